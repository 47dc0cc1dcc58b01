"""Dense cost tables of factors, and a piece's cost as table lookups: what the exact and local solvers evaluate.

`factor_cost` (model.py) prices one assignment by building sets of labels; a table prices every assignment of a
factor's scope once, so elimination sums tables and local search indexes them.
"""

from __future__ import annotations

import math

import numpy as np

from layout_solver.core.model import Factor
from layout_solver.core.solvers.subproblem import Subproblem

# Up to this many entries a factor's table is filled by a plain loop over its assignments: a few microseconds an
# entry, where the vectorised build costs ~70 us whatever the size (most factors of real graphs have 2-27 entries).
_LOOP_TABLE = 64
# Above this many entries a factor is not tabulated for local search (FlatTables): building it costs more than the
# lookups save.
FLAT_LIMIT = 729


def factor_table(sub: Subproblem, f: Factor) -> np.ndarray:
    """Dense cost table of factor `f` over its scope (one axis per variable, in `f.scope` order)."""
    shape = tuple(sub.n_options[v] for v in f.scope)
    if math.prod(shape) <= _LOOP_TABLE:
        return np.array(_looped_costs(sub, f), dtype=float).reshape(shape)
    return _vectorised_table(sub, f, shape)


def _looped_costs(sub: Subproblem, f: Factor) -> list[float]:
    """The factor's cost at every assignment of its scope (row-major, the scope's order), as `factor_cost` prices
    it: the labels the consumers read as a bitmask, each distinct mask priced once per source label."""
    targets = sorted(f.const_req.union(*(r for reqs in f.cons_reqs for r in reqs)))
    bit = {label: 1 << i for i, label in enumerate(targets)}
    # The consumers' masks OR-ed over their options in row-major order (the first consumer outermost).
    masks = [sum(bit[label] for label in f.const_req)]
    for reqs in f.cons_reqs:
        options = [sum(bit[label] for label in r) for r in reqs]
        masks = [mask | option for mask in masks for option in options]
    distinct = list(dict.fromkeys(masks))
    sources = f.src_labels if f.src_var >= 0 else (f.src_labels[0],)
    out = []
    for src in sources:
        row = [sub.cost(f.value, src, dst) if dst != src else 0.0 for dst in targets]
        priced = {mask: sum(price for i, price in enumerate(row) if mask >> i & 1) for mask in distinct}
        out.extend([priced[mask] for mask in masks])
    return out


def _vectorised_table(sub: Subproblem, f: Factor, shape: tuple[int, ...]) -> np.ndarray:
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
    table = np.zeros(shape, dtype=float)
    for i in range(len(targets)):
        present = ((mask >> np.uint64(i)) & np.uint64(1)).astype(bool)
        table = table + np.where(present, price[src_index, i], 0.0)
    return np.broadcast_to(table, shape).copy()


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
