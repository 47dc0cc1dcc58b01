"""Greedy start and local search: the legal answer every exact solver must beat.

Variables are decided in order (the compiled order follows the graph's
topological order), each taking the option that is cheapest given the
decisions so far; then single-variable moves are applied while they help.
"""

from __future__ import annotations

import time

from layout_solver.core.solvers.subproblem import Subproblem, SubResult


def greedy(sub: Subproblem, max_sweeps: int = 8, deadline: float | None = None) -> SubResult:
    """The constructive pass always completes (a legal answer); improving sweeps stop at `deadline`."""
    touching = sub.var_factors()
    # A factor is priced when its last variable (in decision order) is decided.
    completes: list[list[int]] = [[] for _ in range(sub.n_vars)]
    for fi, f in enumerate(sub.factors):
        completes[max(f.scope)].append(fi)
    opt: list[int] = [0] * sub.n_vars

    for var in range(sub.n_vars):
        best, best_cost = 0, float("inf")
        for o in range(sub.n_options[var]):
            opt[var] = o
            c = sub.unary[var][o] + sum(sub.factor_cost(sub.factors[fi], opt) for fi in completes[var])
            if c < best_cost:
                best, best_cost = o, c
        opt[var] = best
    done = opt
    for _ in range(max_sweeps):
        if deadline is not None and time.perf_counter() >= deadline:
            break
        improved = False
        for var in range(sub.n_vars):
            if var % 256 == 0 and deadline is not None and time.perf_counter() >= deadline:
                break
            current = done[var]
            scores = []
            for o in range(sub.n_options[var]):
                done[var] = o
                scores.append(sub.unary[var][o] + sum(sub.factor_cost(sub.factors[fi], done) for fi in touching[var]))
            best = min(range(len(scores)), key=scores.__getitem__)
            if scores[best] < scores[current] - 1e-12:
                improved = True
                done[var] = best
            else:
                done[var] = current
        if not improved:
            break
    return SubResult(options=done, value=sub.total(done), bound=float("-inf"), method="greedy")
