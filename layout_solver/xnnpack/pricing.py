"""What a tagged XNNPACK delegate graph spends on layout, read off the graph as the serializer will read it.

Both sides are priced by this one reading, after their pass has run: every `_to_copy(memory_format=...)`
(stock's conversion stubs and the stage's) is one transpose of its tensor, and every permute_copy runs the
permutation its input's and result's tags give (`op_rules.physical_permutation`), or nothing where the
serializer elides it (`op_rules.permute_elided`); reshapes run in place. It reads the tags, not the stage's
problem, so it prices stock's graph and the stage's the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from cost_models import xnnpack as xnn_cost
from graph_io.fx import graph_snapshot, tensor_of
from layout_solver.xnnpack.op_rules import (
    CHANNELS_LAST,
    CONTIGUOUS,
    OrderPricedCopy,
    elem_bytes,
    permute_elided,
    physical_permutation,
    physical_shape,
    prices,
    rule_for,
    short_target,
)
from layout_solver.xnnpack.visitors import label_of


@dataclass
class Conversion:
    """One data movement the delegate runs for layout: the node, its class, shape, bytes and modelled us."""

    node: str
    op: str  # "_to_copy" or "permute_copy"
    kind: str  # cost_models.xnnpack class: copy, block, transpose
    shape: list[int]
    bytes: int
    us: float  # the solver's price: never under one operator's run (cost_models.xnnpack.OP_FLOOR_US)
    perm: list[int] = field(default_factory=list)  # its physical permutation (its transpose's tiles are read by it)

    def record(self) -> dict:
        """The conversion as a report's transition record (JSON-ready)."""
        return {"value": self.node, "op": self.op, "kind": self.kind, "shape": self.shape, "bytes": self.bytes,
                "cost": round(self.us, 4)}  # fmt: skip


@dataclass
class LayoutCost:
    """A tagged graph's conversions, what its concatenations, slices and pads pay for the order they copy in
    (`op_rules.OrderPricedCopy`: by node, as the layout problem's modes price them), and their modelled sum."""

    conversions: list[Conversion] = field(default_factory=list)
    copies_in_order: dict[str, float] = field(default_factory=dict)

    @property
    def us(self) -> float:
        """The conversions' and the copies' order costs in microseconds, summed."""
        return sum(c.us for c in self.conversions) + sum(self.copies_in_order.values())

    @property
    def transposes(self) -> int:
        """Conversions that move data out of order (not plain copies)."""
        return sum(c.kind != "copy" for c in self.conversions)


def removed_by_stock(graph_module) -> set[str]:
    """The memory-format copies stock's RemoveRedundantCopyPass (run after the layout pass) deletes: one into the
    order its input already has, and a pair converting there and back where the first has no other reader."""
    removed: set[str] = set()
    for node in graph_module.graph.nodes:
        if node.op != "call_function" or short_target(node.target) != "_to_copy.default":
            continue
        source = node.args[0]
        after_copy = (
            isinstance(source, torch.fx.Node) and source.op == "call_function"
            and short_target(source.target) == "_to_copy.default" and source.name not in removed
        )  # fmt: skip
        if after_copy and label_of(source) != label_of(node) and len(source.users) == 1:
            removed |= {source.name, node.name}
            continue
        if label_of(source) == label_of(node):
            removed.add(node.name)
    return removed


def layout_cost(graph_module, profile, threads: int = 1) -> LayoutCost:
    """The conversions of a graph tagged by ChannelsLastTaggedReshapePass (stock's or the stage's), as the
    serializer will run them once RemoveRedundantCopyPass has run."""
    out = LayoutCost()
    removed = removed_by_stock(graph_module)
    op_us = prices(profile, threads).op_us
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        name = short_target(node.target)
        val = tensor_of(node)
        rule = rule_for(node)
        if val is not None and isinstance(rule, OrderPricedCopy):
            extra = rule.order_us(node, label_of(node), op_us)
            if extra > 0:
                out.copies_in_order[node.name] = extra
            continue
        if val is None or name not in ("_to_copy.default", "permute_copy.default") or node.name in removed:
            continue
        source = node.args[0]
        src, dst = label_of(source), label_of(node)
        if name == "_to_copy.default":
            if "memory_format" not in node.kwargs or val.dim() != 4:
                continue
            # The serializer always reads the other order than the one it writes: one NCHW<->NHWC transpose.
            src, perm = (CHANNELS_LAST if dst == CONTIGUOUS else CONTIGUOUS), [0, 1, 2, 3]
        else:
            if permute_elided(node, src, dst):
                continue
            perm = [d % val.dim() for d in node.args[1]]
        shape = physical_shape(tensor_of(source).shape, src)
        perm = physical_permutation(perm, src, dst)
        elem = elem_bytes(node)
        out.conversions.append(
            Conversion(node.name, name.split(".")[0], xnn_cost.conversion_kind(shape, perm), shape,
                       int(torch.Size(shape).numel()) * elem, xnn_cost.conversion_us(profile, shape, elem, perm, threads),
                       list(perm))
        )  # fmt: skip
    return out


def graph_with_prices(graph_module, cost: LayoutCost, exported_program) -> list[dict]:
    """The tagged graph as `graph_io.fx.graph_snapshot` records: each tensor's dim order (read off its tag), the
    conversions the program will run marked and priced as `cost` prices them (their sum is the report's
    `modelled_us`; other ops are not priced by the layout model: their time is the same in either program
    except where their order changes, which the run-time prediction and ETDump show)."""
    from executorch.backends.xnnpack.utils.utils import is_param_node

    converting = {c.node: c.us for c in cost.conversions}
    return graph_snapshot(
        graph_module,
        lambda node: label_of(node) if tensor_of(node) is not None else "",
        lambda node: converting.get(node.name),
        lambda node: node.name in converting,
        lambda node: node.op == "placeholder" and is_param_node(exported_program, node),
    )
