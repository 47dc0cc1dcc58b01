"""Whole-program NPU cycles, stock against the solver stage, on every Ethos-U target asked for (issue 32).

Run: .venv/bin/pip install -e .[outside]
     .venv/bin/python -m benchmarks.arm.total [--targets ethos-u55-128,ethos-u85-256] [--sets zoo,outside,cases]
            [--models a,b] [--jobs 1] [--work zoo-out/arm_total] [--fp-cases] [--out benchmarks/results/arm_total.md]

Each model (the built-in Arm zoo, layout_solver/zoo/outside.py, and executorch's 36 transpose-count cases,
benchmarks/arm/transpose_count_cases.py) is compared on each target with `layout-solver zoo`'s machinery (worker
processes, results cached under --work so a rerun resumes): stock and solver lowered from one int8 program,
Vela's total cycles of every delegate for the target's own compile spec, equivalence on the TOSA reference model
and against the quantized eager model. The solver side is what `solver_layouts()` hands back by default: the
delegate the stage laid out, or stock's where Vela prices the stage's dearer (verify="vela"; the table says how
many delegates kept stock's). The stage's prediction (its objective: the delegates' NPU cycles as its pricing
sees them) is set against Vela's total of the stage's own layout (before that choice). A case stock itself
cannot lower is listed, not counted.

--fp-cases also runs the transpose-count suite in executorch's own TOSA FP pipeline (its tester: lowering,
the count, and the outputs on the reference model), stock and with the stage, and tables the TOSA TRANSPOSE
counts per case.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks import harness

HERE = Path(__file__).parent

SETS = ("zoo", "outside", "cases")


def models_of(sets: list[str]) -> list[str]:
    from benchmarks.arm import transpose_count_cases
    from layout_solver.zoo import outside
    from layout_solver.zoo.models import ARM_ZOO, OUTSIDE

    found = []
    if "zoo" in sets:
        found += list(ARM_ZOO)
    if "outside" in sets:
        found += [f"{OUTSIDE}{m}" for m in outside.MODELS]
    if "cases" in sets:
        found += [f"{HERE / 'transpose_count_cases.py'}:{m}" for m in transpose_count_cases.names()]
    return found


def short(model: str) -> str:
    return model.rpartition(":")[2] if ":" in model else model


def set_of(model: str) -> str:
    if model.startswith("outside:"):
        return "outside"
    if "transpose_count_cases.py" in model:
        return "cases"
    return "zoo"


def fmt(v) -> str:
    return f"{v:,}" if isinstance(v, int) else ("" if v is None else str(v))


def pct(a, b) -> str:
    return f"{a / b - 1:+.1%}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else ""


def table(results: list[dict], target: str) -> tuple[list[str], dict]:
    """The markdown rows of one target, and its figures for the checks."""
    lines = [
        f"### {target}",
        "",
        (
            "| set | model | total cycles stock | solver | change | transpose cycles stock | solver | TOSA transposes "
            "stock / solver | stage's layout (Vela) | predicted | error | delegates kept stock | lower s stock / solver "
            "| equivalent |"
        ),
        "|" + "---|" * 14,
    ]
    figures = {"ratios": {}, "errors": {}, "failed": [], "stock_failed": [], "sums": {}}
    for r in sorted((r for r in results if r["target"] == target), key=lambda r: (set_of(r["model"]), r["model"])):
        s, o = r.get("stock", {}), r.get("solver", {})
        name, group = short(r["model"]), set_of(r["model"])
        if "error" in s or r.get("error"):
            figures["stock_failed"].append(f"{name}: {s.get('error') or r.get('error')}")
            lines.append(f"| {group} | {name} | stock failed: {(s.get('error') or r.get('error'))[:80]} |")
            continue
        if "error" in o:
            figures["failed"].append(f"{name}: {o['error']}")
            lines.append(f"| {group} | {name} | {fmt(s.get('vela_total_cycles'))} | solver failed: {o['error'][:80]} |")
            continue
        stock, solver = s["vela_total_cycles"], o["vela_total_cycles"]
        figures["ratios"][(group, name)] = solver / stock if stock else 1.0
        for key in ("vela_total_cycles", "vela_transpose_cycles"):
            sums = figures["sums"].setdefault(group, {})
            sums.setdefault(key, [0, 0])
            sums[key][0] += s.get(key) or 0
            sums[key][1] += o.get(key) or 0
        predicted, own = o.get("predicted_total_cycles"), o.get("verified_solver_cycles")
        error = (predicted / own - 1) if predicted and own else None
        if error is not None:
            figures["errors"][(group, name)] = error
        equivalent = r.get("equivalent")
        if equivalent is None and r.get("equivalent_on_example_inputs") is not None:
            equivalent = f"{r['equivalent_on_example_inputs']} (example inputs)"
        lines.append(
            f"| {group} | {name} | {fmt(stock)} | {fmt(solver)} | {pct(solver, stock)} | "
            f"{fmt(s.get('vela_transpose_cycles'))} | {fmt(o.get('vela_transpose_cycles'))} | "
            f"{s.get('tosa_transposes')} / {o.get('tosa_transposes')} | {fmt(own)} | "
            f"{fmt(round(predicted)) if predicted else ''} | {'' if error is None else f'{error:+.1%}'} | "
            f"{o.get('delegates_kept_stock', '')} | {s.get('lower_seconds')} / {o.get('lower_seconds')} | "
            f"{equivalent} |"
        )
    return lines + [""], figures


def checks(target: str, figures: dict) -> list[str]:
    ratios, errors = figures["ratios"], figures["errors"]
    worst = max(ratios.items(), key=lambda kv: kv[1], default=(("", ""), 1.0))
    abs_errors = sorted(abs(e) for e in errors.values())
    lines = [
        (
            f"- {target}: {len(ratios)} models compared; total cycles <= stock (0.1% tolerance) on every one: "
            f"{all(v <= 1.001 for v in ratios.values())} (worst {worst[0][1]} {worst[1]:.4f})"
        ),
        f"- {target}: solver side failed where stock lowered: {len(figures['failed'])}"
        + (f" ({'; '.join(figures['failed'])})" if figures["failed"] else ""),
    ]
    if abs_errors:
        worst_error = max(errors.items(), key=lambda kv: abs(kv[1]))
        lines.append(
            f"- {target}: prediction against Vela's total of the stage's layout: median |error| "
            f"{statistics.median(abs_errors):.2%} (<= 3%: {statistics.median(abs_errors) <= 0.03}), worst "
            f"{worst_error[0][1]} {worst_error[1]:+.2%} (every model within 10%: {abs_errors[-1] <= 0.10})"
        )
    for group, sums in sorted(figures["sums"].items()):
        total, transposes = sums["vela_total_cycles"], sums["vela_transpose_cycles"]
        lines.append(
            f"- {target}, {group} summed: total cycles {total[0]:,} -> {total[1]:,} ({pct(total[1], total[0])}), "
            f"transpose cycles {transposes[0]:,} -> {transposes[1]:,} ({pct(transposes[1], transposes[0])})"
        )
    if figures["stock_failed"]:
        lines.append(f"- {target}: stock itself cannot lower (not counted): " + "; ".join(figures["stock_failed"]))
    return lines


def fp_cases(names: list[str]) -> list[str]:
    """The transpose-count suite in executorch's own TOSA FP pipeline, stock and with the stage."""
    from layout_solver.targets.ethos_u.conformance import fp_transpose_count, transpose_count_cases

    lines = [
        "| case | expected (executorch) | TOSA TRANSPOSE stock | solver | stock run | solver run |",
        "|---|---|---|---|---|---|",
    ]
    more, failing = [], []
    for name in names:
        (s, s_run), (o, o_run) = (fp_transpose_count(name, stage) for stage in ("stock", "solver"))
        if s is not None and o is not None and o > s:
            more.append(name)
        if s_run == "ok" and o_run != "ok":
            failing.append(name)
        lines.append(
            f"| {name} | {transpose_count_cases()[name].expected_transposes} | {s} | {o} | {s_run} | {o_run} |"
        )
        print(lines[-1], flush=True)
    lines += [
        "",
        f"- cases with more TOSA TRANSPOSE ops than stock: {len(more)}" + (f" ({', '.join(more)})" if more else ""),
        f"- cases that fail with the stage and pass stock: {len(failing)}"
        + (f" ({', '.join(failing)})" if failing else ""),
    ]
    return lines


def main() -> None:
    from layout_solver.zoo.runner import run_zoo

    parser = harness.parser(__doc__)
    parser.add_argument("--targets", default="ethos-u55-128,ethos-u85-256")
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--models", help="only these (names as in the table)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--work", default="zoo-out/arm_total", help="results cache (a rerun resumes)")
    parser.add_argument("--fp-cases", action="store_true", help="also run the transpose-count suite in TOSA FP")
    args = parser.parse_args()
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # flatc, for the FP counts
    targets = args.targets.split(",")
    models = models_of(args.sets.split(","))
    if args.models:
        wanted = set(args.models.split(","))
        models = [m for m in models if short(m) in wanted]
    start = time.time()
    results = run_zoo(models, targets, Path(args.work), jobs=args.jobs, log=lambda m: print(m, file=sys.stderr))
    lines = [
        harness.provenance(
            f"{len(models)} models x {len(targets)} targets; {(time.time() - start) / 60:.0f} min of new runs"
        ),
        "",
        (
            "Solver: `solver_layouts()` as shipped (verify=\"vela\"). 'stage's layout (Vela)': Vela's total of the "
            "stage's own layout, which the stage's prediction is set against; where it is dearer than stock's, stock's "
            "delegate is kept ('delegates kept stock')."
        ),
        "",
    ]
    summary = []
    for target in targets:
        rows, figures = table(results, target)
        lines += rows
        summary += checks(target, figures)
    lines += ["## Checks", "", *summary, ""]
    if args.fp_cases:
        from benchmarks.arm import transpose_count_cases

        lines += ["## The transpose-count suite in executorch's TOSA FP pipeline", ""]
        lines += fp_cases(transpose_count_cases.names())
    harness.emit(lines, args.out)


if __name__ == "__main__":
    main()
