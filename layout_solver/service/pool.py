"""Solves in worker processes: one request's crash or overrun never takes the service down.

A worker does a whole request's work (parse and validate, content address,
shared disk cache, solve, serialize), so the server process only moves bytes
and the service solves about as fast as the in-process solver on the same cores.

pebble's ProcessPool gives each task its own timeout (the worker running it
is killed and replaced) and reports a worker that died mid-task
(ProcessExpired) without breaking the pool, which concurrent.futures'
ProcessPoolExecutor cannot do. Workers are spawned, not forked, so they do
not inherit the server's event loop and threads.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from concurrent.futures import Future

from pebble import ProcessPool

from layout_solver.core.problem import InfeasibleError, ProblemError, parse_problem
from layout_solver.core.solution_cache import CacheEntry, SolutionCache, cache_key
from layout_solver.core.solve import solve

# The solver returns within its time limit plus compile/report time; the pool
# kills a worker only well past that (a bug or a pathological input).
HARD_LIMIT_GRACE_SECONDS = 10.0


def hard_limit(time_limit: float) -> float:
    """Seconds after which a solve is killed: twice the limit plus a grace period."""
    return 2.0 * time_limit + HARD_LIMIT_GRACE_SECONDS


_caches: dict[tuple[str, int], SolutionCache] = {}


def _renamed(entry: CacheEntry, name: str) -> bytes:
    if entry.name == name:
        return entry.solution_json
    return json.dumps({**json.loads(entry.solution_json), "problem": name}).encode()


def solve_request(body: bytes, time_limit: float, cache_dir: str, cache_bytes: int) -> dict:
    """Worker side of POST /v1/solve; errors come back as data (exceptions lose their fields across processes).

    Returns {"outcome": "hit" | "solved", "entry": CacheEntry, "seconds"} or
    {"error": "problem" | "infeasible", "message", "ops", "values"}.
    """
    cache = _caches.get((cache_dir, cache_bytes))
    if cache is None:
        cache = _caches[(cache_dir, cache_bytes)] = SolutionCache(cache_dir, cache_bytes)
    start = time.perf_counter()
    try:
        problem = parse_problem(body, "request body")
        key = cache_key(problem)
        cached = cache.get(key)
        if cached is not None and cached.serves(time_limit):
            entry = CacheEntry(_renamed(cached, problem.name), cached.status, cached.time_limit, problem.name)
            return {"outcome": "hit", "entry": entry, "seconds": time.perf_counter() - start}
        solution = solve(problem, time_limit=time_limit)
    except InfeasibleError as exc:
        return {"error": "infeasible", "message": str(exc), "ops": exc.ops, "values": exc.values}
    except ProblemError as exc:
        return {"error": "problem", "message": str(exc), "ops": exc.ops, "values": exc.values}
    entry = CacheEntry(solution.model_dump_json().encode(), solution.status, time_limit, problem.name)
    try:
        cache.put(key, entry)
    except OSError:  # a full or read-only disk costs the cache, not the answer
        pass
    return {"outcome": "solved", "entry": entry, "seconds": time.perf_counter() - start}


def warm_up() -> int:
    """Loads the solver's imports in a worker (first requests should not pay for them)."""
    return os.getpid()


class SolverPool:
    """`submit(body, time_limit)` -> a concurrent Future of solve_request's dict.

    The future raises concurrent.futures.TimeoutError past hard_limit(), and
    pebble.ProcessExpired when the worker died; the pool replaces the worker. It raises BrokenProcessPool where
    every worker died (pebble then fails every task it holds): `replace_if_broken()` and submit again.
    """

    def __init__(self, workers: int, cache: SolutionCache):
        self.workers = workers
        self.cache = cache
        self.restarts = 0
        self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPool:
        return ProcessPool(max_workers=self.workers, context=multiprocessing.get_context("spawn"))

    def submit(self, body: bytes, time_limit: float) -> Future:
        """Solve the problem JSON `body` in a worker (killed past a hard limit above `time_limit`); returns a future of
        the worker's answer. A pool broken by a killed worker is replaced."""
        args = (body, time_limit, str(self.cache.directory), self.cache.max_bytes)
        try:
            return self._pool.schedule(solve_request, timeout=hard_limit(time_limit), args=args)
        except RuntimeError:  # the pool was given up (`replace_if_broken`): a new one, keep serving
            self.replace_if_broken()
            return self._pool.schedule(solve_request, timeout=hard_limit(time_limit), args=args)

    def replace_if_broken(self) -> None:
        """Replace the pool where pebble gave it up: a worker killed while it held the shared task channel (an idle
        worker, say, taken by the OOM killer), or every worker dead ("All workers expired"). A pool another request
        already replaced is active and kept."""
        if not self._pool.active:
            self._pool.stop()
            self._pool = self._new_pool()
            self.restarts += 1

    def warm_up(self) -> None:
        """Start every worker now, so the first requests do not pay for it."""
        for future in [self._pool.schedule(warm_up) for _ in range(self.workers)]:
            future.result()

    def close(self) -> None:
        """Stop the workers."""
        self._pool.stop()
        self._pool.join(timeout=10)
