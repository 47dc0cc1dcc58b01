"""Use the structure of real graphs: components, blocks, and repeated pieces.

1. Variables that share no factor are independent: connected components of
   the variables' interaction graph are solved separately.
2. Inside a component, an *articulation* variable (a residual add between
   two transformer blocks, say) separates it into biconnected blocks. Each
   block is solved once per assignment of its articulation variables, giving
   an interface table; a dynamic programme over the block-cut tree combines
   the tables exactly.
3. A block's canonical signature (its factors and costs written in terms of
   variable positions) keys a memo, so repeated blocks are solved once.
   Equal signatures mean the same subproblem up to renaming, so reuse is
   exact; isomorphic blocks written in a different order merely miss.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
from scipy.sparse import coo_array
from scipy.sparse.csgraph import connected_components

from layout_solver.core.model import CompiledProblem, Factor, kept_or_made
from layout_solver.core.solvers.budget import WorkBudget
from layout_solver.core.solvers.cpsat import Trace
from layout_solver.core.solvers.elimination import MAX_TABLE, WIDE_WORK, elimination_order, solve_by_elimination
from layout_solver.core.solvers.exhaustive import ENUMERATION_LIMIT, can_enumerate, enumerate_all
from layout_solver.core.solvers.mincut import solve_mincut
from layout_solver.core.solvers.portfolio import ENGINES, RELATIVE_GAP, solve_hard
from layout_solver.core.solvers.subproblem import Subproblem, SubResult, proven, restrict, within

# Above this many articulation assignments a block is not tabulated; its
# whole component goes to one solver call instead.
MAX_INTERFACE = 256
# Components up to this many variables that exact elimination takes whole are not split into blocks (an irregular
# graph's components; a model's one long component keeps the blocks, whose memo solves a repeated block once).
DIRECT_VARS = 600
# What a component's wide elimination may hold in all its tables to be taken whole (`_narrow`): tens of
# milliseconds here, where the blocks' tabulation of an 18-option model took most of a second.
NARROW_WORK = 1 << 21
# The least share of the time left a component may take against the clock, however few its variables: a
# medium piece (a few hundred variables, a MIP of a fraction of a second) keeps time enough to close.
MIN_TIME_SHARE = 0.1


@dataclass
class SolveStats:
    """What the decomposition did: components, blocks, memo hits and the method that solved each piece."""

    components: int = 0
    blocks: int = 0
    memo_hits: int = 0
    by_method: Counter = field(default_factory=Counter)
    proven: bool = True
    # Every piece not proven optimal is proven within RELATIVE_GAP of its optimum (where the search settles).
    settled: bool = True


@dataclass
class _Table:
    value: np.ndarray  # over articulation options, block cost (internal unaries included)
    bound: np.ndarray
    internal: list[list[int]]  # flat articulation index -> internal options


_shared_memo: contextvars.ContextVar[dict | None] = contextvars.ContextVar("layout_solver_block_memo", default=None)


@contextlib.contextmanager
def shared_memo() -> Iterator[dict]:
    """Inside the block every solve shares one memo of proven block tables: a problem solved again with a few
    costs changed (a pass refining its prices) re-solves only the blocks those costs touch. A block's signature
    is its structure and costs in terms of positions, so a table serves any problem that has the block."""
    token = _shared_memo.set({})
    try:
        yield _shared_memo.get()
    finally:
        _shared_memo.reset(token)


def _labelled(n: int, scopes: tuple[tuple[int, ...], ...]) -> tuple[int, tuple[int, ...]]:
    """The number of connected components of `n` variables joined by factors of `scopes`, and each one's label."""
    rows, cols = [], []
    for scope in scopes:
        for v in scope[1:]:
            rows.append(scope[0])
            cols.append(v)
    graph = coo_array((np.ones(len(rows), dtype=np.int8), (rows, cols)), shape=(n, n))
    count, label_array = connected_components(graph, directed=False)
    return count, tuple(label_array.tolist())  # Python ints: numpy scalar indexing is slow in loops


# The components depend on the factors' scopes alone: one graph solved under several profiles inside
# `compiles_reused()` (the Vulkan stage solves each delegate up to three times) finds them once. Kept there for
# problems of up to this many variables.
COMPONENTS_KEPT_UP_TO = 4096


class Decomposer:
    """Splits a compiled problem into independent components (and biconnected blocks), solves each with the
    portfolio, memoising identical pieces.
    """

    def __init__(
        self,
        compiled: CompiledProblem,
        deadline: float,
        workers: int = 1,
        enumeration_limit: int = ENUMERATION_LIMIT,
        elimination_limit: int = MAX_TABLE,
        use_blocks: bool = True,
        memo: bool = True,
        engines: tuple[str, ...] = ENGINES,
        trace: Trace | None = None,
        budget: WorkBudget | None = None,
    ):
        self.c = compiled
        self.budget = budget
        self.engines = engines
        self.trace = trace
        self.elimination_limit = elimination_limit
        self.use_memo = memo
        self.enumeration_limit = enumeration_limit
        self.use_blocks = use_blocks
        self.deadline = deadline
        self.until = deadline  # the piece being solved: its component's share of the time (`solve`)
        self.workers = workers
        shared = _shared_memo.get()
        self.memo: dict[tuple, _Table] = shared if shared is not None and memo else {}
        self.stats = SolveStats()

    # -- pieces ---------------------------------------------------------------

    def solve_piece(self, sub: Subproblem) -> SubResult:
        """Solve one piece: by enumeration when small, by min-cut or elimination when its structure allows, else
        with the portfolio."""
        if sub.n_vars == 0:
            v = sub.total([])
            return SubResult([], v, v, "constant")
        if can_enumerate(sub, self.enumeration_limit):
            return enumerate_all(sub)
        cut = solve_mincut(sub)
        if cut is not None:
            return cut
        if self.elimination_limit:
            # Exact elimination may give up late on a wide piece: it gets half the time left, CP-SAT the rest;
            # under a work budget its table limit alone decides (the clock only as the safety net).
            now = time.perf_counter()
            until = self.deadline if self.budget is not None else now + 0.5 * (self.until - now)
            exact = solve_by_elimination(sub, self.elimination_limit, until, WIDE_WORK)
            if exact is not None:
                return exact
        trace = None
        if self.trace is not None:

            def trace(phase: str, incumbent: float, bound: float) -> None:
                self.trace(phase, incumbent, bound, sub.n_vars)

        return solve_hard(sub, self.until, self.workers, self.engines, trace, self.budget)

    def _record(self, result: SubResult) -> None:
        self.stats.by_method[result.method] += 1
        if not proven(result):
            self.stats.proven = False
            if not within(result, RELATIVE_GAP):
                self.stats.settled = False

    # -- components -----------------------------------------------------------

    def components(self) -> list[tuple[list[int], list[Factor]]]:
        """The connected components of the variable graph (variables sharing a factor)."""
        n = self.c.n_vars
        scopes = tuple(f.scope for f in self.c.factors)
        if n <= COMPONENTS_KEPT_UP_TO:
            count, label = kept_or_made("components", lambda: (n, scopes), lambda: _labelled(n, scopes))
        else:
            count, label = _labelled(n, scopes)
        members: list[list[int]] = [[] for _ in range(count)]
        for v in range(n):
            members[label[v]].append(v)
        factors: list[list[Factor]] = [[] for _ in range(count)]
        for f in self.c.factors:
            factors[label[f.scope[0]]].append(f)
        return list(zip(members, factors))

    def solve(self) -> tuple[list[int], float]:
        """Options for every variable, and a lower bound on the variable part's cost."""
        options = [0] * self.c.n_vars
        bound = 0.0
        # Smallest first: the many small pieces are solved exactly before a wide one takes the time left.
        components = sorted(self.components(), key=lambda c: len(c[0]))
        remaining = sum(len(c[0]) for c in components)
        whole_budget = self.budget
        for k, (variables, factors) in enumerate(components):
            now = time.perf_counter()
            # Each component gets its share of what is left by its variables (at least MIN_TIME_SHARE of it): the
            # first wide piece no longer takes it all and leaves the greedy answer to the next. Against the clock
            # the share is of the time; under a work budget of the units (what it leaves unspent passes on), the
            # clock only the safety net, so the split stays deterministic.
            share = max(len(variables) / remaining, MIN_TIME_SHARE) if remaining else 1.0
            if whole_budget is None:
                self.until = min(self.deadline, now + share * (self.deadline - now))
            else:
                self.until = self.deadline
                self.budget = WorkBudget(share * whole_budget.left)
            remaining -= len(variables)
            if now >= self.deadline:
                # Out of time: one greedy pass over everything left, not one small search per piece.
                rest = components[k:]
                self.stats.components += len(rest)
                variables = [v for vs, _ in rest for v in vs]
                result = solve_hard(restrict(self.c, variables, [f for _, fs in rest for f in fs], {}), self.deadline)
                self._record(result)
                for v, o in zip(variables, result.options):
                    options[v] = o
                self.budget = whole_budget
                return options, bound + result.bound
            self.stats.components += 1
            try:
                chosen, lb = self.solve_component(variables, factors)
            finally:
                if whole_budget is not None:
                    whole_budget.spend(self.budget.spent)
                    self.budget = whole_budget
            for v, o in zip(variables, chosen):
                options[v] = o
            bound += lb
        return options, bound

    def solve_component(self, variables: list[int], factors: list[Factor]) -> tuple[list[int], float]:
        """Solve one component, by blocks when it splits at articulation variables (unless an identical component
        was solved whole already, or elimination takes it whole)."""
        key = self._signature(variables, [], factors)
        if key not in self.memo and self.use_blocks and len(variables) > 2 and not self._narrow(variables, factors):
            blocks = self._blocks(variables, factors)
            if blocks is not None:
                return self._block_dp(variables, factors, *blocks)
        table = self._tabulate(variables, [], factors, key)
        self.stats.blocks += 1
        return table.internal[0], float(table.bound.reshape(-1)[0])

    def _narrow(self, variables: list[int], factors: list[Factor]) -> bool:
        """Whether exact elimination takes the whole component at once (up to DIRECT_VARS variables, no table
        above the elimination limit): one pass over it costs less than tabulating each block per articulation
        assignment (measured: 66,000 variables in 7,000 irregular components, 2.9 s against over 8 s), and with
        wide tables while their entries in all stay under NARROW_WORK (a MobileViT delegate's 171-variable
        component of 18-option values: 27 ms whole against 0.7 s of block tabulation)."""
        if len(variables) > DIRECT_VARS or not self.elimination_limit:
            return False
        sub = restrict(self.c, variables, factors, {})
        return (
            can_enumerate(sub, self.enumeration_limit)
            or elimination_order(sub, self.elimination_limit, NARROW_WORK) is not None
        )

    # -- blocks ---------------------------------------------------------------

    def _blocks(self, variables, factors):
        graph = nx.Graph()
        graph.add_nodes_from(variables)
        for f in factors:
            graph.add_edges_from(itertools.combinations(f.scope, 2))
        articulation = set(nx.articulation_points(graph))
        if not articulation:
            return None
        blocks = [sorted(b) for b in nx.biconnected_components(graph)]
        for b in blocks:
            arts = [v for v in b if v in articulation]
            if math.prod(self.c.n_options[v] for v in arts) > MAX_INTERFACE:
                return None
        return blocks, articulation

    def _block_dp(self, variables, factors, blocks, articulation):
        c = self.c
        var_blocks: dict[int, list[int]] = {}
        for bi, b in enumerate(blocks):
            for v in b:
                var_blocks.setdefault(v, []).append(bi)
        block_factors: list[list[Factor]] = [[] for _ in blocks]
        art_unary = {v: np.asarray(c.unary[v], dtype=float) for v in articulation}
        for f in factors:
            scope = f.scope
            if len(scope) == 1 and scope[0] in articulation:
                v = scope[0]
                art_unary[v] = art_unary[v] + [c.factor_cost(f, {v: o}) for o in range(c.n_options[v])]
                continue
            candidates = set(var_blocks[scope[0]])
            for v in scope[1:]:
                candidates &= set(var_blocks[v])
            block_factors[min(candidates)].append(f)

        # Root the block-cut tree at block 0.
        parent_of_block: dict[int, int | None] = {0: None}
        children_of_art: dict[int, list[int]] = {}
        order: list[int] = []
        stack = [0]
        while stack:
            bi = stack.pop()
            order.append(bi)
            for v in blocks[bi]:
                if v in articulation and v != parent_of_block[bi]:
                    kids = [b for b in var_blocks[v] if b != bi]
                    children_of_art[v] = kids
                    for k in kids:
                        parent_of_block[k] = v
                        stack.append(k)

        tables: dict[int, _Table] = {}
        arts_of: dict[int, list[int]] = {}
        for bi in order:
            arts = [v for v in blocks[bi] if v in articulation]
            internal = [v for v in blocks[bi] if v not in articulation]
            arts_of[bi] = arts
            tables[bi] = self._tabulate(internal, arts, block_factors[bi])
            self.stats.blocks += 1

        # Bottom-up: art subtree values S (and bounds), block values V per parent option.
        s_val: dict[int, np.ndarray] = {}
        s_lb: dict[int, np.ndarray] = {}
        v_val: dict[int, np.ndarray] = {}
        v_lb: dict[int, np.ndarray] = {}
        best_index: dict[int, np.ndarray] = {}
        for bi in reversed(order):
            arts = arts_of[bi]
            total = tables[bi].value.copy()
            total_lb = tables[bi].bound.copy()
            parent = parent_of_block[bi]
            for axis, v in enumerate(arts):
                if v == parent:
                    continue
                shape = [1] * len(arts)
                shape[axis] = -1
                total = total + s_val[v].reshape(shape)
                total_lb = total_lb + s_lb[v].reshape(shape)
            if parent is None:
                best_index[bi] = np.unravel_index(int(np.argmin(total)), total.shape)
                root_lb = float(total_lb.min())
                continue
            axis = arts.index(parent)
            if axis:
                total, total_lb = np.moveaxis(total, axis, 0), np.moveaxis(total_lb, axis, 0)
            moved = total.reshape(total.shape[0], -1)
            moved_lb = total_lb.reshape(total.shape[0], -1)
            v_val[bi] = moved.min(axis=1)
            v_lb[bi] = moved_lb.min(axis=1)
            best_index[bi] = moved.argmin(axis=1)
            if all(b in v_val for b in children_of_art[parent]):
                s_val[parent] = art_unary[parent] + sum(v_val[b] for b in children_of_art[parent])
                s_lb[parent] = art_unary[parent] + sum(v_lb[b] for b in children_of_art[parent])

        # Top-down reconstruction.
        chosen: dict[int, int] = {}
        for bi in order:
            arts = arts_of[bi]
            shape = tuple(c.n_options[v] for v in arts)
            parent = parent_of_block[bi]
            if parent is None:
                index = tuple(int(i) for i in best_index[bi])
            else:
                axis = arts.index(parent)
                others = shape[:axis] + shape[axis + 1 :]
                rest = np.unravel_index(int(best_index[bi][chosen[parent]]), others) if others else ()
                index = tuple(int(i) for i in rest[:axis]) + (chosen[parent],) + tuple(int(i) for i in rest[axis:])
            for v, o in zip(arts, index):
                chosen.setdefault(v, o)
            flat = int(np.ravel_multi_index(index, shape)) if shape else 0
            internal = [v for v in blocks[bi] if v not in articulation]
            for v, o in zip(internal, tables[bi].internal[flat]):
                chosen[v] = o
        return [chosen[v] for v in variables], root_lb

    def _tabulate(
        self, internal: list[int], arts: list[int], factors: list[Factor], key: tuple | None = None
    ) -> _Table:
        """Cost of the block for every assignment of its articulation variables (`key`: its signature, if known)."""
        key = key or self._signature(internal, arts, factors)
        hit = self.memo.get(key)
        if hit is not None:
            self.stats.memo_hits += 1
            return hit
        shape = tuple(self.c.n_options[v] for v in arts)
        value = np.empty(shape, dtype=float)
        bound = np.empty(shape, dtype=float)
        chosen: list[list[int]] = []
        for index in itertools.product(*(range(n) for n in shape)):
            sub = restrict(self.c, internal, factors, dict(zip(arts, index)))
            result = self.solve_piece(sub)
            self._record(result)
            value[index] = result.value
            bound[index] = result.bound
            chosen.append(result.options)
        table = _Table(value, bound, chosen)
        # An answer found under a time-out may not be optimal: only proven tables outlive this solve.
        if self.use_memo and (self.memo is not _shared_memo.get() or np.allclose(value, bound)):
            self.memo[key] = table
        return table

    def _signature(self, internal: list[int], arts: list[int], factors: list[Factor]) -> tuple:
        c = self.c
        position = {v: i for i, v in enumerate(arts + internal)}
        var_part = tuple(c.n_options[v] for v in arts) + tuple(c.unary[v] for v in internal)
        encoded = []
        for f in factors:
            encoded.append(
                (
                    position[f.src_var] if f.src_var >= 0 else -1,
                    f.src_labels,
                    tuple(position[v] for v in f.cons_vars),
                    tuple(tuple(tuple(sorted(r)) for r in reqs) for reqs in f.cons_reqs),
                    tuple(sorted(f.const_req)),
                    c.price_key[f.value],
                )
            )
        encoded.sort()
        return (len(arts), var_part, tuple(encoded))
