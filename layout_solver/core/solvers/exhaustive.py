"""Exhaustive search for pieces small enough that trying everything is cheapest."""

from __future__ import annotations

import itertools
import math

from layout_solver.core.solvers.subproblem import Subproblem, SubResult

ENUMERATION_LIMIT = 64


def can_enumerate(sub: Subproblem, limit: int = ENUMERATION_LIMIT) -> bool:
    """True if the subproblem is small enough to try every assignment."""
    return math.prod(sub.n_options) <= limit


def enumerate_all(sub: Subproblem) -> SubResult:
    """The exact optimum of a small subproblem by trying every assignment."""
    best, best_cost = None, float("inf")
    for opt in itertools.product(*(range(n) for n in sub.n_options)):
        c = sub.total(opt)
        if c < best_cost:
            best, best_cost = list(opt), c
    assert best is not None
    return SubResult(options=best, value=best_cost, bound=best_cost, method="enumerate")
