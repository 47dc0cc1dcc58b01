"""Arm TOSA graph (before InsertConstShapesPass) -> layout problem.

A label is a dim order: the value is stored physically as
`logical.permute(order)`. What each op allows is in `op_rules` (one rule per
op target); what each mode and each transpose costs comes from the lowering's
pricing (`pricing`: Vela for the lowering's own Ethos-U configuration, or a
target-neutral count of moved bytes). This module gathers the candidate
orders, asks every rule for its modes, prices them and the transitions:

* graph inputs and outputs keep the delegate contract (identity);
  parameters, buffers and lifted constants keep their stored order, and
  transposing one is free (folded at compile time);
* every op's modes carry its own price in that mode (pinned ops too, so the
  objective is the delegate's predicted cost, not only the part a layout
  moves); a mode the target cannot run is dropped, an op the pricing cannot
  write is priced 0 and listed in the problem's `unpriced`;
* a transition is a transpose in its cheapest form (with the memory copy Vela
  makes of a reshape in front of it when the value has other readers), plus
  what it costs the two ops it separates when Vela would fuse them.
"""

from __future__ import annotations

import logging
import warnings
from collections import defaultdict
from dataclasses import dataclass, field

import torch

from graph_io.fx import dtype_name, tensor_of
from layout_solver.arm.op_rules import PINNED, Domains, OpRule, Pinned, read_by_windows_only, rule_for, short_target
from layout_solver.arm.orders import compose, inverse, label_order, order_label
from layout_solver.arm.pricing import ArmPricing, MovedBytesPricing
from layout_solver.core.problem import Problem

log = logging.getLogger(__name__)

# Rounds of candidate-order propagation. Each round moves an order one op further along a chain of free
# ops in both directions; domains are capped (op_rules.MAX_DOMAIN), and on every model measured the
# domains stop growing within 3 rounds.
PROPAGATION_ROUNDS = 4


@dataclass
class ArmProblem:
    """A layout problem with the graph nodes behind its values and ops, and the rule each op followed."""

    problem: Problem
    value_node: dict[str, torch.fx.Node]
    op_node: dict[str, torch.fx.Node]
    op_rule: dict[str, OpRule]
    pinned_unknown: list[str]
    unpriced: list[str] = field(default_factory=list)
    # Transitions (value, src, dst) priced as lower bounds so far (see build_problem's lazy_losses), with what
    # pricing them exactly takes: (value node, its only reader, src, dst, the transpose's own cost).
    pending: dict[tuple[str, str, str], tuple] = field(default_factory=dict)
    pricing: ArmPricing | None = None

    def price_exactly(self, keys) -> int:
        """Add to the named pending transitions what they cost the ops around them (the problem is rebuilt);
        returns how many changed."""
        changed = {}
        for key in keys:
            if key in self.pending:
                node, chain, src, dst, cost = self.pending.pop(key)
                changed[key] = round(cost + self.pricing.fusion_loss(node, chain, src, dst), 1)
        if changed:
            data = self.problem.model_dump()
            for entry in data["transition_costs"]:
                key = (entry["value"], entry["src"], entry["dst"])
                entry["cost"] = changed.get(key, entry["cost"])
            self.problem = Problem.model_validate(data)
        return len(changed)


def build_problem(
    graph_module: torch.fx.GraphModule,
    name: str = "tosa",
    constants: set[str] | None = None,
    pinned_kinds: frozenset[str] = frozenset(),
    pricing: ArmPricing | None = None,
    lazy_losses: bool = False,
) -> ArmProblem:
    """The layout problem of an Arm graph. `constants`: placeholder names that are parameters, buffers or
    lifted constants (their transposes are folded at compile time, so free); other placeholders are
    delegate inputs. Ops no rule names are pinned to the identity order with a warning; so, silently, are
    ops whose rule kind is in `pinned_kinds` (to measure what one rule buys, or to rule it out). `pricing`
    defaults to the target-neutral moved bytes. With `lazy_losses`, a transition between two ops Vela would
    fuse is priced without what it costs them (a lower bound) until `ArmProblem.price_exactly` is asked for it."""
    constants = constants or set()
    pricing = pricing or MovedBytesPricing()
    nodes = [
        n for n in graph_module.graph.nodes if n.op in ("placeholder", "call_function") and tensor_of(n) is not None
    ]
    identity = {n: tuple(range(tensor_of(n).dim())) for n in nodes}
    rules = {n: rule_for(n) for n in nodes if n.op == "call_function"}
    rules = {n: PINNED if rule.kind in pinned_kinds else rule for n, rule in rules.items()}
    draft = _Draft(identity, rules, _candidate_orders(nodes, identity, rules), pricing)
    _add_op_modes(draft)
    _add_contracts(draft, graph_module)
    values, value_node, costs, pending = _values_and_transition_prices(draft, nodes, constants, lazy_losses)
    if draft.pinned_unknown:
        warnings.warn(
            "layout-solver: ops the TOSA rules do not know were pinned to the identity order: "
            + ", ".join(draft.pinned_unknown[:10])
            + (" ..." if len(draft.pinned_unknown) > 10 else ""),
            stacklevel=2,
        )
    problem = Problem.model_validate(
        {"name": name, "values": values, "ops": draft.ops, "transition_costs": costs, "default_cost_per_byte": 0.0}
    )
    return ArmProblem(
        problem, value_node, draft.op_node, draft.op_rule, draft.pinned_unknown, pricing.unpriced, pending, pricing
    )


def _candidate_orders(nodes: list, identity: dict, rules: dict) -> Domains:
    """Values' candidate orders: identity, those that make each permute free, spread along chains of free ops."""
    domains = Domains({n: [identity[n]] for n in nodes})
    for n, rule in rules.items():
        rule.seed(n, domains)
    for _ in range(PROPAGATION_ROUNDS):
        changed = False
        for n, rule in rules.items():
            changed |= rule.propagate(n, domains)
        if not changed:
            break
    return domains


@dataclass
class _Draft:
    """What build_problem gathers before it prices the transitions: the ops with their modes, and per value the
    orders its readers want it in."""

    identity: dict
    rules: dict
    domains: Domains
    pricing: ArmPricing
    ops: list[dict] = field(default_factory=list)
    op_node: dict = field(default_factory=dict)
    op_rule: dict = field(default_factory=dict)
    pinned_unknown: list[str] = field(default_factory=list)
    wanted: dict = field(default_factory=lambda: defaultdict(set))  # node -> the orders its readers read it in
    modes_of: dict = field(default_factory=dict)

    def add_contract(self, op_id: str, target: str, reads: list) -> None:
        """An op that reads `reads` in their identity order and writes nothing the problem tracks."""
        self.ops.append(
            {
                "id": op_id,
                "target": target,
                "operands": [o.name for o in reads],
                "results": [],
                "modes": [
                    {"name": "contract", "operands": [order_label(self.identity[o]) for o in reads], "results": []}
                ],
            }
        )
        for o in reads:
            self.wanted[o].add(self.identity[o])


def _add_op_modes(draft: _Draft) -> None:
    """Op modes: each op its rule's modes, priced; an op with no priced mode (or no rule) pinned to the identity
    order."""
    domains, pricing = draft.domains, draft.pricing
    for n, rule in draft.rules.items():
        operands = rule.operands(n)
        modes = rule.modes(n, domains, operands) if all(o in domains for o in operands) else []
        modes = _priced(n, modes, pricing)
        if not modes:
            if not rule.known:
                draft.pinned_unknown.append(f"{n.name} ({short_target(n)})")
            rule = rule if isinstance(rule, Pinned) else PINNED
            # Every tensor it reads, list arguments (cat) included, must be in identity order.
            operands = list(dict.fromkeys(a for a in rule.operands(n) if a in domains))
            modes = _priced(n, rule.pinned_modes(n, operands), pricing, keep_unpriced=True)
        for m in modes:
            for o, lab in zip(operands, m["operands"]):
                draft.wanted[o].add(label_order(lab))
        draft.modes_of[n] = modes
        draft.ops.append(
            {
                "id": n.name,
                "target": short_target(n),
                "operands": [o.name for o in operands],
                "results": [n.name],
                "modes": modes,
            }
        )
        draft.op_node[n.name], draft.op_rule[n.name] = n, rule


def _add_contracts(draft: _Draft, graph_module: torch.fx.GraphModule) -> None:
    """The program's outputs, and every node with no single tensor result (several results, or none), read their
    operands as they are: in the identity order (without this, a split reading a value the answer keeps transposed
    would split the wrong axis)."""
    output = next(n for n in graph_module.graph.nodes if n.op == "output")
    outs = [a for a in output.all_input_nodes if a in draft.domains]
    for k, o in enumerate(outs):
        draft.add_contract(f"output#{k}", "output", [o])
    for n in graph_module.graph.nodes:
        if n.op == "call_function" and n not in draft.rules:
            reads = [a for a in n.all_input_nodes if a in draft.domains]
            if reads:
                draft.add_contract(f"{n.name}#reads", short_target(n), reads)


def _values_and_transition_prices(draft: _Draft, nodes: list, constants: set[str], lazy_losses: bool):
    """Values and domains, transition prices: each tensor with the orders its producer writes and its readers
    read as its domain, and the price of every (written, read) pair of them; with `lazy_losses`, what a
    transition costs two ops Vela would fuse is left `pending`."""
    identity, rules, pricing = draft.identity, draft.rules, draft.pricing
    values, costs, value_node = [], [], {}
    pending: dict[tuple[str, str, str], tuple] = {}
    for n in nodes:
        wanted = draft.wanted[n]
        produced = (
            {label_order(m["results"][0]) for m in draft.modes_of.get(n, [])}
            if n.op != "placeholder"
            else {identity[n]}
        )
        labels = [order_label(o) for o in dict.fromkeys(list(produced) + sorted(wanted) + [identity[n]])]
        val = tensor_of(n)
        shape, dtype = [int(d) for d in val.shape], dtype_name(val)
        is_input = n.op == "placeholder"
        values.append(
            {
                "id": n.name,
                "shape": shape,
                "dtype": dtype,
                "size_bytes": int(val.numel() * val.element_size()),
                # Constants keep their stored order; transposing one folds at compile time.
                "kind": ("constant" if n.name in constants else "input") if is_input else "activation",
                "domain": labels,
                "fixed": order_label(identity[n]) if is_input else None,
            }
        )
        value_node[n.name] = n
        # CanonicalTransposePass writes a transpose in its cheapest form; a reshape in front of it is a memory
        # copy when the value has other readers (a conservative reading: after write-back one transpose may be
        # its only reader).
        form = "shared" if len(n.users) > 1 else "cheapest"
        # A transpose between an op and its only reader keeps Vela from fusing them.
        chain = next(iter(n.users)) if len(n.users) == 1 and n.op == "call_function" else None
        # convolutions and pooling read the value in its identity order: price the transpose with them
        read_by = n if read_by_windows_only(n) else None
        for src in produced:
            for dst in wanted:
                if src != dst:
                    reader = read_by if dst == identity[n] else None
                    # the transpose is the value's only reader: Ethos-U85 writes it as the producer's output
                    writer = (n, src) if form == "cheapest" and n.op == "call_function" else None
                    cost = _transition_cost(pricing, shape, src, dst, dtype, form, reader, writer)
                    key = (n.name, order_label(src), order_label(dst))
                    if chain in rules and lazy_losses:
                        pending[key] = (n, chain, src, dst, cost)
                    elif chain in rules:
                        cost += pricing.fusion_loss(n, chain, src, dst)
                    costs.append({"value": key[0], "src": key[1], "dst": key[2], "cost": round(cost, 1)})
    return values, value_node, costs, pending


def _priced(node: torch.fx.Node, modes: list[dict], pricing: ArmPricing, keep_unpriced: bool = False) -> list[dict]:
    """The modes with the op's own price in each. A mode the target cannot run is dropped, unless it is the op's
    only way to run (`keep_unpriced`: pinned), where it is priced 0."""
    priced = []
    for m in modes:
        reads = [label_order(lab) for lab in m["operands"]]
        cost = pricing.op_cost(node, reads, label_order(m["results"][0]))
        if cost is None and not keep_unpriced:
            continue
        priced.append({**m, "cost": round(float(cost or 0.0), 1)})
    return priced


def _transition_cost(
    pricing: ArmPricing, logical_shape, src, dst, dtype: str, form: str = "cheapest", read_by=None, written_by=None
) -> float:
    """The price of turning a value stored in order src into order dst: one transpose of the physical tensor
    (`read_by`: the value, when its readers are to be in the transpose's probe; `written_by`: (the value, src),
    when its producer is; see ArmPricing.as_given)."""
    physical = [logical_shape[i] for i in src]
    return pricing.transpose(physical, compose(inverse(src), dst), dtype, form, read_by, written_by).cycles
