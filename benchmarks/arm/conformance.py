"""ExecuTorch's own Arm op tests, stock versus the solver's memory-format stage: pass / fail / xfail per file.

Run: .venv/bin/python -m benchmarks.arm.conformance [--ops permute,view,... | --all] [--keyword tosa_INT]
     [--every 1 [--offset 0]] [--jobs 2] [--work zoo-out/arm_conformance] [--out benchmarks/results/arm_conformance.md]

The tests are the executorch wheel's (`executorch/backends/arm/test/ops/test_<op>.py`, found in the installed
wheel); each runs twice in a pytest subprocess, once as shipped and once with `solver_layouts()` active
(the `layout_solver.targets.ethos_u.conformance` plugin). `--every N` keeps every N-th test of each file (CI runs a
sample; the benchmark runs them all), from the `--offset`-th (the whole suite in N parts: offsets 0 to N-1);
`--all` takes every op-test file, not only the layout-relevant ones.
Every test that passes stock must pass with the solver stage.

The tests run in chunks of whole files (about `--chunk` tests each; one pytest process per chunk and stage, so
the import of torch and executorch is paid once a chunk), `--jobs` chunks at a time; with `--work` each chunk's
outcomes are kept as JSON (keyed by the tests and layout_solver's source) and a rerun of the same code resumes
where the last one stopped.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from benchmarks import harness
from layout_solver.lowering.provenance import source_digest
from layout_solver.targets.ethos_u import conformance

OUTCOMES = ("passed", "failed", "error", "xfailed", "skipped")


def chunks(ids: list[str], size: int) -> list[list[str]]:
    """The tests cut into runs of whole files, about `size` tests each (a file larger than `size` is one run)."""
    by_file: dict[str, list[str]] = {}
    for test in ids:
        by_file.setdefault(test.split("::")[0], []).append(test)
    out, current = [], []
    for tests in by_file.values():
        if current and len(current) + len(tests) > size:
            out.append(current)
            current = []
        current += tests
    return out + ([current] if current else [])


def run_chunk(tests: list[str], stage: str, folder: Path, work: Path | None) -> tuple[dict, float, bool]:
    """One stage's outcomes for one chunk: from `work` if a run of exactly these tests, by this code, is kept there."""
    key = hashlib.sha256(("\n".join([stage, source_digest("arm"), *tests])).encode()).hexdigest()[:16]
    kept = work / f"{stage}-{key}.json" if work else None
    if kept is not None and kept.is_file():
        stored = json.loads(kept.read_text())
        return stored["results"], stored["seconds"], True
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        results = conformance.run(tests, stage, folder, Path(tmp) / "junit.xml")
        seconds = time.perf_counter() - start
    if kept is not None:
        kept.write_text(json.dumps({"tests": tests, "results": results, "seconds": seconds}))
    return results, seconds, False


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--ops", default=",".join(conformance.LAYOUT_RELEVANT))
    parser.add_argument("--all", action="store_true", help="every op-test file of the suite (overrides --ops)")
    parser.add_argument("--keyword", default="tosa_INT", help="pytest -k expression (default %(default)s)")
    parser.add_argument("--every", type=int, default=1, help="keep every N-th test per file (default all)")
    parser.add_argument(
        "--offset", type=int, default=0, help="with --every N: start at each file's K-th test (0..N-1: one part of N)"
    )
    parser.add_argument("--chunk", type=int, default=150, help="about this many tests per pytest process")
    parser.add_argument("--jobs", type=int, default=1, help="pytest processes at a time (default %(default)s)")
    parser.add_argument("--work", help="keep each chunk's outcomes here; a rerun resumes")
    args = parser.parse_args()
    files = (
        conformance.peer_test_files() + conformance.other_peer_test_files()
        if args.all
        else conformance.peer_test_files(tuple(args.ops.split(",")))
    )
    ids = conformance.sample(conformance.collect(files, args.keyword), args.every, args.offset)
    folder = files[0].parent
    work = Path(args.work) if args.work else None
    if work:
        work.mkdir(parents=True, exist_ok=True)
    runs = [(stage, tests) for tests in chunks(ids, args.chunk) for stage in conformance.STAGES]
    print(f"{len(ids)} tests in {len(files)} files ({folder}); {len(runs)} runs, {args.jobs} at a time", flush=True)
    results: dict[str, dict] = {stage: {} for stage in conformance.STAGES}
    seconds = Counter()
    started, done = time.perf_counter(), 0
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:  # each run is a pytest subprocess
        futures = {pool.submit(run_chunk, tests, stage, folder, work): (stage, tests) for stage, tests in runs}
        for future in as_completed(futures):
            stage, tests = futures[future]
            outcome, spent, cached = future.result()
            results[stage].update(outcome)
            seconds[stage] += spent
            done += len(tests)
            files_in = sorted({t.split("::")[0] for t in tests})
            print(
                f"[{done}/{2 * len(ids)} {time.perf_counter() - started:.0f} s] {stage} "
                f"{files_in[0]}..{files_in[-1]} ({len(tests)} tests): "
                f"{dict(Counter(r['outcome'] for r in outcome.values()))}" + (" (kept)" if cached else ""),
                flush=True,
            )
    lost = conformance.regressions(results["stock"], results["solver"])
    lines = [
        harness.provenance("executorch's own Arm op tests, run as shipped and with solver_layouts() active"),
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
            f"- tests: {len(ids)} in {len({t.split('::')[0] for t in ids})} files; stock {dict(total['stock'])} in "
            f"{seconds['stock']:.0f} s; solver {dict(total['solver'])} in {seconds['solver']:.0f} s (process time "
            "summed over chunks)"
        ),
        (
            f"- tests the solver stage laid out (at least one delegate): "
            f"{sum(1 for r in results['solver'].values() if r['delegates'] > 0)}"
        ),
        f"- passing stock but not with the solver stage: {len(lost)}" + (": " + ", ".join(lost) if lost else ""),
    ]
    for test in lost:
        lines.append(f"  - {test}: {results['solver'][test]['outcome']}: {results['solver'][test]['text']}")
    harness.emit(lines, args.out)


if __name__ == "__main__":
    main()
