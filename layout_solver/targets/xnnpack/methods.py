"""A multi-method model's XNNPACK lowerings (stock and per-method), for
`layout_solver.compare.methods.compare_methods`.

No joint side: an XNNPACK delegate's layouts and a method's delegate boundaries are decided within that method,
and nothing the stage decides is shared between methods (each delegate packs its own weights), so a joint
problem would be the per-method problems side by side.
"""

from __future__ import annotations

import copy
import time
from collections import defaultdict

from layout_solver.compare.methods import program_bytes, weighted
from layout_solver.compare.result import error_record


def methods_sides(
    built,
    weights: dict[str, float],
    time_limit: float,
    quantized: bool,
    threads: int = 1,
    cost_profile=None,
    rounds: int = 15,
    execute: bool = True,
) -> dict:
    """Stock's and the stage's lowering of every method of `built` together (one program): per method the
    delegates, the conversions written and their modelled microseconds; per side the lowering's seconds and the
    stage's own (its delegate passes and program-level pass; stock's pass on the stock side). With `execute`,
    every method of both programs run here at `threads`: outputs against eager and stock's, and the two programs
    timed in interleaved paired rounds."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
    from executorch.exir import to_edge_transform_and_lower

    from layout_solver.lowering.joint_lowering import naming_partitions
    from layout_solver.targets.xnnpack.lowering import quantize
    from layout_solver.xnnpack import solver_layouts, stock_layouts

    modules = {
        m: quantize(copy.deepcopy(built.module), i) if quantized else built.module for m, i in built.inputs.items()
    }
    contexts = {
        "stock": lambda: stock_layouts(cost_profile, threads),
        "per_method": lambda: solver_layouts(time_limit, cost_profile, threads),
    }
    sides, buffers = {}, {}
    for side, context in contexts.items():
        start = time.perf_counter()
        try:
            exported = {m: torch.export.export(copy.deepcopy(modules[m]), i) for m, i in built.inputs.items()}
            with context() as reports, naming_partitions(XnnpackBackend):
                manager = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
                program = manager.to_executorch()
        except Exception as exc:  # noqa: BLE001 - recorded, not fatal
            sides[side] = error_record(exc)
            continue
        seconds = time.perf_counter() - start
        buffers[side] = program.buffer
        per_method: dict[str, dict] = defaultdict(lambda: {"transitions": 0, "modelled_us": 0.0, "delegates": 0})
        for report in reports:
            row = per_method[report.partition.split("#")[0]]  # "method#index" (naming_partitions)
            row["transitions"] += report.transitions_written
            row["modelled_us"] = round(row["modelled_us"] + report.modelled_us, 3)
            row["delegates"] += 1
        sides[side] = {
            "per_method": {m: dict(per_method[m]) for m in weights},
            "weighted_modelled_us": weighted(per_method, weights, "modelled_us"),
            "lower_seconds": round(seconds, 3),
            "solve_seconds": round(sum(r.phase_seconds.get("solve", 0.0) for r in reports), 4),
            "stage_seconds": round(sum(r.pass_seconds for r in reports) + getattr(reports, "program_seconds", 0.0), 3),
            **program_bytes(manager, program),
        }
    result = dict(sides)
    if execute and len(buffers) == 2:
        result.update(_execute(built, modules, buffers, sides, weights, threads, rounds, quantized))
    return result


def _execute(built, modules, buffers, sides, weights, threads, rounds, quantized) -> dict:
    """Every method of both programs run on this CPU: against eager and stock's outputs, then timed paired."""
    from layout_solver.compare.outputs import eager_outputs, max_abs_diff
    from layout_solver.targets.xnnpack.measure import STOCK_RTOL, max_rel_diff, run_outputs
    from layout_solver.targets.xnnpack.runtime import paired_times

    worst_vs_stock, equivalent = 0.0, True
    for method, inputs in built.inputs.items():
        # Each method from the module's initial state, as each program starts.
        eager = eager_outputs(copy.deepcopy(modules[method]), inputs)
        outputs = {}
        for side, buffer in buffers.items():
            row = sides[side]["per_method"][method]
            try:
                outputs[side] = run_outputs(buffer, inputs, threads, method)
            except Exception as exc:  # noqa: BLE001 - a method the runtime refuses is that side's result
                row.update(executed=False, execute_error=f"{type(exc).__name__}: {exc}"[:300])
                continue
            row.update(executed=True, max_abs_diff_vs_eager=max_abs_diff(outputs[side], eager))
        if len(outputs) == 2:
            worst_vs_stock = max(worst_vs_stock, max_abs_diff(outputs["stock"], outputs["per_method"]) or 0.0)
            # int8: the same program's integers, bit for bit; fp32: only the order of the same arithmetic may differ
            rel = max_rel_diff(outputs["stock"], outputs["per_method"])
            equivalent &= (rel == 0.0) if quantized else (rel is not None and rel <= STOCK_RTOL)
            timing = paired_times([buffers["stock"], buffers["per_method"]], inputs, threads, rounds, method=method)
            for side, ms in zip(("stock", "per_method"), timing.medians):
                sides[side]["per_method"][method]["run_ms"] = round(ms, 4)
            sides["per_method"]["per_method"][method]["paired_ratio"] = round(timing.ratio(1), 4)
        else:  # a side did not run this method: not shown equivalent
            equivalent = False
    for side in buffers:
        sides[side]["weighted_run_ms"] = weighted(sides[side]["per_method"], weights, "run_ms")
    return {"max_abs_diff_solver_vs_stock": worst_vs_stock, "per_method_equivalent": equivalent}
