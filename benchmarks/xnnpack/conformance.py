"""ExecuTorch's own XNNPACK tests (the wheel's backends/xnnpack/test: ops/, passes/, models/), stock and with the
solver stage, side by side.

Run: .venv/bin/python -m benchmarks.xnnpack.conformance [--suites ops,passes,models] [--out benchmarks/results/xnnpack_conformance.md]

Every test of each suite runs twice through pytest, once as shipped and once inside `solver_layouts()` (the plugin
`layout_solver.targets.xnnpack.conformance`); the table counts outcomes per suite and lists every test that passes
stock and not with the stage (the issue's bar: none), and how many tests lowered a delegate through the stage.
`--stock-where-stage-fails` runs stock only on the tests that do not pass with the stage (stock's side does not
depend on this project's code: the whole stock run of an earlier commit stands for the rest), half the time.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from benchmarks import harness
from layout_solver.targets.xnnpack import conformance


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--suites", default="ops,passes,models")
    parser.add_argument("--stock-where-stage-fails", action="store_true")
    args = parser.parse_args()
    lines = [f"Provenance: {harness.provenance()}", ""]
    rows, lost_all = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for suite in args.suites.split(","):
            ids = conformance.collect_suite(suite)
            if not ids:
                rows.append([suite, 0, "", "", "", "collected no test (the suite needs packages the wheel lacks)"])
                continue
            started = time.perf_counter()
            solver = conformance.run_suite(ids, suite, "solver", Path(tmp) / f"{suite}-solver.xml")
            suspects = [t for t, r in solver.items() if r["outcome"] not in ("passed", "xfailed", "skipped")]
            stock_ids = suspects if args.stock_where_stage_fails else ids
            stock = (
                conformance.run_suite(stock_ids, suite, "stock", Path(tmp) / f"{suite}-stock.xml") if stock_ids else {}
            )
            lost = conformance.regressions(stock, solver)
            lost_all += [(suite, t, solver.get(t, {})) for t in lost]
            count_stock = Counter(r["outcome"] for r in stock.values())
            count_solver = Counter(r["outcome"] for r in solver.values())
            through = sum(1 for r in solver.values() if r["delegates"] > 0)
            stock_cell = (f"{dict(count_stock)} (of the {len(stock_ids)} not passing with the stage)"
                          if args.stock_where_stage_fails else dict(count_stock))  # fmt: skip
            rows.append([suite, len(ids), stock_cell, dict(count_solver), through, len(lost)])
            print(f"{suite}: {len(ids)} tests, {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    lines += harness.table(["suite", "tests", "stock outcomes", "stage outcomes", "tests through the stage",
                            "pass stock, fail with the stage"], rows)  # fmt: skip
    lines += [""] + ([f"- {s}: {t}: {r.get('outcome')}: {r.get('text', '')[:200]}" for s, t, r in lost_all]
                     or ["No test that passes stock fails with the stage."])  # fmt: skip
    harness.emit(lines, args.out)


if __name__ == "__main__":
    main()
