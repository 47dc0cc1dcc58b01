"""Exhaustive reference solver for tiny problems (tests and debugging only)."""

from __future__ import annotations

import itertools

from layout_solver.core.evaluate import evaluate
from layout_solver.core.problem import InfeasibleError, Problem, ProblemError


def brute_force(problem: Problem) -> tuple[float, dict[str, str], dict[str, str]]:
    """Optimal objective, modes and free labels by trying every combination."""
    produced = {v for op in problem.ops for v in op.results}
    free = [v for v in problem.values if v.id not in produced]
    best = None
    for modes in itertools.product(*(op.modes for op in problem.ops)):
        chosen = {op.id: m.name for op, m in zip(problem.ops, modes)}
        for labels in itertools.product(*([v.fixed] if v.fixed else v.domain for v in free)):
            assignment = {v.id: label for v, label in zip(free, labels)}
            try:
                result = evaluate(problem, chosen, assignment)
            except ProblemError:
                continue
            if best is None or result.objective < best[0]:
                best = (result.objective, chosen, assignment)
    if best is None:
        raise InfeasibleError("no assignment satisfies the hard constraints")
    return best
