"""The layout-assignment problem and its solution, as validated, serializable data.

Semantics (the solvers and the brute-force tests share exactly this reading):

* Every value is stored in one *label* (a dim order, a Vulkan representation)
  from its ``domain``. A value produced by an op takes the result label of the
  op's chosen mode; a value nobody produces (graph input, constant) picks its
  label freely from the domain, or is pinned by ``fixed``.
* Every op picks one of its ``modes``. A mode fixes the label of every operand
  slot and every result. The mode's ``cost`` is paid.
* An op that needs an operand in a label other than the value's own label
  reads a transitioned copy. One transition is paid per (value, target label),
  however many consumers share it. Transitions of constants are folded at
  compile time (free) unless ``price_constants`` is set.
* Labels a mode names must lie in the domains of the values it touches: the
  domain is every layout the tensor may exist in, including transitioned
  copies. ``fixed`` restricts only the value's own (home) label.

An output contract ("this graph output must be NCHW") is an op that consumes
the value with a single mode, so the solver prices the transition it forces.
"""

from __future__ import annotations

import graphlib
import hashlib
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

SCHEMA_VERSION = 1
# Costs above this are not device costs but mistakes (and would swamp float sums with rounding).
MAX_COST = 1e15

ValueKind = Literal["activation", "constant", "input", "output"]


class ProblemError(ValueError):
    """A problem that cannot be solved as given; names the values and ops at fault."""

    def __init__(self, message: str, *, values: list[str] | None = None, ops: list[str] | None = None):
        self.values = list(values or [])
        self.ops = list(ops or [])
        super().__init__(message)


class InfeasibleError(ProblemError):
    """No assignment satisfies the hard constraints."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class Value(_Strict):
    """A tensor: its shape, dtype, size, kind (activation, input, constant) and the labels (layouts) it may take;
    `fixed` pins one.
    """

    id: str
    shape: list[int] = Field(default_factory=list)
    dtype: str = "float32"
    size_bytes: int = Field(0, ge=0, le=2**53)
    kind: ValueKind = "activation"
    domain: list[str] = Field(min_length=1)
    fixed: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Value:
        if len(set(self.domain)) != len(self.domain):
            raise ValueError(f"value {self.id!r}: domain has repeated labels {self.domain}")
        if self.fixed is not None and self.fixed not in self.domain:
            raise ValueError(f"value {self.id!r}: fixed label {self.fixed!r} is not in its domain {self.domain}")
        if any(d < 0 for d in self.shape):
            raise ValueError(
                f"value {self.id!r}: negative dimension in shape {self.shape} (dynamic shapes are not supported)"
            )
        return self


class Mode(_Strict):
    """One way an op can run: the label it reads each operand in, the label of each result, and its own cost."""

    name: str
    operands: list[str]
    results: list[str]
    cost: float = Field(0.0, ge=0, le=MAX_COST, allow_inf_nan=False)


class Op(_Strict):
    """An operation: its operands and results (value ids) and the modes it can run in (at least one)."""

    id: str
    target: str = ""
    graph: str = "main"
    operands: list[str]
    results: list[str]
    modes: list[Mode] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> Op:
        for mode in self.modes:
            if len(mode.operands) != len(self.operands) or len(mode.results) != len(self.results):
                raise ValueError(
                    f"op {self.id!r}: mode {mode.name!r} labels {len(mode.operands)} operands and "
                    f"{len(mode.results)} results, the op has {len(self.operands)} and {len(self.results)}"
                )
        names = [m.name for m in self.modes]
        if len(set(names)) != len(names):
            raise ValueError(f"op {self.id!r}: repeated mode names {names}")
        return self


class TransitionCost(_Strict):
    """The price of turning `value` from label `src` into `dst` (overrides default_cost_per_byte)."""

    value: str
    src: str
    dst: str
    cost: float = Field(ge=0, le=MAX_COST, allow_inf_nan=False)


class Problem(_Strict):
    """One layout-assignment problem; several graphs (methods) may share values."""

    schema_version: Literal[1] = SCHEMA_VERSION
    name: str = "problem"
    values: list[Value]
    ops: list[Op]
    transition_costs: list[TransitionCost] = Field(default_factory=list)
    # Price of a (value, src, dst) pair not listed above: size_bytes * this.
    default_cost_per_byte: float = Field(1.0, ge=0, le=MAX_COST, allow_inf_nan=False)
    price_constants: bool = False

    @model_validator(mode="after")
    def _check_references(self) -> Problem:
        validate_references(self)
        return self

    def transition_table(self) -> dict[tuple[str, str, str], float]:
        """(value, src, dst) -> explicit transition cost."""
        return {(t.value, t.src, t.dst): t.cost for t in self.transition_costs}

    def with_costs(
        self,
        mode_costs: list[list[float]],
        transition_costs: dict[tuple[str, str, str], float],
        default_cost_per_byte: float | None = None,
        name: str | None = None,
    ) -> Problem:
        """The same problem at other prices: op i's mode j costs `mode_costs[i][j]`, the listed transitions are
        `transition_costs` ((value, src, dst) -> cost). Its structure was validated once and is not validated again
        (that is most of a build's time on a large graph; one graph is priced under several profiles); the prices
        are (`checked_prices`). Raises ProblemError naming the op or value whose price is out of range."""
        return self.priced(self.checked_prices(mode_costs, transition_costs, default_cost_per_byte), name)

    def checked_prices(
        self,
        mode_costs: list[list[float]],
        transition_costs: dict[tuple[str, str, str], float],
        default_cost_per_byte: float | None = None,
        like: Prices | None = None,
    ) -> Prices:
        """Other prices for this problem's structure, checked as validation checks prices: one per mode of every op,
        each finite and within [0, MAX_COST], every transition's value and labels in the problem. `like`: prices
        of this problem checked before; where `transition_costs` lists the same pairs, they are not looked up in
        the domains again (one graph priced under several profiles lists the same pairs under each).

        Raises ProblemError naming the op or value whose price is out of range."""
        if len(mode_costs) != len(self.ops):
            raise ProblemError(f"{len(mode_costs)} ops priced, the problem has {len(self.ops)}")
        for op, costs in zip(self.ops, mode_costs):
            if len(costs) != len(op.modes):
                raise ProblemError(f"op {op.id!r}: {len(costs)} modes priced, it has {len(op.modes)}", ops=[op.id])
            if not all(0.0 <= c <= MAX_COST for c in costs):  # also refuses NaN
                raise ProblemError(f"op {op.id!r}: a mode price outside [0, {MAX_COST:g}]: {costs}", ops=[op.id])
        known = like is not None and like.structure is self and like.transition_costs.keys() == transition_costs.keys()
        domains = None if known else {v.id: v.domain for v in self.values}
        for (value, src, dst), cost in transition_costs.items():
            if not 0.0 <= cost <= MAX_COST or (
                domains is not None and (src not in domains.get(value, ()) or dst not in domains[value])
            ):
                raise ProblemError(f"transition of {value!r} {src} -> {dst} priced {cost}", values=[value])
        default = self.default_cost_per_byte if default_cost_per_byte is None else default_cost_per_byte
        if not 0.0 <= default <= MAX_COST:
            raise ProblemError(f"default_cost_per_byte {default} outside [0, {MAX_COST:g}]")
        return Prices(mode_costs, transition_costs, float(default), self)

    def own_prices(self) -> Prices:
        """This problem's own prices, as `checked_prices` gives other ones."""
        return Prices(
            [[m.cost for m in op.modes] for op in self.ops], self.transition_table(), self.default_cost_per_byte, self
        )

    def priced(self, prices: Prices, name: str | None = None) -> Problem:
        """This problem at `prices` (checked for it: `checked_prices`), as a Problem of its own: the same values
        (copies: a caller may pin one problem's values), ops and modes, at those prices."""
        self.check_priced_by(prices)
        return self.model_copy(
            update={
                "name": self.name if name is None else name,
                "values": [_replaced(v) for v in self.values],
                "ops": [
                    _replaced(op, modes=_repriced_modes(op.modes, c)) for op, c in zip(self.ops, prices.mode_costs)
                ],
                "transition_costs": _transitions(prices.transition_costs),
                "default_cost_per_byte": prices.default_cost_per_byte,
            }
        )

    def check_priced_by(self, prices: Prices) -> None:
        """Raise ProblemError unless `prices` were checked for this problem's structure (`checked_prices`)."""
        if prices.structure is not self and not same_structure(prices.structure, self):
            raise ProblemError(
                f"prices checked for problem {prices.structure.name!r}, whose structure is not {self.name!r}'s"
            )

    def checked_transitions(self, transition_costs: dict[tuple[str, str, str], float]) -> list[TransitionCost]:
        """`transition_costs` ((value, src, dst) -> cost) as this problem's `transition_costs` list, each checked as
        validation checks it (a value of the problem, labels of its domain, a finite price within [0, MAX_COST];
        one price per key, being a dict) and built without pydantic: its one call over plain dicts was 3% of a
        Vulkan pass. Raises ProblemError naming the value whose transition is not."""
        domains = {v.id: v.domain for v in self.values}
        for (value, src, dst), cost in transition_costs.items():
            if src not in domains.get(value, ()) or dst not in domains[value] or not 0.0 <= cost <= MAX_COST:
                raise ProblemError(f"transition of {value!r} {src} -> {dst} priced {cost}", values=[value])
        return _transitions(transition_costs)


@dataclass(frozen=True)
class Prices:
    """A problem's prices apart from its structure (`Problem.checked_prices`, or `own_prices`): op i's mode j costs
    `mode_costs[i][j]`, a (value, src, dst) pair of `transition_costs` its price, any other pair size_bytes *
    `default_cost_per_byte`. `structure` is the problem they were checked for. One graph priced several ways (a
    Vulkan delegate under each device profile, and their weighted sum) is solved and evaluated at each
    (`solve(problem, prices=...)`) without a Problem of its own per pricing: making one was a tenth of a pass."""

    mode_costs: list[list[float]]
    transition_costs: dict[tuple[str, str, str], float]
    default_cost_per_byte: float
    structure: Problem = field(repr=False, compare=False)


def _transitions(transition_costs: dict[tuple[str, str, str], float]) -> list[TransitionCost]:
    """Checked prices ((value, src, dst) -> cost) as TransitionCost objects, built unvalidated (`_unvalidated`
    written out: thousands per problem)."""
    made = []
    for (value, src, dst), cost in transition_costs.items():
        transition = _new(TransitionCost)
        _set(transition, "__dict__", {"value": value, "src": src, "dst": dst, "cost": float(cost)})
        _set(transition, "__pydantic_fields_set__", _EVERY_TRANSITION_FIELD)
        _set(transition, "__pydantic_extra__", None)
        _set(transition, "__pydantic_private__", None)
        made.append(transition)
    return made


def same_structure(a: Problem, b: Problem) -> bool:
    """Whether `a` and `b` differ in nothing but prices: the same values (ids, domains, fixed labels, kinds) and
    ops (ids, operands, results, modes' names and labels), in the same order, and the same reading of constants.
    Sizes and costs may differ. A problem priced again by `with_costs` shares its lists with the original, so
    this is mostly identity checks (0.4 ms on a 168-op delegate with 1,154 modes, against 3.3 ms for building and
    comparing their structures as tuples)."""
    if a is b:
        return True
    if len(a.values) != len(b.values) or len(a.ops) != len(b.ops) or a.price_constants != b.price_constants:
        return False
    for u, v in zip(a.values, b.values):
        if u.id != v.id or u.domain != v.domain or u.fixed != v.fixed or u.kind != v.kind:
            return False
    for p, q in zip(a.ops, b.ops):
        if p.id != q.id or p.operands != q.operands or p.results != q.results or len(p.modes) != len(q.modes):
            return False
        for m, n in zip(p.modes, q.modes):
            if m.name != n.name or m.operands != n.operands or m.results != n.results:
                return False
    return True


def _replaced(model: _Strict, **update):
    """`model.model_copy(update=update)` for this module's models (no extra fields, no private attributes), at a
    third of its cost: a problem priced under several profiles copies every mode of every op (5,000 per copy on a
    MobileViT's delegate, most of what pricing it again took)."""
    return _unvalidated(type(model), {**model.__dict__, **update}, model.__pydantic_fields_set__ | update.keys())


def _unvalidated(cls: type[_Strict], fields: dict, fields_set) -> _Strict:
    """An instance of one of this module's models holding `fields` as they are (already checked), unvalidated."""
    made = _new(cls)
    _set(made, "__dict__", fields)
    _set(made, "__pydantic_fields_set__", set(fields_set))  # a set, as pydantic's own: `model_copy` updates it
    _set(made, "__pydantic_extra__", None)
    _set(made, "__pydantic_private__", None)
    return made


def _repriced_modes(modes: list[Mode], costs) -> list[Mode]:
    """`[_replaced(m, cost=float(c)) for m, c in zip(modes, costs)]`, the one copy `with_costs` makes per mode of every
    op, in a little over half its time (`_unvalidated` written out: this loop runs for every mode)."""
    copies = []
    for mode, cost in zip(modes, costs):
        copied = _new(Mode)
        fields = mode.__dict__.copy()
        fields["cost"] = float(cost)
        _set(copied, "__dict__", fields)
        _set(copied, "__pydantic_fields_set__", mode.__pydantic_fields_set__ | _COST)
        _set(copied, "__pydantic_extra__", None)
        _set(copied, "__pydantic_private__", None)
        copies.append(copied)
    return copies


_new, _set, _COST = object.__new__, object.__setattr__, frozenset({"cost"})
# One fields-set for every transition built unvalidated: it names every field, so nothing pydantic adds to a
# fields-set (an assigned field) changes it, and `model_copy` copies it before updating.
_EVERY_TRANSITION_FIELD = {"value", "src", "dst", "cost"}


def validate_references(problem: Problem) -> None:
    """Cross-object checks: every id known, every label inside the right domain."""
    counts = Counter(v.id for v in problem.values)
    repeated = sorted(k for k, n in counts.items() if n > 1)
    if repeated:
        raise ProblemError(f"values defined more than once: {repeated}", values=repeated)
    op_counts = Counter(o.id for o in problem.ops)
    repeated = sorted(k for k, n in op_counts.items() if n > 1)
    if repeated:
        raise ProblemError(f"ops defined more than once: {repeated}", ops=repeated)
    values = {v.id: v for v in problem.values}
    domains = {v.id: frozenset(v.domain) for v in problem.values}
    producer: dict[str, str] = {}
    for op in problem.ops:
        slots = [*op.operands, *op.results]
        for vid in slots:
            if vid not in values:
                raise ProblemError(f"op {op.id!r} refers to unknown value {vid!r}", ops=[op.id], values=[vid])
        for vid in op.results:
            if vid in producer:
                raise ProblemError(
                    f"value {vid!r} is produced by both {producer[vid]!r} and {op.id!r}",
                    ops=[producer[vid], op.id],
                    values=[vid],
                )
            producer[vid] = op.id
        allowed = [domains[vid] for vid in slots]
        for mode in op.modes:  # every label in its slot's domain, checked in C (most of a Vulkan build's check)
            labels = mode.operands + mode.results
            if all(map(frozenset.__contains__, allowed, labels)):
                continue
            vid, label = next((vid, label) for vid, label, a in zip(slots, labels, allowed) if label not in a)
            raise ProblemError(
                f"op {op.id!r} mode {mode.name!r} wants value {vid!r} in {label!r}, "
                f"outside its domain {values[vid].domain}",
                ops=[op.id],
                values=[vid],
            )
    priced: dict[tuple[str, str, str], float] = {}
    for t in problem.transition_costs:
        key = (t.value, t.src, t.dst)
        if priced.setdefault(key, t.cost) != t.cost:
            raise ProblemError(
                f"transition cost of value {t.value!r} from {t.src!r} to {t.dst!r} is given twice, "
                f"as {priced[key]} and {t.cost}",
                values=[t.value],
            )
        if t.value not in values:
            raise ProblemError(f"transition cost for unknown value {t.value!r}", values=[t.value])
        for label in (t.src, t.dst):
            if label not in values[t.value].domain:
                raise ProblemError(
                    f"transition cost of value {t.value!r} names {label!r}, outside its domain",
                    values=[t.value],
                )
        if not math.isfinite(t.cost):
            raise ProblemError(f"transition cost of value {t.value!r} is not finite", values=[t.value])
    _reject_cycles(problem, producer)


def _reject_cycles(problem: Problem, producer: dict[str, str]) -> None:
    """A value that feeds, through any chain of ops, the op producing it: no order can evaluate it."""
    sorter = graphlib.TopologicalSorter(
        {op.id: [producer[v] for v in op.operands if v in producer] for op in problem.ops}
    )
    try:
        sorter.prepare()
    except graphlib.CycleError as exc:
        cycle = list(reversed(exc.args[1]))  # [a, ..., a] in producer -> consumer order
        raise ProblemError(f"the ops form a cycle: {' -> '.join(cycle)}", ops=cycle[:-1]) from None


class Transition(_Strict):
    """One transition in a solution: the value, its source and target labels, the ops that read the target, and its
    cost.
    """

    value: str
    src: str
    dst: str
    consumers: list[str]
    cost: float


class ComponentStats(_Strict):
    """How the solver split the problem: independent components, blocks, memo hits, and which method solved how many."""

    count: int = 0
    blocks: int = 0
    memo_hits: int = 0
    by_method: dict[str, int] = Field(default_factory=dict)


class Solution(_Strict):
    """A solver's answer: a label per value, a mode per op, the transitions they need, objective, proven bound, gap
    and timings.
    """

    schema_version: int = SCHEMA_VERSION
    problem: str
    status: Literal["optimal", "feasible"]
    labels: dict[str, str]
    modes: dict[str, str]
    transitions: list[Transition]
    objective: float
    bound: float
    gap: float
    timings: dict[str, float]
    components: ComponentStats = Field(default_factory=ComponentStats)
    notes: list[str] = Field(default_factory=list)


def _reject_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise ProblemError(f"duplicate JSON key {key!r} (the last one would silently win)")
        seen[key] = value
    return seen


def _reject_non_finite(token: str) -> float:
    raise ProblemError(f"non-finite number {token} in JSON")


def parse_problem(raw: bytes | str, source: str = "input") -> Problem:
    """A validated Problem from JSON text; every defect is a ProblemError naming `source`.

    The CLI (`source` = the file) and the service (`source` = "request body")
    share this reading, so both give the same messages. Duplicate keys and
    NaN/Infinity literals are rejected rather than silently accepted.

    >>> parse_problem('{"values": [], "ops": []}').name
    'problem'
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw
    except UnicodeDecodeError as exc:
        raise ProblemError(f"{source} is not UTF-8 text (byte {exc.start})") from exc
    try:
        data = json.loads(text, object_pairs_hook=_reject_duplicate_keys, parse_constant=_reject_non_finite)
    except json.JSONDecodeError as exc:
        raise ProblemError(f"{source} is not valid JSON: {exc}") from exc
    except ProblemError as exc:
        raise ProblemError(f"{source} is not a valid problem: {exc}") from exc
    if not isinstance(data, dict):
        raise ProblemError(f"{source} is not a valid problem: expected a JSON object, got {type(data).__name__}")
    try:
        return Problem.model_validate(data)
    except ValidationError as exc:
        lines = []
        for e in exc.errors():
            where, message = _where(data, e["loc"]), e["msg"].removeprefix("Value error, ")
            lines.append(message if where and message.startswith(where.rstrip(": ")) else where + message)
        raise ProblemError(f"{source} is not a valid problem: " + "; ".join(lines)) from exc


_KINDS = {"values": "value", "ops": "op", "modes": "mode", "transition_costs": "transition cost"}


def _where(data: object, loc: tuple) -> str:
    """A pydantic error location in the problem's own words: `op 'conv1' mode 'nhwc' cost: `."""
    parts, node = [], data
    for key in loc:
        if isinstance(key, int) and isinstance(node, list) and 0 <= key < len(node):
            node = node[key]
            label = node.get("id", node.get("name", node.get("value"))) if isinstance(node, dict) else None
            parts[-1] = f"{parts[-1]} {label!r}" if label is not None else f"{parts[-1]} #{key}"
        else:
            parts.append(_KINDS.get(key, str(key)))
            node = node.get(key) if isinstance(node, dict) else None
    return " ".join(parts) + ": " if parts else ""


def problem_digest(problem: Problem) -> str:
    """Content address of a problem: equal for problems that differ only in their name.

    Used as the key of solution caches (the name is written back on a hit).
    """
    canonical = problem.model_dump_json(exclude={"name"})
    return hashlib.sha256(canonical.encode()).hexdigest()
