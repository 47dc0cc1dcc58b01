"""Greedy start and local search: the legal answer every exact solver must beat.

Variables are decided in order (the compiled order follows the graph's
topological order), each taking the option that is cheapest given the
decisions so far; then single-variable moves are applied while they help.
Costs are looked up in the factors' tables (tables.py), not rebuilt per move.
"""

from __future__ import annotations

import time

from layout_solver.core.solvers.budget import EVALUATIONS_PER_UNIT, WorkBudget
from layout_solver.core.solvers.subproblem import Subproblem, SubResult
from layout_solver.core.solvers.tables import FlatTables


def greedy(sub: Subproblem, max_sweeps: int = 8, deadline: float | None = None) -> SubResult:
    """The constructive pass always completes (a legal answer); improving sweeps stop at `deadline`."""
    tables = FlatTables(sub)
    # A factor is priced when its last variable (in decision order) is decided.
    completes: list[list[int]] = [[] for _ in range(sub.n_vars)]
    for fi, f in enumerate(sub.factors):
        completes[max(f.scope)].append(fi)
    opt: list[int] = [0] * sub.n_vars
    cost = tables.cost
    for var in range(sub.n_vars):
        best, best_cost = 0, float("inf")
        for o in range(sub.n_options[var]):
            opt[var] = o
            c = sub.unary[var][o] + sum(cost(fi, opt) for fi in completes[var])
            if c < best_cost:
                best, best_cost = o, c
        opt[var] = best
    done = improve(sub, opt, max_sweeps, deadline, tables)
    return SubResult(options=done, value=sub.total(done), bound=float("-inf"), method="greedy")


def improve(
    sub: Subproblem,
    options: list[int],
    max_sweeps: int = 8,
    deadline: float | None = None,
    tables: FlatTables | None = None,
    budget: WorkBudget | None = None,
) -> list[int]:
    """`options` after single-variable moves, swept in order while one helps (at most `max_sweeps` sweeps, none
    after `deadline`, and under a `budget` only whole sweeps it still covers, each charged its move evaluations);
    never worse than `options`."""
    done = list(options)
    if max_sweeps <= 0:
        return done
    cost = (tables or FlatTables(sub)).cost
    touching = sub.var_factors()
    if budget is not None:
        sweep_units = sum(sub.n_options[v] * len(fs) for v, fs in enumerate(touching)) / EVALUATIONS_PER_UNIT
    for _ in range(max_sweeps):
        if deadline is not None and time.perf_counter() >= deadline:
            break
        if budget is not None:
            if budget.left < sweep_units:
                break
            budget.spend(sweep_units)
        improved = False
        for var in range(sub.n_vars):
            if var % 256 == 0 and deadline is not None and time.perf_counter() >= deadline:
                break
            current = done[var]
            scores = []
            for o in range(sub.n_options[var]):
                done[var] = o
                scores.append(sub.unary[var][o] + sum(cost(fi, done) for fi in touching[var]))
            best = min(range(len(scores)), key=scores.__getitem__)
            if scores[best] < scores[current] - 1e-12:
                improved = True
                done[var] = best
            else:
                done[var] = current
        if not improved:
            break
    return done
