"""Vulkan: stock TagMemoryMetaPass versus the solver on one module, and optionally both programs run on the
Vulkan device against eager."""

from __future__ import annotations

import time
from collections import Counter

from layout_solver.compare.result import Comparison, Side, error_record
from layout_solver.quiet import quiet
from layout_solver.solve import DEFAULT_TIME_LIMIT


def compare_vulkan(
    module,
    inputs: tuple,
    name: str | None = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
    execute: bool = False,
    runtime: str | None = None,
    cost_profile: str | None = None,
    rounds: int = 15,
    service: str | None = None,
) -> Comparison:
    """Lower `module` on `inputs` with the stock TagMemoryMetaPass and with the solver (each from a fresh
    export); with `execute`, run both on the Vulkan device (runtime plugin `runtime` or
    $LAYOUT_SOLVER_VULKAN_RUNTIME) against eager. `name` labels the result (default: the module's class).

    Raises VulkanRuntimeUnavailable (before lowering anything) when `execute` has no plugin or no device.
    """
    with quiet():
        return _compare_vulkan(
            module, inputs, name or type(module).__name__, time_limit, execute, runtime, cost_profile, rounds, service
        )


def _compare_vulkan(module, inputs, name, time_limit, execute, runtime, cost_profile, rounds, service) -> Comparison:
    from layout_solver.vulkan import solver_layouts, stock_layouts
    from layout_solver.vulkan.runtime import probe

    if execute:
        probe(runtime)
    sides = {}
    buffers = {}
    contexts = (
        ("stock", lambda: stock_layouts(cost_profile)),
        ("solver", lambda: solver_layouts(time_limit, cost_profile, service)),
    )
    for side, context in contexts:
        start = time.perf_counter()
        try:
            buffers[side], reports = lower_vulkan(module, inputs, context)
        except Exception as exc:  # noqa: BLE001 - recorded, not fatal: e.g. upstream fake-mode failures
            sides[side] = error_record(exc)
            continue
        elapsed = time.perf_counter() - start
        by_repr: Counter = Counter()
        for r in reports:
            by_repr.update(r.tensors_by_repr)
        record = {
            "transitions": sum(len(r.transitions) for r in reports),
            "transition_cost": round(sum(r.transition_cost for r in reports), 3),
            "tensors_by_repr": dict(sorted(by_repr.items())),
            "lower_seconds": round(elapsed, 3),
            "pass_seconds": round(sum(r.pass_seconds for r in reports), 4),
            "delegates": len(reports),
            "modelled_us": round(sum(r.modelled_us for r in reports), 3),
            "modelled_us_by_profile": {
                label: round(sum(r.modelled_us_by_profile.get(label, 0.0) for r in reports), 3)
                for label in dict.fromkeys(k for r in reports for k in r.modelled_us_by_profile)
            }
            or None,
            "transition_list": [t for r in reports for t in r.transitions],
        }
        if side == "solver":
            record.update(
                objective=round(sum(r.objective or 0.0 for r in reports), 3),
                bound=round(sum(r.bound or 0.0 for r in reports), 3),
                gap=max((r.gap or 0.0 for r in reports), default=0.0),
                fallbacks=[n for r in reports if r.kind == "stock-fallback" for n in r.notes],
                delegates_kept_stock=sum(r.kept_stock for r in reports),
                solver_notes=[n for r in reports if r.kind == "solver" for n in r.notes],
                problem_ops=sum(r.problem_ops for r in reports),
                solve_seconds=round(sum(r.phase_seconds.get("solve", 0.0) for r in reports), 4),
                phase_seconds={
                    k: round(sum(r.phase_seconds.get(k, 0.0) for r in reports), 4)
                    for k in ("build", "solve", "write_back", "check")
                },
            )
        sides[side] = record
    extra = execute_on_device(module, inputs, buffers, sides, runtime, rounds) if execute and buffers else {}
    return Comparison(
        model=name,
        target="vulkan",
        cost_profile=cost_profile or "default",
        **{side: Side(**record) for side, record in sides.items()},
        **extra,
    )


def lower_vulkan(module, inputs: tuple, context) -> tuple[bytes, list]:
    """One Vulkan lowering of a fresh export inside `context()` (stock_layouts or solver_layouts):
    the program's bytes and the tagging passes' reports."""
    import torch
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
    from executorch.exir import to_edge_transform_and_lower

    exported = torch.export.export(module, inputs)
    with context() as reports:
        program = to_edge_transform_and_lower(exported, partitioner=[VulkanPartitioner()])
        return program.to_executorch().buffer, reports


def execute_on_device(module, inputs, buffers: dict[str, bytes], sides: dict, runtime, rounds: int) -> dict:
    """Run each lowered side on the Vulkan device; adds executed / max_abs_diff_vs_eager / run_ms per side."""
    import numpy as np
    import torch

    from layout_solver.vulkan.runtime import execute

    with torch.no_grad():
        expected = [
            t.detach().numpy() for t in torch.utils._pytree.tree_leaves(module(*inputs)) if isinstance(t, torch.Tensor)
        ]
    ran = execute(buffers, inputs, runtime=runtime, rounds=rounds)
    for side, outcome in ran.items():
        record = sides[side]
        record["executed"] = outcome.executed
        record["run_ms"] = round(outcome.run_ms, 3) if outcome.run_ms is not None else None
        if outcome.executed:
            shapes_match = len(outcome.outputs) == len(expected) and all(
                o.shape == e.shape for o, e in zip(outcome.outputs, expected)
            )
            record["max_abs_diff_vs_eager"] = (
                float(
                    max(
                        (np.abs(o.astype(np.float64) - e).max() for o, e in zip(outcome.outputs, expected)), default=0.0
                    )
                )
                if shapes_match
                else None
            )
            if not shapes_match:
                record["execute_error"] = "the program's outputs do not have the eager model's shapes"
        else:
            record["max_abs_diff_vs_eager"] = None
        if outcome.error:
            record["execute_error"] = outcome.error
    extra: dict = {}
    stock, solver = ran.get("stock"), ran.get("solver")
    if stock and solver and stock.run_ms and solver.run_ms:
        extra["run_ratio"] = round(solver.run_ms / stock.run_ms, 4)
        extra["measured_delta_us"] = round((solver.run_ms - stock.run_ms) * 1000.0, 1)
        extra["predicted_delta_us"] = round(sides["solver"]["modelled_us"] - sides["stock"]["modelled_us"], 1)
    if stock and solver and stock.executed and solver.executed:
        extra["max_abs_diff_stock_vs_solver"] = float(
            max((np.abs(a.astype(np.float64) - b).max() for a, b in zip(stock.outputs, solver.outputs)), default=0.0)
        )
    return extra
