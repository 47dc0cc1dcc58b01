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

from layout_solver.core.model import kept_or_made
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
    """A greedy elimination order, found symbolically on the interaction graph, or None if some step's table would
    exceed `max_table`; given `wide_work`, tables up to WIDE_TABLE pass too while all the order's tables hold at
    most `wide_work` entries.

    First the min-size order (each step removes the variable whose combined table is smallest). Where it fails, or
    needs a table above FILL_TRIED_ABOVE times `max_table` (on a piece of up to FILL_MAX_VARS), the weighted
    min-fill order too (each step removes the variable whose elimination joins the fewest option pairs of
    neighbours not yet joined), and the one whose tables hold fewer entries in all is taken: on a Llama decode step's Vulkan delegate (183 variables, values of
    up to 18 options) min-size needed tables of 2.2 million entries, 5.6 million in all, min-fill 31,000 and
    250,000; a window-40 piece min-size needs 373,248 for, min-fill 20,736. Deterministic: ties go to the lower
    variable.
    """
    if sub.n_vars > ORDERS_KEPT_UP_TO:
        return _elimination_order(sub, max_table, wide_work)
    order = kept_or_made(
        "elimination orders",
        lambda: (tuple(sub.n_options), tuple(f.scope for f in sub.factors), max_table, wide_work),
        lambda: _elimination_order(sub, max_table, wide_work),
    )
    return None if order is None else list(order)  # a copy: the kept one is shared


# An order depends on the piece's option counts and factor scopes alone, not its prices: one graph solved under
# several profiles inside `compiles_reused()` (the Vulkan stage's up to three solves of each delegate) asks for the
# same orders. Kept there for pieces of up to this many variables.
ORDERS_KEPT_UP_TO = 2048


def _elimination_order(sub: Subproblem, max_table: int, wide_work: int | None) -> list[int] | None:
    cap = _table_cap(max_table, wide_work)
    work_cap = wide_work if wide_work is not None else 0  # no table above max_table passes without a wide limit
    order, largest, work = _greedy_order(sub, cap, max_table, work_cap, _table_size)
    if (order is not None and largest <= FILL_TRIED_ABOVE * max_table) or sub.n_vars > FILL_MAX_VARS:
        return order
    fill, _, fill_work = _greedy_order(sub, cap, max_table, work_cap, _min_fill)
    if fill is not None and (order is None or fill_work < work):
        return fill
    return order


# The min-fill order is looked for only where min-size's largest table is this many times the table limit (or it
# fails): finding it costs a few ms in Python on a piece of 100-200 variables, which only tables of this size repay
# (a MobileViT delegate's pieces, 70,000 entries at most, gained under 30% of their entries from it).
FILL_TRIED_ABOVE = 8
# ... and on pieces of up to this many variables: its keys are found again two steps around each variable removed,
# which on a random piece of 6,845 variables took 2.8 s before its tables outgrew the limits.
FILL_MAX_VARS = 1000


def _min_fill(v: int, adjacent: list[set[int]], options: list[int], cap: int) -> tuple[int, ...]:
    """The weighted min-fill order's key: the option pairs of the neighbours of `v` that eliminating it joins (those
    not joined yet), then the size of its table."""
    neighbours = sorted(adjacent[v])
    fill = 0
    for i, a in enumerate(neighbours):
        joined = adjacent[a]
        for b in neighbours[i + 1 :]:
            if b not in joined:
                fill += options[a] * options[b]
    return fill, _table_size(v, adjacent, options, cap)


def _table_size(v: int, adjacent: list[set[int]], options: list[int], cap: int) -> int:
    total = options[v]
    for u in adjacent[v]:
        total *= options[u]
        if total > cap:
            break
    return total


def _greedy_order(sub: Subproblem, cap: int, max_table: int, work_cap: int, key) -> tuple[list[int] | None, int, int]:
    """The order that removes, step by step, the variable with the smallest `key` (a heap with lazy updates, no tables
    built), with its largest table and the entries of all its tables; (None, ...) as soon as a table would exceed
    `cap`, or one has exceeded `max_table` and all of them `work_cap` entries (a piece far too wide is given up
    early). A step changes the keys of the eliminated variable's neighbours and, for a fill key, of theirs."""
    n = sub.n_vars
    options = sub.n_options
    adjacent: list[set[int]] = [set() for _ in range(n)]
    for f in sub.factors:
        scope = f.scope
        for a in scope:
            adjacent[a].update(scope)
    for v in range(n):
        adjacent[v].discard(v)
    two_hops = key is _min_fill  # a fill key also changes where two of the neighbours meet
    current = [key(v, adjacent, options, cap) for v in range(n)]
    heap = [(current[v], v) for v in range(n)]
    heapq.heapify(heap)
    done = [False] * n
    order: list[int] = []
    largest = work = 0
    while heap:
        k, v = heapq.heappop(heap)
        if done[v] or k != current[v]:
            continue
        size = k[1] if two_hops else k  # each key holds the size of the table eliminating `v` builds
        largest, work = max(largest, size), work + size
        if size > cap or (largest > max_table and work > work_cap):
            return None, largest, work
        done[v] = True
        order.append(v)
        neighbours = adjacent[v]
        for u in neighbours:
            adjacent[u].discard(v)
            adjacent[u].update(w for w in neighbours if w != u)
        touched = neighbours
        if two_hops:
            touched = set(neighbours)
            for u in neighbours:
                touched.update(adjacent[u])
        for u in touched:  # the heap orders by (key, variable): the order of the pushes does not matter
            if not done[u]:
                current[u] = key(u, adjacent, options, cap)
                heapq.heappush(heap, (current[u], u))
    return order, largest, work


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
