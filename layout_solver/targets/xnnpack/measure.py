"""Stock against the solver on XNNPACK, measured on this CPU: both programs lowered from fresh exports of one
module (int8: of one quantized module), run through `executorch.runtime` in one process, interleaved and
paired, threads pinned; per-op times from ETDump; outputs against stock's and against eager."""

from __future__ import annotations

import hashlib
import statistics

import numpy as np

from layout_solver.compare.outputs import eager_outputs, max_abs_diff
from layout_solver.core.solve import DEFAULT_TIME_LIMIT
from layout_solver.targets.xnnpack.lowering import Lowered, lower, predicted_run, quantize

__all__ = ["Lowered", "compare_xnnpack", "lower", "predicted_run", "quantize"]

# A pair whose first paired ratio reads dearer than this is timed again in fresh processes (the median decides).
CONFIRM_BEYOND = 0.02
CONFIRM_TIMINGS = 4
# XNNPACK's own tests compare fp32 programs with eager at atol = rtol = 1e-3 (backends/xnnpack/test/tester).
EAGER_ATOL = EAGER_RTOL = 1e-3
# The solver's fp32 program against stock's: only the order of the same arithmetic may differ.
STOCK_RTOL = 1e-5


def run_outputs(buffer: bytes, inputs: tuple, threads: int = 1, method: str = "forward") -> list[np.ndarray]:
    """The program's `method`'s outputs on `inputs`, as float64 arrays."""
    from layout_solver.targets.xnnpack.runtime import load_method, set_threads

    set_threads(threads)
    outputs = load_method(buffer, method=method)[1].execute(list(inputs))
    return [np.asarray(o.detach().numpy() if hasattr(o, "detach") else o, dtype=np.float64) for o in outputs]


def max_rel_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float | None:
    """max |a - b| / max |a| over the outputs (relative to the output's own scale)."""
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return None
    return float(max((np.abs(x - y).max(initial=0.0) / max(np.abs(x).max(initial=0.0), 1e-12)
                      for x, y in zip(a, b)), default=0.0))  # fmt: skip


def side_record(buffer: bytes, reports: list, seconds: float, solver: bool) -> dict:
    """What the lowering of one side reported."""
    record = {
        "lower_seconds": round(seconds, 3),
        "pass_seconds": round(sum(r.pass_seconds for r in reports), 4),
        "delegates": len(reports),
        "transitions": sum(r.transitions_written for r in reports),
        "modelled_us": round(sum(r.modelled_us for r in reports), 3),
        "transition_list": [t for r in reports for t in r.transitions],
        "pte_sha256": hashlib.sha256(buffer).hexdigest()[:16],
    }
    if solver:
        record.update(
            objective=round(sum(r.objective or 0.0 for r in reports if r.kind == "solver"), 3),
            bound=round(sum(r.bound or 0.0 for r in reports if r.kind == "solver"), 3),
            gap=max((r.gap or 0.0 for r in reports if r.kind == "solver"), default=0.0),
            delegates_kept_stock=sum(r.kept_stock for r in reports),
            fallbacks=[n for r in reports if r.kind == "stock-fallback" for n in r.notes],
            solver_notes=[n for r in reports if r.kind == "solver" for n in r.notes],
            problem_ops=sum(r.problem_ops for r in reports),
            solve_seconds=round(sum(r.phase_seconds.get("solve", 0.0) for r in reports), 4),
            phase_seconds={
                k: round(sum(r.phase_seconds.get(k, 0.0) for r in reports), 4)
                for k in ("build", "solve", "write_back", "check")
            },
        )
    return record


def timed_pair(buffers: dict[str, bytes], inputs: tuple, threads: int, rounds: int):
    """(the solver-to-stock paired ratio at `threads`, every reading of it, the first timing): one in-process
    reading, and where it is outside 1 + CONFIRM_BEYOND (and the programs differ), four more in fresh processes,
    judged on the median."""
    from layout_solver.targets.xnnpack.runtime import paired_times, time_in_fresh_process

    pair = [buffers["stock"], buffers["solver"]]
    first = paired_times(pair, inputs, threads, rounds)
    readings = [first.ratio(1)]
    if pair[0] != pair[1] and readings[0] > 1 + CONFIRM_BEYOND:
        for _ in range(CONFIRM_TIMINGS):
            readings.append(time_in_fresh_process(pair, inputs, threads, rounds).ratio(1))
    return statistics.median(readings), readings, first


def compare_xnnpack(
    module,
    inputs: tuple,
    name: str,
    target: str,
    quantized: bool,
    time_limit: float = DEFAULT_TIME_LIMIT,
    service: str | None = None,
    threads: tuple[int, ...] = (1, 2),
    cost_profile: str | None = None,
    rounds: int = 30,
    verify: str = "model",
):
    """Stock versus solver on XNNPACK (see the module docstring); `verify="run"` keeps, on the solver side, the
    faster of the two programs by a paired timing at the first thread count."""
    from cost_models import xnnpack as xnn_cost
    from layout_solver.compare.artifacts import keep
    from layout_solver.compare.result import Comparison, Side, error_record, not_lowered
    from layout_solver.lowering.quiet import quiet
    from layout_solver.targets.xnnpack.cpu_ops import CpuOpTimes
    from layout_solver.targets.xnnpack.runtime import paired_times
    from layout_solver.xnnpack import solver_layouts, stock_layouts

    profile = xnn_cost.load_profile(cost_profile)
    cpu_times = CpuOpTimes()
    sides: dict[str, dict] = {}
    buffers: dict[str, bytes] = {}
    reports_by_side: dict[str, list] = {}
    with quiet():
        program_module = quantize(module, inputs) if quantized else module
        contexts = (
            ("stock", lambda: stock_layouts(profile, threads[0])),
            ("solver", lambda: solver_layouts(time_limit, profile, threads[0], service)),
        )
        for side, context in contexts:
            try:
                lowered = lower(program_module, inputs, context)
            except Exception as exc:  # noqa: BLE001 - recorded per side, the other side goes on
                sides[side] = error_record(exc)
                continue
            buffers[side] = lowered.buffer
            keep(side, reports_by_side.setdefault(side, lowered.reports))
            sides[side] = side_record(lowered.buffer, lowered.reports, lowered.seconds, side == "solver")
            predicted = {str(n): predicted_run(lowered, profile, n, cpu_times) for n in threads}
            if all(predicted.values()):
                sides[side]["predicted_run_ms_by_threads"] = {
                    n: round(p["total"] / 1e3, 4) for n, p in predicted.items()
                }
                sides[side]["predicted_run_us_by_part"] = predicted[str(threads[0])]
    extra: dict = {"threads": list(threads)}
    if set(buffers) != {"stock", "solver"}:
        extra.update(not_lowered(buffers))
    else:
        if verify == "run":
            timing = paired_times([buffers["stock"], buffers["solver"]], inputs, threads[0], rounds)
            kept = "solver" if timing.ratio(1) < 1.0 else "stock"
            sides["solver"].update(kept=kept, verify_run_ms={"stock": round(timing.medians[0], 4),
                                                            "solver": round(timing.medians[1], 4)})  # fmt: skip
            buffers["solver"] = buffers[kept]
            keep("solver", reports_by_side[kept])
            if kept == "stock":  # the solver side is stock's program now: priced as such
                for key in ("modelled_us", "predicted_run_ms_by_threads", "predicted_run_us_by_part"):
                    sides["solver"][key] = sides["stock"].get(key)
        extra.update(_measure(module if not quantized else program_module, inputs, buffers, sides, threads, rounds,
                              quantized, profile))  # fmt: skip
    return Comparison(model=name, target=target, cost_profile=xnn_cost.profile_name(cost_profile), cpu=xnn_cost.cpu_model(),
                      **{s: Side(**r) for s, r in sides.items()}, **extra)  # fmt: skip


def _measure(reference, inputs, buffers, sides, threads, rounds, quantized, profile) -> dict:
    """Outputs, paired timings and ETDump profiles of both programs."""
    from layout_solver.compare.result import not_compared
    from layout_solver.targets.xnnpack.clock import reference_ratio
    from layout_solver.targets.xnnpack.runtime import profile_ops

    extra: dict = {"same_program": buffers["stock"] == buffers["solver"]}
    outputs = {}
    for side in buffers:
        try:
            outputs[side] = run_outputs(buffers[side], inputs, threads[0])
        except Exception as exc:  # noqa: BLE001 - a program the runtime refuses is that side's result
            sides[side].update(executed=False, execute_error=f"{type(exc).__name__}: {exc}"[:500])
    if len(outputs) < 2:
        failed = " and ".join(sorted(set(buffers) - set(outputs)))
        return {**extra, **not_compared(f"{failed}'s program did not run on this CPU")}
    eager = eager_outputs(reference, inputs)
    for side, outs in outputs.items():
        sides[side]["executed"] = True
        sides[side]["max_abs_diff_vs_eager"] = max_abs_diff(outs, eager)
        sides[side]["eager_within_tolerance"] = len(outs) == len(eager) and all(
            np.allclose(o, e, atol=EAGER_ATOL, rtol=EAGER_RTOL) for o, e in zip(outs, eager)
        )
    extra["max_abs_diff_stock_vs_solver"] = max_abs_diff(outputs["stock"], outputs["solver"])
    extra["max_rel_diff_stock_vs_solver"] = max_rel_diff(outputs["stock"], outputs["solver"])
    extra["bit_identical"] = extra["max_abs_diff_stock_vs_solver"] == 0.0
    rel = extra["max_rel_diff_stock_vs_solver"]
    extra["equivalent"] = extra["bit_identical"] if quantized else (rel is not None and rel <= STOCK_RTOL)
    extra["max_abs_diff"] = extra["max_abs_diff_stock_vs_solver"]
    ratios, readings_by = {}, {}
    for n in threads:
        ratio, readings, first = timed_pair(buffers, inputs, n, rounds)
        ratios[str(n)] = round(ratio, 4)
        if n > 1:  # rounds the machine did not give every CPU to (`contention`), left out of the first timing
            extra.setdefault("contended_rounds_by_threads", {})[str(n)] = first.contended_rounds
            if not first.quiet:
                extra.setdefault("contended_timing_kept_by_threads", {})[str(n)] = True
        if len(readings) > 1:
            readings_by[str(n)] = [round(r, 4) for r in readings]
        for side, ms in zip(("stock", "solver"), first.medians):
            sides[side].setdefault("run_ms_by_threads", {})[str(n)] = round(ms, 4)
        if str(n) in profile.reference_us:  # the run times at the profile's speed, by the reference clock
            to_reference, reference_ms = reference_ratio(buffers["stock"], inputs, n, rounds)
            at_reference = to_reference * profile.reference_us[str(n)] / 1e3
            extra.setdefault("reference_ms_by_threads", {})[str(n)] = round(reference_ms, 4)
            # the speed the run times are stated at, so a profile measured again can restate them at its own
            extra.setdefault("profile_reference_us_by_threads", {})[str(n)] = profile.reference_us[str(n)]
            for side, value in (("stock", at_reference), ("solver", at_reference * ratio)):
                sides[side].setdefault("run_ms_at_reference_by_threads", {})[str(n)] = round(value, 4)
        for side in buffers:
            ops = profile_ops(buffers[side], inputs, n, runs=max(10, rounds // 2))
            sides[side].setdefault("conversion_ms_by_threads", {})[str(n)] = round(ops.conversion_ms, 4)
            if n == threads[0]:
                sides[side]["conversion_share"] = round(ops.conversion_share, 4)
                sides[side]["conversions"] = ops.conversions
    for side in buffers:
        sides[side]["run_ms"] = sides[side]["run_ms_by_threads"][str(threads[0])]
        sides[side]["predicted_conversion_ms"] = round(sides[side]["modelled_us"] / 1000.0, 4)
    extra["run_ratio_by_threads"] = ratios
    extra["run_ratio_paired"] = ratios[str(threads[0])]
    if readings_by:
        extra["run_ratio_timings_by_threads"] = readings_by
    extra["run_ratio"] = round(sides["solver"]["run_ms"] / sides["stock"]["run_ms"], 4)
    return extra
