"""ExecuTorch's own Arm op tests, stock versus the solver's memory-format stage: pass / fail / xfail per file.

Run: .venv/bin/python benchmarks/bench_arm_conformance.py [--ops permute,view,...] [--keyword tosa_INT]
     [--every 1] [--out benchmarks/results/arm_conformance.md]

The tests are the executorch wheel's (`executorch/backends/arm/test/ops/test_<op>.py`, found in the installed
wheel); each runs twice in a pytest subprocess, once as shipped and once with `solver_layouts()` active
(the `layout_solver.arm.conformance` plugin). `--every N` keeps every N-th test of each file (CI runs a
sample; the benchmark runs them all). Every test that passes stock must pass with the solver stage.
"""

from __future__ import annotations

import argparse
import shlex
import tempfile
import time
from collections import Counter
from pathlib import Path

from layout_solver.arm import conformance

OUTCOMES = ("passed", "failed", "error", "xfailed", "skipped")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default=",".join(conformance.LAYOUT_RELEVANT))
    parser.add_argument("--keyword", default="tosa_INT", help="pytest -k expression (default %(default)s)")
    parser.add_argument("--every", type=int, default=1, help="keep every N-th test per file (default all)")
    parser.add_argument("--out", help="also write the table to this markdown file")
    args = parser.parse_args()
    files = conformance.peer_test_files(tuple(args.ops.split(",")))
    ids = conformance.sample(conformance.collect(files, args.keyword), args.every)
    folder = files[0].parent
    print(f"{len(ids)} tests in {len(files)} files ({folder})", flush=True)
    results, seconds = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for stage in conformance.STAGES:
            start = time.perf_counter()
            results[stage] = conformance.run(ids, stage, folder, Path(tmp) / f"{stage}.xml")
            seconds[stage] = time.perf_counter() - start
            print(
                f"{stage}: {dict(Counter(r['outcome'] for r in results[stage].values()))} in {seconds[stage]:.0f} s",
                flush=True,
            )
    lost = conformance.regressions(results["stock"], results["solver"])
    lines = [
        (
            "Command: .venv/bin/python benchmarks/bench_arm_conformance.py "
            + ("" if args.ops == ",".join(conformance.LAYOUT_RELEVANT) else f"--ops {args.ops} ")
            + f"--keyword {shlex.quote(args.keyword)} --every {args.every} "
            f"({time.strftime('%Y-%m-%d')}; executorch's own Arm op tests, run as shipped and with "
            "solver_layouts() active; 2-core machine)"
        ),
        "",
        (
            "| file | tests | stock passed / failed / error / xfailed / skipped | solver passed / failed / error / "
            "xfailed / skipped | solver laid out | lost |"
        ),
        "|" + "---|" * 6,
    ]
    for file in sorted({t.split("::")[0] for t in ids}):
        tests = [t for t in ids if t.startswith(file + "::")]
        counts = {
            stage: Counter(results[stage].get(t, {}).get("outcome", "missing") for t in tests)
            for stage in conformance.STAGES
        }
        laid_out = sum(1 for t in tests if results["solver"].get(t, {}).get("delegates", 0) > 0)
        cells = [" / ".join(str(counts[stage][o]) for o in OUTCOMES) for stage in conformance.STAGES]
        lines.append(
            f"| {file} | {len(tests)} | {cells[0]} | {cells[1]} | {laid_out} | "
            f"{sum(1 for t in lost if t.startswith(file + '::'))} |"
        )
    total = {stage: Counter(r["outcome"] for r in results[stage].values()) for stage in conformance.STAGES}
    lines += [
        "",
        (
            f"- tests: {len(ids)}; stock {dict(total['stock'])} in {seconds['stock']:.0f} s; solver "
            f"{dict(total['solver'])} in {seconds['solver']:.0f} s"
        ),
        (
            f"- tests the solver stage laid out (at least one delegate): "
            f"{sum(1 for r in results['solver'].values() if r['delegates'] > 0)}"
        ),
        f"- passing stock but not with the solver stage: {len(lost)}" + (": " + ", ".join(lost) if lost else ""),
    ]
    for test in lost:
        lines.append(f"  - {test}: {results['solver'][test]['outcome']}: {results['solver'][test]['text']}")
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
