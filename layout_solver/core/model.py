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

from dataclasses import dataclass, field

from layout_solver.core.evaluate import TransitionPricer
from layout_solver.core.problem import InfeasibleError, Problem


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
    cost_table: dict[tuple[int, int, int], float] = field(default_factory=dict)
    _pricer: TransitionPricer | None = None

    @property
    def n_vars(self) -> int:
        """The number of variables."""
        return len(self.n_options)

    def cost(self, value: int, src: int, dst: int) -> float:
        """The price of moving `value` from label id `src` to `dst` (memoised)."""
        key = (value, src, dst)
        c = self.cost_table.get(key)
        if c is None:
            c = self._pricer(self.problem.values[value].id, self.labels[src], self.labels[dst])
            self.cost_table[key] = c
        return c

    def factor_cost(self, f: Factor, opt) -> float:
        """The cost of factor `f` under the option assignment `opt`."""
        return factor_cost(f, opt, self.cost)


def compile_problem(problem: Problem) -> CompiledProblem:
    """Compile a validated Problem into variables and factors; raises InfeasibleError (naming the op and values)
    when no mode of an op can produce its results in their allowed labels."""
    label_ids: dict[str, int] = {}

    def lid(label: str) -> int:
        return label_ids.setdefault(label, len(label_ids))

    values = problem.values
    value_index = {v.id: i for i, v in enumerate(values)}
    domains = [frozenset(lid(label) for label in v.domain) for v in values]
    home = [frozenset([lid(v.fixed)]) if v.fixed is not None else domains[i] for i, v in enumerate(values)]

    producer: dict[int, tuple[int, int]] = {}  # value -> (op, result slot)
    for oi, op in enumerate(problem.ops):
        for r, vid in enumerate(op.results):
            producer[value_index[vid]] = (oi, r)

    n_options: list[int] = []
    var_op: list[int] = []
    var_value: list[int] = []
    var_choices: list[tuple[int, ...]] = []
    unary: list[tuple[float, ...]] = []
    offset = 0.0
    op_var: dict[int, int] = {}
    op_fixed_mode: dict[int, int] = {}
    legal_modes: list[list[int]] = []

    # Label ids of every mode's operand and result slots, computed once; ops
    # repeat the same few label patterns, so intern them.
    interned: dict[tuple[str, ...], tuple[int, ...]] = {}

    def ids(labels: list[str]) -> tuple[int, ...]:
        key = tuple(labels)
        got = interned.get(key)
        if got is None:
            got = interned[key] = tuple(lid(x) for x in key)
        return got

    mode_operands = [[ids(m.operands) for m in op.modes] for op in problem.ops]
    mode_results = [[ids(m.results) for m in op.modes] for op in problem.ops]
    single = {}  # label id -> frozenset({label id})

    for oi, op in enumerate(problem.ops):
        result_idx = [value_index[v] for v in op.results]
        legal = [
            mi for mi, res in enumerate(mode_results[oi]) if all(label in home[v] for v, label in zip(result_idx, res))
        ]
        if not legal:
            _raise_infeasible(problem, oi, result_idx)
        legal_modes.append(legal)
        if len(legal) == 1:
            op_fixed_mode[oi] = legal[0]
            offset += op.modes[legal[0]].cost
        else:
            op_var[oi] = len(n_options)
            n_options.append(len(legal))
            var_op.append(oi)
            var_value.append(-1)
            var_choices.append(tuple(legal))
            unary.append(tuple(op.modes[mi].cost for mi in legal))

    value_var: dict[int, int] = {}
    value_fixed_label: dict[int, int] = {}
    for vi, value in enumerate(values):
        if vi in producer:
            continue
        allowed = [lid(label) for label in value.domain if lid(label) in home[vi]]
        if len(allowed) == 1 or (value.kind == "constant" and not problem.price_constants):
            # A free-to-transition constant's own label changes no cost.
            value_fixed_label[vi] = allowed[0]
            continue
        value_var[vi] = len(n_options)
        n_options.append(len(allowed))
        var_op.append(-1)
        var_value.append(vi)
        var_choices.append(tuple(allowed))
        unary.append((0.0,) * len(allowed))

    # Consumers of every value, grouped per op (an op may read a value twice).
    consumers: dict[int, dict[int, list[int]]] = {}
    for oi, op in enumerate(problem.ops):
        for slot, vid in enumerate(op.operands):
            consumers.setdefault(value_index[vid], {}).setdefault(oi, []).append(slot)

    explicit: dict[int, list[tuple[int, int, float]]] = {}
    for t in problem.transition_costs:
        explicit.setdefault(value_index[t.value], []).append((lid(t.src), lid(t.dst), t.cost))
    free_constants = not problem.price_constants
    price_key = [
        ("folded",) if free_constants and v.kind == "constant" else (v.size_bytes, tuple(sorted(explicit.get(i, ()))))
        for i, v in enumerate(values)
    ]

    compiled = CompiledProblem(
        problem=problem,
        labels=list(label_ids),
        n_options=n_options,
        var_op=var_op,
        var_value=var_value,
        var_choices=var_choices,
        unary=unary,
        factors=[],
        offset=0.0,
        price_key=price_key,
        op_fixed_mode=op_fixed_mode,
        value_fixed_label=value_fixed_label,
    )
    compiled._pricer = TransitionPricer(problem)
    skip_constants = not problem.price_constants

    for vi, uses in consumers.items():
        if skip_constants and values[vi].kind == "constant":
            continue
        if vi in producer:
            oi, r = producer[vi]
            if oi in op_var:
                src_var = op_var[oi]
                src_labels = tuple(mode_results[oi][mi][r] for mi in legal_modes[oi])
            else:
                src_var, src_labels = -1, (mode_results[oi][op_fixed_mode[oi]][r],)
        elif vi in value_var:
            src_var, src_labels = value_var[vi], var_choices[value_var[vi]]
        else:
            src_var, src_labels = -1, (value_fixed_label[vi],)
        if src_var >= 0 and len(set(src_labels)) == 1:
            src_var, src_labels = -1, (src_labels[0],)
        const_req: set[int] = set()
        cons_vars: list[int] = []
        cons_reqs: list[tuple[frozenset[int], ...]] = []
        for oi, slots in uses.items():
            if len(slots) == 1:
                slot = slots[0]
                per_mode = [
                    single.get(mode_operands[oi][mi][slot])
                    or single.setdefault(mode_operands[oi][mi][slot], frozenset((mode_operands[oi][mi][slot],)))
                    for mi in legal_modes[oi]
                ]
            else:
                per_mode = [frozenset(mode_operands[oi][mi][s] for s in slots) for mi in legal_modes[oi]]
            if oi in op_var and len(set(per_mode)) > 1:
                common = frozenset.intersection(*per_mode)
                const_req |= common
                cons_vars.append(op_var[oi])
                cons_reqs.append(tuple(p - common for p in per_mode))
            else:
                const_req |= per_mode[0]
        factor = Factor(vi, src_var, src_labels, tuple(cons_vars), tuple(cons_reqs), frozenset(const_req))
        if not factor.scope:
            offset += compiled.factor_cost(factor, ())
            continue
        compiled.factors.append(factor)
    compiled.offset = offset
    return compiled


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
