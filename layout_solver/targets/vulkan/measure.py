"""Vulkan lowering for measurement: one lowering of a fresh export inside a layout context (stock or solver),
and both sides' programs run on the Vulkan device against eager."""

from __future__ import annotations

import statistics


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


def execute_on_device(
    module,
    inputs,
    buffers: dict[str, bytes],
    sides: dict,
    runtime,
    rounds: int,
    confirm_timings: int = 0,
    confirm_beyond: float = 0.0,
) -> dict:
    """Run each lowered side on the Vulkan device; adds executed / max_abs_diff_vs_eager / run_ms per side.

    Two different programs whose paired ratio reads more than `confirm_beyond` away from 1 are timed again in
    `confirm_timings` fresh processes, and the paired ratio becomes the median over all the processes
    (`run_ratio_timings` lists each one's): on a shared CPU device one process's reading of identical programs
    strays by several percent, so a single reading cannot call a program dearer or better."""
    import numpy as np
    import torch

    from layout_solver.targets.vulkan.runtime import execute, time_again

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
    if "stock" in buffers and "solver" in buffers:  # the same bytes: any difference in their times is noise
        extra["same_program"] = buffers["stock"] == buffers["solver"]
    stock, solver = ran.get("stock"), ran.get("solver")
    if stock and solver and stock.run_ms and solver.run_ms:
        extra["run_ratio"] = round(solver.run_ms / stock.run_ms, 4)
        # each round runs both programs back to back: the median of the rounds' own ratios cancels the drift
        # between rounds that the ratio of the two medians keeps
        first = paired_ratio(stock.run_ms_all, solver.run_ms_all)
        if first is not None:
            extra["run_ratio_paired"] = round(first, 4)
            if not extra.get("same_program") and abs(first - 1) > confirm_beyond and confirm_timings:
                pair = {"stock": buffers["stock"], "solver": buffers["solver"]}
                readings = [first]
                for _ in range(confirm_timings):
                    times = time_again(pair, inputs, runtime=runtime, rounds=rounds)
                    again = paired_ratio(times.get("stock", []), times.get("solver", []))
                    if again is not None:
                        readings.append(again)
                extra["run_ratio_timings"] = [round(r, 4) for r in readings]
                extra["run_ratio_paired"] = round(statistics.median(readings), 4)
        extra["measured_delta_us"] = round((solver.run_ms - stock.run_ms) * 1000.0, 1)
        extra["predicted_delta_us"] = round(sides["solver"]["modelled_us"] - sides["stock"]["modelled_us"], 1)
    if stock and solver and stock.executed and solver.executed:
        extra["max_abs_diff_stock_vs_solver"] = float(
            max((np.abs(a.astype(np.float64) - b).max() for a, b in zip(stock.outputs, solver.outputs)), default=0.0)
        )
    return extra


def paired_ratio(stock_ms: list[float], solver_ms: list[float]) -> float | None:
    """The median of the rounds' own solver / stock ratios (each round runs both back to back: the drift
    between rounds cancels); None without a full pair of timings."""
    if not stock_ms or len(stock_ms) != len(solver_ms):
        return None
    paired = [o / s for o, s in zip(solver_ms, stock_ms, strict=True) if s > 0]
    return statistics.median(paired) if paired else None
