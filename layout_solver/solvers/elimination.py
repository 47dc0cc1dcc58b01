"""Exact variable elimination (min-sum bucket elimination) for narrow pieces.

Pieces of real graphs are chains and small diamonds, so eliminating one
variable at a time (min-degree order) keeps every intermediate table small.
Each factor becomes a dense numpy table over its scope; eliminating x sums
the tables that mention x and minimises over x, remembering the argmin for
the backward pass. Gives up (returns None) if a table would exceed the limit,
leaving the piece to CP-SAT.
"""

from __future__ import annotations

import math

import numpy as np

from layout_solver.solvers.subproblem import SubResult, Subproblem

MAX_TABLE = 1 << 14


def _factor_table(sub: Subproblem, f) -> tuple[tuple[int, ...], np.ndarray]:
    """Dense cost table of one factor over its scope, vectorised with label bitmasks.

    Each consumer option contributes the bitmask of labels it reads; the
    union over the scope is a broadcast OR, and the cost sums, per target
    label present, the price from the value's own label.
    """
    scope = f.scope
    ndim = len(scope)
    targets = sorted(set(f.const_req).union(*(r for reqs in f.cons_reqs for r in reqs)))
    bit = {label: np.uint64(1) << np.uint64(i) for i, label in enumerate(targets)}

    def along(axis: int, array: np.ndarray) -> np.ndarray:
        shape = [1] * ndim
        shape[axis] = -1
        return array.reshape(shape)

    mask = np.zeros([1] * ndim, dtype=np.uint64)
    for label in f.const_req:
        mask |= bit[label]
    offset = 1 if f.src_var >= 0 else 0
    for k, reqs in enumerate(f.cons_reqs):
        per_option = np.array([sum((bit[label] for label in r), np.uint64(0)) for r in reqs], dtype=np.uint64)
        mask = mask | along(k + offset, per_option)
    sources = list(f.src_labels)
    price = np.array([[sub.cost(f.value, a, b) if a != b else 0.0 for b in targets] for a in sources])
    if f.src_var >= 0:
        src_index = along(0, np.arange(len(sources)))
    else:
        src_index = np.zeros([1] * ndim, dtype=int)
    shape = tuple(sub.n_options[v] for v in scope)
    table = np.zeros(shape, dtype=float)
    for i in range(len(targets)):
        present = ((mask >> np.uint64(i)) & np.uint64(1)).astype(bool)
        table = table + np.where(present, price[src_index, i], 0.0)
    return scope, np.broadcast_to(table, shape).copy()


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
    for _, table in tables:  # only scope-free leftovers can remain
        constant += float(table)
    options = [0] * n
    for v, rest, argmin in reversed(eliminated):
        options[v] = int(argmin[tuple(options[u] for u in rest)]) if rest else int(argmin)
    value = sub.total(options)
    return SubResult(options=options, value=value, bound=min(value, constant), method="elimination")
