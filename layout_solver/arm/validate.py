"""Post-condition of the Arm stage: the written graph computes what the graph it was given computes.

A second reading, kept apart from the rules (`op_rules.py`) and the write-back plan so that one blind spot
cannot hide in both. It trusts neither; it reads what the ops themselves say:

* the delegate's contract: every graph input (not its constants, which the stage may store permuted) and
  every output keeps its shape and dtype (values cross the delegate's boundary in the identity order);
* every op the stage wrote or moved, re-run on its operands' recorded tensors by the op's own meta kernel
  (torch's registry, under the graph's fake mode), gives the shape and dtype its metadata says: an op that
  reads an operand in an order its arguments do not follow (a cat on the wrong axis, a view of the wrong
  shape, a product of transposed operands left unswapped) gives another shape, or none;
* a transpose the stage wrote never undoes another (two permutes whose orders compose to the identity,
  where the stage could have read the value itself).

A violation raises `ArmLayoutValidationError` naming the node and the reason: the lowering stops rather than
hand back a program that computes something else.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from executorch.exir.dialects._ops import ops as exir_ops

PERMUTE = exir_ops.edge.aten.permute_copy.default


class ArmLayoutValidationError(RuntimeError):
    """The written graph breaks the stage's post-condition; the message names the node and the reason."""


@dataclass(frozen=True)
class GraphSnapshot:
    """What the post-condition compares the written graph with: the graph's boundary, each node's target and
    arguments as they came (names of nodes the stage left untouched need no re-check)."""

    boundary: tuple
    nodes: dict[str, tuple]
    inputs: set[str]  # the placeholders that are the delegate's inputs (not its constants)


def _tensor_facts(value) -> tuple | None:
    if isinstance(value, torch.Tensor):
        return tuple(int(d) for d in value.shape), value.dtype
    if isinstance(value, (list, tuple)):
        return tuple(_tensor_facts(v) for v in value)
    return int(value) if isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool) else None


def _boundary(graph: torch.fx.Graph, inputs: set[str] | None = None) -> tuple:
    """The delegate's inputs (placeholders named in `inputs`, default all) and its outputs, with their facts."""
    found = tuple(
        (n.name, _tensor_facts(n.meta.get("val")))
        for n in graph.nodes
        if n.op == "placeholder" and (inputs is None or n.name in inputs)
    )
    (output,) = [n for n in graph.nodes if n.op == "output"]
    outputs = tuple(_tensor_facts(a.meta.get("val")) if isinstance(a, torch.fx.Node) else a for a in output.args[0])
    return found, outputs


def _node_facts(node: torch.fx.Node) -> tuple:
    args = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: n.name)
    return node.target, repr(args), _tensor_facts(node.meta.get("val"))


def snapshot(graph_module: torch.fx.GraphModule, constants: set[str] = frozenset()) -> GraphSnapshot:
    """The facts `validate` needs of the graph before the stage writes it. `constants` names the placeholders
    that are parameters, buffers or lifted constants: the stage may store those in another order (a permuted
    copy, folded at compile time), so they are not part of the boundary it must keep."""
    graph = graph_module.graph
    inputs = {n.name for n in graph.nodes if n.op == "placeholder" and n.name not in constants}
    return GraphSnapshot(
        _boundary(graph, inputs), {n.name: _node_facts(n) for n in graph.nodes if n.op == "call_function"}, inputs
    )


def _fake_mode(graph: torch.fx.Graph):
    for node in graph.nodes:
        mode = getattr(node.meta.get("val"), "fake_mode", None)
        if mode is not None:
            return mode
    return None


def _recomputed(node: torch.fx.Node, mode):
    """The op's own meta kernel on the operands' recorded tensors (None if the op has none to run here)."""
    if not callable(node.target) or node.target.__module__ == "_operator":
        return None  # getitem and friends: a selection, not a computation

    def val(arg):
        return arg.meta.get("val")

    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), val)
    with mode if mode is not None else contextlib.nullcontext():
        try:
            return node.target(*args, **kwargs)
        except NotImplementedError:
            return None  # no meta kernel for this op (a backend dialect op): nothing to compare


def _orders(node: torch.fx.Node) -> tuple[int, ...]:
    return tuple(int(d) % len(node.args[1]) for d in node.args[1])


def validate(graph_module: torch.fx.GraphModule, before: GraphSnapshot) -> int:
    """Raise ArmLayoutValidationError if the written graph breaks the post-condition; return how many ops
    were re-computed."""
    graph = graph_module.graph
    if (after := _boundary(graph, before.inputs)) != before.boundary:
        raise ArmLayoutValidationError(
            f"the delegate's inputs or outputs changed shape or dtype: {before.boundary} -> {after}"
        )
    mode = _fake_mode(graph)
    checked = 0
    for node in graph.nodes:
        if node.op != "call_function" or before.nodes.get(node.name) == _node_facts(node):
            continue  # untouched: what it computes is what it computed
        recorded = _tensor_facts(node.meta.get("val"))
        try:
            result = _recomputed(node, mode)
        except Exception as exc:  # the op's own kernel refuses the operands as written
            raise ArmLayoutValidationError(
                f"node {node.name!r} ({node.target}): its operands as written are refused by the op: "
                f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            ) from exc
        if result is None:
            continue
        checked += 1
        if _tensor_facts(result) != recorded:
            raise ArmLayoutValidationError(
                f"node {node.name!r} ({node.target}): computes {_tensor_facts(result)} from its operands as "
                f"written, its metadata says {recorded}"
            )
        if node.target == PERMUTE and isinstance(inner := node.args[0], torch.fx.Node) and inner.target == PERMUTE:
            outer_order, inner_order = _orders(node), _orders(inner)
            composed = tuple(inner_order[d] for d in outer_order)
            if composed == tuple(range(len(composed))):
                raise ArmLayoutValidationError(
                    f"node {node.name!r}: a permute {outer_order} that undoes {inner.name!r} {inner_order} "
                    "(its readers could read the value itself)"
                )
    return checked
