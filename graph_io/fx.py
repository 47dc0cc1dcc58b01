"""Small torch.fx helpers every reader and writer needs: a node's tensor, its dtype name and shape, a fake
tensor of a new shape, and a new node that inherits an old one's metadata."""

from __future__ import annotations

import contextlib

import torch


def tensor_of(node) -> torch.Tensor | None:
    """The tensor a node produces (its meta["val"]), or None for non-tensor nodes and non-nodes."""
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def dtype_name(val) -> str:
    """A tensor's (or dtype's) name without the torch prefix.

    >>> dtype_name(torch.zeros(1, dtype=torch.int8))
    'int8'
    """
    return str(getattr(val, "dtype", val)).removeprefix("torch.")


def shape_of(val) -> list[int]:
    """A tensor's shape as plain ints (fake and symbolic-free shapes alike).

    >>> shape_of(torch.zeros(2, 3))
    [2, 3]
    """
    return [int(d) for d in val.shape]


def fake_like(like: torch.Tensor, shape) -> torch.Tensor:
    """An empty tensor of `like`'s dtype (and fake mode, if it has one) with a new shape, for meta["val"]."""
    mode = getattr(like, "fake_mode", None)
    with mode if mode is not None else contextlib.nullcontext():
        return torch.empty([int(d) for d in shape], dtype=like.dtype)


def create_like(
    graph: torch.fx.Graph,
    template: torch.fx.Node,
    target,
    args: tuple,
    kwargs: dict | None = None,
    before: torch.fx.Node | None = None,
    keep_val: bool = True,
) -> torch.fx.Node:
    """A new call_function node inserted before `before` (default: before `template`) that inherits
    `template`'s metadata (debug handles, quantization parameters, ...); without `keep_val`, the tensor
    metadata ("val", "tensor_meta") is left for the caller to set."""
    with graph.inserting_before(before if before is not None else template):
        node = graph.create_node("call_function", target, args, dict(kwargs or {}))
    node.meta = {k: v for k, v in template.meta.items() if keep_val or k not in ("val", "tensor_meta")}
    return node


def graph_snapshot(
    graph_module: torch.fx.GraphModule, layout_of, cost_of, is_conversion, is_constant=lambda node: False
) -> list[dict]:
    """The graph as plain records, one per input, op and output, in graph order: id, op, the ids it reads,
    shape, dtype, `layout_of(node)`, `cost_of(node)` (None where unpriced) and `is_conversion(node)`; nodes
    `is_constant` says are weights are left out. What a viewer needs of a tagged graph, detached from torch
    (`layout_solver.explain` draws it)."""
    records = []
    kept = set()
    for node in graph_module.graph.nodes:
        if node.op not in ("placeholder", "call_function", "output") or is_constant(node):
            continue
        kept.add(node)
        val = tensor_of(node)
        target = node.target if node.op == "call_function" else node.op
        records.append(
            {
                "id": node.name,
                "op": getattr(target, "__name__", str(target)),
                "inputs": [n.name for n in node.all_input_nodes if n in kept],
                "shape": shape_of(val) if val is not None else [],
                "dtype": dtype_name(val) if val is not None else "",
                "layout": layout_of(node) if node.op != "output" else "",
                "conversion": bool(node.op == "call_function" and is_conversion(node)),
                "cost": cost_of(node) if node.op == "call_function" else None,
            }
        )
    return records
