"""Greedy start and local search: the legal answer every exact solver must beat.

Variables are decided in order (the compiled order follows the graph's
topological order), each taking the option that is cheapest given the
decisions so far; then single-variable moves are applied while they help.
"""

from __future__ import annotations

from layout_solver.solvers.subproblem import SubResult, Subproblem


def greedy(sub: Subproblem, max_sweeps: int = 8) -> SubResult:
    touching = sub.var_factors()
    opt: list[int | None] = [None] * sub.n_vars

    def partial_cost(var: int) -> float:
        total = 0.0
        for fi in touching[var]:
            f = sub.factors[fi]
            if all(opt[v] is not None for v in f.scope):
                total += sub.factor_cost(f, opt)
        return total

    for var in range(sub.n_vars):
        best, best_cost = 0, float("inf")
        for o in range(sub.n_options[var]):
            opt[var] = o
            c = sub.unary[var][o] + partial_cost(var)
            if c < best_cost:
                best, best_cost = o, c
        opt[var] = best
    done: list[int] = list(opt)  # type: ignore[arg-type]
    for _ in range(max_sweeps):
        improved = False
        for var in range(sub.n_vars):
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
