"""Batch analysis of a model zoo: stock versus solver for every model x target.

Each (model, target) is one job: `layout_solver.targets.compare(model, target)`
in a worker process (a local process pool, or Ray tasks on a local or remote
cluster). Results are cached as JSON under OUT/cache, keyed by model, target
and the versions of every tool that can change a number, so a rerun resumes
where the last one stopped; a job that fails is recorded with its error and
the others go on. OUT gets results.csv, report.md and PNG plots.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from importlib import metadata
from multiprocessing import get_context
from pathlib import Path

from layout_solver.provenance import source_digest, tool_versions
from layout_solver.targets import get_target


@dataclass(frozen=True)
class Job:
    """One zoo job: a model, a target and the keyword options of its comparison."""

    model: str
    target: str
    options: tuple[tuple[str, object], ...] = ()  # keyword options of compare() for this target


def job_key(job: Job) -> str:
    """The cache key of a job: model, target, options, tool versions and the project's source digest."""
    payload = json.dumps(
        {
            "model": job.model,
            "target": job.target,
            "tools": tool_versions(),
            "source": source_digest(),
            **({"options": list(job.options)} if job.options else {}),
            # a saved program by its bytes, a catalog model by the transformers that built it
            **({"content": _file_digest(job.model)} if job.model.endswith(".pt2") else {}),
            **({"transformers": _transformers_version()} if job.model.startswith("transformers:") else {}),
            # the default Vulkan objective weighs every profile, the user's own files included
            **({"vulkan_profiles": _profile_digest()} if job.target == "vulkan" else {}),
        },
        sort_keys=True,
    )
    return hashlib.sha1(payload.encode()).hexdigest()[:16]


def _file_digest(path: str) -> str:
    try:
        return hashlib.sha1(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "unreadable"  # the job records the error


def _transformers_version() -> str:
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return "absent"


def _profile_digest() -> str:
    from cost_models.vulkan import profile_files

    digest = hashlib.sha1()
    for path in profile_files():
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def compare_named(name: str, target: str, **options):
    """`layout_solver.targets.compare` on a zoo model by name (or `path/to/file.py:factory`): the built-in
    multi-method models get their three-sided comparison (graph inputs as their methods declare them, solved
    in-process, so `input_order` and `service` do not apply). Raises ModelError for a model that cannot be built."""
    from layout_solver.targets import compare
    from layout_solver.zoo.models import MULTI_METHOD_ZOO, build, build_methods

    if name in MULTI_METHOD_ZOO:
        options = {k: v for k, v in options.items() if k not in ("input_order", "service")}
        return compare(build_methods(name), None, target, name=name, **options)
    module, inputs = build(name)
    return compare(module, inputs, target, name=name, **options)


def run_job(job: Job) -> dict:
    """Runs in a worker: never raises, a failure becomes a record."""
    from layout_solver.compare.result import error_record

    start = time.perf_counter()
    try:
        comparison = compare_named(job.model, job.target, **dict(job.options))
        failed = [
            s
            for s in ("stock", "solver", "per_method", "joint")
            if getattr(getattr(comparison, s, None), "error", None)
        ]
        status = "ok" if not failed else f"{'+'.join(failed)} failed"
        result = comparison.to_json()
    except Exception as exc:  # noqa: BLE001 - any failure is recorded for this program, the rest go on
        result = {
            "model": job.model,
            "target": job.target,
            **error_record(exc, limit=None),
        }
        status = "error"
    result["status"] = status
    result["wall_seconds"] = round(time.perf_counter() - start, 2)
    return result


def _worker_init() -> None:
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)


def _pool(workers: int) -> ProcessPoolExecutor:
    # spawn: torch and executorch are not fork-safe once initialised
    return ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"), initializer=_worker_init)


def _alone(job: Job) -> dict:
    """One job in a worker of its own; a crashed record if it kills that worker."""
    with _pool(1) as pool:
        try:
            return pool.submit(run_job, job).result()
        except BrokenProcessPool:
            return {"model": job.model, "target": job.target, "status": "error", "wall_seconds": 0.0,
                    "error": "the worker process died running this job (a native abort or segfault)"}  # fmt: skip


def execute_local(jobs: list[Job], workers: int) -> Iterable[tuple[Job, dict]]:
    """Run jobs in a local process pool; yields (job, record) as they finish. A job that kills its worker (a
    native abort in a compiler or the reference model) breaks the pool for every job not finished: those run
    again one by one, so only the one that kills its worker alone is recorded as crashed."""
    broken = []
    pool = _pool(workers)
    try:
        with _terminated_as_exit():
            futures = {pool.submit(run_job, job): job for job in jobs}
            for future in as_completed(futures):
                try:
                    result = future.result()
                except BrokenProcessPool:
                    broken.append(futures[future])
                    continue
                yield futures[future], result
    except BaseException:
        # Stopped (Ctrl-C, SIGTERM, or the caller closed the generator): the workers go too, mid-job, rather than
        # finishing their lowerings as orphans. The jobs done are already in the cache.
        _stop(pool)
        raise
    pool.shutdown()
    for job in broken:
        yield job, _alone(job)


@contextlib.contextmanager
def _terminated_as_exit():
    """SIGTERM raises SystemExit in the main thread while inside (so the pool's workers are stopped with us)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and terminate the worker processes."""
    processes = list((pool._processes or {}).values())  # the executor has no public handle on its workers
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(timeout=10)


def execute_ray(jobs: list[Job], workers: int, address: str | None = None) -> Iterable[tuple[Job, dict]]:
    """Run jobs as Ray tasks on a local or remote cluster; yields (job, record) as they finish."""
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:  # a local cluster, started and stopped by this command
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    try:
        remote = ray.remote(num_cpus=1)(run_job)
        pending = {remote.remote(job): job for job in jobs}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                yield pending.pop(ref), ray.get(ref)
    finally:
        if started_here:
            ray.shutdown()


def run_zoo(
    models: list[str],
    targets: list[str],
    out: Path,
    jobs: int = 2,
    executor: str = "local",
    address: str | None = None,
    log: Callable[[str], None] = print,
    options: dict[str, dict] | None = None,
) -> list[dict]:
    """Every model x target, stock versus solver; `options` maps a target to keyword options of its compare()."""
    from tqdm import tqdm

    from layout_solver.zoo.models import MULTI_METHOD_ZOO

    cache = out / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    todo, results = [], []
    for model in models:
        for target in targets:
            chosen = dict((options or {}).get(target, {}))
            if model in MULTI_METHOD_ZOO:  # joint solves share one subproblem cache across models and runs
                # compare_methods solves in-process and takes graph inputs as the methods declare them
                chosen = {k: v for k, v in chosen.items() if k not in ("service", "input_order")}
                chosen["cache_dir"] = str(out / "subproblems")
            job = Job(model, target, tuple(sorted(chosen.items())))
            path = cache / f"{job_key(job)}.json"
            if path.exists():
                results.append(json.loads(path.read_text()))
                log(f"[cached] {model} on {target}: {results[-1]['status']}")
            else:
                todo.append(job)
    run = execute_ray(todo, jobs, address) if executor == "ray" else execute_local(todo, jobs)
    with tqdm(total=len(todo), desc="zoo", unit="job", file=sys.stderr, disable=not todo) as bar:
        for job, result in run:
            (cache / f"{job_key(job)}.json").write_text(json.dumps(result))
            results.append(result)
            bar.update(1)
            tqdm.write(
                f"[{result['status']}] {job.model} on {job.target} in {result['wall_seconds']:.0f} s", file=sys.stderr
            )
    results.sort(key=lambda r: (r["model"], r["target"]))
    write_outputs(results, out)
    return results


def _family(target: str) -> str:
    return get_target(target).family


ROW_FIELDS = {  # per target family
    "ethos-u": [
        "tosa_transposes",
        "vela_transpose_cycles",
        "vela_total_cycles",
        "predicted_total_cycles",
        "npu_ops",
        "cpu_ops",
        "lower_seconds",
        "eager_within_tolerance",
    ],
    "vulkan": [
        "transitions",
        "transition_cost",
        "lower_seconds",
        "pass_seconds",
        "modelled_us",
        "executed",
        "max_abs_diff_vs_eager",
        "run_ms",
    ],
}


def solved_by(notes: list[str]) -> str:
    """Who answered the solver side, from the pass reports' notes (see layout_solver/service/client.py)."""
    if any(n.startswith("solved by service") for n in notes):
        return "service"
    failed = next((n for n in notes if n.startswith("service ") and "solved in-process" in n), None)
    return f"in-process ({failed})" if failed else "in-process"


def _equivalent(result: dict) -> object:
    # None from compare means "not checked" (the reference model rejected a side): say so in the table.
    if result.get("equivalent", "") is None:
        on_examples = result.get("equivalent_on_example_inputs")
        return "not checked" if on_examples is None else f"{on_examples} (example inputs)"
    return result.get("equivalent", "")


def _method_rows(r: dict) -> list[dict]:
    """A multi-method result as one row per method (`model:method`): stock against the joint solve."""
    out = []
    for method in r.get("methods", []):
        row = {
            "model": f"{r['model']}:{method}",
            "target": r["target"],
            "status": r["status"],
            "error": r.get("error") or r.get("stock", {}).get("error") or r.get("joint", {}).get("error") or "",
            "method_weight": r["weights"].get(method, ""),
        }
        for side, source in (("stock", "stock"), ("solver", "joint")):
            for key in ROW_FIELDS.get(_family(r["target"]), []):
                row[f"{side}_{key}"] = r.get(source, {}).get("per_method", {}).get(method, {}).get(key, "")
        joint = r.get("joint", {})
        # Per method there is no gap, run ratio or problem size of its own: the joint solve has one for all.
        row.update(
            solve_seconds=joint.get("solve_seconds", ""),
            problem_ops="",
            gap="",
            run_ratio="",
            solved_by="",
            cache_hits=joint.get("cache_hits", ""),
            equivalent=r.get("joint_equivalent", ""),
        )
        out.append(row)
    return out


def rows(results: list[dict]) -> list[dict]:
    """The zoo records as table rows, one per model x target (multi-method models: one per method)."""
    out = []
    for r in results:
        if "methods" in r:
            out += _method_rows(r)
            continue
        row = {
            "model": r["model"],
            "target": r["target"],
            "status": r["status"],
            "error": r.get("error") or r.get("stock", {}).get("error") or r.get("solver", {}).get("error") or "",
        }
        for side in ("stock", "solver"):
            for key in ROW_FIELDS.get(_family(r["target"]), []):
                row[f"{side}_{key}"] = r.get(side, {}).get(key, "")
        solver = r.get("solver", {})
        row.update(
            solve_seconds=solver.get("solve_seconds", ""),
            problem_ops=solver.get("problem_ops", ""),
            gap=solver.get("gap", ""),
            equivalent=_equivalent(r),
            run_ratio=r.get("run_ratio", ""),
            solved_by=solved_by(solver.get("solver_notes", [])),
        )
        if _family(r["target"]) == "ethos-u":
            row.update(stock_reference=r.get("stock_reference", ""), solver_reference=r.get("solver_reference", ""))
        out.append(row)
    return out


def write_outputs(results: list[dict], out: Path) -> None:
    """Write results.csv, report.md and the plots into `out`."""
    table = rows(results)
    fields = list(dict.fromkeys(k for row in table for k in row))
    with (out / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(table)
    (out / "report.md").write_text(report_markdown(table))
    plot(table, out)


def report_markdown(table: list[dict]) -> str:
    """The zoo table as Markdown, one section per target."""
    lines = ["# Zoo report: stock executorch versus layout-solver", ""]
    vk = [r for r in table if _family(r["target"]) == "vulkan"]
    for target in dict.fromkeys(r["target"] for r in table if _family(r["target"]) == "ethos-u"):
        lines += [
            f"## {target} (Vela cycle estimates of the whole delegate)",
            "",
            (
                "| model | status | TOSA transposes stock / solver | transpose cycles stock | solver | total cycles stock "
                "| solver | change | predicted (solver) | lower s stock / solver | solve s | equivalent |"
            ),
            "|" + "---|" * 12,
        ]
        for r in (r for r in table if r["target"] == target):
            stock, solver = r["stock_vela_total_cycles"], r["solver_vela_total_cycles"]
            change = (
                f"{solver / stock - 1:+.1%}" if isinstance(stock, int) and isinstance(solver, int) and stock else ""
            )
            lines.append(
                f"| {r['model']} | {r['status']} | {r['stock_tosa_transposes']} / {r['solver_tosa_transposes']} "
                f"| {r['stock_vela_transpose_cycles']} | {r['solver_vela_transpose_cycles']} | "
                f"{stock} | {solver} | {change} | {r['solver_predicted_total_cycles']} | "
                f"{r['stock_lower_seconds']} / {r['solver_lower_seconds']} | {r['solve_seconds']} | "
                f"{r['equivalent']} |"
            )
        lines.append("")
    if vk:
        lines += [
            "## Vulkan (transitions = clone dispatches; cost in modelled microseconds)",
            "",
            (
                "| model | status | transitions stock / solver | cost stock / solver | pass ms stock / solver | "
                "lower s stock / solver | gap | ran stock / solver | max abs diff vs eager stock / solver | "
                "run ms stock / solver | run ratio |"
            ),
            "|" + "---|" * 11,
        ]
        for r in vk:
            ms = lambda v: f"{v * 1000:.1f}" if isinstance(v, (int, float)) else ""
            lines.append(
                f"| {r['model']} | {r['status']} | {r['stock_transitions']} / {r['solver_transitions']} | "
                f"{r['stock_transition_cost']} / {r['solver_transition_cost']} | "
                f"{ms(r['stock_pass_seconds'])} / {ms(r['solver_pass_seconds'])} | "
                f"{r['stock_lower_seconds']} / {r['solver_lower_seconds']} | {r['gap']} | "
                f"{r['stock_executed']} / {r['solver_executed']} | "
                f"{r['stock_max_abs_diff_vs_eager']} / {r['solver_max_abs_diff_vs_eager']} | "
                f"{r['stock_run_ms']} / {r['solver_run_ms']} | {r['run_ratio']} |"
            )
        lines.append("")
    failures = [r for r in table if r["status"] != "ok"]
    if failures:
        lines += ["## Failures", ""] + [f"- {r['model']} on {r['target']}: {r['error']}" for r in failures] + [""]
    lines += ["Plots: `total_cycles*.png`, `transpose_cycles*.png`, `transitions.png`, `solve_time_vs_size.png`.", ""]
    return "\n".join(lines)


def plot(table: list[dict], out: Path) -> None:
    """Bar charts of stock versus solver (transpose cycles, transitions, run time) and solve time against problem
    size, as PNGs in `out`.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def bars(rows_, stock_key, solver_key, title, ylabel, path):
        rows_ = [r for r in rows_ if isinstance(r[stock_key], (int, float)) and isinstance(r[solver_key], (int, float))]
        fig, ax = plt.subplots(figsize=(max(6, len(rows_) * 0.9), 4))
        xs = range(len(rows_))
        ax.bar([x - 0.2 for x in xs], [r[stock_key] for r in rows_], 0.4, label="stock")
        ax.bar([x + 0.2 for x in xs], [r[solver_key] for r in rows_], 0.4, label="layout-solver")
        ax.set_xticks(list(xs), [r["model"] for r in rows_], rotation=30, ha="right")
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)

    for target in dict.fromkeys(r["target"] for r in table if _family(r["target"]) == "ethos-u"):
        arm = [r for r in table if r["target"] == target]
        suffix = "" if target == "ethos-u55-128" else f"_{target}"
        bars(arm, "stock_vela_transpose_cycles", "solver_vela_transpose_cycles", f"{target}: Vela transpose cycles",
             "cycles", out / f"transpose_cycles{suffix}.png")  # fmt: skip
        bars(arm, "stock_vela_total_cycles", "solver_vela_total_cycles", f"{target}: Vela total NPU cycles",
             "cycles", out / f"total_cycles{suffix}.png")  # fmt: skip
    bars(
        [r for r in table if r["target"] == "vulkan"],
        "stock_transitions",
        "solver_transitions",
        "Vulkan: layout transitions",
        "clone dispatches",
        out / "transitions.png",
    )
    executed = [r for r in table if r["target"] == "vulkan" and isinstance(r.get("stock_run_ms"), (int, float))]
    if executed:
        bars(
            executed,
            "stock_run_ms",
            "solver_run_ms",
            "Vulkan: run time on the device (median)",
            "ms",
            out / "vulkan_run_ms.png",
        )
    fig, ax = plt.subplots(figsize=(6, 4))
    for target in dict.fromkeys(r["target"] for r in table):
        marker = "s" if _family(target) == "vulkan" else "o"
        pts = [
            (r["problem_ops"], r["solve_seconds"])
            for r in table
            if r["target"] == target and isinstance(r["problem_ops"], int) and isinstance(r["solve_seconds"], float)
        ]
        if pts:
            ax.scatter(*zip(*pts), marker=marker, label=target)
    ax.set_xlabel("ops in the layout problem")
    ax.set_ylabel("solve time (s)")
    ax.set_title("Solve time against graph size")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "solve_time_vs_size.png", dpi=120)
    plt.close(fig)
