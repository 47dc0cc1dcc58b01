"""Exact cost of a full assignment, straight from the problem's semantics.

This is the reference the solvers are checked against: it knows nothing of
components, min-cut or CP-SAT, only of values, modes and shared transitions.
"""

from __future__ import annotations

from dataclasses import dataclass

from layout_solver.core.problem import Prices, Problem, ProblemError, Transition


@dataclass(frozen=True)
class TransitionPricer:
    """Cost of moving one value from one label to another; `values`, if given, the only values it is asked about
    (it reads only their listed prices: an assignment moves a few of a problem's values, whose listed pairs can
    number thousands); `prices` (checked for the problem), read instead of the problem's own."""

    problem: Problem
    values: frozenset[str] | None = None
    prices: Prices | None = None

    def __post_init__(self) -> None:
        if self.prices is not None:
            self.problem.check_priced_by(self.prices)
            listed = self.prices.transition_costs
            table = listed if self.values is None else {k: c for k, c in listed.items() if k[0] in self.values}
            per_byte = self.prices.default_cost_per_byte
        elif self.values is None:
            table, per_byte = self.problem.transition_table(), self.problem.default_cost_per_byte
        else:  # the last listing of a pair wins, as in `transition_table`
            table = {(t.value, t.src, t.dst): t.cost for t in self.problem.transition_costs if t.value in self.values}
            per_byte = self.problem.default_cost_per_byte
        object.__setattr__(self, "_table", table)
        object.__setattr__(self, "_per_byte", per_byte)
        object.__setattr__(self, "_values", {v.id: v for v in self.problem.values})

    def __call__(self, value_id: str, src: str, dst: str) -> float:
        if src == dst:
            return 0.0
        if self.values is not None and value_id not in self.values:
            raise KeyError(f"value {value_id!r}: not among the values this pricer was made for")
        value = self._values[value_id]
        if value.kind == "constant" and not self.problem.price_constants:
            return 0.0
        explicit = self._table.get((value_id, src, dst))
        if explicit is not None:
            return explicit
        return value.size_bytes * self._per_byte


@dataclass
class Evaluation:
    """The price of one assignment: objective, every value's label, the transitions, and the ops' own mode cost."""

    objective: float
    labels: dict[str, str]
    transitions: list[Transition]
    mode_cost: float


def evaluate(
    problem: Problem, modes: dict[str, str], free_labels: dict[str, str], prices: Prices | None = None
) -> Evaluation:
    """Cost of choosing ``modes`` (op id -> mode name) and labels for unproduced values; at `prices` (checked for
    `problem`: `Problem.checked_prices`) instead of the problem's own, if given.

    Raises ProblemError if the choice breaks a hard constraint (a result label
    outside its value's domain or against its fixed label).
    """
    labels: dict[str, str] = {}
    mode_cost = 0.0
    chosen = {}
    mode_costs = None if prices is None else prices.mode_costs
    for oi, op in enumerate(problem.ops):
        by_name = {m.name: mi for mi, m in enumerate(op.modes)}
        if modes.get(op.id) not in by_name:
            raise ProblemError(f"op {op.id!r} has no chosen mode (got {modes.get(op.id)!r})", ops=[op.id])
        mi = by_name[modes[op.id]]
        mode = chosen[op.id] = op.modes[mi]
        mode_cost += mode.cost if mode_costs is None else mode_costs[oi][mi]
        for vid, label in zip(op.results, mode.results):
            labels[vid] = label
    for value in problem.values:
        if value.id not in labels:
            labels[value.id] = free_labels.get(value.id, value.fixed or value.domain[0])
        label = labels[value.id]
        if label not in value.domain or (value.fixed is not None and label != value.fixed):
            raise ProblemError(
                f"value {value.id!r} would be stored as {label!r}; allowed: "
                f"{[value.fixed] if value.fixed else value.domain}",
                values=[value.id],
            )
    # (value, target label) -> consumers sharing that one transition (dict as ordered set)
    needed: dict[tuple[str, str], dict[str, None]] = {}
    for op in problem.ops:
        for vid, want in zip(op.operands, chosen[op.id].operands):
            if want != labels[vid]:
                needed.setdefault((vid, want), {})[op.id] = None
    pricer = TransitionPricer(problem, frozenset(vid for vid, _ in needed), prices)
    # Built from validated parts, so skip re-validation (large graphs have many).
    transitions = [
        Transition.model_construct(
            value=vid, src=labels[vid], dst=dst, consumers=list(consumers), cost=pricer(vid, labels[vid], dst)
        )
        for (vid, dst), consumers in needed.items()
    ]
    objective = mode_cost + sum(t.cost for t in transitions)
    return Evaluation(objective=objective, labels=labels, transitions=transitions, mode_cost=mode_cost)
