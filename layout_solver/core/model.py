"""The problem compiled to integers: decision variables, unary costs and factors.

A *variable* is an op with more than one legal mode, or an unproduced value
(graph input, constant) with more than one allowed label. Everything with a
single choice is folded into constants, which is what cuts the graph apart.

A *factor* prices one value's transitions: its scope is the variable that
decides the value's label (if any) and the consumers whose required label
depends on their mode. Its cost is

    sum over labels L required by any consumer, L != own label, of c(value, own, L)

so a transition shared by several consumers is paid once.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field

from layout_solver.core.problem import InfeasibleError, Prices, Problem, same_structure


@dataclass(slots=True)
class Factor:
    """One transition factor: the value's source label (a variable or a constant) and the labels its consumers'
    options require.
    """

    value: int
    src_var: int  # -1: the value's label is the constant src_labels[0]
    src_labels: tuple[int, ...]  # label per option of src_var
    cons_vars: tuple[int, ...]
    cons_reqs: tuple[tuple[frozenset[int], ...], ...]  # per consumer var, per option
    const_req: frozenset[int]

    @property
    def scope(self) -> tuple[int, ...]:
        """The variables this factor depends on (source first)."""
        return ((self.src_var,) if self.src_var >= 0 else ()) + self.cons_vars


def factor_cost(f: Factor, opt, cost) -> float:
    """Cost of factor f when variable i takes option opt[i]; `cost(value, src, dst)` prices one transition."""
    src = f.src_labels[opt[f.src_var]] if f.src_var >= 0 else f.src_labels[0]
    req = set(f.const_req)
    for var, reqs in zip(f.cons_vars, f.cons_reqs):
        req |= reqs[opt[var]]
    req.discard(src)
    return sum(cost(f.value, src, dst) for dst in req)


@dataclass
class CompiledProblem:
    """A Problem as integer variables (one per op with a choice, one per free value), unary costs and transition
    factors; what every solver works on.
    """

    problem: Problem
    labels: list[str]
    n_options: list[int]  # per variable
    var_op: list[int]  # op index, or -1 for a value variable
    var_value: list[int]  # value index, or -1 for an op variable
    var_choices: list[tuple[int, ...]]  # mode indices (op var) or label ids (value var)
    unary: list[tuple[float, ...]]  # per variable, per option
    factors: list[Factor]
    offset: float  # cost fixed by single-choice ops and fully constant factors
    # Per value: a key that determines c(value, a, b) for every label pair, so
    # signatures compare prices without enumerating them.
    price_key: list[tuple]
    op_fixed_mode: dict[int, int]  # op index -> its only legal mode
    value_fixed_label: dict[int, int]  # unproduced value index -> its only label
    # The problem's transition prices by label ids, as `TransitionPricer` reads them: per value, its listed
    # (src, dst) prices, and the price of a pair it does not list (0 for a constant whose moves are free).
    listed_prices: dict[int, dict[tuple[int, int], float]] = field(default_factory=dict)
    unlisted_price: list[float] = field(default_factory=list)
    # Factors no variable decides (their cost is in `offset`), in the order they were added: pricing the same
    # structure again re-adds them in that order, so the offset is the same float a fresh compile gives.
    constant_factors: list[Factor] = field(default_factory=list)

    @property
    def n_vars(self) -> int:
        """The number of variables."""
        return len(self.n_options)

    def cost(self, value: int, src: int, dst: int) -> float:
        """The price of moving `value` from label id `src` to `dst`: what `TransitionPricer` says, read by label ids
        (the solvers price thousands of pairs per problem; going through the labels' strings cost ~5% of a solve)."""
        if src == dst:
            return 0.0
        listed = self.listed_prices.get(value)
        if listed is not None:
            price = listed.get((src, dst))
            if price is not None:
                return price
        return self.unlisted_price[value]

    def factor_cost(self, f: Factor, opt) -> float:
        """The cost of factor `f` under the option assignment `opt`."""
        return factor_cost(f, opt, self.cost)

    def prices_of(self, value: int) -> tuple:
        """A key that determines `cost(value, src, dst)` for every pair, in any problem: its listed prices (with its
        size) and the price of a pair it does not list."""
        return self.price_key[value], self.unlisted_price[value]


def compile_problem(problem: Problem, prices: Prices | None = None) -> CompiledProblem:
    """Compile a validated Problem into variables and factors; raises InfeasibleError (naming the op and values)
    when no mode of an op can produce its results in their allowed labels. Three phases: the ops' variables (their
    legal modes), the free values' variables (their labels), then one factor per value read. `prices` (checked for
    `problem`: `Problem.checked_prices`): compiled at those prices instead of its own.

    Inside `compiles_reused()`, a problem that differs from the last one compiled there only in its prices
    (`same_structure`: one graph priced under several profiles, or their weighted sum, solved one after another)
    keeps that one's variables and factors and is only priced again (`_priced_again`): the same CompiledProblem a
    fresh compile gives, in about half the time.
    """
    if prices is not None:
        problem.check_priced_by(prices)
    scope = _reuse_scope.get()
    last = scope.last if scope is not None else None
    if last is not None and same_structure(last.problem, problem):
        compiled = _priced_again(last, problem, prices)
    else:
        draft = _Draft(problem, prices)
        draft.add_op_variables()
        draft.add_value_variables()
        compiled = draft.compiled_with_factors()
    if scope is not None:
        scope.last = compiled
    return compiled


def kept(kind: str) -> dict | None:
    """The innermost `compiles_reused()` block's store of `kind` (a dict the caller keys by what determines its
    entries), or None outside one."""
    scope = _reuse_scope.get()
    return None if scope is None else scope.kept[kind]


def kept_or_made(kind: str, key: Callable[[], Hashable], make: Callable[[], object]):
    """`make()`, kept in the `compiles_reused()` block's store of `kind` under `key()` (built only inside one) and
    taken from it when there; outside a block, made afresh."""
    store = kept(kind)
    if store is None:
        return make()
    k = key()
    found = store.get(k, _MISSING)
    if found is _MISSING:
        found = store[k] = make()
    return found


_MISSING = object()


@dataclass
class _ReuseScope:
    """What the solves inside one `compiles_reused()` block share: the last compiled problem, and what the solvers
    work out from a piece's structure or a factor's prices alone (`kept`)."""

    last: CompiledProblem | None = None
    kept: dict[str, dict] = field(default_factory=lambda: defaultdict(dict))


# The innermost `compiles_reused()` block's scope, or None outside one.
_reuse_scope: contextvars.ContextVar[_ReuseScope | None] = contextvars.ContextVar("compiles_reused", default=None)


@contextlib.contextmanager
def compiles_reused() -> Iterator[None]:
    """A block whose solves may reuse the last compile of the same structure (`compile_problem`), and whatever a
    solver keeps in it by a key that determines it (`kept`: elimination orders and components by the factors'
    scopes, factor tables by their prices). Scoped, so that nothing outlives the block: a caller solving one graph
    under several prices (the Vulkan stage's profiles) opens it around those solves; another thread or context
    compiles afresh."""
    token = _reuse_scope.set(_ReuseScope())
    try:
        yield
    finally:
        _reuse_scope.reset(token)


def _transition_prices(
    problem: Problem, label_ids: dict[str, int], value_index: dict[str, int], prices: Prices | None = None
):
    """The problem's transition prices (or `prices`'s) by label ids, per value: a key that determines them
    (`CompiledProblem.price_key`), its listed (src, dst) prices (`listed_prices`) and the price of a pair it does not
    list (`unlisted_price`)."""
    values = problem.values
    explicit: dict[int, list[tuple[int, int, float]]] = {}
    listed_pairs = (
        (((t.value, t.src, t.dst), t.cost) for t in problem.transition_costs)
        if prices is None
        else prices.transition_costs.items()
    )
    for (value, src, dst), cost in listed_pairs:
        explicit.setdefault(value_index[value], []).append((label_ids[src], label_ids[dst], cost))
    per_byte = problem.default_cost_per_byte if prices is None else prices.default_cost_per_byte
    free_constants = not problem.price_constants
    free = [free_constants and v.kind == "constant" for v in values]
    price_key = [
        ("folded",) if free[i] else (v.size_bytes, tuple(sorted(explicit.get(i, ())))) for i, v in enumerate(values)
    ]
    # the last listing of a pair wins, as in `Problem.transition_table`
    listed = {vi: {(s, d): c for s, d, c in pairs} for vi, pairs in explicit.items() if not free[vi]}
    unlisted = [0.0 if free[i] else v.size_bytes * per_byte for i, v in enumerate(values)]
    return price_key, listed, unlisted


def _priced_again(like: CompiledProblem, problem: Problem, prices: Prices | None = None) -> CompiledProblem:
    """`problem` compiled, given `like`, the compiled form of a problem of the same structure (`same_structure`):
    its variables, choices and factors, with `problem`'s unary costs, transition prices and offset (or `prices`'s),
    each summed in the order a fresh compile sums it."""
    label_ids = {label: i for i, label in enumerate(like.labels)}
    value_index = {v.id: i for i, v in enumerate(problem.values)}
    price_key, listed, unlisted = _transition_prices(problem, label_ids, value_index, prices)
    mode_costs = _mode_costs(problem, prices)
    unary = [
        tuple(mode_costs[oi][mi] for mi in choices) if oi >= 0 else costs
        for oi, choices, costs in zip(like.var_op, like.var_choices, like.unary)
    ]
    offset = 0.0
    for oi, mi in like.op_fixed_mode.items():  # in op order, as `add_op_variables` added them
        offset += mode_costs[oi][mi]
    compiled = dataclasses.replace(
        like,
        problem=problem,
        unary=unary,
        price_key=price_key,
        listed_prices=listed,
        unlisted_price=unlisted,
        offset=0.0,
    )
    for factor in like.constant_factors:
        offset += compiled.factor_cost(factor, ())
    compiled.offset = offset
    return compiled


def _mode_costs(problem: Problem, prices: Prices | None) -> list[list[float]]:
    """Op i's mode j's cost at [i][j]: `prices`'s, or the problem's own."""
    return [[m.cost for m in op.modes] for op in problem.ops] if prices is None else prices.mode_costs


class _Draft:
    """compile_problem's working state: label ids (interned), the variables so far and how each op and value
    maps onto them."""

    def __init__(self, problem: Problem, prices: Prices | None = None):
        self.problem = problem
        self.prices = prices  # read instead of the problem's own, if given
        self.mode_costs = _mode_costs(problem, prices)
        self.label_ids: dict[str, int] = {}
        self.interned: dict[tuple[str, ...], tuple[int, ...]] = {}
        values = problem.values
        self.value_index = {v.id: i for i, v in enumerate(values)}
        domains = [frozenset(self.lid(label) for label in v.domain) for v in values]
        self.home = [
            frozenset([self.lid(v.fixed)]) if v.fixed is not None else domains[i] for i, v in enumerate(values)
        ]
        self.producer: dict[int, tuple[int, int]] = {}  # value -> (op, result slot)
        for oi, op in enumerate(problem.ops):
            for r, vid in enumerate(op.results):
                self.producer[self.value_index[vid]] = (oi, r)
        self.n_options: list[int] = []
        self.var_op: list[int] = []
        self.var_value: list[int] = []
        self.var_choices: list[tuple[int, ...]] = []
        self.unary: list[tuple[float, ...]] = []
        self.offset = 0.0
        self.op_var: dict[int, int] = {}
        self.op_fixed_mode: dict[int, int] = {}
        self.legal_modes: list[list[int]] = []
        self.value_var: dict[int, int] = {}
        self.value_fixed_label: dict[int, int] = {}
        # Label ids of every mode's operand and result slots, computed once; ops repeat the same few label
        # patterns, so they are interned.
        self.mode_operands = [[self.ids(m.operands) for m in op.modes] for op in problem.ops]
        self.mode_results = [[self.ids(m.results) for m in op.modes] for op in problem.ops]

    def lid(self, label: str) -> int:
        """The id of `label` (a new one the first time it is seen)."""
        return self.label_ids.setdefault(label, len(self.label_ids))

    def ids(self, labels: list[str]) -> tuple[int, ...]:
        """The ids of `labels`, interned."""
        key = tuple(labels)
        got = self.interned.get(key)
        if got is None:
            got = self.interned[key] = tuple(self.lid(x) for x in key)
        return got

    def _add_variable(self, op: int, value: int, choices: tuple[int, ...], costs: tuple[float, ...]) -> int:
        self.n_options.append(len(choices))
        self.var_op.append(op)
        self.var_value.append(value)
        self.var_choices.append(choices)
        self.unary.append(costs)
        return len(self.n_options) - 1

    def add_op_variables(self) -> None:
        """An op with one legal mode (its results within their domains) is fixed, its cost an offset; one with
        several is a variable over them."""
        problem, home = self.problem, self.home
        for oi, op in enumerate(problem.ops):
            result_idx = [self.value_index[v] for v in op.results]
            legal = [
                mi
                for mi, res in enumerate(self.mode_results[oi])
                if all(label in home[v] for v, label in zip(result_idx, res))
            ]
            if not legal:
                _raise_infeasible(problem, oi, result_idx)
            self.legal_modes.append(legal)
            if len(legal) == 1:
                self.op_fixed_mode[oi] = legal[0]
                self.offset += self.mode_costs[oi][legal[0]]
            else:
                costs = self.mode_costs[oi]
                self.op_var[oi] = self._add_variable(oi, -1, tuple(legal), tuple(costs[mi] for mi in legal))

    def add_value_variables(self) -> None:
        """A value no op produces (an input, a constant) is a variable over its allowed labels, or fixed where it
        has one (or is a constant whose transitions are free: its own label changes no cost)."""
        for vi, value in enumerate(self.problem.values):
            if vi in self.producer:
                continue
            allowed = [self.lid(label) for label in value.domain if self.lid(label) in self.home[vi]]
            if len(allowed) == 1 or (value.kind == "constant" and not self.problem.price_constants):
                self.value_fixed_label[vi] = allowed[0]
                continue
            self.value_var[vi] = self._add_variable(-1, vi, tuple(allowed), (0.0,) * len(allowed))

    def compiled_with_factors(self) -> CompiledProblem:
        """The CompiledProblem: per value read, one factor over the variable that decides its label and those of
        the ops that read it (a factor with no variable left is a constant, added to the offset)."""
        problem, values = self.problem, self.problem.values
        # Consumers of every value, grouped per op (an op may read a value twice).
        consumers: dict[int, dict[int, list[int]]] = {}
        for oi, op in enumerate(problem.ops):
            for slot, vid in enumerate(op.operands):
                consumers.setdefault(self.value_index[vid], {}).setdefault(oi, []).append(slot)
        price_key, listed, unlisted = _transition_prices(problem, self.label_ids, self.value_index, self.prices)
        compiled = CompiledProblem(
            problem=problem,
            labels=list(self.label_ids),
            n_options=self.n_options,
            var_op=self.var_op,
            var_value=self.var_value,
            var_choices=self.var_choices,
            unary=self.unary,
            factors=[],
            offset=0.0,
            price_key=price_key,
            op_fixed_mode=self.op_fixed_mode,
            value_fixed_label=self.value_fixed_label,
            listed_prices=listed,
            unlisted_price=unlisted,
        )
        offset = self.offset
        for vi, uses in consumers.items():
            if not problem.price_constants and values[vi].kind == "constant":
                continue
            factor = self._factor(vi, uses)
            if not factor.scope:
                offset += compiled.factor_cost(factor, ())
                compiled.constant_factors.append(factor)
                continue
            compiled.factors.append(factor)
        compiled.offset = offset
        return compiled

    def _factor(self, vi: int, uses: dict[int, list[int]]) -> Factor:
        """Value `vi`'s factor: where its label comes from (its producer's variable, its own, or a fixed label)
        and what each reader needs it in, per mode (a need every mode shares is a constant requirement)."""
        mode_operands, legal_modes, op_var = self.mode_operands, self.legal_modes, self.op_var
        if vi in self.producer:
            oi, r = self.producer[vi]
            if oi in op_var:
                src_var = op_var[oi]
                src_labels = tuple(self.mode_results[oi][mi][r] for mi in legal_modes[oi])
            else:
                src_var, src_labels = -1, (self.mode_results[oi][self.op_fixed_mode[oi]][r],)
        elif vi in self.value_var:
            src_var, src_labels = self.value_var[vi], self.var_choices[self.value_var[vi]]
        else:
            src_var, src_labels = -1, (self.value_fixed_label[vi],)
        if src_var >= 0 and len(set(src_labels)) == 1:
            src_var, src_labels = -1, (src_labels[0],)
        const_req: set[int] = set()
        cons_vars: list[int] = []
        cons_reqs: list[tuple[frozenset[int], ...]] = []
        for oi, slots in uses.items():
            if len(slots) == 1:
                per_mode = [_single(mode_operands[oi][mi][slots[0]]) for mi in legal_modes[oi]]
            else:
                per_mode = [frozenset(mode_operands[oi][mi][s] for s in slots) for mi in legal_modes[oi]]
            if oi in op_var and len(set(per_mode)) > 1:
                common = frozenset.intersection(*per_mode)
                const_req |= common
                cons_vars.append(op_var[oi])
                cons_reqs.append(tuple(p - common for p in per_mode))
            else:
                const_req |= per_mode[0]
        return Factor(vi, src_var, src_labels, tuple(cons_vars), tuple(cons_reqs), frozenset(const_req))


@functools.cache
def _single(label: int) -> frozenset[int]:
    """{label}, one object per label id (factors compare and hash these sets many times)."""
    return frozenset((label,))


def _raise_infeasible(problem: Problem, oi: int, result_idx: list[int]) -> None:
    op = problem.ops[oi]
    conflicting = []
    for r, vi in enumerate(result_idx):
        value = problem.values[vi]
        offered = sorted({m.results[r] for m in op.modes})
        allowed = [value.fixed] if value.fixed is not None else value.domain
        if not set(offered) & set(allowed):
            conflicting.append(f"value {value.id!r} must be {allowed} but op {op.id!r} can only produce {offered}")
    if not conflicting:
        conflicting.append(
            f"op {op.id!r}: no single mode produces all of {[problem.values[v].id for v in result_idx]} "
            "in their allowed labels"
        )
    raise InfeasibleError(
        "infeasible: " + "; ".join(conflicting),
        ops=[op.id],
        values=[problem.values[v].id for v in result_idx],
    )
