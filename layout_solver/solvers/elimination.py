"""Exact variable elimination (min-sum bucket elimination) for narrow pieces.

Pieces of real graphs are chains and small diamonds, so eliminating one
variable at a time (min-degree order) keeps every intermediate table small.
Each factor becomes a dense numpy table over its scope; eliminating x sums
the tables that mention x and minimises over x, remembering the argmin for
the backward pass. Gives up (returns None) if a table would exceed the limit,
leaving the piece to CP-SAT.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from layout_solver.solvers.subproblem import SubResult, Subproblem

MAX_TABLE = 1 << 14


def _factor_table(sub: Subproblem, f) -> tuple[tuple[int, ...], np.ndarray]:
    scope = f.scope
    shape = tuple(sub.n_options[v] for v in scope)
    table = np.empty(shape, dtype=float)
    opt = {}
    for index in itertools.product(*(range(n) for n in shape)):
        opt.update(zip(scope, index))
        table[index] = sub.factor_cost(f, opt)
    return scope, table


def _aligned(scope: tuple[int, ...], table: np.ndarray, union: list[int]) -> np.ndarray:
    axes = sorted(range(len(scope)), key=lambda a: union.index(scope[a]))
    shape = [table.shape[scope.index(v)] if v in scope else 1 for v in union]
    return table.transpose(axes).reshape(shape)


def solve_by_elimination(sub: Subproblem, max_table: int = MAX_TABLE) -> SubResult | None:
    n = sub.n_vars
    for f in sub.factors:
        if math.prod(sub.n_options[v] for v in f.scope) > max_table:
            return None
    tables: list[tuple[tuple[int, ...], np.ndarray]] = [((v,), np.asarray(sub.unary[v], dtype=float)) for v in range(n)]
    tables += [_factor_table(sub, f) for f in sub.factors]
    remaining = set(range(n))
    eliminated: list[tuple[int, list[int], np.ndarray]] = []  # (var, rest of scope, argmin table)
    constant = sub.offset
    while remaining:
        # Min-degree: the variable whose combined table is smallest.
        best_var, best_union, best_size = None, None, None
        for v in remaining:
            union = sorted({u for scope, _ in tables if v in scope for u in scope})
            size = math.prod(sub.n_options[u] for u in union)
            if best_size is None or size < best_size:
                best_var, best_union, best_size = v, union, size
        if best_size > max_table:
            return None
        v, union = best_var, best_union
        mine = [(s, t) for s, t in tables if v in s]
        tables = [(s, t) for s, t in tables if v not in s]
        total = sum(_aligned(s, t, union) for s, t in mine)
        axis = union.index(v)
        rest = union[:axis] + union[axis + 1:]
        eliminated.append((v, rest, total.argmin(axis=axis)))
        reduced = total.min(axis=axis)
        if rest:
            tables.append((tuple(rest), reduced))
        else:
            constant += float(reduced)
        remaining.discard(v)
    for scope, table in tables:  # only scope-free leftovers can remain
        constant += float(table)
    options = [0] * n
    for v, rest, argmin in reversed(eliminated):
        options[v] = int(argmin[tuple(options[u] for u in rest)]) if rest else int(argmin)
    value = sub.total(options)
    return SubResult(options=options, value=value, bound=min(value, constant), method="elimination")
