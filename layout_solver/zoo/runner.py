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
import hashlib
import json
import re
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

from layout_solver.lowering.provenance import source_digest, tool_versions
from layout_solver.targets import get_target


@dataclass(frozen=True)
class Job:
    """One zoo job: a model, a target and the keyword options of its comparison."""

    model: str
    target: str
    options: tuple[tuple[str, object], ...] = ()  # keyword options of compare() for this target
    explain_dir: str = ""  # where to draw both sides as Model Explorer files (`explain`); "" not drawn


def job_key(job: Job) -> str:
    """The cache key of a job: model, target, options, tool versions and the digest of the source its target's
    comparison can read."""
    payload = json.dumps(
        {
            "model": job.model,
            "target": job.target,
            "tools": tool_versions(),
            "source": source_digest(get_target(job.target).backend),
            **({"options": list(job.options)} if job.options else {}),
            # a saved program by its bytes, a catalog model by the transformers that built it
            **({"content": _file_digest(job.model)} if job.model.endswith(".pt2") else {}),
            **({"transformers": _transformers_version()} if job.model.startswith("transformers:") else {}),
            **get_target(job.target).cache_inputs(),
        },
        sort_keys=True,
    )
    return hashlib.sha1(payload.encode()).hexdigest()[:16]


def provenance(job: Job) -> dict:
    """What produced a job's numbers, stored with them: the digest of the source its comparison reads and the
    tool versions (the cache key hashes these; the record keeps them readable)."""
    return {
        "source": source_digest(get_target(job.target).backend),
        "tools": tool_versions(),
        **({"transformers": _transformers_version()} if job.model.startswith("transformers:") else {}),
    }


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


def compare_named(name: str, target: str, **options):
    """`layout_solver.targets.compare` on a zoo model by name (or `path/to/file.py:factory`): the built-in
    multi-method models get their three-sided comparison (graph inputs as their methods declare them, solved
    in-process, so `input_order` and `service` do not apply). Raises ModelError for a model that cannot be built."""
    from layout_solver.targets import compare
    from layout_solver.zoo.models import build
    from layout_solver.zoo.multi_method import MULTI_METHOD_ZOO, build_methods

    if name in MULTI_METHOD_ZOO:
        options = {k: v for k, v in options.items() if k not in ("input_order", "service")}
        return compare(build_methods(name), None, target, name=name, **options)
    module, inputs = build(name)
    return compare(module, inputs, target, name=name, **options)


def explain_named(model: str, target: str, out=None, **options):
    """`layout_solver.explain` on a zoo model by name (or `path/to/file.py:factory`, `transformers:NAME`, ...):
    stock and solver once, both sides drawn (into `out` if given). Multi-method models are not drawn: ValueError."""
    from layout_solver.explain import explain_comparison
    from layout_solver.targets import get_target
    from layout_solver.zoo.multi_method import MULTI_METHOD_ZOO

    if model in MULTI_METHOD_ZOO:
        raise ValueError(f"explain draws single-method models; {model!r} has several methods")
    return explain_comparison(lambda: compare_named(model, target, **options), model, get_target(target), out)


def explain_dir(out: Path, model: str, target: str) -> Path:
    """Where a zoo run with --explain draws `model` on `target`."""
    local = model.endswith(".pt2") or model.partition(":")[0].endswith(".py")  # a file: named by its name
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(model).name if local else model)
    return out / "explain" / f"{name}-{target}"


def run_job(job: Job) -> dict:
    """Runs in a worker: never raises, a failure becomes a record."""
    from layout_solver.compare.result import error_record

    start = time.perf_counter()
    try:
        if job.explain_dir:
            result = explain_named(job.model, job.target, Path(job.explain_dir), **dict(job.options)).comparison
        else:
            result = compare_named(job.model, job.target, **dict(job.options)).to_json()
        failed = [s for s in ("stock", "solver", "per_method", "joint") if (result.get(s) or {}).get("error")]
        status = "ok" if not failed else f"{'+'.join(failed)} failed"
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


def _worker_init(log_path: str | None = None) -> None:
    """Python warnings and library logs off; where `log_path` is given, the worker's own stdout and stderr (file
    descriptors 1 and 2: what native code prints, e.g. the TOSA serializer's version warning once per delegate)
    appended there, so the console keeps the progress bar and the report."""
    import logging
    import os
    import warnings

    from layout_solver.lowering.quiet import console_to

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    if log_path:  # for the worker's life: the saved descriptors are not needed
        for saved in console_to(log_path):
            os.close(saved)


def _pool(workers: int, log_path: Path | None = None) -> ProcessPoolExecutor:
    # spawn: torch and executorch are not fork-safe once initialised
    return ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"), initializer=_worker_init,
                               initargs=(str(log_path) if log_path else None,))  # fmt: skip


def _alone(job: Job, log_path: Path | None = None) -> dict:
    """One job in a worker of its own; a crashed record if it kills that worker. Stopped, it stops the worker."""
    pool = _pool(1, log_path)
    try:
        return pool.submit(run_job, job).result()
    except BrokenProcessPool:
        return {"model": job.model, "target": job.target, "status": "crashed", "wall_seconds": 0.0,
                "error": "the worker process died running this job (a native abort or segfault)"}  # fmt: skip
    except BaseException:
        _stop(pool)
        raise
    finally:
        pool.shutdown()


def execute_local(jobs: list[Job], workers: int, log_path: Path | None = None) -> Iterable[tuple[Job, dict]]:
    """Run jobs in a local process pool; yields (job, record) as they finish. A job that kills its worker (a
    native abort in a compiler or the reference model) breaks the pool for every job not finished: those run
    again one by one, so only the one that kills its worker alone is recorded as crashed. `log_path`: where the
    workers' own output goes (`_worker_init`)."""
    broken = []
    pool = _pool(workers, log_path)
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
    with _terminated_as_exit():
        for job in broken:
            yield job, _alone(job, log_path)


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
    prune: bool = False,
    archive: bool = False,
    explain: bool = False,
) -> list[dict]:
    """Every model x target, stock versus solver; `options` maps a target to keyword options of its compare().
    `prune`: afterwards, delete the results in `out/cache` this run did not read or write (results of other code,
    tool versions, models or targets), and say how many. Results archived in `out/cache.jsonl.gz` count as cached
    (`layout_solver.zoo.archive`); `archive` writes the cache there after the run. `explain`: draw both sides of every
    single-method model as Model Explorer files in `out/explain/MODEL-TARGET` (`layout_solver.explain`); a cached
    result whose files are not there is lowered again to draw them."""
    from tqdm import tqdm

    from layout_solver.zoo import archive as archived
    from layout_solver.zoo.multi_method import MULTI_METHOD_ZOO

    cache = out / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    if restored := archived.restore(out):
        log(f"{restored} results from {out / archived.ARCHIVE}")
    todo, results = [], []
    paths: dict[Job, Path] = {}  # keyed once: a saved program's key reads its file
    for model in models:
        for target in targets:
            chosen = dict((options or {}).get(target, {}))
            if model in MULTI_METHOD_ZOO:  # joint solves share one subproblem cache across models and runs
                # compare_methods solves in-process and takes graph inputs as the methods declare them
                chosen = {k: v for k, v in chosen.items() if k not in ("service", "input_order")}
                chosen["cache_dir"] = str(out / "subproblems")
            drawn = explain and model not in MULTI_METHOD_ZOO
            job = Job(
                model, target, tuple(sorted(chosen.items())), str(explain_dir(out, model, target)) if drawn else ""
            )
            path = paths[job] = cache / f"{job_key(job)}.json"
            if path.exists() and (not drawn or (Path(job.explain_dir) / "explain.json").exists()):
                results.append(json.loads(path.read_text()))
                log(f"[cached] {model} on {target}: {results[-1]['status']}")
            else:
                todo.append(job)
    from layout_solver.zoo.report import THIRD_PARTY_LOG  # here, as write_outputs: no worker's digest has it

    todo.sort(key=lambda job: -get_target(job.target).job_weight)  # the longest first (stable: else as listed)
    third_party = out / THIRD_PARTY_LOG
    if todo:  # this run's output only
        third_party.write_text("")
    run = execute_ray(todo, jobs, address) if executor == "ray" else execute_local(todo, jobs, third_party)
    with tqdm(total=len(todo), desc="zoo", unit="job", file=sys.stderr, disable=not todo) as bar:
        for job, result in run:
            result["provenance"] = provenance(job)
            paths[job].write_text(json.dumps(result))
            results.append(result)
            bar.update(1)
            tqdm.write(
                f"[{result['status']}] {job.model} on {job.target} in {result['wall_seconds']:.0f} s", file=sys.stderr
            )
    if prune:
        used = set(paths.values())
        stale = [path for path in cache.glob("*.json") if path not in used]
        for path in stale:
            path.unlink()
        log(f"pruned {len(stale)} results this run did not use from {cache}")
    if archive:
        log(f"results archived in {archived.pack(out)}")
    results.sort(key=lambda r: (r["model"], r["target"]))
    from layout_solver.zoo.report import write_outputs  # here, never in a worker: no result's digest has it

    write_outputs(results, out)
    return results
