"""One side's program as a viewer draws it: graphs of ops, each with its tensor's layout, whether it is a layout
conversion, and what the target prices it at. Pure data (no torch): the targets build it from what their
lowering kept (`PassReport.graph` snapshots, Ethos-U's TOSA and Vela rows), `layout_solver.explain.model_explorer` writes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GraphOp:
    """One op (or graph input / output): `id` is unique in its graph and names the same op on both sides where
    both have it (fx node names, TOSA tensor names)."""

    id: str
    op: str
    inputs: list[str] = field(default_factory=list)
    shape: list[int] = field(default_factory=list)
    dtype: str = ""
    layout: str = ""  # the dim order (Ethos-U, XNNPACK) or storage x packing (Vulkan) of the tensor it writes
    conversion: bool = False  # a transpose / transition / copy the layout put there
    cost: float | None = None  # in the graph's unit; None where the target prices nothing for it
    attrs: dict[str, str] = field(default_factory=dict)


@dataclass
class LayoutGraph:
    """One delegate (or other priced graph) of one side: its ops and `unit` ("NPU cycles (Vela)", ...)."""

    id: str
    unit: str
    ops: list[GraphOp] = field(default_factory=list)

    @property
    def total(self) -> float:
        """The ops' prices, summed."""
        return sum(op.cost or 0.0 for op in self.ops)

    @property
    def conversions(self) -> list[GraphOp]:
        """The layout conversions of this graph."""
        return [op for op in self.ops if op.conversion]

    @classmethod
    def from_snapshot(cls, graph_id: str, unit: str, records: list[dict]) -> LayoutGraph:
        """A graph from `graph_io.fx.graph_snapshot` records."""
        return cls(
            graph_id,
            unit,
            [
                GraphOp(
                    r["id"],
                    r["op"],
                    list(r["inputs"]),
                    list(r["shape"]),
                    r["dtype"],
                    r["layout"],
                    r["conversion"],
                    r["cost"],
                )
                for r in records
            ],
        )


def cost_deltas(stock: list[LayoutGraph], solver: list[LayoutGraph]) -> dict[str, dict[str, float]]:
    """Per solver graph, per op: its price minus stock's price of the op of the same id in the graph of the same
    id (0 where stock has none: a new op costs all it costs); ops the solver removed are not in its graph, and
    their saving shows in the totals."""
    stock_costs = {g.id: {op.id: op.cost or 0.0 for op in g.ops} for g in stock}
    return {
        g.id: {
            op.id: (op.cost or 0.0) - stock_costs.get(g.id, {}).get(op.id, 0.0)
            for op in g.ops
            if op.cost is not None or op.id in stock_costs.get(g.id, {})
        }
        for g in solver
    }
