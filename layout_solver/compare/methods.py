"""Stock, per-method solver and joint solver lowerings of one multi-method model, side by side.

`compare_methods(model, target)` lowers the model's methods together
(`to_edge_transform_and_lower({"prefill": ep1, "decode": ep2}, ...)`) three
ways from fresh exports of one module:

* ``stock``: the backend's own layout stage;
* ``per_method``: the solver, each partition solved on its own (the default);
* ``joint``: the solver with `method_weights`: one problem over every
  partition of every method (see `layout_solver.lowering.joint_lowering`).

Per side and per method it reports the device cost (Ethos-U: Vela cycles and
transposes per method; Vulkan: the profile's modelled cost and, with
`execute`, lavapipe run time), the weighted total over methods, the .pte
size, constant bytes and solve time; then checks the solver programs against
stock (Ethos-U: every delegate on the TOSA reference model, bit-exact) or
against eager (Vulkan: every method on the device).

What is shared lives here (the model, the result's assembly, the program's
figures); each target's lowering of the three sides is its own
(`layout_solver.targets.<target>.methods`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from layout_solver.compare.result import MethodsComparison, MethodsSide
from layout_solver.lowering.quiet import quiet

SIDES = ("stock", "per_method", "joint")
# What a multi-method comparison sums over its methods (Arm's cycles or Vulkan's microseconds and run time), then the
# program's and the joint solve's figures: the rows of its tables (the CLI's and the benchmark's)
WEIGHTED_FIGURES = ("weighted_total_cycles", "weighted_transpose_cycles", "weighted_modelled_us", "weighted_run_ms")
PROGRAM_FIGURES = (
    "pte_bytes",
    "delegate_bytes",
    "constant_bytes",
    "solve_seconds",
    "joint_solve_seconds",
    "lower_seconds",
    "joint_groups",
    "linked_values",
    "merged_values",
    "cache_hits",
)


def program_bytes(program_manager, executorch_program) -> dict:
    """.pte size, delegate blob bytes and named (constant) data bytes of a lowered multi-method program."""
    blobs = 0
    for method in program_manager.methods:
        graph_module = program_manager.exported_program(method).graph_module
        for _, child in graph_module.named_children():
            blobs += len(getattr(child, "processed_bytes", b"") or b"")
    named = executorch_program._named_data
    named_bytes = sum(len(b.buffer) if hasattr(b, "buffer") else len(b) for b in (named.buffers if named else []))
    return {
        "pte_bytes": len(executorch_program.buffer),
        "delegate_bytes": blobs,
        "constant_bytes": named_bytes,
        "constant_entries": len(named.pte_data) if named else 0,
        "pte_sha256": hashlib.sha256(executorch_program.buffer).hexdigest()[:16],
    }


def joint_fields(reports) -> dict:
    """What the joint solve of a lowering reported (nothing for the stock and per-method sides)."""
    joints = getattr(reports, "joint", None) or []
    if not joints:
        return {}
    # The passes only looked their answers up: the side's solve time is the joint solve's.
    seconds = round(sum(j.solve_seconds for j in joints), 4)
    return {
        "joint_groups": sum(j.groups for j in joints),
        "cache_hits": sum(j.cache_hits for j in joints),
        "linked_values": sum(j.linked_values for j in joints),
        "merged_values": sum(j.merged_values for j in joints),
        "joint_solve_seconds": seconds,
        "solve_seconds": seconds,
        "joint_notes": [n for j in joints for n in j.notes],
    }


def weighted(per_method: dict[str, dict], weights: dict[str, float], key: str) -> float | None:
    """The methods' `key` weighted by `weights` and summed; None where a method lacks it."""
    values = [per_method[m].get(key) for m in weights]
    if any(v is None for v in values):
        return None
    return round(sum(weights[m] * v for m, v in zip(weights, values)), 3)


@dataclass
class MultiMethodModel:
    """One module exported as several methods that share its weights (and buffers): inputs per method, and
    how often each method runs per use of the program (the solver's `method_weights`)."""

    module: Any
    inputs: dict[str, tuple]
    weights: dict[str, float]


def compare_methods(
    built: MultiMethodModel,
    target: str,
    sides: Callable[[MultiMethodModel, dict[str, float]], dict],
    name: str | None = None,
    weights: dict[str, float] | None = None,
) -> MethodsComparison:
    """Stock vs per-method vs joint for `built` (module, inputs per method, weights) on `target`: `sides(built,
    weights)` is the target's own lowering of the three sides (the targets' `compare_methods` pass theirs: call it
    through the registry, `layout_solver.targets.get_target(name).compare_methods`). `weights` overrides the
    model's method weights; `name` labels the result (default: the module's class)."""
    weights = dict(weights or built.weights)
    with quiet():
        result = sides(built, weights)
    return MethodsComparison(
        model=name or type(built.module).__name__,
        target=target,
        methods=list(built.inputs),
        weights=weights,
        **{k: MethodsSide(**v) if k in SIDES else v for k, v in result.items()},
    )
