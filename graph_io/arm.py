"""Write a dim-order assignment into an Arm (pre-TOSA) fx graph.

Plain inputs only: a plan names, per node, the order it reads each operand
in, the order its own result is stored in, and which of its arguments are
per-axis and so must follow that order. This module knows nothing of the
solver or of op kinds; `layout_solver.arm.op_rules` says which arguments an
op has (ArgRemap), `layout_solver.arm.passes` turns a solution into a plan.

A value read in an order it is not stored in gets one permute_copy per
(value, order), placed before its first reader in graph order; graph outputs
are read in the identity order (the delegate's contract).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from executorch.exir.dialects._ops import ops as exir_ops

from graph_io.fx import create_like, fake_like

Order = tuple[int, ...]
PERMUTE = exir_ops.edge.aten.permute_copy.default


@dataclass(frozen=True)
class ArgRemap:
    """One argument that speaks about axes, and how it follows the result's physical order.

    axis: one dim (cat's dim; `default` when absent). axes: a list of dims
    (reductions). per_axis: one entry per axis (SLICE start/size), a list or a
    CONST_SHAPE node. per_axis_pairs: two entries per axis (PAD lo/hi).
    physical_shape: the shape argument of a view becomes the stored shape. swap_operands: a product
    whose result is stored transposed reads its operands transposed and swapped (B^T A^T = (A B)^T): `arg`
    and the next argument trade places, and so do their quantization parameters.
    """

    arg: int
    how: Literal["axis", "axes", "per_axis", "per_axis_pairs", "physical_shape", "swap_operands"]
    default: int = 0


@dataclass(frozen=True)
class NodeRewrite:
    """What the assignment asks of one node.

    `reads`: operand value name -> the order the node reads it in. `order`: its
    result's stored order. `alias`: a permute whose output is its input
    re-labelled; it is removed and its users read `reads`'s one entry.
    """

    reads: dict[str, Order]
    order: Order
    remaps: tuple[ArgRemap, ...] = ()
    alias: bool = False


@dataclass
class ArmRewritePlan:
    """Every value's stored order, and the rewrites of the nodes the assignment touches (by node name)."""

    orders: dict[str, Order]
    nodes: dict[str, NodeRewrite] = field(default_factory=dict)


def _identity(order: Order) -> bool:
    return order == tuple(range(len(order)))


def _permuted_list(graph: torch.fx.Graph, arg, order: Order, before: torch.fx.Node, pairs: bool = False):
    """A per-axis list argument in physical order (pairs: two entries per axis, as PAD's lo/hi);
    a CONST_SHAPE node gets a permuted copy."""

    def permute(values):
        if pairs:
            return [v for i in order for v in (values[2 * i], values[2 * i + 1])]
        return [values[i] for i in order]

    if isinstance(arg, torch.fx.Node):
        copy = create_like(graph, arg, arg.target, (permute(arg.args[0]), *arg.args[1:]), arg.kwargs, before=before)
        if isinstance(val := arg.meta.get("val"), (list, tuple)):
            copy.meta["val"] = permute(list(val))  # TOSA's CONST_SHAPE writes its values from meta["val"]
        return copy
    return permute(arg)


def _remapped(graph: torch.fx.Graph, node: torch.fx.Node, remap: ArgRemap, order: Order):
    rank = len(order)
    arg = node.args[remap.arg] if len(node.args) > remap.arg else None
    if remap.how == "axis":
        dim = arg if arg is not None else node.kwargs.get("dim", remap.default)
        return order.index(dim % rank)
    if remap.how == "axes":
        dims = arg if isinstance(arg, (list, tuple)) else [arg]
        return [order.index(d % rank) for d in dims]
    if remap.how == "physical_shape":
        val = node.meta["val"]
        return [int(val.shape[i]) for i in order]
    return _permuted_list(graph, arg, order, node, pairs=remap.how == "per_axis_pairs")


def _swap_operands(node: torch.fx.Node, args: list, first: int) -> None:
    """Swap arguments `first` and `first + 1`, and the input quantization parameters recorded for them."""
    args[first], args[first + 1] = args[first + 1], args[first]
    qparams = node.meta.get("input_qparams")
    if qparams and first in qparams and first + 1 in qparams:  # a new dict: the meta may be shared
        node.meta["input_qparams"] = {**qparams, first: qparams[first + 1], first + 1: qparams[first]}


def apply_plan(graph_module: torch.fx.GraphModule, plan: ArmRewritePlan) -> tuple[int, int]:
    """Rewrite the graph as planned; returns (permutes inserted, permutes removed). Node metadata
    ("val") follows the stored shapes."""
    graph = graph_module.graph
    by_name = {n.name: n for n in graph.nodes}
    # Each value's logical tensor, read before the loop below stores nodes in their planned order (it replaces
    # meta["val"]): a transition read after its producer was rewritten still knows the logical shape.
    logical_val = {n.name: n.meta.get("val") for n in graph.nodes}
    physical: dict[str, torch.fx.Node] = {}  # an aliased permute's name -> the node that holds its data
    transitions: dict[tuple[str, Order], torch.fx.Node] = {}
    removed = []

    def read_as(vid: str, want: Order, before: torch.fx.Node) -> torch.fx.Node:
        have = plan.orders[vid]
        src = physical.get(vid, by_name[vid])
        if want == have:
            return src
        if (vid, want) not in transitions:
            logical = logical_val[vid]
            perm = [have.index(a) for a in want]  # compose(inverse(have), want)
            node = create_like(graph, src, PERMUTE, (src, perm), before=before, keep_val=False)
            node.meta["val"] = fake_like(logical, [logical.shape[i] for i in want])
            transitions[(vid, want)] = node
        return transitions[(vid, want)]

    for node in list(graph.nodes):
        # The outputs, and the nodes no rule rewrites (several results or none), read every operand in the
        # identity order (their problems contract them so).
        if node.op == "output" or (node.op == "call_function" and node.name not in plan.nodes):
            for arg in node.all_input_nodes:
                if arg.name in plan.orders:
                    node.replace_input_with(arg, read_as(arg.name, tuple(range(len(plan.orders[arg.name]))), node))
            continue
        rewrite = plan.nodes.get(node.name)
        if rewrite is None:
            continue
        if rewrite.alias:
            ((vid, want),) = rewrite.reads.items()
            physical[node.name] = read_as(vid, want, node)
            removed.append(node)
            continue
        for vid, want in rewrite.reads.items():
            new = read_as(vid, want, node)
            if new is not by_name[vid]:
                node.replace_input_with(by_name[vid], new)
        if not _identity(rewrite.order):
            args, kwargs = list(node.args), dict(node.kwargs)
            for remap in rewrite.remaps:
                if remap.how == "swap_operands":
                    _swap_operands(node, args, remap.arg)
                    continue
                value = _remapped(graph, node, remap, rewrite.order)
                if remap.arg >= len(args) and remap.how == "axis":
                    kwargs["dim"] = value  # given by keyword or left to its default: set it by keyword
                    continue
                args[remap.arg] = value
            node.args, node.kwargs = tuple(args), kwargs
            val = node.meta["val"]
            node.meta["val"] = fake_like(val, [val.shape[i] for i in rewrite.order])
    for node in removed:
        node.replace_all_uses_with(physical[node.name])
        graph.erase_node(node)
    return len(transitions), len(removed)


def cancel_inverse_permutes(graph_module: torch.fx.GraphModule) -> int:
    """Remove every permute that undoes the permute it reads (the two orders compose to the identity): its readers
    read the value itself; the inner one goes too where nothing else reads it. Such a pair is the graph's own (a
    model that transposes and transposes back) or one the write-back made (a value stored in an order, then read
    back in the identity). Kept where the value would leave the delegate as one of its inputs. Returns how many
    permutes were removed."""
    graph = graph_module.graph
    removed = 0
    for node in list(graph.nodes):
        inner = node.args[0] if node.op == "call_function" and node.target == PERMUTE else None
        if not (isinstance(inner, torch.fx.Node) and inner.target == PERMUTE and node.users):
            continue
        outer_order = [int(d) % len(node.args[1]) for d in node.args[1]]
        inner_order = [int(d) % len(inner.args[1]) for d in inner.args[1]]
        if [inner_order[d] for d in outer_order] != list(range(len(outer_order))):
            continue
        source = inner.args[0]
        if source.op == "placeholder" and any(user.op == "output" for user in node.users):
            continue
        node.replace_all_uses_with(source)
        graph.erase_node(node)
        removed += 1
        if not inner.users:
            graph.erase_node(inner)
            removed += 1
    return removed


def fold_constant_permutes(graph_module: torch.fx.GraphModule, program, constants: set[str]) -> int:
    """Compute every permute of a parameter, buffer or lifted constant now, into a new constant placeholder
    (executorch's FuseConstantArgsPass, node by node); returns how many. The Arm pipeline folds constant ops
    before the layout stage runs, so a permute the write-back puts on a constant would otherwise run on the NPU
    as a TRANSPOSE, while the problem prices reading a constant in any order as free."""
    from executorch.backends.arm._passes.fuse_constant_ops_pass import FuseConstantArgsPass

    if program is None or not constants:
        return 0
    fuse = FuseConstantArgsPass(program)
    folded, sources = 0, set()
    for node in list(graph_module.graph.nodes):
        source = node.args[0] if node.op == "call_function" and node.target == PERMUTE else None
        constant = isinstance(source, torch.fx.Node) and source.op == "placeholder" and source.name in constants
        # the pass's own per-node step (its call() would retrace the whole graph)
        if constant and fuse._fuse_nodes(node):
            folded += 1
            sources.add(source)
    if folded:
        graph_module.graph.eliminate_dead_code()
        fuse.maybe_delete(sources)
    return folded
