"""Arm TOSA graph (before InsertConstShapesPass) -> layout problem.

A label is a dim order: the value is stored physically as
`logical.permute(order)`. What each op allows is in `op_rules` (one rule per
op target); this module gathers the candidate orders, asks every rule for its
modes and prices the transitions:

* graph inputs and outputs keep the delegate contract (identity);
  parameters, buffers and lifted constants keep their stored order, and
  transposing one is free (folded at compile time);
* a transition is a transpose priced by cost_models.ethos_u55: in its
  cheapest form (with the memory copy Vela makes of a reshape in front of it
  when the value has other readers); plus the cost of a RESCALE it stops Vela from fusing
  into a compute op (a standalone RESCALE costs several times the transpose).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import torch

from cost_models import ethos_u55, vela
from graph_io.fx import dtype_name, tensor_of
from layout_solver.arm.op_rules import PINNED, Domains, OpRule, Pinned, rule_for, short_target
from layout_solver.arm.orders import compose, inverse, label_order, order_label
from layout_solver.problem import Problem

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


def build_problem(
    graph_module: torch.fx.GraphModule,
    name: str = "tosa",
    constants: set[str] | None = None,
    pinned_kinds: frozenset[str] = frozenset(),
) -> ArmProblem:
    """The layout problem of an Arm graph. `constants`: placeholder names that are parameters, buffers or
    lifted constants (their transposes are folded at compile time, so free); other placeholders are
    delegate inputs. Ops no rule names are pinned to the identity order with a warning; so, silently, are
    ops whose rule kind is in `pinned_kinds` (to measure what one rule buys, or to rule it out)."""
    constants = constants or set()
    nodes = [
        n for n in graph_module.graph.nodes if n.op in ("placeholder", "call_function") and tensor_of(n) is not None
    ]
    identity = {n: tuple(range(tensor_of(n).dim())) for n in nodes}
    rules = {n: rule_for(n) for n in nodes if n.op == "call_function"}
    rules = {n: PINNED if rule.kind in pinned_kinds else rule for n, rule in rules.items()}

    # Candidate orders: identity, those that make each permute free, spread along chains of free ops.
    domains = Domains({n: [identity[n]] for n in nodes})
    for n, rule in rules.items():
        rule.seed(n, domains)
    for _ in range(PROPAGATION_ROUNDS):
        changed = False
        for n, rule in rules.items():
            changed |= rule.propagate(n, domains)
        if not changed:
            break

    values, ops, costs = [], [], []
    value_node, op_node, op_rule = {}, {}, {}
    pinned_unknown = []
    wanted: dict[torch.fx.Node, set] = {n: set() for n in nodes}
    modes_of: dict[torch.fx.Node, list[dict]] = {}

    for n, rule in rules.items():
        operands = rule.operands(n)
        modes = rule.modes(n, domains, operands) if all(o in domains for o in operands) else []
        if not modes:
            if not rule.known:
                pinned_unknown.append(f"{n.name} ({short_target(n)})")
            rule = rule if isinstance(rule, Pinned) else PINNED
            # Every tensor it reads, list arguments (cat) included, must be in identity order.
            operands = list(dict.fromkeys(a for a in rule.operands(n) if a in domains))
            modes = rule.pinned_modes(n, operands)
        for m in modes:
            for o, lab in zip(operands, m["operands"]):
                wanted[o].add(label_order(lab))
        modes_of[n] = modes
        ops.append(
            {
                "id": n.name,
                "target": short_target(n),
                "operands": [o.name for o in operands],
                "results": [n.name],
                "modes": modes,
            }
        )
        op_node[n.name], op_rule[n.name] = n, rule

    output = next(n for n in graph_module.graph.nodes if n.op == "output")
    outs = [a for a in output.all_input_nodes if a in domains]
    for k, o in enumerate(outs):
        ops.append(
            {
                "id": f"output#{k}",
                "target": "output",
                "operands": [o.name],
                "results": [],
                "modes": [{"name": "contract", "operands": [order_label(identity[o])], "results": []}],
            }
        )
        wanted[o].add(identity[o])

    for n in nodes:
        produced = (
            {label_order(m["results"][0]) for m in modes_of.get(n, [])} if n.op != "placeholder" else {identity[n]}
        )
        labels = [order_label(o) for o in dict.fromkeys(list(produced) + sorted(wanted[n]) + [identity[n]])]
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
        fusion_loss = _rescale_fusion_loss(n) if any(src != dst for src in produced for dst in wanted[n]) else 0.0
        for src in produced:
            for dst in wanted[n]:
                if src != dst:
                    loss = fusion_loss + _slice_fusion_loss(n, src)
                    costs.append(
                        {
                            "value": n.name,
                            "src": order_label(src),
                            "dst": order_label(dst),
                            "cost": round(_transition_cycles(shape, src, dst, dtype, form) + loss, 1),
                        }
                    )
    if pinned_unknown:
        warnings.warn(
            "layout-solver: ops the TOSA rules do not know were pinned to the identity order: "
            + ", ".join(pinned_unknown[:10])
            + (" ..." if len(pinned_unknown) > 10 else ""),
            stacklevel=2,
        )
    problem = Problem.model_validate(
        {"name": name, "values": values, "ops": ops, "transition_costs": costs, "default_cost_per_byte": 0.0}
    )
    return ArmProblem(problem, value_node, op_node, op_rule, pinned_unknown)


def _transition_cycles(logical_shape, src, dst, dtype: str, form: str = "cheapest") -> float:
    """Cycles to turn a value stored in order src into order dst: one transpose of the physical tensor."""
    physical = [logical_shape[i] for i in src]
    perm = compose(inverse(src), dst)
    if dtype not in ethos_u55.DTYPE_BYTES:
        return float(ethos_u55.DTYPE_BYTES.get("int32", 4) * len(physical))
    return ethos_u55.transpose_cost(physical, perm, dtype, form=form).cycles


def _is(node, targets) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and short_target(node) in targets


def _fuses_back(rescale) -> bool:
    producer = rescale.args[0]
    return _is(producer, ethos_u55.RESCALE_FOLDS_INTO_OUTPUT_OF) and len(producer.users) == 1


def _fuses_forward(rescale) -> bool:
    return len(rescale.users) == 1 and _is(next(iter(rescale.users)), ethos_u55.RESCALE_FOLDS_INTO_INPUT_OF)


def _const_list(arg) -> list[int]:
    """A per-axis argument as a list: given inline, or as a CONST_SHAPE node's values."""
    return [int(v) for v in (arg.args[0] if isinstance(arg, torch.fx.Node) else arg)]


def _slice_fusion_loss(node, order) -> float:
    """Cycles of the MemoryCopy Vela makes of a SLICE (stored in `order`) once a transpose or a reshape reads
    it: fused into an elementwise, CONCAT or compute consumer a slice is free, before a layout op it is
    copied out (cost_models.vela.measure_slice, up to 8 cycles a byte when it strides the innermost axis)."""
    if not _is(node, {"SLICE.default"}):
        return 0.0
    source = tensor_of(node.args[0])
    dtype = dtype_name(source)
    if dtype not in ethos_u55.DTYPE_BYTES:
        return 0.0
    shape, start, size = [int(d) for d in source.shape], _const_list(node.args[1]), _const_list(node.args[2])
    physical = lambda values: [values[i] for i in order]
    try:
        return float(vela.measure_slice(physical(shape), physical(start), physical(size), dtype))
    except vela.VelaUnsupported:
        return ethos_u55.copy_cycles(tensor_of(node).numel(), dtype)


def _rescale_fusion_loss(node) -> float:
    """Cycles Vela loses when a transpose goes on this value: RESCALEs around it stop fusing.

    Vela folds a RESCALE into its producer's output or its consumer's input,
    never into a transpose. int32 values only live between a compute op and
    the RESCALEs folded into it, so a transpose there unfolds all of them
    (the op's own input and output RESCALEs). On an int8/int16 value, a
    transpose after a RESCALE breaks its forward fusion and one before it the
    backward fusion; that costs only when it was the RESCALE's only way to fuse.
    """

    def standalone(rescale) -> float:
        src, out = tensor_of(rescale.args[0]), tensor_of(rescale)
        return ethos_u55.standalone_rescale_cycles(out.numel(), dtype_name(src), dtype_name(out))

    rescale = {"RESCALE.default"}
    if dtype_name(tensor_of(node)) == "int32":
        unfolded = {u for u in node.users if _is(u, rescale)}
        if _is(node, rescale):
            unfolded.add(node)
        if _is(node, ethos_u55.RESCALE_FOLDS_INTO_OUTPUT_OF):
            unfolded |= {a for a in node.all_input_nodes if _is(a, rescale)}
        return sum(standalone(r) for r in unfolded)
    loss = 0.0
    if _is(node, rescale) and _fuses_forward(node) and not _fuses_back(node):
        loss += standalone(node)
    for user in node.users:
        if _is(user, rescale) and _fuses_back(user) and not _fuses_forward(user):
            loss += standalone(user)
    return loss
