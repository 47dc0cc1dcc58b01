"""Large-neighbourhood search for pieces too big to model whole (memory, model-building time).

Starting from the greedy answer, windows of consecutive variables (the
compiled order follows the graph's topological order, so a window is a stretch
of the graph) are re-solved exactly with SCIP while everything outside is held
fixed; a window's answer is taken when it lowers the total. Windows overlap by
half and sweep the piece until a sweep improves nothing or time (or the work budget: each window's search and
WINDOW_UNITS for the window itself) runs out.
Memory is bounded by the window, not the piece.

The bound is the sum of what each variable and each factor cost at least on
their own: weak, but valid, and honest about the gap.
"""

from __future__ import annotations

import itertools
import math
import time

from layout_solver.core.solvers.budget import WINDOW_UNITS, WorkBudget
from layout_solver.core.solvers.cpsat import Trace, solve_cpsat
from layout_solver.core.solvers.mip import solve_mip
from layout_solver.core.solvers.subproblem import Subproblem, SubResult, restrict

WINDOW_VARS = 1500
WINDOW_SECONDS = 2.0
_ENUMERABLE = 64


def separable_bound(sub: Subproblem, deadline: float | None = None) -> float:
    """Each unary and each factor at its own minimum (a factor whose scope is too large to enumerate
    counts 0); factors left when `deadline` passes count 0 as well."""
    bound = sub.plain_bound
    for k, f in enumerate(sub.factors):
        if k % 512 == 0 and deadline is not None and time.perf_counter() >= deadline:
            break
        scope = f.scope
        if math.prod(sub.n_options[v] for v in scope) > _ENUMERABLE:
            continue
        cheapest = min(
            sub.factor_cost(f, dict(zip(scope, choice)))
            for choice in itertools.product(*(range(sub.n_options[v]) for v in scope))
        )
        bound += cheapest
    return bound


def solve_large(
    sub: Subproblem, start: SubResult, deadline: float, trace: Trace | None = None, budget: WorkBudget | None = None
) -> SubResult:
    """Improve `start` by solving overlapping windows of variables exactly until nothing improves, the deadline
    passes or (given one) the `budget` is spent; the bound is the better of start's and a separable one.
    """

    def out_of_work() -> bool:
        return time.perf_counter() >= deadline or (budget is not None and budget.left <= 0)

    current = list(start.options)
    bound = max(start.bound, separable_bound(sub, deadline))
    touching = sub.var_factors()
    n = sub.n_vars
    value = start.value
    improved = True
    while improved and not out_of_work():
        improved = False
        for lo in range(0, max(1, n - WINDOW_VARS // 2), WINDOW_VARS // 2):
            if out_of_work():
                break
            window = list(range(lo, min(n, lo + WINDOW_VARS)))
            inside = set(window)
            factors = [sub.factors[fi] for fi in sorted({fi for v in window for fi in touching[v]})]
            fixed = {v: current[v] for f in factors for v in f.scope if v not in inside}
            piece = restrict(sub, window, factors, fixed)
            here = [current[v] for v in window]
            before = piece.total(here)
            hint = SubResult(here, before, -math.inf, "lns")
            if budget is None:
                window_deadline = min(deadline, time.perf_counter() + WINDOW_SECONDS)
                found = solve_mip(piece, hint, window_deadline) or solve_cpsat(piece, hint, window_deadline)
            else:  # the window's search counted in work: the same windows, the same answers, on any machine
                budget.spend(WINDOW_UNITS)
                share = WorkBudget(min(budget.left, 1.0))
                found = solve_mip(piece, hint, deadline, budget=share) or solve_cpsat(piece, hint, deadline,
                                                                                       budget=share)  # fmt: skip
                budget.spend(share.spent)
            if found.value < before - 1e-9 * max(1.0, abs(before)):
                for v, o in zip(window, found.options):
                    current[v] = o
                value += found.value - before
                improved = True
                if trace is not None:
                    trace("lns", value, bound)
    value = sub.total(current)
    return SubResult(current, value, min(bound, value), "lns")
