"""Where the layouts went: one model lowered by stock and by the solver (through the target's comparison, once)
and each side's program drawn as Model Explorer inputs, every tensor with its layout, every conversion marked
with its price, every op with what the target prices it at.

`explain(module, inputs, target, out=DIR)` writes, per side, `{side}.graphs.json` (Model Explorer's JSON graph
format, one graph per delegate) and its overlays `{side}.cost.json`, `{side}.layout.json`,
`{side}.conversions.json`, plus `solver.delta.json` (each solver op's price minus stock's) and `explain.json`
(the comparison, each side's totals and the files). The prices are those the comparison reports: Vela's cycles
on Ethos-U (they sum to its `vela_total_cycles`), the modelled microseconds on Vulkan and XNNPACK (they sum to
its `modelled_us`); `Explanation.totals` sets the two side by side.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from graph_io.layout_graph import GraphOp, LayoutGraph

__all__ = ["Explanation", "GraphOp", "LayoutGraph", "explain", "explain_comparison"]

SIDES = ("stock", "solver")


@dataclass
class Explanation:
    """One model explained on one target: the comparison's JSON, each side's graphs, the files written."""

    model: str
    target: str
    comparison: dict
    graphs: dict[str, list[LayoutGraph]]
    unit: str
    total_field: str
    files: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def totals(self) -> dict[str, dict[str, float | None]]:
        """Per side: the overlays' prices summed, and the figure the comparison reports for the same lowering."""
        return {
            side: {
                "overlay": round(sum(g.total for g in graphs), 4),
                "reported": (self.comparison.get(side) or {}).get(self.total_field),
            }
            for side, graphs in self.graphs.items()
        }

    def conversions(self, side: str) -> list[GraphOp]:
        """The layout conversions of one side's program."""
        return [op for g in self.graphs.get(side, []) for op in g.conversions]

    def summary(self) -> str:
        """A few lines: per side, graphs, ops, conversions and the total both ways."""
        lines = [f"{self.model} on {self.target} ({self.unit})"]
        for side, total in self.totals.items():
            graphs = self.graphs[side]
            reported = total["reported"]
            lines.append(
                f"  {side:6} {len(graphs)} graph(s), {sum(len(g.ops) for g in graphs)} ops, "
                f"{len(self.conversions(side))} conversions; overlay total {total['overlay']:,.6g}"
                + (f", compare's {self.total_field} {reported:,.6g}" if reported is not None else "")
            )
        for side in SIDES:
            error = (self.comparison.get(side) or {}).get("error")
            if error:
                lines.append(f"  {side} failed, not drawn: {error}")
            elif side not in self.graphs:
                lines.append(f"  {side}: not drawn ({self.target}'s comparison keeps no program to draw)")
        for side, paths in self.files.items():
            lines.append(f"  {side}: {paths['graphs']}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        """What `explain.json` holds."""
        return {
            "model": self.model,
            "target": self.target,
            "unit": self.unit,
            "total_field": self.total_field,
            "totals": self.totals,
            "conversions": {
                side: [
                    {"id": op.id, "op": op.op, "layout": op.layout, "cost": op.cost} for op in self.conversions(side)
                ]
                for side in self.graphs
            },
            "files": self.files,
            "comparison": self.comparison,
        }


def explain(module, inputs: tuple, target, out: Path | str | None = None, name: str | None = None, **options):
    """Lower `module` both ways on `target` (a name or a Target) through its comparison, with the layout passes
    keeping their graphs; with `out`, write the Model Explorer files there. Returns an `Explanation`."""
    from layout_solver.targets import get_target

    target = get_target(target) if isinstance(target, str) else target
    name = name or type(module).__name__
    return explain_comparison(lambda: target.compare(module, inputs, name=name, **options), name, target, out)


def explain_comparison(compare, name: str, target, out: Path | str | None = None) -> Explanation:
    """Run `compare()` (a comparison on `target`, returning a Comparison) with the passes keeping their graphs and
    the sides kept; draw both sides (into `out` if given). `layout_solver.zoo.runner.explain_named` runs it on a
    model by name."""
    from layout_solver.compare.artifacts import keeping_sides
    from layout_solver.lowering.pass_report import explaining

    with explaining(), keeping_sides() as kept:
        comparison = compare()
    explanation = Explanation(
        name,
        target.name,
        comparison.to_json(),
        {side: target.explained_graphs(kept[side]) for side in SIDES if side in kept},
        target.explain_unit,
        target.explain_total,
    )
    if out is not None:
        write(explanation, Path(out))
    return explanation


def write(explanation: Explanation, out: Path) -> None:
    """The Model Explorer files of both sides and `explain.json` into `out`."""
    from layout_solver.explain import model_explorer

    graphs = explanation.graphs
    legend = model_explorer.layout_legend([g for side in graphs.values() for g in side])
    for side, side_graphs in graphs.items():
        paths = model_explorer.write(side, side_graphs, out, legend, f"{explanation.model} on {explanation.target}")
        explanation.files[side] = {kind: str(path) for kind, path in paths.items()}
    if set(SIDES) <= set(graphs):
        explanation.files["solver"]["delta"] = str(model_explorer.write_delta(graphs["stock"], graphs["solver"], out))
    (out / "explain.json").write_text(json.dumps(explanation.to_json(), indent=1, default=str))
