"""Differential testing of the Arm layout stage on seeded random graphs (issue 35): stock against the solver.

Run: .venv/bin/python -m benchmarks.arm.generated [--seeds 0-199] [--targets ethos-u55-128,ethos-u85-256]
            [--alternate] [--jobs 2] [--work zoo-out/arm_generated] [--shrink] [--out benchmarks/results/arm_generated.md]

Each seed is one graph of `layout_solver.zoo.generated` (`layout-solver compare generated:SEED` shows one); each
(graph, target) is a `zoo` job (worker processes, results cached under --work, so a rerun resumes). The checks
are `layout_solver.zoo.differential`'s: the solver side never fails where stock lowers, the two programs give
identical int8 outputs on the TOSA reference model, and Vela's total cycles of the solver's program are <= stock's.
With --shrink every violation is shrunk in this process and written as a Python module under WORK/failures/.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from benchmarks import harness
from layout_solver.zoo import differential, generated
from layout_solver.zoo.models import expand_names
from layout_solver.zoo.runner import run_zoo


def seed_of(model: str) -> int:
    return int(model.rpartition(":")[2])


def summary(records: list[dict], target: str) -> list[str]:
    mine = [r for r in records if r["target"] == target]
    verdicts = Counter(v for r in mine for v in r["verdicts"])
    compared = [r for r in mine if r["stock_cycles"] and r["solver_cycles"]]
    stock_total = sum(r["stock_cycles"] for r in compared)
    solver_total = sum(r["solver_cycles"] for r in compared)
    stage = [r for r in compared if r["stage_layout_cycles"]]
    stage_dearer = sum(1 for r in stage if differential.dearer(r["stage_layout_cycles"], r["stock_cycles"]))
    errors = [
        abs(r["predicted_cycles"] / r["stage_layout_cycles"] - 1) for r in stage if r["predicted_cycles"] is not None
    ]
    ratios = [r["solver_cycles"] / r["stock_cycles"] for r in compared]
    better = sum(1 for x in ratios if x < 1 - differential.CYCLE_TOLERANCE)
    violations = [r for r in mine if differential.violations(r)]
    lines = [
        f"### {target}",
        "",
        (
            "| graphs | stock failed (not counted) | ok | unchecked | crashed | solver failed | not equivalent | dearer | better | "
            "total cycles stock -> solver | stage's own layout dearer than stock (kept stock's) | "
            "prediction median / worst abs error |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {len(mine)} | {verdicts['stock_failed']} | {verdicts['ok']} | {verdicts['unchecked']} | {verdicts['crashed']} | "
        f"{verdicts['solver_failed']} | {verdicts['not_equivalent']} | {verdicts['dearer']} | {better} | "
        f"{stock_total:,} -> {solver_total:,} ({(solver_total / stock_total - 1) if stock_total else 0:+.1%}) | "
        f"{stage_dearer} of {len(stage)} | "
        + (f"{statistics.median(errors):.1%} / {max(errors):.1%} |" if errors else " |"),
        "",
    ]
    if violations:
        lines += ["Violations:", ""]
        lines += [
            f"- {r['model']}: {', '.join(differential.violations(r))}: {r['solver_error'] or ''}" for r in violations
        ]
        lines.append("")
    failed_stock = Counter(
        (r["stock_cause"] or r["stock_error"] or "")[:120] for r in mine if "stock_failed" in r["verdicts"]
    )
    if failed_stock:
        lines += ["Stock failures by kind (graphs the Arm backend itself cannot lower):", ""]
        lines += [f"- {kind or '(no message)'}: {n}" for kind, n in failed_stock.most_common()]
        lines.append("")
    return lines


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--seeds", default="0-199", help="a range A-B (inclusive)")
    parser.add_argument("--targets", default="ethos-u55-128,ethos-u85-256")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--work", default="zoo-out/arm_generated", help="results cache (a rerun resumes)")
    parser.add_argument("--shrink", action="store_true", help="shrink each violation and write it as a module")
    parser.add_argument(
        "--alternate", action="store_true", help="each graph on one target: seed s on the (s mod #targets)-th, as CI"
    )
    args = parser.parse_args()
    models = expand_names([f"generated:{args.seeds}"])
    targets = args.targets.split(",")
    work = Path(args.work)
    start = time.time()
    if args.alternate:
        results = []
        for k, target in enumerate(targets):
            mine = [m for m in models if seed_of(m) % len(targets) == k]
            results += run_zoo(mine, [target], work, jobs=args.jobs, log=lambda m: None)
    else:
        results = run_zoo(models, targets, work, jobs=args.jobs, log=lambda m: None)
    records = [differential.record(r) for r in results]
    ops = Counter(op for m in models for op in generated.random_graph(seed_of(m)).ops())
    lines = [
        harness.provenance(
            f"{len(models)} graphs x {len(targets)} targets"
            + (" (alternating: each graph on one target)" if args.alternate else "")
            + f"; {(time.time() - start) / 60:.0f} min of new runs"
        ),
        "",
        "Ops drawn over these graphs: " + ", ".join(f"{op} {n}" for op, n in ops.most_common()),
        "",
    ]
    for target in targets:
        lines += summary(records, target)
    if args.shrink:
        failures = work / "failures"
        failures.mkdir(exist_ok=True)
        for r in records:
            if not differential.violations(r):
                continue
            spec = generated.random_graph(seed_of(r["model"]))
            print(f"shrinking {r['model']} on {r['target']} ({len(spec.nodes)} nodes)", file=sys.stderr)
            smallest, _ = differential.shrink_failure(
                spec, r, r["target"], progress=lambda m: print(m, file=sys.stderr)
            )
            path = failures / f"seed{smallest.seed}_{r['target']}.py"
            path.write_text(generated.source(smallest))
            lines.append(f"- {r['model']} on {r['target']} shrunk to {len(smallest.nodes)} nodes: {path}")
    harness.emit(lines, args.out)


if __name__ == "__main__":
    main()
