"""Pieces too wide for the exact combinatorial solvers: an incumbent fast, then SCIP and CP-SAT.

1. Greedy with single-variable local search: a legal answer in milliseconds.
2. SCIP on the shared 0-1 formulation, warm-started from it: its LP bound is
   strong on layout problems, so it usually proves optimality outright.
3. CP-SAT on the same formulation with the remaining workers, side by side
   (workers >= 2), or after SCIP when SCIP is missing or runs out of model
   building time (workers == 1). Whichever proves optimality first stops the other.

Pieces of LP_PIECE_VARS or more first get the LP relaxation (relaxation.py): its bound, and an answer rounded
from it, which SCIP (or, above LARGE_PIECE_VARS, large-neighbourhood search, lns.py) then starts from.

The answer is the best incumbent found; the bound the best either proved.

Given a work budget (budget.py) the engines stop on their own counts of work, not on the clock, and never race:
SCIP, then CP-SAT with every worker, interleaved (which of two racing engines proves first depends on the
machine's load, and so would the answer).
"""

from __future__ import annotations

import threading
import time

from layout_solver.core.solvers.budget import ITERATIONS_PER_UNIT, WorkBudget
from layout_solver.core.solvers.cpsat import Trace, solve_cpsat
from layout_solver.core.solvers.greedy import greedy
from layout_solver.core.solvers.lns import solve_large
from layout_solver.core.solvers.mip import solve_mip
from layout_solver.core.solvers.relaxation import FIRST_ORDER_BOOLS, solve_by_relaxation
from layout_solver.core.solvers.subproblem import Subproblem, SubResult, proven, within

ENGINES = ("lp", "mip", "cpsat")
# Above this many variables a whole-piece model costs more memory and building time than it
# returns (measured: ~1 GB for 6,600 variables with SCIP and CP-SAT side by side); such pieces
# get large-neighbourhood search over windows instead (lns.py).
LARGE_PIECE_VARS = 8000
# From this many variables SCIP's root processing no longer closes a piece in a second (a 6,300-variable piece of
# an irregular graph: 14 s to optimal, 3.96% open at 10 s; 1,364 variables: 1.5 s), while the relaxation alone
# takes 0.6 s at 6,300 variables and proves its rounded answer within 0.5%.
LP_PIECE_VARS = 1000
# Dual simplex iterations the relaxation needs, per Boolean of the formulation (measured 0.33-0.38 on irregular
# graphs of 6,000-63,000 variables): a relaxation the budget or the clock would cut short is not started.
ITERATIONS_PER_BOOLEAN = 0.4
# Simplex iterations a second on this project's 2-core machine, for the same decision against the clock.
ITERATIONS_PER_SECOND = 10000
# The least budget a first-order relaxation is started with (a few hundred passes over a 100k-op graph's matrix),
# and the least time against the clock (PDLP takes half of it; a 5,600-variable piece's bound after 0.3 s is
# within a few percent, the greedy answer's bound nowhere near).
FIRST_ORDER_MIN_UNITS = 0.25
FIRST_ORDER_MIN_SECONDS = 0.25
# A relaxed piece proven this close to its optimum is done: SCIP would spend the rest of the time limit on root
# processing to close the last fraction of a percent (8 s at 6,300 variables, measured), a tenth of what the cost
# models themselves are off by (the shipped profiles' prediction errors are 10% and more).
RELATIVE_GAP = 0.01


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
    start = None
    method = _relaxation_method(sub, deadline, budget) if "lp" in engines and sub.n_vars >= LP_PIECE_VARS else None
    if method is not None:
        # The relaxation's rounded answer comes first; the greedy one only if the relaxation stops short.
        relaxed = solve_by_relaxation(sub, None, deadline, _exact_repair(deadline, budget), budget, workers,
                                      first_order=method == "first-order")  # fmt: skip
        if relaxed is not None:
            if trace is not None:
                trace("lp", relaxed.value, relaxed.bound)
            if (
                within(relaxed, RELATIVE_GAP)
                or time.perf_counter() >= deadline
                or (budget is not None and budget.left <= 0)
            ):
                return relaxed
            start = relaxed
    if start is None:
        start = greedy(sub, deadline=deadline)
        start.bound = sub.plain_bound
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


def _relaxation_method(sub: Subproblem, deadline: float, budget: WorkBudget | None) -> str | None:
    """How to relax `sub` on what is left: "simplex" where the dual simplex is expected to finish (its
    iterations against the budget, deterministic, or else the clock), else "first-order" (PDLP has a bound
    wherever it stops, so it needs only FIRST_ORDER_MIN_UNITS, or FIRST_ORDER_MIN_SECONDS: a piece the simplex would not finish
    gets a bound and a rounded answer, not the greedy one, which left a 20,000-variable window-40 piece 47% open
    at 10 s), None where not even that is left."""
    booleans = sum(sub.n_options) + 2 * len(sub.factors)
    if booleans <= FIRST_ORDER_BOOLS:
        needed = ITERATIONS_PER_BOOLEAN * booleans
        if budget is not None and needed <= budget.left * ITERATIONS_PER_UNIT:
            return "simplex"
        if budget is None and needed <= (deadline - time.perf_counter()) * ITERATIONS_PER_SECOND:
            return "simplex"
    if budget is not None:
        return "first-order" if budget.left >= FIRST_ORDER_MIN_UNITS else None
    return "first-order" if deadline - time.perf_counter() >= FIRST_ORDER_MIN_SECONDS else None


def _exact_repair(deadline: float, budget: WorkBudget | None):
    """Re-solves the variables an LP left fractional (a small piece) with SCIP, from the rounded answer."""

    def repair(piece: Subproblem, hint_options: list[int]) -> SubResult:
        hint = SubResult(hint_options, piece.total(hint_options), float("-inf"), "lp-round")
        share = None if budget is None else WorkBudget(min(budget.left, 1.0))
        found = solve_mip(piece, hint, deadline, budget=share)
        if share is not None:
            budget.spend(share.spent)
        return found if found is not None and found.value < hint.value else hint

    return repair


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
