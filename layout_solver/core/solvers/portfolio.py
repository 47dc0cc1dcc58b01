"""Pieces too wide for the exact combinatorial solvers: an incumbent fast, then SCIP and CP-SAT.

1. Greedy with single-variable local search: a legal answer in milliseconds.
2. SCIP on the shared 0-1 formulation, warm-started from it: its LP bound is
   strong on layout problems, so it usually proves optimality outright.
3. CP-SAT on the same formulation with the remaining workers, side by side
   (workers >= 2), or after SCIP when SCIP is missing or runs out of model
   building time (workers == 1). Whichever proves optimality first stops the other.

Pieces above LARGE_PIECE_VARS go to large-neighbourhood search instead (lns.py).

The answer is the best incumbent found; the bound the best either proved.

Given a work budget (budget.py) the engines stop on their own counts of work, not on the clock, and never race:
SCIP, then CP-SAT with every worker, interleaved (which of two racing engines proves first depends on the
machine's load, and so would the answer).
"""

from __future__ import annotations

import threading
import time

from layout_solver.core.solvers.budget import WorkBudget
from layout_solver.core.solvers.cpsat import Trace, solve_cpsat
from layout_solver.core.solvers.greedy import greedy
from layout_solver.core.solvers.lns import solve_large
from layout_solver.core.solvers.mip import solve_mip
from layout_solver.core.solvers.subproblem import Subproblem, SubResult

ENGINES = ("mip", "cpsat")
# Above this many variables a whole-piece model costs more memory and building time than it
# returns (measured: ~1 GB for 6,600 variables with SCIP and CP-SAT side by side); such pieces
# get large-neighbourhood search over windows instead (lns.py).
LARGE_PIECE_VARS = 8000


def proven(result: SubResult) -> bool:
    """True if `result` is proven optimal (its bound meets its value)."""
    return result.bound >= result.value - 1e-9 * max(1.0, abs(result.value))


def solve_hard(
    sub: Subproblem,
    deadline: float,
    workers: int = 1,
    engines: tuple[str, ...] = ENGINES,
    trace: Trace | None = None,
    budget: WorkBudget | None = None,
) -> SubResult:
    """Best answer for `sub` by `deadline` (a time.perf_counter() instant), within `budget` where one is given,
    with a proven bound."""
    start = greedy(sub, deadline=deadline)
    start.bound = sub.offset + sum(min(u) for u in sub.unary)
    if trace is not None:
        trace("greedy", start.value, start.bound)
    if time.perf_counter() >= deadline or not engines or (budget is not None and budget.left <= 0):
        return start
    if sub.n_vars > LARGE_PIECE_VARS:
        return solve_large(sub, start, deadline, trace, budget)
    use_mip, use_cpsat = "mip" in engines, "cpsat" in engines
    if use_mip and use_cpsat and workers >= 2 and budget is None:
        return _side_by_side(sub, start, deadline, workers, trace)
    best = start
    if use_mip:
        found = solve_mip(sub, start, deadline, trace, budget=budget)
        if found is not None:
            best = found
            if proven(found):
                return found
    if use_cpsat and deadline - time.perf_counter() > 0 and (budget is None or budget.left > 0):
        return solve_cpsat(sub, best, deadline, workers, trace, budget=budget)  # keeps best's if better
    return best


def _side_by_side(sub: Subproblem, start: SubResult, deadline: float, workers: int, trace: Trace | None) -> SubResult:
    done = threading.Event()
    results: dict[str, SubResult | None] = {}

    def run_mip() -> None:
        found = solve_mip(sub, start, deadline, trace, stop_event=done)
        results["mip"] = found
        if found is not None and proven(found):
            done.set()

    thread = threading.Thread(target=run_mip, daemon=True)
    thread.start()
    cpsat = solve_cpsat(sub, start, deadline, workers - 1, trace, stop_event=done)
    if proven(cpsat):
        done.set()
    thread.join()
    candidates = [r for r in (results.get("mip"), cpsat) if r is not None]  # SCIP first: it wins ties
    best = min(candidates, key=lambda r: r.value)
    bound = min(max(r.bound for r in candidates), best.value)
    return SubResult(best.options, best.value, bound, best.method)
