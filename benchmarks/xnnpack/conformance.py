"""ExecuTorch's own XNNPACK tests (the wheel's backends/xnnpack/test: ops/, passes/, models/), stock and with the
solver stage, side by side.

Run: .venv/bin/python -m benchmarks.xnnpack.conformance [--suites ops,passes,models] [--out benchmarks/results/xnnpack_conformance.md]

Every test of each suite runs twice through pytest, once as shipped and once inside `solver_layouts()` (the plugin
`layout_solver.targets.xnnpack.conformance`); the table counts outcomes per suite and lists every test that passes
stock and not with the stage (the issue's bar: none), and how many tests lowered a delegate through the stage.
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
            stock = conformance.run_suite(ids, suite, "stock", Path(tmp) / f"{suite}-stock.xml")
            solver = conformance.run_suite(ids, suite, "solver", Path(tmp) / f"{suite}-solver.xml")
            lost = conformance.regressions(stock, solver)
            lost_all += [(suite, t, solver.get(t, {})) for t in lost]
            count_stock = Counter(r["outcome"] for r in stock.values())
            count_solver = Counter(r["outcome"] for r in solver.values())
            through = sum(1 for r in solver.values() if r["delegates"] > 0)
            rows.append([suite, len(ids), dict(count_stock), dict(count_solver), through, len(lost)])
            print(f"{suite}: {len(ids)} tests, {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    lines += harness.table(["suite", "tests", "stock outcomes", "stage outcomes", "tests through the stage",
                            "pass stock, fail with the stage"], rows)  # fmt: skip
    lines += [""] + ([f"- {s}: {t}: {r.get('outcome')}: {r.get('text', '')[:200]}" for s, t, r in lost_all]
                     or ["No test that passes stock fails with the stage."])  # fmt: skip
    harness.emit(lines, args.out)


if __name__ == "__main__":
    main()
