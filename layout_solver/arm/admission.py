"""Graphs the Arm stage declines whole: the delegate is lowered by stock's pipeline, byte for byte.

The stage's problem is one order per tensor of one static graph. A delegate whose graph is not that (control
flow, whose branch and loop bodies are graphs of their own that read their operands in the identity order;
symbolic shapes, which the rewrite would freeze to their example sizes; zero-sized tensors; ranks above
TOSA's six) is not changed at all: `solver_layouts()` runs stock's whole pass pipeline for it (stock's permute
propagation included, not the views-only variant) and says why, naming the node. Ops the rules merely do not
know are not declined: they are pinned to the identity order (`layout_solver.arm.problem_builder.build_problem`).
"""

from __future__ import annotations

import torch

from graph_io.fx import tensor_of
from layout_solver.arm.op_rules import short_target

# TOSA 1.0's largest tensor rank (MAX_RANK of its level 8K profile)
MAX_RANK = 6


def declined(graph_module: torch.fx.GraphModule) -> str | None:
    """Why the stage leaves this graph as stock lowers it ("node 'x' (target): reason"), or None."""
    for node in graph_module.graph.nodes:
        if node.op == "get_attr" and isinstance(getattr(graph_module, str(node.target), None), torch.fx.GraphModule):
            runner = next(iter(node.users), node)
            what = getattr(runner.target, "__name__", runner.target)
            return f"node {runner.name!r} ({what}) runs the submodule {node.target!r}: control flow is not laid out"
        hop = node.op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator)
        if hop and node.target.__name__ != "executorch_call_delegate":
            return f"node {node.name!r} ({node.target.__name__}): control flow is not laid out"
        val = tensor_of(node)
        if val is None:
            continue
        where = f"node {node.name!r}" + (f" ({short_target(node)})" if node.op == "call_function" else "")
        if any(not isinstance(d, int) for d in val.shape):
            return f"{where}: dynamic shape {tuple(val.shape)} (the stage lays out static shapes only)"
        if val.dim() > MAX_RANK:
            return f"{where}: rank {val.dim()} is above TOSA's {MAX_RANK}"
        if val.numel() == 0:
            return f"{where}: zero-sized tensor {tuple(val.shape)}"
    return None
