"""Dense cost tables of factors, and a piece's cost as table lookups: what the exact and local solvers evaluate.

`factor_cost` (model.py) prices one assignment by building sets of labels; a table prices every assignment of a
factor's scope once, so elimination sums tables and local search indexes them.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from layout_solver.core.model import Factor, kept
from layout_solver.core.solvers.subproblem import Subproblem

# Up to this many entries a factor's table is filled by a plain loop over its assignments: a few microseconds an
# entry, where the vectorised build costs ~70 us whatever the size (most factors of real graphs have 2-27 entries).
_LOOP_TABLE = 64
# Above this many entries a factor is not tabulated for local search (FlatTables): building it costs more than the
# lookups save.
FLAT_LIMIT = 729


def factor_table(sub: Subproblem, f: Factor) -> np.ndarray:
    """Dense cost table of factor `f` over its scope (one axis per variable, in `f.scope` order); read-only, and
    shared with every factor priced and read alike (`_tables`)."""
    tables = kept("factor tables") if sub.prices_of is not None else None
    key = None
    if tables is not None:
        sources = f.src_labels if f.src_var >= 0 else f.src_labels[:1]
        key = (sub.prices_of(f.value), f.src_var >= 0, sources, f.cons_reqs, f.const_req)
        table = tables.get(key)
        if table is not None:
            return table
    shape = tuple(sub.n_options[v] for v in f.scope)
    size = math.prod(shape)
    if size <= _LOOP_TABLE:
        table = np.array(_looped_costs(sub, f), dtype=float).reshape(shape)
    else:
        table = _vectorised_table(sub, f, shape)
    table.setflags(write=False)
    if key is not None and size <= _KEPT_TABLE:
        tables[key] = table
    return table


# A factor's table is determined by its value's prices (`CompiledProblem.prices_of`), its source's labels and what
# its consumers read, whichever value and variables it is of: a transformer's layers repeat their values' shapes and
# their prices within a delegate. Inside `compiles_reused()`, tables of up to this many entries are kept.
_KEPT_TABLE = 1024


# A factor whose consumers have up to this many joint options has its reading (`_Reads`) cached: most factors of real
# graphs, repeated layer after layer and again under each profile. A wider one is read afresh (its reading is as
# large as its table).
_CACHED_READS = 4096


@dataclass(frozen=True, slots=True)
class _Reads:
    """What a factor's consumers read, whatever the prices: the labels any of them may read (`targets`, sorted), the
    distinct sets of them that an assignment of their options reads (`present`, 0/1 per target; `distinct`, the
    same as target positions), and for every assignment (row-major, the first consumer outermost) the index of its
    set (`inverse`)."""

    targets: tuple[int, ...]
    present: np.ndarray  # (distinct sets, targets) of 0.0 / 1.0
    distinct: tuple[tuple[int, ...], ...]
    inverse: np.ndarray


def _reads(f: Factor) -> _Reads:
    """`f`'s consumers' reading, shared by every factor whose consumers read alike where it is small."""
    if math.prod(len(reqs) for reqs in f.cons_reqs) <= _CACHED_READS:
        return _cached_reads(f.const_req, f.cons_reqs)
    return _read(f.const_req, f.cons_reqs)


def _read(const_req: frozenset[int], cons_reqs: tuple[tuple[frozenset[int], ...], ...]) -> _Reads:
    targets = tuple(sorted(const_req.union(*(r for reqs in cons_reqs for r in reqs))))
    bit = {label: 1 << i for i, label in enumerate(targets)}
    # The labels each assignment reads as a bitmask: the consumers' options OR-ed, one axis per consumer.
    mask = np.full([1] * len(cons_reqs), sum(bit[label] for label in const_req), dtype=np.uint64)
    for axis, reqs in enumerate(cons_reqs):
        shape = [1] * len(cons_reqs)
        shape[axis] = -1
        mask = mask | np.array([sum(bit[label] for label in r) for r in reqs], dtype=np.uint64).reshape(shape)
    masks, inverse = np.unique(mask.ravel(), return_inverse=True)
    present = (masks[:, None] >> np.arange(len(targets), dtype=np.uint64) & np.uint64(1)).astype(float)
    distinct = tuple(tuple(np.flatnonzero(row).tolist()) for row in present)
    for array in (present, inverse):
        array.setflags(write=False)  # shared by every factor that reads alike
    return _Reads(targets, present, distinct, inverse)


# A graph's factors read in a few hundred ways at most; 2,048 readings of up to _CACHED_READS entries bound the cache.
_cached_reads = functools.lru_cache(maxsize=2048)(_read)


def _source_prices(sub: Subproblem, f: Factor, targets: tuple[int, ...]) -> list[list[float]]:
    """The price of moving the factor's value from each of its source labels to each target (0 where they agree)."""
    sources = f.src_labels if f.src_var >= 0 else f.src_labels[:1]
    cost, value = sub.cost, f.value
    return [[cost(value, src, dst) if dst != src else 0.0 for dst in targets] for src in sources]


def _looped_costs(sub: Subproblem, f: Factor) -> list[float]:
    """The factor's cost at every assignment of its scope (row-major, the scope's order), as `factor_cost` prices
    it: each distinct set of read labels priced once per source label, summed in the targets' order."""
    reads = _reads(f)
    inverse = reads.inverse.tolist()
    out: list[float] = []
    for row in _source_prices(sub, f, reads.targets):
        priced = [sum([row[i] for i in read]) for read in reads.distinct]
        out.extend([priced[k] for k in inverse])
    return out


def _vectorised_table(sub: Subproblem, f: Factor, shape: tuple[int, ...]) -> np.ndarray:
    """Dense cost table of one factor over its scope: each distinct set of read labels priced once per source label
    (summed target by target, in the targets' order, so every entry is the float `_looped_costs` gives), then
    spread over the assignments that read it."""
    reads = _reads(f)
    prices = np.array(_source_prices(sub, f, reads.targets), dtype=float)
    priced = np.zeros((len(prices), len(reads.distinct)))
    for i in range(len(reads.targets)):  # x + 0.0 * p == x: an absent target leaves the sum as it was
        priced += prices[:, i : i + 1] * reads.present[:, i]
    return priced[:, reads.inverse].reshape(shape)


class FlatTables:
    """Every factor of a piece as a flat list of costs with the strides of its scope: a factor's cost under an
    assignment is one list lookup, ten times cheaper than `factor_cost` (the local search's inner loop). A factor
    whose table would exceed FLAT_LIMIT entries (a value read by many consumers) is priced by `factor_cost`."""

    def __init__(self, sub: Subproblem):
        self.sub = sub
        self.costs: list[list[float] | None] = []
        self.scopes: list[tuple[tuple[int, int], ...]] = []  # per factor: (variable, stride) pairs
        for f in sub.factors:
            shape = [sub.n_options[v] for v in f.scope]
            size = math.prod(shape)
            if size > FLAT_LIMIT:
                self.costs.append(None)
                self.scopes.append(())
                continue
            self.costs.append(_looped_costs(sub, f) if size <= _LOOP_TABLE else factor_table(sub, f).ravel().tolist())
            strides, stride = [], 1
            for n in reversed(shape):
                strides.append(stride)
                stride *= n
            self.scopes.append(tuple(zip(f.scope, reversed(strides))))

    def cost(self, fi: int, options: list[int]) -> float:
        """Factor `fi`'s cost under `options` (one option per variable of the piece)."""
        flat = self.costs[fi]
        if flat is None:
            return self.sub.factor_cost(self.sub.factors[fi], options)
        return flat[sum(options[v] * stride for v, stride in self.scopes[fi])]
