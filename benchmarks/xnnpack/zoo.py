"""XNNPACK on this CPU: stock ChannelsLastTaggedReshapePass against the solver stage, model by model, timed.

Run: .venv/bin/python -m benchmarks.xnnpack.zoo [--models a,b | --set zoo,outside,issue,transpose_counts,catalog]
     [--targets xnnpack,xnnpack-int8] [--threads 1,2] [--rounds 30] [--cache DIR] [--out benchmarks/results/xnnpack.md]
     [--repredict xnnpack-int8] [--cached-only] [--profile host]

`--repredict TARGETS` reads the cached records of those targets' predicted run times again with this checkout's
run-time model, the timings kept: each side lowered again and checked to be the same program (its .pte digest), a
record whose program differs left as it was, and its run times at the profile's speed restated at this profile's
reference speed where the record says which it was stated at. For a change to the prediction alone (it decides no
layout).

Sets: the built-in zoo, the outside set (transformers configs), "issue" (the issue's own model,
benchmarks/xnnpack/issue_models.py), "transpose_counts" (ExecuTorch's 36 transpose-count modules,
benchmarks/arm/transpose_count_cases.py) and the transformers catalog.

Per model and target (`layout-solver compare MODEL --target xnnpack[-int8] --threads 1,2`): both programs lowered in
one warm process from fresh exports of one module (int8: of one quantized module), run through executorch.runtime,
interleaved and paired at each thread count (a pair first read above 1.02 is timed again in four fresh processes and
judged on the median); ETDump's per-op times give each program's layout-conversion time (XNNPACK's transposes) and
its share of the run. Results are kept per model and target in --cache (a rerun resumes) and tabled with the
issue's acceptance checks: no model slower than stock (paired ratio <= 1.02) at any thread count; over the models
whose stock program spends >= 5% of its time converting, conversion time summed >= 60% lower; over those at
>= 15%, run-time geometric mean <= 0.90; the predicted conversion time against the measured one; lowering time
with the stage against stock's (median); the profile's predicted run time against the measured one, stated at
the profile's speed by the reference program timed in the same rounds (and raw).
"""

from __future__ import annotations

import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

from benchmarks import harness

SETS = ("zoo", "outside", "issue", "transpose_counts", "catalog")
# Models of the sets not timed, and why (listed in the report).
LEFT_OUT = {
    "transformers:efficientnet/image-classification": (
        "its final AvgPool2d takes the config's hidden_dim as its kernel (2560 x 2560 over a 2 x 2 map, "
        "ceil_mode), which XNNPACK does not take and the portable kernel runs in about 10 s a call; probing it "
        "and 120 paired runs would take over an hour, for a kernel the same in both programs"
    ),
}


def model_names(sets: list[str]) -> list[str]:
    """The single-method models of the named sets."""
    from layout_solver.zoo.models import ZOO

    names: list[str] = []
    if "zoo" in sets:
        names += list(ZOO)
    if "outside" in sets:
        from layout_solver.zoo.outside import MODELS

        names += [f"outside:{n}" for n in MODELS]
    if "issue" in sets:
        names.append("benchmarks/xnnpack/issue_models.py:channel_layer_norm_cnn")
    if "transpose_counts" in sets:
        from benchmarks.arm.transpose_count_cases import names as cases

        names += [f"benchmarks/arm/transpose_count_cases.py:{case}" for case in cases()]
    if "catalog" in sets:
        from layout_solver.zoo.catalog import default_names

        names += default_names()
    return names


def warm_up() -> None:
    """One small lowering of each side first, so no model's first lowering pays the process's start-up."""
    import torch

    from layout_solver.targets import compare

    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    compare(module, (torch.randn(1, 3, 8, 8),), "xnnpack", threads=[1], rounds=3)


def run_one(model: str, target: str, threads: list[int], rounds: int, profile: str) -> dict:
    from layout_solver.compare.result import error_record
    from layout_solver.zoo.runner import compare_named

    started = time.perf_counter()
    try:
        record = compare_named(model, target, threads=threads, rounds=rounds, cost_profile=profile).to_json()
        record["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - a model that cannot be built or exported is a row, not the end
        record = {"model": model, "target": target, "status": "error", **error_record(exc, limit=2)}
    record["seconds"] = round(time.perf_counter() - started, 1)
    return record


def repredict(record: dict, threads: list[int]) -> bool:
    """Read a cached record's predicted run times again (`--repredict`); False where a side's program is not the
    one the record timed."""
    from cost_models import xnnpack as xnn_cost
    from layout_solver.lowering.quiet import quiet
    from layout_solver.targets.xnnpack.cpu_ops import CpuOpTimes
    from layout_solver.targets.xnnpack.measure import lower, predicted_run, quantize
    from layout_solver.xnnpack import solver_layouts, stock_layouts
    from layout_solver.zoo.models import build

    profile = xnn_cost.load_profile(record.get("cost_profile"))
    module, inputs = build(record["model"])
    contexts = {"stock": lambda: stock_layouts(profile, threads[0]),
                "solver": lambda: solver_layouts(cost_profile=profile, threads=threads[0])}  # fmt: skip
    predicted = {}
    with quiet():
        program_module = quantize(module, inputs) if record["target"].endswith("int8") else module
        for side, context in contexts.items():
            lowered = lower(program_module, inputs, context)
            if hashlib.sha256(lowered.buffer).hexdigest()[:16] != record[side].get("pte_sha256"):
                return False
            predicted[side] = {str(n): predicted_run(lowered, profile, n, CpuOpTimes()) for n in threads}
    for side, by_threads in predicted.items():
        if all(by_threads.values()):
            record[side]["predicted_run_ms_by_threads"] = {n: round(p["total"] / 1e3, 4) for n, p in by_threads.items()}
            record[side]["predicted_run_us_by_part"] = by_threads[str(threads[0])]
    restate_at_reference(record, profile.reference_us)
    return True


def restate_at_reference(record: dict, reference_us: dict[str, float]) -> None:
    """A record's run times at the profile's speed, stated at another profile's (`reference_us`, by threads): each
    scaled by that over the reference speed the record says they were stated at (records without it kept)."""
    stated = record.get("profile_reference_us_by_threads", {})
    for n, was in list(stated.items()):
        if n in reference_us:
            for side in ("stock", "solver"):
                at_reference = record[side].get("run_ms_at_reference_by_threads", {})
                if n in at_reference:
                    at_reference[n] = round(at_reference[n] * reference_us[n] / was, 4)
            stated[n] = reference_us[n]


def _fmt(x, digits=3) -> str:
    return "" if x is None else f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def report(records: list[dict], threads: list[int]) -> list[str]:
    lines = [f"Provenance: {harness.provenance()}", ""]
    for target in dict.fromkeys(r["target"] for r in records):
        mine = [r for r in records if r["target"] == target]
        ok = [r for r in mine if r.get("status") == "ok" and "error" not in r.get("stock", {})
              and "error" not in r.get("solver", {}) and r.get("run_ratio_by_threads")]  # fmt: skip
        header = ["model", *(f"ratio {t}t" for t in threads), "same bytes", "stock conv ms", "solver conv ms", "stock share",
                  "predicted stock / solver conv ms", "stock / solver run ms (1st)",
                  "stock run ms predicted / at ref (1st)", "equivalent", "lower s stock / solver"]  # fmt: skip
        rows = []
        for r in ok:
            s, o = r["stock"], r["solver"]
            ratios = r.get("run_ratio_by_threads", {})
            t0 = str(threads[0])
            rows.append([
                r["model"], *(_fmt(ratios.get(str(t))) for t in threads), "yes" if r.get("same_program") else "",
                _fmt(s.get("conversion_ms_by_threads", {}).get(t0)), _fmt(o.get("conversion_ms_by_threads", {}).get(t0)),
                _fmt(s.get("conversion_share")), f"{_fmt(s.get('predicted_conversion_ms'))} / {_fmt(o.get('predicted_conversion_ms'))}",
                f"{_fmt(s.get('run_ms'))} / {_fmt(o.get('run_ms'))}",
                " / ".join(_fmt((s.get(k) or {}).get(t0)) for k in ("predicted_run_ms_by_threads",
                                                                   "run_ms_at_reference_by_threads")),
                "bit-identical" if r.get("bit_identical") else _fmt(r.get("equivalent")),
                f"{_fmt(s.get('lower_seconds'), 2)} / {_fmt(o.get('lower_seconds'), 2)}",
            ])  # fmt: skip
        lines += [f"## {target}", ""] + harness.table(header, rows) + [""]
        lines += checks(ok, threads) + [""]
        failed = [r for r in mine if r not in ok]
        if failed:
            lines += ["Not compared:", ""] + [
                f"- {r['model']}: {_why_not(r)}" for r in failed
            ] + [""]  # fmt: skip
    return lines


def _why_not(r: dict) -> str:
    """Why a record has no paired timing: the error that stopped it, or what kept its programs from running."""
    stock, solver = r.get("stock", {}), r.get("solver", {})
    if not r.get("error") and stock.get("error"):
        return f"stock's own lowering fails: {stock['error']}"
    return (r.get("error") or solver.get("error")
            or (f"did not run on this CPU (stock: {stock.get('execute_error')}; same bytes: "
                f"{'yes' if r.get('same_program') else 'no'})"))  # fmt: skip


def paired(r: dict, threads: str) -> float | None:
    """A model's paired ratio at a thread count; 1 where the two programs are the same bytes (what they read
    apart is the machine's noise, as the zoo report reads it)."""
    if r.get("same_program"):
        return 1.0
    return r.get("run_ratio_by_threads", {}).get(threads)


def checks(ok: list[dict], threads: list[int]) -> list[str]:
    """The issue's acceptance figures over the compared models of one target."""
    out = []
    for t in map(str, threads):
        ratios = [paired(r, t) for r in ok if paired(r, t) is not None]
        dearer = [r["model"] for r in ok if (paired(r, t) or 1) > 1.02]
        over5 = [r for r in ok if (r["stock"].get("conversion_share") or 0) >= 0.05]
        over15 = [r for r in ok if (r["stock"].get("conversion_share") or 0) >= 0.15]
        stock5 = sum(r["stock"]["conversion_ms_by_threads"][t] for r in over5)
        solver5 = sum(r["solver"]["conversion_ms_by_threads"][t] for r in over5)
        out.append(
            f"- {t} thread(s): {len(ratios)} models, geomean paired ratio {harness.geomean(ratios):.3f}, worst "
            f"{max(ratios, default=1):.3f}; dearer than 1.02: {dearer or 'none'}; "
            f"{len(over5)} models spend >= 5% converting: conversion time summed {stock5:.3f} -> {solver5:.3f} ms "
            f"({(1 - solver5 / stock5) if stock5 else 0:.0%} lower); {len(over15)} at >= 15%: geomean ratio "
            f"{harness.geomean([paired(r, t) for r in over15]) if over15 else float('nan'):.3f}"
        )
    errors = []
    for r in ok:
        for side in ("stock", "solver"):
            measured = r[side].get("conversion_ms_by_threads", {}).get(str(threads[0]))
            predicted = r[side].get("predicted_conversion_ms")
            if measured and predicted is not None and measured > 0.01:
                errors.append(abs(predicted - measured) / measured)
    if errors:
        out.append(f"- predicted conversion time against ETDump's, |error| median {statistics.median(errors):.0%} "
                   f"over {len(errors)} programs")  # fmt: skip
    out += prediction_checks(ok, threads)
    lowering = [
        r["solver"]["lower_seconds"] / r["stock"]["lower_seconds"] for r in ok if r["stock"].get("lower_seconds")
    ]
    if lowering:
        out.append(f"- lowering time with the stage / stock's: median {statistics.median(lowering):.2f}, "
                   f"worst {max(lowering):.2f}")  # fmt: skip
    noise = sorted(r["run_ratio_by_threads"][str(threads[0])] for r in ok if r.get("same_program"))
    if noise:
        out.append(f"- timing noise: {len(noise)} byte-identical pairs read {noise[0]:.3f} - {noise[-1]:.3f} "
                   f"at {threads[0]} thread(s) (counted as 1)")  # fmt: skip
    identical = sum(1 for r in ok if r.get("same_program"))
    out.append(f"- {identical} of {len(ok)} programs byte-identical to stock's (the stage kept every delegate's "
               f"layout); outputs: {sum(1 for r in ok if r.get('equivalent'))} equivalent")  # fmt: skip
    return out


def prediction_errors(ok: list[dict], t: str, measured_key: str) -> list[float]:
    """|predicted / measured - 1| of each side's whole run at `t` threads (`measured_key`: the run time at the
    profile's speed, or the raw one)."""
    out = []
    for r in ok:
        for side in ("stock", "solver"):
            predicted = (r[side].get("predicted_run_ms_by_threads") or {}).get(t)
            measured = (r[side].get(measured_key) or {}).get(t)
            if predicted and measured:
                out.append(abs(predicted / measured - 1))
    return out


def timed_where(r: dict) -> str:
    """Where a record was timed, against the profile that predicted it: on the CPU the profile was measured on, on
    another, not recorded (records before the CPU was), or against a profile file not readable here."""
    from cost_models import xnnpack as xnn_cost

    if not r.get("cpu"):
        return "CPU not recorded"
    try:
        own = xnn_cost.measured_on(xnn_cost.load_profile(r.get("cost_profile")), r["cpu"])
    except OSError:
        return "profile not readable here"
    return "on the profile's own CPU" if own else "on another CPU than the profile's"


def prediction_checks(ok: list[dict], threads: list[int]) -> list[str]:
    """The profile's predicted run time against the measured one, per thread count, apart by where the programs
    were timed (a profile predicts the CPU it was measured on)."""
    out = []
    groups: dict[str, list[dict]] = {}
    for r in ok:
        groups.setdefault(timed_where(r), []).append(r)
    for where, mine in sorted(groups.items()):
        for t in map(str, threads):
            at_reference = prediction_errors(mine, t, "run_ms_at_reference_by_threads")
            raw = prediction_errors(mine, t, "run_ms_by_threads")
            if at_reference:
                out.append(
                    f"- predicted run time at {t} thread(s) against measured ({where}), |error| median "
                    f"{statistics.median(at_reference):.0%} at the profile's speed ({sum(e <= 0.1 for e in at_reference)} "
                    f"of {len(at_reference)} programs within 10%), {statistics.median(raw):.0%} raw"
                )  # fmt: skip
            quiet = [r for r in mine if t not in (r.get("contended_timing_kept_by_threads") or {})]
            if t != "1" and any("contended_rounds_by_threads" in r for r in mine):
                errors = prediction_errors(quiet, t, "run_ms_at_reference_by_threads")
                out.append(
                    f"  - {len(quiet)} of {len(mine)} records timed at {t} threads in quiet spells only "
                    f"(`contention`; the others kept their quietest chunks)"
                    + (f": |error| median {statistics.median(errors):.0%} over them" if errors else "")
                )  # fmt: skip
    out += reference_spread(ok, threads)
    return out


def reference_spread(ok: list[dict], threads: list[int]) -> list[str]:
    """How far the machine's own multi-thread speed moves during the run: the reference program's run time at
    each further thread count over its time at the first, per record (both read in the model's rounds), against
    the profile's. A profile's multi-thread curves hold for one such state; where the ratio wanders by more than
    the prediction's tolerance, no profile predicts that thread count within it."""
    from cost_models import xnnpack as xnn_cost

    profile = xnn_cost.load_profile(ok[0].get("cost_profile") if ok else None)
    first, out = str(threads[0]), []
    for t in map(str, threads[1:]):
        ratios = sorted(
            r["reference_ms_by_threads"][t] / r["reference_ms_by_threads"][first]
            for r in ok
            if {first, t} <= set(r.get("reference_ms_by_threads") or {})
        )
        if len(ratios) < 10 or not {first, t} <= set(profile.reference_us):
            continue
        deciles = statistics.quantiles(ratios, n=10)
        out.append(
            f"- the reference program's run time at {t} over {first} thread(s), across the run: median "
            f"{statistics.median(ratios):.2f}, 10-90% {deciles[0]:.2f} - {deciles[-1]:.2f}, all {ratios[0]:.2f} - "
            f"{ratios[-1]:.2f} ({len(ratios)} records); the profile's {profile.reference_us[t] / profile.reference_us[first]:.2f}"
        )  # fmt: skip
    return out


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--models")
    parser.add_argument("--set", default="zoo,outside")
    parser.add_argument("--targets", default="xnnpack,xnnpack-int8")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--cache", default="zoo-out/xnnpack-bench")
    parser.add_argument("--repredict", default="", help="targets whose cached predictions to read again")
    parser.add_argument("--cached-only", action="store_true", help="table the cached records, run nothing")
    parser.add_argument("--profile", default="host",
                        help="the XNNPACK profile both sides are lowered and predicted with (default: the built-in "
                             "measured on this CPU; a file from `calibrate xnnpack` where none was)")  # fmt: skip
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    models = args.models.split(",") if args.models else model_names(args.set.split(","))
    left_out = {m: why for m, why in LEFT_OUT.items() if m in models}
    models = [m for m in models if m not in left_out]
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    if not args.cached_only:
        warm_up()
    records, not_run = [], []
    jobs = [(m, t) for t in args.targets.split(",") for m in models]
    for i, (model, target) in enumerate(jobs, 1):
        path = cache / f"{target}__{model.replace('/', '_').replace(':', '_')}.json"
        if path.is_file():
            records.append(json.loads(path.read_text()))
            if target in args.repredict.split(",") and records[-1].get("status") == "ok" and "stock" in records[-1]:
                same = repredict(records[-1], threads)
                path.write_text(json.dumps(records[-1]))
                print(f"[{i}/{len(jobs)}] {target} {model}: predicted again" if same else
                      f"[{i}/{len(jobs)}] {target} {model}: another program now, left as it was",
                      file=sys.stderr, flush=True)  # fmt: skip
            continue
        if args.cached_only:
            not_run.append(f"{target} {model}")
            continue
        record = run_one(model, target, threads, args.rounds, args.profile)
        path.write_text(json.dumps(record))
        records.append(record)
        ratios = record.get("run_ratio_by_threads", {})
        print(f"[{i}/{len(jobs)}] {target} {model}: {record['status']} ratios {ratios} "
              f"share {record.get('stock', {}).get('conversion_share')} ({record['seconds']} s)",
              file=sys.stderr, flush=True)  # fmt: skip
    lines = report(records, threads)
    if left_out:
        lines += ["Left out:", ""] + [f"- {m}: {why}" for m, why in left_out.items()] + [""]
    if not_run:
        lines += [f"Not run yet ({len(not_run)}; `--cached-only`): {', '.join(not_run)}", ""]
    harness.emit(lines, args.out)


if __name__ == "__main__":
    main()
