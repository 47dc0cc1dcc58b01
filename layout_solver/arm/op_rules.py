"""What each Arm (pre-TOSA) op allows of its tensors' dim orders, registered once per op target.

Every rule answers the same four questions, the way executorch's Vulkan
`op_registry` registers each op's features in one place:

* `operands(node)`: the tensors whose order matters;
* `propagate(node, domains)`: which candidate orders to offer its neighbours
  (so an order that makes one op free can spread along a chain);
* `modes(node, domains, operands)`: the (operand orders -> result order, cost)
  combinations it runs in; an empty list pins it to the identity order;
* `remaps`: which arguments speak about axes and so follow the result's
  stored order in the write-back (`graph_io.arm.ArgRemap`).

`build_problem` (problem_builder.py) and the write-back (passes.py) iterate this
registry and nothing else; adding an op is one `@register(...)` here. At this
stage of the Arm pipeline, layout-sensitive TOSA ops (CONV2D, pooling, ...)
already read NHWC *logical* tensors wrapped by permute_copy pairs, so a
permute is bookkeeping and everything that is not registered as movable wants
the identity order. An op no rule names is pinned there with a warning.
"""

from __future__ import annotations

import functools
from typing import ClassVar

import torch

from graph_io.arm import ArgRemap
from graph_io.fx import dtype_name, tensor_of
from layout_solver.arm.orders import Order, axes_moved, compose, inverse, order_label, view_output_order

MAX_DOMAIN = 6  # candidate orders per value: enough for every permute chain seen, small enough to solve fast


def short_target(node: torch.fx.Node) -> str:
    """'aten.permute_copy.default' -> 'permute_copy.default'; builtins keep their name."""
    return _short_name(node.target)


@functools.lru_cache(maxsize=4096)
def _short_name(target) -> str:
    # Read once per target: an edge op's name is its repr, built anew on every call.
    name = getattr(target, "__name__", None) or str(target)
    return ".".join(name.split(".")[-2:])


class Domains(dict):
    """Candidate orders per node (identity first), capped at MAX_DOMAIN."""

    def offer(self, node, order: Order) -> bool:
        """Add `order` to `node`'s candidates; True if it was new (and there was room)."""
        if node in self and order not in self[node] and len(self[node]) < MAX_DOMAIN:
            self[node].append(order)
            return True
        return False


def mode(operands: list[Order], result: Order, cost: float = 0.0, name: str | None = None) -> dict:
    """One problem mode: read the operands in these orders, store the result in `result`."""
    return {
        "name": name or order_label(operands[0] if operands else result),
        "operands": [order_label(o) for o in operands],
        "results": [order_label(result)],
        "cost": cost,
    }


class OpRule:
    """A rule's defaults: the tensor arguments are the operands; no propagation; pinned to the identity."""

    kind: ClassVar[str] = "pinned"
    known: ClassVar[bool] = True  # False only for the fallback of ops no rule names (they warn)
    alias: ClassVar[bool] = False  # the write-back removes the node: its output is its input re-labelled
    remaps: ClassVar[tuple[ArgRemap, ...]] = ()
    # Modes that are ways of computing, not only orders (reports count the ops not in the `plain` one).
    algebraic: ClassVar[bool] = False
    plain: ClassVar[str] = ""

    def applies(self, node: torch.fx.Node) -> bool:
        """False if this node's arguments put it outside the rule (it is then pinned)."""
        return True

    def operands(self, node: torch.fx.Node) -> list[torch.fx.Node]:
        """The tensors whose order matters to this op (default: its tensor arguments)."""
        return [a for a in node.args if isinstance(a, torch.fx.Node) and tensor_of(a) is not None]

    def seed(self, node: torch.fx.Node, domains: Domains) -> None:
        """Offer the orders this op makes free on its own (before any propagation)."""

    def propagate(self, node: torch.fx.Node, domains: Domains) -> bool:
        """Offer neighbours the orders that keep this op free; True if any domain grew."""
        return False

    def modes(self, node: torch.fx.Node, domains: Domains, operands: list[torch.fx.Node]) -> list[dict]:
        """The (operand orders -> result order, cost) combinations the op runs in, as problem modes; empty pins it."""
        return []


class Pinned(OpRule):
    """Reads every tensor (list arguments included) and writes its result in the identity order."""

    def __init__(self, known: bool = True):
        self.known = known

    def operands(self, node: torch.fx.Node) -> list[torch.fx.Node]:
        """Every tensor the op reads, list arguments included."""
        return list(node.all_input_nodes)

    def pinned_modes(self, node: torch.fx.Node, operands: list[torch.fx.Node]) -> list[dict]:
        """The one identity mode: every operand and the result in the identity order."""
        identity = lambda n: tuple(range(tensor_of(n).dim()))
        return [mode([identity(o) for o in operands], identity(node), name="identity")]


RULES: dict[str, OpRule] = {}
PINNED = Pinned()
UNKNOWN = Pinned(known=False)


def register(*targets: str):
    """Class decorator: one instance of the rule serves every named target ("permute_copy.default")."""

    def decorate(cls: type[OpRule]) -> type[OpRule]:
        _add(cls(), targets)
        return cls

    return decorate


def _add(rule: OpRule, targets) -> None:
    taken = [t for t in targets if t in RULES]
    if taken:  # refuse the whole registration: a half-registered rule would be a silent surprise
        raise ValueError(f"two Arm op rules for {', '.join(taken)}")
    RULES.update(dict.fromkeys(targets, rule))


def rule_for(node: torch.fx.Node) -> OpRule:
    """The rule this node follows: its target's, the pinned rule if the target's rule declines the node,
    or the unknown-op fallback."""
    rule = RULES.get(short_target(node))
    if rule is None:
        return UNKNOWN
    return rule if rule.applies(node) else PINNED


def _perm(node: torch.fx.Node) -> Order:
    """A permute node's permutation with negative axes normalised."""
    rank = max(tensor_of(node).dim(), 1)
    return tuple(int(p) % rank for p in node.args[1])


# TOSA ops that read a rank-4 NHWC feature map through a window: Vela may write a feature map only they read in a
# form of its own, which changes what the transpose writing it costs (probes.read_transpose_probe), and writes a
# transpose of their result as their output (probes.write_transpose_probes).
WINDOW_OPS = frozenset(
    {
        "CONV2D.default",
        "DEPTHWISE_CONV2D.default",
        "TRANSPOSE_CONV2D.default",
        "MAX_POOL2D.default",
        "AVG_POOL2D.default",
        "AVG_POOL2D_ADAPTIVE.default",
    }
)


def read_by_windows_only(node: torch.fx.Node) -> bool:
    """Whether every reader of `node`'s result is a WINDOW_OPS op."""
    return bool(node.users) and all(u.op == "call_function" and short_target(u) in WINDOW_OPS for u in node.users)


# Ops that want the identity order on purpose: layout-sensitive TOSA ops already wrapped in NHWC permutes,
# shape-changing ops, gathers, casts and TOSA ops the pipeline has already fixed.
_add(
    PINNED,
    (
        *sorted(WINDOW_OPS),
        "RESIZE.default",
        "slice_copy.Tensor",
        "constant_pad_nd.default",
        "GATHER.default",
        "SCATTER.default",
        "CONST_SHAPE.default",
        "argmax.default",
        "_to_dim_order_copy.default",
        "CAST.default",
        "RESHAPE.default",
        "CONCAT.default",
        "TRANSPOSE.default",
        "index_select.default",
        "full.default",
        "unsqueeze_copy.default",
        "squeeze_copy.dims",
        "expand_copy.default",
        "alias_copy.default",
        "clone.default",
        "getitem",
    ),
)


@register("permute_copy.default", "permute.default")
class Permute(OpRule):
    """Free bookkeeping: input order a gives output order inv(p)[a]; no data moves."""

    kind = "permute"
    alias = True

    def operands(self, node):
        return [node.args[0]]

    def seed(self, node, domains):
        perm = _perm(node)
        domains.offer(node.args[0], perm)
        domains.offer(node, inverse(perm))

    def propagate(self, node, domains):
        perm, source, changed = _perm(node), node.args[0], False
        for a in list(domains.get(source, [])):
            changed |= domains.offer(node, compose(inverse(perm), a))
        for b in list(domains[node]):
            changed |= domains.offer(source, compose(perm, b))
        return changed

    def modes(self, node, domains, operands):
        perm = _perm(node)
        found = []
        for a in domains[operands[0]]:
            out = compose(inverse(perm), a)
            if out in domains[node]:
                found.append(mode([a], out))
        return found


@register("view_copy.default")
class View(OpRule):
    """Free in every pair of orders that keeps it a pure reshape (checked exactly on index arrays)."""

    kind = "view"
    remaps = (ArgRemap(1, "physical_shape"),)

    def propagate(self, node, domains):
        source, changed = node.args[0], False
        s_in, s_out = list(tensor_of(source).shape), list(tensor_of(node).shape)
        for a in list(domains.get(source, [])):
            b = view_output_order(s_in, s_out, a)
            if b is not None:
                changed |= domains.offer(node, b)
        for b in list(domains[node]):
            a = view_output_order(s_out, s_in, b)
            if a is not None and source.op != "placeholder":
                changed |= domains.offer(source, a)
        return changed

    def modes(self, node, domains, operands):
        if not operands:
            return []
        s_in, s_out = list(tensor_of(operands[0]).shape), list(tensor_of(node).shape)
        found = []
        for a in domains[operands[0]]:
            b = view_output_order(s_in, s_out, a)
            if b is not None and b in domains[node]:
                found.append(mode([a], b))
        return found


class SameOrder(OpRule):
    """Runs in any order common to its result and all its operands (ranks already matched)."""

    def propagate(self, node, domains):
        rank = tensor_of(node).dim()
        group = [node] + [a for a in self.operands(node) if a in domains and tensor_of(a).dim() == rank]
        changed = False
        for member in group:
            for order in list(domains.get(member, [])):
                for other in group:
                    if other.op != "placeholder":
                        changed |= domains.offer(other, order)
        return changed

    def modes(self, node, domains, operands):
        rank = tensor_of(node).dim()
        if not all(tensor_of(o).dim() == rank for o in operands):
            return []
        return [
            mode([order] * len(operands), order)
            for order in domains[node]
            if all(order in domains[o] or o.op == "placeholder" for o in operands)
        ]


@register(
    "add.Tensor",
    "sub.Tensor",
    "mul.Tensor",
    "CLAMP.default",
    "maximum.default",
    "minimum.default",
    "neg.default",
    "abs.default",
    "clamp.default",
    "relu.default",
    "where.self",
    "eq.Tensor",
    "ge.Tensor",
    "gt.Tensor",
    "bitwise_and.Tensor",
    "logical_and.default",
)
class Elementwise(SameOrder):
    """Runs in any order common to its result and all its operands (ranks already matched by the pipeline)."""

    kind = "elementwise"


@register(
    "sigmoid.default",
    "tanh.default",
    "exp.default",
    "log.default",
    "rsqrt.default",
    "reciprocal.default",
    "erf.default",
    "sin.default",
    "cos.default",
    "floor.default",
    "ceil.default",
    "bitwise_not.default",
    "logical_not.default",
    "pow.Tensor_Scalar",
    "pow.Tensor_Tensor",
    "lt.Tensor",
    "le.Tensor",
    "ne.Tensor",
    "bitwise_or.Tensor",
    "bitwise_xor.Tensor",
    "logical_or.default",
    "logical_xor.default",
)
class PointwiseMath(Elementwise):
    """Pointwise ops the TOSA FP pipeline keeps as themselves (the INT pipeline turns the unary ones into TABLE
    lookups first): each output element reads the same element of every operand, so any order common to all
    of them computes the same values."""


@register("TABLE.default")
class Table(Elementwise):
    """Elementwise through a lookup table; the table itself is not laid out like the input."""

    def operands(self, node):
        return super().operands(node)[:1]


@register("RESCALE.default")
class Rescale(Elementwise):
    """Elementwise when it has one per-tensor scale; a per-channel RESCALE is tied to its channel axis."""

    def applies(self, node):
        scale = node.args[2] if len(node.args) > 2 else None
        return isinstance(scale, (list, tuple)) and len(scale) == 1


@register("sum.dim_IntList", "amax.default", "amin.default", "mean.dim")
class Reduction(SameOrder):
    """With keepdim, runs in any order with its axes remapped. Vela reduces the innermost axis natively and
    transposes first for any other, which the pricing sees in each mode's probe."""

    kind = "reduction"
    remaps = (ArgRemap(1, "axes"),)

    def applies(self, node):
        return bool(node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False))

    @staticmethod
    def axes(node) -> list[int]:
        """The axes the node reduces, normalised (all of them where none are given)."""
        rank = tensor_of(node.args[0]).dim()
        dims = node.args[1] if len(node.args) > 1 else list(range(rank))
        return [int(d) % rank for d in (dims if isinstance(dims, (list, tuple)) else [dims])]

    def seed(self, node, domains):
        # Offer the order with the reduced axes innermost (the others keep their places): Vela's own transpose
        # before a reduction along an outer axis moves the 32-bit accumulator operand, which on Ethos-U85 costs
        # far more than moving the 8-bit tensor once upstream; the pricing sets one against the other.
        rank = tensor_of(node).dim()
        order = axes_moved(rank, sorted(set(self.axes(node))), innermost=True)
        if order != tuple(range(rank)):
            domains.offer(node, order)


@register("SLICE.default")
class Slice(SameOrder):
    """TOSA SLICE(input, start, size): the per-axis lists follow the order."""

    kind = "reorder"
    remaps = (ArgRemap(1, "per_axis"), ArgRemap(2, "per_axis"))


@register("repeat.default")
class Repeat(SameOrder):
    """A repeat (TOSA TILE: BroadcastArgsPass and expand write them) with one multiple per axis runs in any
    order, its multiples following it."""

    kind = "reorder"
    remaps = (ArgRemap(1, "per_axis"),)

    def applies(self, node):
        multiples = node.args[1] if len(node.args) > 1 else None
        return isinstance(multiples, (list, tuple)) and len(multiples) == tensor_of(node.args[0]).dim()

    def operands(self, node):
        return [node.args[0]]

    def seed(self, node, domains):
        # Offer the order with the repeated axes outermost (the others keep their places): Vela runs a TILE as
        # one memory copy per repeat, a contiguous block when the repeated axis is outermost and an
        # element-strided copy when it is inner (ethos-u55-128, int32 [64, 64, 1] x [1, 1, 2]: 262,568 cycles;
        # stored [1, 64, 64] x [2, 1, 1]: 34,048). The pricing sets that against what the order costs around it.
        multiples = node.args[1]
        order = axes_moved(len(multiples), [a for a, m in enumerate(multiples) if int(m) > 1], innermost=False)
        if order != tuple(range(len(multiples))):
            domains.offer(node, order)


@register("PAD.default")
class Pad(SameOrder):
    """TOSA PAD(input, [lo, hi] per axis): the pairs follow the order. Vela runs a PAD as memory copies whose
    speed follows the innermost dim (a 3-channel image pads faster with W innermost, a 32-channel map with its
    channels innermost), which the pricing sees in each mode's probe."""

    kind = "reorder"
    remaps = (ArgRemap(1, "per_axis_pairs"),)


@register("cat.default")
class Concat(SameOrder):
    """Runs in any order common to its inputs, its axis remapped."""

    kind = "concat"
    remaps = (ArgRemap(1, "axis"),)

    def operands(self, node):
        return [a for a in node.args[0] if isinstance(a, torch.fx.Node) and tensor_of(a) is not None]


@register("MATMUL.default")
class MatMul(OpRule):
    """TOSA MATMUL (N, H, C) x (N, C, W) -> (N, H, W), or the transposed product: with both operands and the
    result stored in order (0, 2, 1) the node computes MATMUL(B^T, A^T) = (A B)^T, its operands swapped.

    Vela's MatMul is not symmetric in H and W (it runs one output column at a time and transposes its second
    operand first), so the two orientations cost differently; the pricing compiles each. Only int8 products
    have both (Vela's int16 MATMUL widens to int48); others keep the identity.
    """

    kind = "matmul"
    algebraic = True
    plain = "AB"
    remaps = (ArgRemap(0, "swap_operands"),)
    TRANSPOSED: ClassVar[Order] = (0, 2, 1)

    def applies(self, node):
        tensors = [tensor_of(a) for a in node.args[:2]]
        return all(t is not None and t.dim() == 3 and dtype_name(t) == "int8" for t in tensors)

    def operands(self, node):
        return list(node.args[:2])

    def seed(self, node, domains):
        for value in (*node.args[:2], node):
            domains.offer(value, self.TRANSPOSED)

    def modes(self, node, domains, operands):
        identity = (0, 1, 2)
        usable = [
            o for o in (identity, self.TRANSPOSED) if o in domains[node] and all(o in domains[v] for v in operands)
        ]
        if len(usable) < 2:
            return []  # pinned to the identity
        return [mode([o, o], o, name=self.plain if o == identity else "(B^T A^T)^T") for o in usable]
