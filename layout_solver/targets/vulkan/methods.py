"""A multi-method model's three Vulkan lowerings (stock, per-method, joint), for
`layout_solver.compare.methods.compare_methods`."""

from __future__ import annotations

import copy
import time
from collections import defaultdict

from layout_solver.compare.methods import joint_fields, program_bytes, weighted
from layout_solver.compare.result import error_record


def methods_sides(
    built,
    weights: dict[str, float],
    time_limit: float,
    execute: bool = False,
    runtime: str | None = None,
    cost_profile: str | None = None,
    rounds: int = 15,
    cache_dir: str | None = None,
) -> dict:
    """The three sides (stock, per-method, joint) of `built` lowered for Vulkan: per method the transitions, the
    profile's modelled cost and delegates; with `execute`, each method run on the device (`runtime`, `rounds`
    rounds) and checked against eager."""
    import torch
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
    from executorch.backends.vulkan.vulkan_preprocess import VulkanBackend
    from executorch.exir import to_edge_transform_and_lower

    from layout_solver.lowering.joint_lowering import naming_partitions
    from layout_solver.targets.vulkan.runtime import probe
    from layout_solver.vulkan import solver_layouts, stock_layouts

    if execute:
        probe(runtime)
    contexts = {
        "stock": lambda: stock_layouts(cost_profile),
        "per_method": lambda: solver_layouts(time_limit, cost_profile),
        "joint": lambda: solver_layouts(time_limit, cost_profile, method_weights=weights, cache_dir=cache_dir),
    }
    sides, buffers = {}, {}
    for side, context in contexts.items():
        start = time.perf_counter()
        try:
            exported = {
                m: torch.export.export(copy.deepcopy(built.module), inputs) for m, inputs in built.inputs.items()
            }
            with context() as reports, naming_partitions(VulkanBackend):
                manager = to_edge_transform_and_lower(exported, partitioner=[VulkanPartitioner()])
                program = manager.to_executorch()
        except Exception as exc:  # noqa: BLE001 - recorded, not fatal
            sides[side] = error_record(exc)
            continue
        buffers[side] = program.buffer
        per_method: dict[str, dict] = defaultdict(lambda: {"transitions": 0, "modelled_us": 0.0, "delegates": 0})
        for report in reports:
            row = per_method[report.partition.split("#")[0]]
            row["transitions"] += len(report.transitions)
            row["modelled_us"] = round(row["modelled_us"] + report.modelled_us, 3)
            row["delegates"] += 1
        record = {
            "per_method": {m: dict(per_method[m]) for m in weights},
            "weighted_modelled_us": weighted(per_method, weights, "modelled_us"),
            "lower_seconds": round(time.perf_counter() - start, 3),
            "solve_seconds": round(sum(r.phase_seconds.get("solve", 0.0) for r in reports), 4),
            # The stage's own time: its passes (stock's pass on the stock side) and the joint solve between them.
            "stage_seconds": round(
                sum(r.pass_seconds for r in reports) + sum(j.solve_seconds for j in getattr(reports, "joint", [])), 3
            ),
            **program_bytes(manager, program),
        }
        record.update(joint_fields(reports))
        sides[side] = record
    result = dict(sides)
    if execute and buffers:
        result.update(_execute_vulkan(built, buffers, sides, weights, runtime, rounds))
    return result


def _execute_vulkan(built, buffers, sides, weights, runtime, rounds) -> dict:
    import numpy as np
    import torch

    from layout_solver.targets.vulkan.runtime import execute

    expected = {}
    for method, inputs in built.inputs.items():
        with torch.no_grad():  # each method from the module's initial state, as each program starts
            expected[method] = [
                t.numpy() for t in torch.utils._pytree.tree_leaves(copy.deepcopy(built.module)(*inputs))
            ]
    runs = {f"{side}/{m}": (buffer, m) for side, buffer in buffers.items() for m in built.inputs}
    ran = execute(
        {}, {name: built.inputs[name.split("/")[1]] for name in runs}, runtime=runtime, rounds=rounds, methods=runs
    )
    worst_vs_stock = 0.0
    for name, outcome in ran.items():
        side, method = name.split("/")
        row = sides[side]["per_method"][method]
        row["executed"] = outcome.executed
        row["run_ms"] = round(outcome.run_ms, 3) if outcome.run_ms is not None else None
        if outcome.error:
            row["execute_error"] = outcome.error
        if outcome.executed:
            row["max_abs_diff_vs_eager"] = float(
                max(np.abs(o.astype(np.float64) - e).max() for o, e in zip(outcome.outputs, expected[method]))
            )
            stock = ran.get(f"stock/{method}")
            if side != "stock" and stock is not None and stock.executed:
                worst_vs_stock = max(
                    worst_vs_stock,
                    float(max(np.abs(a.astype(np.float64) - b).max() for a, b in zip(outcome.outputs, stock.outputs))),
                )
    for side in buffers:
        sides[side]["weighted_run_ms"] = weighted(sides[side]["per_method"], weights, "run_ms")
    return {"max_abs_diff_solver_vs_stock": worst_vs_stock}
