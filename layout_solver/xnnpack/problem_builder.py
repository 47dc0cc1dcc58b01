"""One XNNPACK delegate's graph -> a layout problem (values, op modes, conversion prices), read off `op_rules`.

Phases, each its own function: `values_and_domains` (a value per tensor node: the delegate's inputs pinned to
the dim order the program hands them in, constants free but never in two orders, activations free; a 3-D value
may be NLC only where it is an activation),
`op_modes` (each call_function node's modes from its rule, and one op per delegate output pinning the order
the program reads it in), `conversion_prices` (what converting each activation costs, from the XNNPACK cost
profile). Costs are microseconds on the profile's CPU for the lowering's thread count.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graph_io.fx import tensor_of
from layout_solver.core.problem import Op, Problem, TransitionCost, Value
from layout_solver.xnnpack.op_rules import (
    CHANNELS_LAST,
    CONTIGUOUS,
    ORDERED_RANKS,
    OpRule,
    conversion_us,
    elem_bytes,
    is_dequantize,
    is_quantize,
    labels_for,
    prices,
    rank,
    rule_for,
)

NHWC_ORDER = (0, 2, 3, 1)
# A constant is laid out once at serialization (stock raises if two ops want it in two orders), and a value a
# quantize reads is a quantized kernel's raw result (XNNPACK quantizes a kernel's output only where its one
# reader is that quantize: a conversion between them leaves an int8 kernel writing fp32, which XNNPACK refuses),
# unless it is the delegate's float input, which no kernel wrote: its conversion runs in fp32 before the quantize.
# Nor may a dynamically quantized value: stock's conversion of one traces back to the chain's source and
# rewires every reader of that source, not only the one that asked. None may take a second order: priced out of
# reach rather than modelled.
SECOND_ORDER_REFUSED = 1e12


@dataclass
class BuiltProblem:
    """The problem of one delegate and what the write-back needs of it: the node of each value id."""

    problem: Problem
    nodes: dict[str, torch.fx.Node]


def stored_label(node) -> str:
    """The order the program stores a boundary tensor in: the dim order the emitter writes for it (its strides
    sorted), which XNNExecutor maps the delegate's dims by. Not stock's reading (`_is_nhwc`), which calls an
    [N, C, 1, 1] tensor NCHW whatever its strides: a channels-last one would leave the delegate with dims the
    runtime cannot map."""
    from executorch.exir.tensor import dim_order_from_stride

    val = tensor_of(node)
    if val is None or val.dim() != 4:
        return CONTIGUOUS
    return CHANNELS_LAST if tuple(dim_order_from_stride(val.stride())) == NHWC_ORDER else CONTIGUOUS


def orders_distinct(shape) -> bool:
    """Whether a 4-D tensor of `shape` has two distinct stored orders that every reader tells apart: not where
    NHWC and NCHW are the same bytes ([N, C, 1, 1], C = 1), which stock reads as NCHW whatever the dim order, the
    emitter by its strides (with C = 1 as (0, 2, 1, 3), an order nothing reads). Only such a tensor may cross a
    program boundary channels-last."""
    from executorch.exir.tensor import dim_order_from_stride

    if len(shape) != 4:  # a value whose tensor the graph does not state (e.g. a getitem of a tuple)
        return False
    nhwc = torch.empty([int(d) for d in shape], device="meta", memory_format=torch.channels_last)
    return not nhwc.is_contiguous() and tuple(dim_order_from_stride(nhwc.stride())) == NHWC_ORDER


def build_problem(graph_module, exported_program, profile, threads: int = 1, name: str = "xnnpack") -> BuiltProblem:
    """The layout problem of one XNNPACK delegate graph (before ChannelsLastTaggedReshapePass)."""
    from executorch.backends.xnnpack.utils.utils import is_param_node

    price = prices(profile, threads)
    values, nodes = values_and_domains(graph_module, lambda n: is_param_node(exported_program, n))
    ops = op_modes(graph_module, nodes, price, domains={v.id: v.domain for v in values.values()})
    transitions = conversion_prices(values, nodes, price)
    problem = Problem(
        name=name, values=list(values.values()), ops=ops, transition_costs=transitions, price_constants=True
    )
    return BuiltProblem(problem, nodes)


def values_and_domains(
    graph_module, is_constant, ranks: tuple[int, ...] = ORDERED_RANKS
) -> tuple[dict[str, Value], dict[str, torch.fx.Node]]:
    """A value per tensor-valued node, with its domain (both orders at the `ranks` that may be stored
    channels-last; at rank 4 only for a constant or an input: stock's serializer lays out NHWC constants and
    the program hands its inputs over at rank 4 only); delegate inputs pinned to their stored order."""
    values: dict[str, Value] = {}
    nodes: dict[str, torch.fx.Node] = {}
    for node in graph_module.graph.nodes:
        if node.op not in ("placeholder", "call_function", "get_attr") or rank(node) is None:
            continue
        val = tensor_of(node)
        shape = [int(d) for d in val.shape] if val is not None else []
        kind, fixed = "activation", None
        if node.op == "placeholder" and not is_constant(node):
            kind, fixed = "input", stored_label(node)
        elif node.op != "call_function":
            kind = "constant"
        values[node.name] = Value(
            id=node.name,
            shape=shape,
            dtype=str(val.dtype).removeprefix("torch.") if val is not None else "float32",
            size_bytes=(val.numel() * elem_bytes(node)) if val is not None else 0,
            kind=kind,
            domain=list(labels_for(node, ranks if kind == "activation" else tuple(r for r in ranks if r == 4))),
            fixed=fixed,
        )
        nodes[node.name] = node
    return values, nodes


def op_modes(
    graph_module, nodes, price, domains: dict[str, list[str]], rule_of=rule_for, fallback: OpRule | None = None
) -> list[Op]:
    """Each call_function node's modes from its rule (`rule_of(node)`: XNNPACK's by default; the program-level
    problem asks the CPU's for the ops it leaves there), those whose labels are in every value's `domains`, else
    `fallback`'s where one is given; one op per graph output, pinned to its stored order."""
    ops: list[Op] = []
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and node.name in nodes:
            rule = rule_of(node)
            operands = [n for n in rule.operands(node) if n.name in nodes]
            modes = [m for m in rule.modes(node, operands, price) if _within(m, node, operands, domains)]
            if not modes and fallback is not None:
                operands = [n for n in fallback.operands(node) if n.name in nodes]
                modes = [m for m in fallback.modes(node, operands, price) if _within(m, node, operands, domains)]
            if not modes:  # e.g. an NHWC kernel on a tensor that is not 4-D: stock cannot lower it either
                raise ValueError(f"{node.name} ({node.target}): no dim order its kernel accepts")
            ops.append(
                Op(
                    id=node.name,
                    target=str(node.target),
                    operands=[n.name for n in operands],
                    results=[node.name],
                    modes=modes,
                )
            )
        elif node.op == "output":
            for index, out in enumerate(node.args[0]):
                if isinstance(out, torch.fx.Node) and out.name in nodes:
                    label = stored_label(out)
                    ops.append(
                        Op(
                            id=f"output#{index}",
                            target="output",
                            operands=[out.name],
                            results=[],
                            modes=[{"name": label, "operands": [label], "results": [], "cost": 0.0}],
                        )
                    )
    return ops


def _within(mode: dict, node, operands, domains) -> bool:
    labels = [*zip([n.name for n in operands], mode["operands"]), (node.name, mode["results"][0])]
    return all(label in domains[name] for name, label in labels)


def conversion_prices(values: dict[str, Value], nodes, price) -> list[TransitionCost]:
    """Converting an activation between the orders costs one XNNPACK transpose of its bytes (a 4-D one by
    stock's stub, a 3-D one by an identity permute between two tags); a constant, a value a quantize reads (but
    a float delegate input: converted in fp32 before its quantize), a quantized delegate input a dequantize reads
    (stock's `is_nhwc_node` reads such a dequantize's order from the placeholder's own strides, so a conversion in
    front of it is never seen: stock converts after the dequantize), and a dynamic q / dq's value never take a
    second order."""
    from executorch.backends.xnnpack.utils.quant_utils import is_dynamic_qdq

    out = []
    for vid, value in values.items():
        if len(value.domain) < 2:
            continue
        for src in value.domain:
            for dst in value.domain:
                if src == dst:
                    continue
                node = nodes[vid]
                if (
                    value.kind == "constant"
                    or is_dynamic_qdq(node)
                    or (value.kind != "input" and any(is_quantize(u) for u in node.users))
                    or (value.kind == "input" and any(is_dequantize(u) for u in node.users))
                ):
                    cost = SECOND_ORDER_REFUSED
                else:
                    cost = conversion_us(price, value.shape, elem_bytes(node), [0, 1, 2, 3], src, dst)
                out.append(TransitionCost(value=vid, src=src, dst=dst, cost=cost))
    return out
