"""Arm TOSA graph (before InsertConstShapesPass) -> layout problem.

A label is a dim order: the value is stored physically as
`logical.permute(order)`. At this stage layout-sensitive TOSA ops (CONV2D,
DEPTHWISE_CONV2D, pooling, ...) already read NHWC *logical* tensors, wrapped
by permute_copy pairs; so:

* permute_copy(p) is free bookkeeping: input order a gives output order
  inv(p)[a], no data moves;
* elementwise ops (add, sub, mul, TABLE, per-tensor RESCALE, clamp, ...) run
  in any order common to all operands (ranks already matched);
* sum.dim_IntList with keepdim runs in any order with its axes remapped; a
  reduction whose axis is not innermost is priced as the transpose Vela inserts;
* view_copy is free in every pair of orders that keeps it a pure reshape
  (whole reshape groups moved together; checked exactly on index arrays);
* TOSA SLICE and PAD run in any order with their per-axis lists permuted,
  cat in any order common to its inputs with its axis remapped;
* everything else (convs, pooling, views, matmuls, ...) wants the identity
  order; an op this module does not know is pinned there with a warning;
* graph inputs and outputs keep the delegate contract (identity);
  parameters, buffers and lifted constants keep their stored order, and
  transposing one is free (folded at compile time).

A transition is a transpose priced by cost_models.ethos_u55: in its cheapest
form, except on a delegate input, where CanonicalTransposePass leaves it as
written; plus the cost of a RESCALE it stops Vela from fusing into a compute
op (a standalone RESCALE costs several times the transpose).
"""

from __future__ import annotations

import functools
import logging
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from cost_models import ethos_u55
from layout_solver.problem import Problem

log = logging.getLogger(__name__)

MAX_DOMAIN = 6
ELEMENTWISE = {"add.Tensor", "sub.Tensor", "mul.Tensor", "TABLE.default", "CLAMP.default", "maximum.default",
               "minimum.default", "neg.default", "abs.default", "clamp.default", "relu.default", "where.self",
               "eq.Tensor", "ge.Tensor", "gt.Tensor", "bitwise_and.Tensor", "logical_and.default"}
REDUCTIONS = {"sum.dim_IntList", "amax.default", "amin.default", "mean.dim"}
# Ops pinned to the identity order on purpose (no warning).
PINNED = {"CONV2D.default", "DEPTHWISE_CONV2D.default", "TRANSPOSE_CONV2D.default", "MAX_POOL2D.default",
          "AVG_POOL2D.default", "AVG_POOL2D_ADAPTIVE.default", "RESIZE.default", "MATMUL.default",
          "slice_copy.Tensor", "constant_pad_nd.default",
          "repeat.default", "GATHER.default", "SCATTER.default", "CONST_SHAPE.default", "argmax.default",
          "_to_dim_order_copy.default", "CAST.default", "RESHAPE.default", "SLICE.default", "CONCAT.default",
          "TRANSPOSE.default", "RESCALE.default", "index_select.default", "full.default", "unsqueeze_copy.default",
          "squeeze_copy.dims", "expand_copy.default", "alias_copy.default", "clone.default"}
PERMUTES = {"permute_copy.default", "permute.default"}
# Ops whose output a following RESCALE folds into, and ops whose input a preceding RESCALE folds into.
FUSES_OUTPUT_RESCALE = {"CONV2D.default", "DEPTHWISE_CONV2D.default", "TRANSPOSE_CONV2D.default", "MATMUL.default",
                        "MAX_POOL2D.default", "AVG_POOL2D.default", "AVG_POOL2D_ADAPTIVE.default", "add.Tensor",
                        "sub.Tensor", "mul.Tensor", "sum.dim_IntList", "TABLE.default"}
FUSES_INPUT_RESCALE = {"add.Tensor", "sub.Tensor", "mul.Tensor", "maximum.default", "minimum.default"}


def short_target(node: torch.fx.Node) -> str:
    """'aten.permute_copy.default' -> 'permute_copy.default'; builtins keep their name."""
    name = getattr(node.target, "__name__", str(node.target))
    return ".".join(name.split(".")[-2:])


def order_label(order) -> str:
    return ",".join(str(i) for i in order)


def label_order(label: str) -> tuple[int, ...]:
    return tuple(int(x) for x in label.split(",")) if label else ()


def compose(a, b) -> tuple[int, ...]:
    """a[b]: the order of transpose(transpose(x, a), b)."""
    return tuple(a[i] for i in b)


def inverse(p) -> tuple[int, ...]:
    inv = [0] * len(p)
    for i, x in enumerate(p):
        inv[x] = i
    return tuple(inv)


def _val(node) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def _dtype(val) -> str:
    return str(val.dtype).removeprefix("torch.")


@dataclass
class ArmProblem:
    problem: Problem
    value_node: dict[str, torch.fx.Node]
    op_node: dict[str, torch.fx.Node]
    op_kind: dict[str, str]  # "permute", "elementwise", "reduction", "reorder", "concat", "view", "pinned"
    pinned_unknown: list[str]


def op_kind(node: torch.fx.Node) -> str:
    target = short_target(node)
    if target in PERMUTES:
        return "permute"
    if target == "RESCALE.default":
        scale = node.args[2] if len(node.args) > 2 else None
        return "elementwise" if isinstance(scale, (list, tuple)) and len(scale) == 1 else "pinned"
    if target in ELEMENTWISE:
        return "elementwise"
    if target in ("SLICE.default", "PAD.default"):
        return "reorder"  # per-axis argument lists follow the order
    if target == "cat.default":
        return "concat"  # the concat axis is remapped
    if target == "view_copy.default":
        return "view"  # free in the orders that keep it a pure reshape
    if target in REDUCTIONS:
        keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        return "reduction" if keepdim else "pinned"
    return "pinned"


VIEW_CHECK_LIMIT = 1 << 20  # elements; larger views stay in the identity order


def _reshape_groups(s_in, s_out) -> list[tuple[list[int], list[int]]] | None:
    """Pair contiguous runs of input and output axes with equal element counts."""
    groups, i, j = [], 0, 0
    while i < len(s_in) or j < len(s_out):
        gi, gj = [], []
        pi = pj = 1
        while True:
            if pi <= pj and i < len(s_in):
                pi *= s_in[i]
                gi.append(i)
                i += 1
            elif j < len(s_out):
                pj *= s_out[j]
                gj.append(j)
                j += 1
            else:
                return None
            if pi == pj and (i == len(s_in) or s_in[i] != 1 or j == len(s_out)) and \
                    (j == len(s_out) or s_out[j] != 1 or i == len(s_in)):
                break
        groups.append((gi, gj))
    return groups


def view_output_order(s_in, s_out, order_in) -> tuple[int, ...] | None:
    """The output order in which reshaping s_in -> s_out moves no data, given the input order.

    Proposed from the reshape's axis groups, then checked exactly on index arrays."""
    return _view_output_order(tuple(int(d) for d in s_in), tuple(int(d) for d in s_out), tuple(order_in))


@functools.lru_cache(maxsize=4096)
def _view_output_order(s_in, s_out, order_in) -> tuple[int, ...] | None:
    # Cached: the domain propagation and the mode building ask the same questions,
    # and each exact check builds index arrays of up to VIEW_CHECK_LIMIT elements.
    s_in, s_out = list(s_in), list(s_out)
    if list(order_in) == list(range(len(s_in))):
        return tuple(range(len(s_out)))  # a view of a row-major tensor is always a pure reshape
    n = 1
    for d in s_in:
        n *= d
    if n > VIEW_CHECK_LIMIT or n == 0:
        return None
    groups = _reshape_groups(s_in, s_out)
    if groups is None:
        return None
    group_of = {a: g for g, (gi, _) in enumerate(groups) for a in gi}
    sequence = []
    for a in order_in:  # group sequence in physical order, axes of a group kept contiguous and ascending
        g = group_of[a]
        if not sequence or sequence[-1][0] != g:
            sequence.append((g, [a]))
        else:
            sequence[-1][1].append(a)
    if len({g for g, _ in sequence}) != len(sequence) or any(axes != sorted(axes) for _, axes in sequence):
        return None
    order_out = tuple(b for g, _ in sequence for b in groups[g][1])
    if sorted(order_out) != list(range(len(s_out))):
        return None
    index = np.arange(n)
    if not np.array_equal(index.reshape(s_in).transpose(order_in).ravel(),
                          index.reshape(s_out).transpose(order_out).ravel()):
        return None
    return order_out


def _operands(node: torch.fx.Node, kind: str) -> list[torch.fx.Node]:
    """The tensor operands whose layout matters (cat: the list entries)."""
    if kind == "concat":
        return [a for a in node.args[0] if isinstance(a, torch.fx.Node) and _val(a) is not None]
    operands = [a for a in node.args if isinstance(a, torch.fx.Node) and _val(a) is not None]
    if short_target(node) == "TABLE.default":
        operands = operands[:1]  # the lookup table is not laid out like the input
    return operands


def _perm(node: torch.fx.Node) -> tuple[int, ...]:
    """A permute node's permutation with negative axes normalised."""
    rank = max(_val(node).dim(), 1)
    return tuple(int(p) % rank for p in node.args[1])


def build_problem(graph_module: torch.fx.GraphModule, name: str = "tosa",
                  constants: set[str] | None = None) -> ArmProblem:
    """`constants`: placeholder names that are parameters/buffers/lifted constants (their
    transposes are folded at compile time, so free); other placeholders are delegate inputs."""
    constants = constants or set()
    nodes = [n for n in graph_module.graph.nodes if n.op in ("placeholder", "call_function") and _val(n) is not None]
    rank = {n: _val(n).dim() for n in nodes}
    identity = {n: tuple(range(rank[n])) for n in nodes}
    kinds = {n: op_kind(n) for n in nodes if n.op == "call_function"}

    # Candidate orders: identity, those that make each permute free, spread along elementwise chains.
    domain: dict[torch.fx.Node, list[tuple[int, ...]]] = {n: [identity[n]] for n in nodes}

    def offer(node, order) -> bool:
        if node in domain and order not in domain[node] and len(domain[node]) < MAX_DOMAIN:
            domain[node].append(order)
            return True
        return False

    for n, kind in kinds.items():
        if kind == "permute":
            perm = _perm(n)
            offer(n.args[0], perm)
            offer(n, inverse(perm))
    for _ in range(4):  # propagate through free permutes and elementwise chains
        changed = False
        for n, kind in kinds.items():
            if kind == "permute":
                perm = _perm(n)
                for a in list(domain[n.args[0]]):
                    changed |= offer(n, compose(inverse(perm), a))
                for b in list(domain[n]):
                    changed |= offer(n.args[0], compose(perm, b))
            elif kind == "view":
                s_in, s_out = list(_val(n.args[0]).shape), list(_val(n).shape)
                for a in list(domain.get(n.args[0], [])):
                    b = view_output_order(s_in, s_out, a)
                    if b is not None:
                        changed |= offer(n, b)
                for b in list(domain[n]):
                    a = view_output_order(s_out, s_in, b)
                    if a is not None and n.args[0].op != "placeholder":
                        changed |= offer(n.args[0], a)
            elif kind in ("elementwise", "reduction", "reorder", "concat"):
                group = [n] + [a for a in _operands(n, kind) if rank.get(a) == rank[n]]
                for member in group:
                    for order in list(domain.get(member, [])):
                        for other in group:
                            if other.op != "placeholder":
                                changed |= offer(other, order)
        if not changed:
            break

    values, ops, costs = [], [], []
    value_node, op_node, op_kinds = {}, {}, {}
    pinned_unknown = []
    wanted: dict[torch.fx.Node, set] = {n: set() for n in nodes}
    modes_of: dict[torch.fx.Node, list[dict]] = {}

    for n, kind in kinds.items():
        operands = _operands(n, kind)
        if any(o not in domain for o in operands):
            kind = "pinned"
        if kind == "pinned" and short_target(n) not in PINNED and short_target(n) not in ELEMENTWISE \
                and short_target(n) not in REDUCTIONS and short_target(n) != "getitem":
            pinned_unknown.append(f"{n.name} ({short_target(n)})")
        if kind == "pinned":
            # Every tensor it reads, list arguments (cat) included, must be in identity order.
            operands = list(dict.fromkeys(a for a in n.all_input_nodes if a in domain))
        modes = []
        if kind == "permute":
            perm = _perm(n)
            for a in domain[n.args[0]]:
                out = compose(inverse(perm), a)
                if out in domain[n]:
                    modes.append({"name": order_label(a), "operands": [order_label(a)],
                                  "results": [order_label(out)], "cost": 0.0})
        elif kind == "view" and operands:
            s_in, s_out = list(_val(operands[0]).shape), list(_val(n).shape)
            for a in domain[operands[0]]:
                b = view_output_order(s_in, s_out, a)
                if b is not None and b in domain[n]:
                    modes.append({"name": order_label(a), "operands": [order_label(a)],
                                  "results": [order_label(b)], "cost": 0.0})
        elif kind in ("elementwise", "reduction", "reorder", "concat") and all(rank[o] == rank[n] for o in operands):
            for order in domain[n]:
                if not all(order in domain[o] or o.op == "placeholder" for o in operands):
                    continue
                cost = _reduction_mode_cost(n, order) if kind == "reduction" else 0.0
                modes.append({"name": order_label(order), "operands": [order_label(order)] * len(operands),
                              "results": [order_label(order)], "cost": round(cost, 1)})
        if not modes:
            kind = "pinned"
            operands = list(dict.fromkeys(a for a in n.all_input_nodes if a in domain))
            modes = [{"name": "identity", "operands": [order_label(identity[o]) for o in operands],
                      "results": [order_label(identity[n])], "cost": 0.0}]
        for m in modes:
            for o, lab in zip(operands, m["operands"]):
                wanted[o].add(label_order(lab))
        modes_of[n] = modes
        ops.append({"id": n.name, "target": short_target(n), "operands": [o.name for o in operands],
                    "results": [n.name], "modes": modes})
        op_node[n.name], op_kinds[n.name] = n, kind

    output = next(n for n in graph_module.graph.nodes if n.op == "output")
    outs = [a for a in output.all_input_nodes if a in domain]
    for k, o in enumerate(outs):
        ops.append({"id": f"output#{k}", "target": "output", "operands": [o.name], "results": [],
                    "modes": [{"name": "contract", "operands": [order_label(identity[o])], "results": []}]})
        wanted[o].add(identity[o])

    for n in nodes:
        produced = {label_order(m["results"][0]) for m in modes_of.get(n, [])} if n.op != "placeholder" \
            else {identity[n]}
        labels = [order_label(o) for o in dict.fromkeys(list(produced) + sorted(wanted[n]) + [identity[n]])]
        val = _val(n)
        shape, dtype = [int(d) for d in val.shape], _dtype(val)
        is_input = n.op == "placeholder"
        values.append({"id": n.name, "shape": shape, "dtype": dtype,
                       "size_bytes": int(val.numel() * val.element_size()),
                       # Constants keep their stored order; transposing one folds at compile time.
                       "kind": ("constant" if n.name in constants else "input") if is_input else "activation",
                       "domain": labels, "fixed": order_label(identity[n]) if is_input else None})
        value_node[n.name] = n
        # CanonicalTransposePass never reshapes a delegate input (Vela would add a MemoryCopy), so a
        # transpose there runs as written.
        form = "as_given" if is_input and n.name not in constants else "cheapest"
        fusion_loss = _rescale_fusion_loss(n) if any(src != dst for src in produced for dst in wanted[n]) else 0.0
        for src in produced:
            for dst in wanted[n]:
                if src != dst:
                    costs.append({"value": n.name, "src": order_label(src), "dst": order_label(dst),
                                  "cost": round(_transition_cycles(shape, src, dst, dtype, form) + fusion_loss, 1)})
    if pinned_unknown:
        warnings.warn("layout-solver: ops the TOSA rules do not know were pinned to the identity order: "
                      + ", ".join(pinned_unknown[:10]) + (" ..." if len(pinned_unknown) > 10 else ""), stacklevel=2)
    problem = Problem.model_validate({"name": name, "values": values, "ops": ops, "transition_costs": costs,
                                      "default_cost_per_byte": 0.0})
    return ArmProblem(problem, value_node, op_node, op_kinds, pinned_unknown)


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
    return _is(producer, FUSES_OUTPUT_RESCALE) and len(producer.users) == 1


def _fuses_forward(rescale) -> bool:
    return len(rescale.users) == 1 and _is(next(iter(rescale.users)), FUSES_INPUT_RESCALE)


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
        src, out = _val(rescale.args[0]), _val(rescale)
        return ethos_u55.standalone_rescale_cycles(out.numel(), _dtype(src), _dtype(out))

    rescale = {"RESCALE.default"}
    if _dtype(_val(node)) == "int32":
        unfolded = {u for u in node.users if _is(u, rescale)}
        if _is(node, rescale):
            unfolded.add(node)
        if _is(node, FUSES_OUTPUT_RESCALE):
            unfolded |= {a for a in node.all_input_nodes if _is(a, rescale)}
        return sum(standalone(r) for r in unfolded)
    loss = 0.0
    if _is(node, rescale) and _fuses_forward(node) and not _fuses_back(node):
        loss += standalone(node)
    for user in node.users:
        if _is(user, rescale) and _fuses_back(user) and not _fuses_forward(user):
            loss += standalone(user)
    return loss


def _reduction_mode_cost(node, order) -> float:
    """Vela reduces along the innermost axis natively; for any other axis it inserts a transpose first.

    A RESCALE feeding the reduction is folded into it before that, so the
    transpose moves the RESCALE's input (int8 rather than int32).
    """
    val = _val(node.args[0])
    source = node.args[0]
    folded = _is(source, {"RESCALE.default"}) and len(source.users) == 1
    dtype = _dtype(_val(source.args[0]) if folded else val)
    if dtype not in ethos_u55.DTYPE_BYTES:
        return 0.0
    dims = node.args[1] if len(node.args) > 1 else []
    dims = [d % val.dim() for d in (dims if isinstance(dims, (list, tuple)) else [dims])]
    shape = [int(val.shape[i]) for i in order]
    total = 0.0
    for axis in sorted(order.index(d) for d in dims):  # one REDUCE_SUM per axis
        total += ethos_u55.reduce_sum_cycles(shape, axis, dtype)
        shape[axis] = 1
    return total
