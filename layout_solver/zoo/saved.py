"""A saved ExportedProgram (`torch.export.save` -> `.pt2`) as a model: `compare PATH.pt2`, `zoo --models
'DIR/*.pt2'`.

The program's module (`ExportedProgram.module()`) is what both sides export and lower afresh, as for any other
model; its inputs are the example inputs saved with it, or, where none were saved, generated from its input
specs: floating inputs from a seeded normal draw, integer inputs in a range every op that reads them accepts
(below the row count of each embedding table that looks them up; 0 or 1 where nothing says, as for masks),
booleans true. Ethos-U quantization is calibrated on those inputs.

A program the comparison cannot take is an `UnsupportedProgram` naming the reason (`zoo.models.build` makes it
the model's `ModelError`), never a traceback:
a file that is not a saved program, symbolic (dynamic) input shapes (save it exported with static shapes),
control flow (cond / while_loop / map: the comparison lowers one straight-line graph), keyword inputs.
"""

from __future__ import annotations

from pathlib import Path

import torch

SUFFIX = ".pt2"


class UnsupportedProgram(ValueError):
    """A saved program the comparison cannot take; the message says why."""


def is_saved_program(name: str) -> bool:
    """Whether a model name is a saved program's path (it ends in .pt2)."""
    return name.endswith(SUFFIX)


def load(path: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """(module, inputs) of the saved program at `path`; `UnsupportedProgram` if the comparison cannot take it."""
    file = Path(path)
    if not file.is_file():
        raise UnsupportedProgram("file not found")
    try:
        program = torch.export.load(file)
    except Exception as exc:  # any unreadable file is the same error to the user
        raise UnsupportedProgram(f"not a saved ExportedProgram ({type(exc).__name__}: {exc})") from exc
    reason = unsupported(program)
    if reason:
        raise UnsupportedProgram(reason)
    saved = program.example_inputs
    if saved is not None and saved[1]:
        raise UnsupportedProgram(f"keyword inputs {sorted(saved[1])} are not supported (pass them by position)")
    inputs = tuple(saved[0]) if saved is not None else generated_inputs(program)
    if not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise UnsupportedProgram(f"the inputs must be tensors, got {[type(t).__name__ for t in inputs]}")
    return program.module(), inputs


def unsupported(program: torch.export.ExportedProgram) -> str | None:
    """Why the comparison cannot take this program, naming the input or node; None if it can."""
    for node in program.graph.nodes:
        val = node.meta.get("val")
        tensor = node.op == "placeholder" and isinstance(val, torch.Tensor)
        if tensor and any(not isinstance(d, int) for d in val.shape):
            return (
                f"input {node.name!r} has a dynamic shape {tuple(val.shape)}; the comparison lowers static "
                "shapes (export and save it with static shapes)"
            )
        if node.op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator):
            return f"node {node.name!r} ({node.target.__name__}) is control flow or another higher-order op; the comparison lowers one straight-line graph"
    return None


def generated_inputs(program: torch.export.ExportedProgram) -> tuple[torch.Tensor, ...]:
    """Inputs drawn from the program's input specs (shapes, dtypes); integers within every table they index."""
    user = set(program.graph_signature.user_inputs)
    inputs = []
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in user:
            continue
        val = node.meta.get("val")
        shape, dtype = tuple(int(d) for d in val.shape), val.dtype
        if dtype.is_floating_point:
            inputs.append(torch.randn(shape).to(dtype))
        elif dtype == torch.bool:
            inputs.append(torch.ones(shape, dtype=dtype))
        else:
            inputs.append(torch.randint(0, _index_bound(node), shape, dtype=dtype))
    return tuple(inputs)


def _index_bound(node: torch.fx.Node) -> int:
    """One past the largest value every table lookup reading `node` accepts (2 where none reads it)."""
    bounds = []
    for user in node.users:
        name = getattr(user.target, "__name__", "")
        if name.startswith("embedding") and user.args[1] is node:  # embedding(weight, indices)
            bounds.append(_extent(user.args[0], 0))
        elif name.startswith("index_select") and user.args[2] is node:  # index_select(self, dim, index)
            bounds.append(_extent(user.args[0], user.args[1]))
    return min(b for b in bounds if b) if any(bounds) else 2


def _extent(table, dim: int) -> int:
    val = table.meta.get("val") if isinstance(table, torch.fx.Node) else None
    return int(val.shape[dim]) if isinstance(val, torch.Tensor) else 0
