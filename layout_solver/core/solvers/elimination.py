"""Exact variable elimination (min-sum bucket elimination) for narrow pieces.

Pieces of real graphs are chains and small diamonds, so eliminating one
variable at a time (min-degree order) keeps every intermediate table small.
Each factor becomes a dense numpy table over its scope; eliminating x sums
the tables that mention x and minimises over x, remembering the argmin for
the backward pass. Gives up (returns None) if a table would exceed the limit,
leaving the piece to CP-SAT.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time

import numpy as np

from layout_solver.core.solvers.subproblem import Subproblem, SubResult
from layout_solver.core.solvers.tables import factor_table

MAX_TABLE = 1 << 16
# A piece no table limit above lets through is otherwise left to SCIP or CP-SAT, which take 0.5-1 s on the
# 183-variable piece of a Llama decode step's Vulkan delegate (18-option values: its min-size order needs tables of
# 2^21 entries, 0.24 s to eliminate). So before those it is eliminated with tables up to WIDE_TABLE entries (32 MiB
# of float64) where all the order's tables together hold at most WIDE_WORK entries (`wide_work`).
WIDE_TABLE = 1 << 22
WIDE_WORK = 1 << 24


def _aligned(scope: tuple[int, ...], table: np.ndarray, union: list[int]) -> np.ndarray:
    axes = sorted(range(len(scope)), key=lambda a: union.index(scope[a]))
    shape = [table.shape[scope.index(v)] if v in scope else 1 for v in union]
    return table.transpose(axes).reshape(shape)


def _table_cap(max_table: int, wide_work: int | None) -> int:
    """The largest table a step may build: `max_table`, or WIDE_TABLE where the wide limit applies."""
    return max(max_table, WIDE_TABLE) if wide_work is not None else max_table


def elimination_order(sub: Subproblem, max_table: int = MAX_TABLE, wide_work: int | None = None) -> list[int] | None:
    """A min-size elimination order (each step removes the variable whose combined table is
    smallest), found symbolically on the interaction graph, or None if some step's table would
    exceed `max_table`; given `wide_work`, tables up to WIDE_TABLE pass too while all the order's
    tables hold at most `wide_work` entries. One pass either way: a wider limit only lets the same
    order run further. Linear-ish in the piece: a heap with lazy updates, no tables built.
    """
    n = sub.n_vars
    options = sub.n_options
    adjacent: list[set[int]] = [set() for _ in range(n)]
    for f in sub.factors:
        scope = f.scope
        for a in scope:
            adjacent[a].update(scope)
    for v in range(n):
        adjacent[v].discard(v)

    cap = _table_cap(max_table, wide_work)

    def size(v: int) -> int:
        total = options[v]
        for u in adjacent[v]:
            total *= options[u]
            if total > cap:
                break
        return total

    current = [size(v) for v in range(n)]
    heap = [(current[v], v) for v in range(n)]
    heapq.heapify(heap)
    done = [False] * n
    order: list[int] = []
    largest = work = 0
    while heap:
        s, v = heapq.heappop(heap)
        if done[v] or s != current[v]:
            continue
        largest, work = max(largest, s), work + s
        if s > cap or (largest > max_table and work > wide_work):
            return None
        done[v] = True
        order.append(v)
        neighbours = adjacent[v]
        for u in neighbours:
            adjacent[u].discard(v)
            adjacent[u].update(w for w in neighbours if w != u)
        for u in neighbours:
            current[u] = size(u)
            heapq.heappush(heap, (current[u], u))
    return order


def solve_by_elimination(
    sub: Subproblem, max_table: int = MAX_TABLE, deadline: float | None = None, wide_work: int | None = None
) -> SubResult | None:
    """Exact optimum of `sub`, or None when a table would exceed `max_table` entries (or, given
    `wide_work`, the wide limits of `elimination_order`; decided symbolically, before any table is
    built) or the `deadline` (a time.perf_counter() instant) passes first."""
    n = sub.n_vars
    cap = _table_cap(max_table, wide_work)
    for f in sub.factors:
        if math.prod(sub.n_options[v] for v in f.scope) > cap:
            return None
    order = elimination_order(sub, max_table, wide_work)
    if order is None:
        return None
    tables: dict[int, tuple[tuple[int, ...], np.ndarray]] = {}
    var_tables: list[set[int]] = [set() for _ in range(n)]

    def add(scope: tuple[int, ...], table: np.ndarray) -> None:
        tid = next(counter)
        tables[tid] = (scope, table)
        for u in scope:
            var_tables[u].add(tid)

    counter = itertools.count()
    # (var, the rest of its bucket's scope, the bucket's summed table): the backward pass takes the argmin of one
    # row per variable, at the options already chosen, instead of an argmin table per step (most of a wide
    # elimination's time: an argmin over a table's middle axis copies the table first). The tables are kept
    # until then: as many entries as the order's steps build (`wide_work` at most where it applies), where the
    # argmin tables held one entry in each table's option count.
    eliminated: list[tuple[int, list[int], np.ndarray]] = []
    for v in range(n):
        add((v,), np.asarray(sub.unary[v], dtype=float))
    for f in sub.factors:
        add(f.scope, factor_table(sub, f))
    constant = sub.offset
    for v in order:
        if deadline is not None and time.perf_counter() > deadline:
            return None
        mine = [tables.pop(tid) for tid in sorted(var_tables[v])]
        for scope, _ in mine:
            for u in scope:
                if u != v:
                    var_tables[u].difference_update(var_tables[v])
        var_tables[v].clear()
        union = sorted({u for scope, _ in mine for u in scope})
        total = sum(_aligned(s, t, union) for s, t in mine)
        axis = union.index(v)
        rest = union[:axis] + union[axis + 1 :]
        eliminated.append((v, rest, np.moveaxis(total, axis, -1)))
        reduced = total.min(axis=axis)
        if rest:
            add(tuple(rest), reduced)
        else:
            constant += float(reduced)
    for _, table in tables.values():  # only scope-free leftovers can remain
        constant += float(table)
    options = [0] * n
    for v, rest, total in reversed(eliminated):
        options[v] = int(total[tuple(options[u] for u in rest)].argmin())
    value = sub.total(options)
    return SubResult(options=options, value=value, bound=min(value, constant), method="elimination")
