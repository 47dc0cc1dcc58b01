"""Exact min-cut for pieces in which every variable has two options.

A value's factor splits, per target label L, into terms of two shapes:

  (A) c * OR_j [y_j = b_j]                 the transition to L is needed by
                                           some consumer (own label fixed)
  (B) c * [x = a] * OR_j [y_j = b_j]       ... and the producer x made the
                                           value something other than L

Both are hyperedges: one auxiliary node with an edge of capacity c and
infinite edges to the literals, so a transition shared by many consumers is
cut once. A term is representable iff, after flipping some variables, all
its literals sit on the cut's "paying" side; the flips are a parity
constraint system solved with a union-find. If it has no solution the piece
is not submodular and the caller falls back to CP-SAT.
"""

from __future__ import annotations

from collections import deque

import numpy as np
from scipy.sparse import coo_array
from scipy.sparse.csgraph import maximum_flow

from layout_solver.core.solvers.subproblem import Subproblem, SubResult, integer_scale

_MAX_TOTAL = 2**30


class _Parity:
    """Union-find over variables with the parity of each to its root."""

    def __init__(self, n: int):
        self.parent = list(range(n))
        self.parity = [0] * n

    def find(self, i: int) -> tuple[int, int]:
        p = 0
        while self.parent[i] != i:
            p ^= self.parity[i]
            i = self.parent[i]
        return i, p

    def relate(self, i: int, j: int, parity: int) -> bool:
        ri, pi = self.find(i)
        rj, pj = self.find(j)
        if ri == rj:
            return (pi ^ pj) == parity
        self.parent[ri] = rj
        self.parity[ri] = pi ^ pj ^ parity
        return True


def _terms(sub: Subproblem):
    """Split every factor into unary costs, (A) terms and (B) terms."""
    unary = [list(u) for u in sub.unary]
    const = sub.offset
    or_terms: list[tuple[float, list[tuple[int, int]]]] = []
    and_terms: list[tuple[float, tuple[int, int], list[tuple[int, int]]]] = []
    for f in sub.factors:
        targets = set(f.const_req)
        for reqs in f.cons_reqs:
            for r in reqs:
                targets |= r
        for dst in targets:
            literals = []
            always = dst in f.const_req
            for var, reqs in zip(f.cons_vars, f.cons_reqs):
                wanting = [o for o in (0, 1) if dst in reqs[o]]
                if len(wanting) == 2:
                    always = True
                elif wanting:
                    literals.append((var, wanting[0]))
            if f.src_var < 0:
                src = f.src_labels[0]
                c = sub.cost(f.value, src, dst) if src != dst else 0.0
                if c == 0:
                    continue
                if always:
                    const += c
                elif len(literals) == 1:
                    unary[literals[0][0]][literals[0][1]] += c
                elif literals:
                    or_terms.append((c, literals))
                continue
            x = f.src_var
            c0, c1 = (sub.cost(f.value, f.src_labels[o], dst) if f.src_labels[o] != dst else 0.0 for o in (0, 1))
            if always:
                unary[x][0] += c0
                unary[x][1] += c1
                continue
            if not literals:
                continue
            m = min(c0, c1)
            if m > 0:
                if len(literals) == 1:
                    unary[literals[0][0]][literals[0][1]] += m
                else:
                    or_terms.append((m, literals))
            for a, extra in ((0, c0 - m), (1, c1 - m)):
                if extra > 0:
                    and_terms.append((extra, (x, a), literals))
    return unary, const, or_terms, and_terms


def solve_mincut(sub: Subproblem) -> SubResult | None:
    """Exact answer, or None if the piece is not a two-option submodular one."""
    if any(n != 2 for n in sub.n_options):
        return None
    n = sub.n_vars
    unary, const, or_terms, and_terms = _terms(sub)
    parity = _Parity(n)
    for _, lits in or_terms:
        v0, b0 = lits[0]
        for v, b in lits[1:]:
            if not parity.relate(v0, v, b0 ^ b):
                return None
    for _, (x, a), lits in and_terms:
        for v, b in lits:
            if not parity.relate(x, v, a ^ b ^ 1):
                return None
    flip = [parity.find(i)[1] for i in range(n)]

    costs = [c for u in unary for c in u] + [c for c, _ in or_terms] + [c for c, _, _ in and_terms]
    total = sum(costs)
    scale, slack = integer_scale(costs, _MAX_TOTAL / 2)

    def q(c: float) -> int:
        return round(c * scale)

    s, t = 0, 1
    rows: list[int] = []
    cols: list[int] = []
    caps: list[int] = []
    inf = q(total) + 1

    def edge(i: int, j: int, c: int) -> None:
        if c > 0:
            rows.append(i)
            cols.append(j)
            caps.append(c)

    node = lambda i: i + 2
    base = 0
    for i, (u0, u1) in enumerate(unary):
        m = min(u0, u1)
        base += q(m)
        for o, extra in ((0, u0 - m), (1, u1 - m)):
            if extra > 0:
                if o ^ flip[i] == 0:
                    edge(node(i), t, q(extra))  # pays when on the source side
                else:
                    edge(s, node(i), q(extra))
    aux = n + 2
    for c, lits in or_terms:
        side = lits[0][1] ^ flip[lits[0][0]]
        if side == 1:
            edge(s, aux, q(c))
            for v, _ in lits:
                edge(aux, node(v), inf)
        else:
            for v, _ in lits:
                edge(node(v), aux, inf)
            edge(aux, t, q(c))
        aux += 1
    for c, (x, a), lits in and_terms:
        if a ^ flip[x] == 0:
            edge(node(x), aux, q(c))
            for v, _ in lits:
                edge(aux, node(v), inf)
        else:
            for v, _ in lits:
                edge(node(v), aux, inf)
            edge(aux, node(x), q(c))
        aux += 1
    if not caps:
        options = [0 if u[0] <= u[1] else 1 for u in unary]
        value = sub.total(options)
        return SubResult(options=options, value=value, bound=value, method="mincut")
    graph = coo_array((np.asarray(caps, dtype=np.int32), (rows, cols)), shape=(aux, aux)).tocsr()
    result = maximum_flow(graph, s, t)
    residual = (graph - result.flow).tocsr()
    source_side = np.zeros(aux, dtype=bool)
    source_side[s] = True
    queue = deque([s])
    indptr, indices, data = residual.indptr, residual.indices, residual.data
    while queue:
        i = queue.popleft()
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            if data[k] > 0 and not source_side[j]:
                source_side[j] = True
                queue.append(j)
    options = [(0 if source_side[node(i)] else 1) ^ flip[i] for i in range(n)]
    value = sub.total(options)
    bound = const + (base + result.flow_value) / scale - slack
    return SubResult(options=options, value=value, bound=min(bound, value), method="mincut")
