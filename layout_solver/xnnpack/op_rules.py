"""What each op inside an XNNPACK delegate allows of its tensors' dim orders, registered once per op target.

A tensor is either *contiguous* (its logical dim order) or *channels_last*: dim 1 stored last, NHWC for a 4-D tensor
(stock's `XNN_NHWC_NODE` tag) and NLC for a 3-D one (the stage's own tag, `visitors.ORDER_KEY`: a Conv1d's
activations, and the tokens a vision model reads off a feature map). Every rule answers, for one node:

* `operands(node)`: the input nodes whose dim order the op constrains (a conv's weight and bias are the
  visitor's own business, not operands);
* `modes(node, operands, price)`: the (operand labels -> result label, cost) combinations its XNNPACK visitor
  serializes correctly. `price(shape, elem_bytes, perm)` is a conversion's microseconds.

Which ops want which order is read from executorch's own pass (`ChannelsLastTaggedReshapePass`'s
`memory_sensitive_ops_nhwc` / `_nchw` sets), so a new channels-last op of a later executorch is one more member
there, not here. What is written here is what stock leaves implicit in its visitors: an op that follows its
inputs into channels_last is one whose visitor is layout-blind (element-wise ops) or remaps its axes under the
tag (cat, slice_copy, constant_pad_nd: 4-D only; cat and slice_copy priced by the runs they copy in each
order, a pad by the rows its kernel runs on, or nothing where folded into a convolution: `OrderPricedCopy`); any
other op (softmax over the last dim, bmm, ...) stays contiguous, where every visitor is right. Two kinds of op
may read one order and write the other, serialized by the stage's own visitors (`visitors.py`): a permute runs
its physical permutation (`physical_permutation`), and elided where that moves no byte; a reshape (view,
squeeze, unsqueeze) runs in place wherever the bytes stay where they are (`keeps_bytes`): XNNPACK's reshape is a
no-op on the data, so `x.flatten(2).transpose(1, 2)` of an NHWC feature map costs nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ClassVar

import torch

from cost_models.xnnpack import PAD_COPY, copy_class
from graph_io.fx import tensor_of

CONTIGUOUS = "contiguous"
CHANNELS_LAST = "channels_last"
LABELS = (CONTIGUOUS, CHANNELS_LAST)
# The ranks whose activations may be stored channels-last inside a delegate: NHWC and NLC.
ORDERED_RANKS = (3, 4)

Price = Callable[[list[int], int, list[int]], float]


@functools.lru_cache(maxsize=4096)
def short_target(target) -> str:
    """'aten.convolution.default' for an edge op; builtins (getitem) keep their name."""
    name = getattr(target, "__name__", None) or str(target)
    return ".".join(name.split(".")[-2:])


def rank(node) -> int | None:
    """The node's tensor rank; for a tuple of tensors (max.dim), their common rank, else None."""
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if isinstance(val, torch.Tensor):
        return val.dim()
    if isinstance(val, (tuple, list)) and val and all(isinstance(v, torch.Tensor) for v in val):
        ranks = {v.dim() for v in val}
        return ranks.pop() if len(ranks) == 1 else None
    return None


def labels_for(node, ranks: tuple[int, ...] = ORDERED_RANKS) -> tuple[str, ...]:
    """The labels a node's value may take: both for a tensor of a rank in `ranks`, contiguous otherwise."""
    return LABELS if rank(node) in ranks else (CONTIGUOUS,)


def dim_order(label: str, ndim: int) -> tuple[int, ...]:
    """Physical dim k of a tensor of rank `ndim` stored in `label` holds logical dim dim_order(...)[k]."""
    if label == CONTIGUOUS or ndim < 3:
        return tuple(range(ndim))
    return (0, *range(2, ndim), 1)


def physical_shape(shape, label: str) -> list[int]:
    """The dims of a tensor of logical `shape` as `label` stores them (what XNNPACK's tensor value holds)."""
    return [int(shape[d]) for d in dim_order(label, len(shape))]


def physical_permutation(perm: list[int], src: str, dst: str) -> list[int]:
    """What permute_copy(x, perm) runs on the bytes when x is stored in `src` and its result in `dst`:
    output physical dim k reads input physical dim q[k] = a^-1[perm[b[k]]] (a, b the two stored orders)."""
    a, b = dim_order(src, len(perm)), dim_order(dst, len(perm))
    a_inv = [a.index(d) for d in range(len(perm))]
    return [a_inv[perm[b[k]]] for k in range(len(perm))]


def conversion_us(price: Price, shape, elem: int, perm: list[int], src: str, dst: str) -> float:
    """What `price` asks for permute_copy(x, perm) of a tensor of logical `shape` stored `src`, written `dst`: the
    physical permutation of the physical dims."""
    return price(physical_shape(shape, src), elem, physical_permutation(perm, src, dst))


def keeps_bytes(src_shape, src: str, dst_shape, dst: str) -> bool:
    """Whether reshaping a tensor of `src_shape` stored `src` to `dst_shape` stored `dst` leaves every byte where
    it is: each group of dims the reshape merges or splits is stored as one run, in logical order, in both
    orders, and the groups come in the same sequence in both (size-1 dims, which store nothing, left out)."""
    groups = _reshape_groups([int(d) for d in src_shape], [int(d) for d in dst_shape])
    if groups is None:
        return False
    sequences = []
    for shape, label, side in ((src_shape, src, 0), (dst_shape, dst, 1)):
        group_of = {d: g for g, members in enumerate(groups) for d in members[side]}
        runs: list[list[int]] = []  # the stored non-1 dims, split where the group changes
        for d in (d for d in dim_order(label, len(shape)) if shape[d] != 1):
            if runs and group_of[runs[-1][-1]] == group_of[d]:
                runs[-1].append(d)
            else:
                runs.append([d])
        sequence = [group_of[run[0]] for run in runs]
        if any(run != sorted(run) for run in runs) or len(set(sequence)) != len(sequence):
            return False
        sequences.append(sequence)
    return sequences[0] == sequences[1]


def _reshape_groups(src: list[int], dst: list[int]) -> list[tuple[list[int], list[int]]] | None:
    """The minimal runs of non-1 dims of `src` and `dst` (row-major) whose products match, or None where the
    element counts differ."""
    a = [d for d in range(len(src)) if src[d] != 1]
    b = [d for d in range(len(dst)) if dst[d] != 1]
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        group_a, group_b = [a[i]], [b[j]]
        size_a, size_b = src[a[i]], dst[b[j]]
        i, j = i + 1, j + 1
        while size_a != size_b:
            if size_a < size_b and i < len(a):
                group_a.append(a[i])
                size_a *= src[a[i]]
                i += 1
            elif size_b < size_a and j < len(b):
                group_b.append(b[j])
                size_b *= dst[b[j]]
                j += 1
            else:
                return None
        groups.append((group_a, group_b))
    return groups if i == len(a) and j == len(b) else None


def mode(operands: list[str], result: str, cost: float = 0.0, name: str | None = None) -> dict:
    """One problem mode."""
    return {"name": name or result, "operands": list(operands), "results": [result], "cost": cost}


def _single_element(node) -> bool:
    val = tensor_of(node)
    return val is not None and val.numel() == 1


def tensor_inputs(node) -> list:
    """The node's input nodes that hold a tensor (or a tuple of them), in argument order, each once."""
    return [n for n in node.all_input_nodes if rank(n) is not None]


class Prices:
    """What a rule's modes are priced with: called, a conversion's microseconds (`Price`); `op_us(op_class, work,
    elem_bytes, units=0)`, one op's, where the problem is built with a run-time profile (else None: no op is
    priced)."""

    def __init__(self, conversion: Price, op_us: Callable[..., float] | None = None):
        self.conversion, self.op_us = conversion, op_us

    def __call__(self, shape, elem: int, perm) -> float:
        return self.conversion(shape, elem, perm)


def prices(profile, threads: int) -> Prices:
    """`profile`'s conversion and op curves at `threads`, as the rules' modes and the conversions are priced."""
    from cost_models import xnnpack as xnn_cost

    def conversion(shape, elem, perm):
        return round(xnn_cost.conversion_us(profile, shape, elem, perm, threads), 4)

    def op_us(op_class, work, elem, units=0.0):
        return profile.op_us(op_class, work, elem, threads, units)

    return Prices(conversion, op_us)


# The ops XNNPACK runs as copies of runs (`contiguous_run`), whose price depends on the order they copy in.
STRIDED_COPY_TARGETS = ("cat.default", "slice_copy.Tensor")


def contiguous_run(node, label: str) -> int | None:
    """The elements of the shortest run a cat or slice_copy copies whole with its result stored in `label`'s
    order: the copied dim's extent (each input's, for cat) times every dim stored inside it; None for other ops."""
    name = short_target(node.target)
    if name not in STRIDED_COPY_TARGETS:
        return None
    sources = node.args[0] if name == "cat.default" else [node]
    tensors = [tensor_of(n) for n in sources if isinstance(n, torch.fx.Node)]
    if not tensors or any(t is None for t in tensors):
        return None
    ndim = tensors[0].dim()
    dim = (node.args[1] if len(node.args) > 1 else 0) % ndim
    order = dim_order(label, ndim)
    inner = order[order.index(dim) :]
    return min(int(torch.Size([t.shape[d] for d in inner]).numel()) for t in tensors)


def copy_op_class(node, label: str) -> str:
    """A copy's op class with its result stored in `label`'s order: "copy@strided" for a cat or slice_copy in
    short runs (`cost_models.xnnpack.copy_class`), else "copy"."""
    run = contiguous_run(node, label)
    return "copy" if run is None else copy_class(run * elem_bytes(node))


def strided_copy_us(node, label: str, op_us: Callable[[str, float, int], float]) -> float:
    """What a cat or slice_copy costs in `label`'s order beyond a copy of whole runs (0 where its runs are long, or
    the profile prices both alike)."""
    op_class, val = copy_op_class(node, label), tensor_of(node)
    if op_class == "copy" or val is None:
        return 0.0
    work, elem = float(val.numel()), elem_bytes(node)
    return max(0.0, op_us(op_class, work, elem) - op_us("copy", work, elem))


PAD_TARGET = "constant_pad_nd.default"


def pad_rows(node, label: str) -> int | None:
    """The rows XNNPACK's constant pad calls its kernel on with its tensors stored in `label`'s order (None for any
    other op): its output's elements over one row, a row being the innermost stored dim, merged with the dims
    outside it up to the first padded one where it is not padded itself (`reshape_constant_pad_nd`: a dim joins
    the one inside it where neither is padded)."""
    out = tensor_of(node)
    if short_target(node.target) != PAD_TARGET or out is None or out.dim() == 0:
        return None
    pads = list(node.args[1])
    padded = {out.dim() - 1 - i // 2 for i in range(len(pads)) if pads[i]}  # (before, after) from the last dim
    order = dim_order(label, out.dim())
    row = int(out.shape[order[-1]])
    if order[-1] not in padded:
        for d in reversed(order[:-1]):
            if d in padded:
                break
            row *= int(out.shape[d])
    return int(out.numel()) // max(1, row)


def folded_pad(node, label: str) -> bool:
    """Whether XNNPACK folds the constant pad into the convolution it feeds (its subgraph fusion): a pad of H and W
    alone by zero, stored NHWC, whose one reader is a (depthwise) convolution of more than 1x1 taps. It then runs
    no operator (ETDump: no `Constant Pad` event); an NCHW pad feeds its convolution through a transpose and
    runs."""
    if short_target(node.target) != PAD_TARGET or label != CHANNELS_LAST or rank(node) != 4:
        return False
    pads = list(node.args[1])
    value = node.args[2] if len(node.args) > 2 else 0.0
    users = list(node.users)
    if value != 0 or any(pads[4:]) or len(users) != 1 or users[0].args[0] is not node:
        return False
    reader = users[0]
    # A 1x1 reader does not take it (ETDump: an empty pad before MobileNetV2's pointwise convolutions runs).
    weight = tensor_of(reader.args[1]) if short_target(reader.target) == "convolution.default" else None
    return weight is not None and list(weight.shape[2:]) != [1, 1]


def pad_rows_us(node, label: str, op_us: Callable[..., float]) -> float:
    """What a constant pad costs in `label`'s order beyond its cheaper order (0 for a pad of another rank, which
    runs contiguous): its class's curve of elements and its rows (`pad_rows`), or nothing where XNNPACK folds it
    into the convolution it feeds (`folded_pad`)."""
    val = tensor_of(node)
    if val is None or rank(node) != 4:
        return 0.0

    def whole(order: str) -> float:
        rows = pad_rows(node, order)
        if not rows or folded_pad(node, order):
            return 0.0
        return op_us(PAD_COPY, float(val.numel()), kernel_elem_bytes(node), rows)

    return max(0.0, whole(label) - min(whole(order) for order in LABELS))


class OpRule:
    """Default: every tensor input is an operand; all contiguous."""

    kind: ClassVar[str] = "contiguous"

    def operands(self, node) -> list:
        """The input nodes whose dim order the op constrains (default: every tensor input)."""
        return tensor_inputs(node)

    def modes(self, node, operands: list, price: Price) -> list[dict]:
        """The op's problem modes (default: everything contiguous); `price` prices a data movement the op itself runs."""
        return [mode([CONTIGUOUS] * len(operands), CONTIGUOUS)]


class ChannelsLastOp(OpRule):
    """An NHWC kernel (conv, pooling, mean over H and W, ...): its first input (each tensor of a list there)
    channels_last, and so its result; its other inputs are the visitor's (weights, bias). 4-D only."""

    kind = "channels_last"

    def operands(self, node) -> list:
        """The first argument's tensors (weights and bias are laid out by the visitor itself)."""
        first = node.args[0]
        items = first if isinstance(first, (list, tuple)) else [first]
        return [n for n in items if isinstance(n, torch.fx.Node)]

    def modes(self, node, operands, price):
        """All channels_last, where every operand is 4-D (none otherwise: stock cannot lower it either)."""
        if rank(node) != 4 or any(rank(n) != 4 for n in operands):
            return []
        return [mode([CHANNELS_LAST] * len(operands), CHANNELS_LAST)]


class WholeTensorReduction(OpRule):
    """An op that reduces its whole input to scalars (choose_qparams.tensor: one scale and zero point), which no
    stored order changes: it constrains no operand."""

    kind = "order-blind"

    def operands(self, node) -> list:
        """None: the input may be stored in either order."""
        return []


class ContiguousOp(OpRule):
    """An NCHW-only op (linear, squeeze, unsqueeze): every tensor input and its result contiguous."""


class Follow(OpRule):
    """An op whose visitor writes its result in the order it reads its inputs: all its tensors in one label;
    channels_last where all of them have the result's rank and it is one of `ranks` (an element-wise visitor is
    blind to the order at any rank; one that remaps its axis under the tag knows NHWC only)."""

    kind = "follow"

    def __init__(self, ranks: tuple[int, ...] = ORDERED_RANKS):
        self.ranks = ranks

    def operands(self, node) -> list:
        """Every tensor input but a single-element one (a lifted scalar), which has no order to follow."""
        return [n for n in tensor_inputs(node) if not _single_element(n)]

    def modes(self, node, operands, price):
        """All contiguous, or (see the class docstring) all channels_last."""
        out = [mode([CONTIGUOUS] * len(operands), CONTIGUOUS)]
        if rank(node) in self.ranks and all(rank(n) == rank(node) for n in operands):
            out.append(mode([CHANNELS_LAST] * len(operands), CHANNELS_LAST))
        return out


class OrderPricedCopy(Follow):
    """A copy XNNPACK runs differently in either order: `Follow` at rank 4, each mode priced (where the problem has
    a run-time profile) by `order_us(node, label, op_us)`, what the copy costs in that order: cat and slice_copy
    beyond whole runs (`strided_copy_us`: NHWC along channels copies C elements per pixel), a constant pad beyond
    its cheaper order (`pad_rows_us`: NHWC calls the kernel once per pixel, NCHW once per line of a channel; a
    zero pad NHWC into a convolution runs none). `pricing.layout_cost` prices a tagged graph's copies so too."""

    def __init__(self, order_us: Callable[..., float]):
        super().__init__(ranks=(4,))
        self.order_us = order_us

    def modes(self, node, operands, price: Prices):
        """`Follow`'s modes, each with its order's price."""
        out = super().modes(node, operands, price)
        if price.op_us is not None:
            for each in out:
                each["cost"] = round(self.order_us(node, each["results"][0], price.op_us), 4)
        return out


class Reshape(OpRule):
    """view_copy, squeeze_copy, unsqueeze_copy: one XNNPACK reshape, which runs in place (ETDump: 0 us). Any
    pair of orders in which the bytes stay where they are (`keeps_bytes`), at no cost: NHWC [N, C, H, W] to NLC
    [N, C, H*W], an NLC Conv1d activation unsqueezed to NHWC [N, C, L, 1], and, as stock, any order to itself
    where the merged and split dims stay adjacent."""

    kind = "reshape"

    def operands(self, node) -> list:
        """The tensor reshaped."""
        return [node.args[0]]

    def modes(self, node, operands, price):
        """Every (input order, result order) pair in which the reshape moves no byte (contiguous to contiguous
        always)."""
        src, dst = tensor_of(node.args[0]), tensor_of(node)
        if src is None or dst is None:
            return [mode([CONTIGUOUS], CONTIGUOUS)]
        return [
            mode([a], b, 0.0, f"{a}->{b}")
            for a in labels_for(node.args[0])
            for b in labels_for(node)
            if (a, b) == (CONTIGUOUS, CONTIGUOUS) or keeps_bytes(src.shape, a, dst.shape, b)
        ]


class MemoryFormatCopy(OpRule):
    """`_to_copy(memory_format=...)`: a conversion the graph already holds. Its visitor always transposes (it
    reads the other order); read in its own order it copies nothing, and the write-back removes it, as stock's
    RemoveRedundantCopyPass would."""

    kind = "conversion"

    def operands(self, node) -> list:
        """The tensor converted."""
        return [node.args[0]]

    def modes(self, node, operands, price):
        """Converting from the other order (one transpose), or reading its own order (removed, free)."""
        if rank(node) != 4:
            return [mode([CONTIGUOUS], CONTIGUOUS)]
        dst = CHANNELS_LAST if node.kwargs.get("memory_format") == torch.channels_last else CONTIGUOUS
        src = CONTIGUOUS if dst == CHANNELS_LAST else CHANNELS_LAST
        cost = conversion_us(price, tensor_of(node).shape, elem_bytes(node), [0, 1, 2, 3], src, dst)
        return [mode([src], dst, cost), mode([dst], dst, 0.0, name=f"{dst} (removed)")]


class Permute(OpRule):
    """permute_copy: any order in, any order out, priced by the permutation the bytes go through; free where
    that moves no byte and the serializer can elide it (`permute_elided`)."""

    kind = "permute"

    def operands(self, node) -> list:
        """The tensor permuted."""
        return [node.args[0]]

    def modes(self, node, operands, price):
        """One mode per (input order, result order)."""
        source = tensor_of(node.args[0])
        perm = [d % source.dim() for d in node.args[1]]
        out = []
        for src in labels_for(node.args[0]):
            for dst in labels_for(node):
                elided = permute_elided(node, src, dst)
                cost = 0.0 if elided else conversion_us(price, source.shape, elem_bytes(node), perm, src, dst)
                out.append(mode([src], dst, cost, f"{src}->{dst}"))
        return out


def permute_elided(node, src: str, dst: str) -> bool:
    """Whether permute_copy `node`, reading `src` and writing `dst`, is serialized as no operator at all: its
    physical permutation is the identity (the result's bytes and dims are its input's), it changes the stored
    order (stock's never does: a stock-tagged graph keeps stock's bytes), its input and result are not both the
    delegate's own inputs or outputs (one XNNPACK value cannot be both), and both carry one quantization."""
    source = node.args[0]
    perm = [d % rank(source) for d in node.args[1]]
    if src == dst or physical_permutation(perm, src, dst) != list(range(len(perm))):
        return False
    if _is_external(source) and _is_external(node):
        return False
    return _quantization_in(source) == _quantization_out(node)


def _is_external(node) -> bool:
    """A value XNNPACK makes a delegate input or output: a placeholder (behind its q / dq, where quantized) or a
    value the delegate returns (or returns quantized)."""
    while is_dequantize(node) and isinstance(node.args[0], torch.fx.Node) and is_quantize(node.args[0]):
        node = node.args[0].args[0]
    readers = [node, *(u for u in node.users if is_quantize(u))]
    return node.op == "placeholder" or any(u.op == "output" for r in readers for u in r.users)


def _quantization_in(node) -> tuple:
    return tuple(node.args[1:]) if is_dequantize(node) else ()


def _quantization_out(node) -> tuple:
    quantized = [u for u in node.users if is_quantize(u)]
    return tuple(quantized[0].args[1:]) if quantized else ()


def elem_bytes(node) -> int:
    """Bytes per element of the node's tensor as the delegate stores it: a quantized graph's dequantized
    values (a dq's output, or a quantized kernel's result that only quantize ops read) are int8 inside XNNPACK;
    a float value a quantize reads that no quantized kernel wrote (the delegate's input, a conversion of it) is
    not: XNNPACK converts it to int8 at that quantize."""
    val = tensor_of(node)
    if val is None:
        return 4
    if is_dequantize(node) or (
        node.users and all(is_quantize(u) for u in node.users) and any(is_dequantize(n) for n in node.all_input_nodes)
    ):
        return 1
    return val.element_size()


def kernel_elem_bytes(node) -> int:
    """Bytes per element the node's own XNNPACK kernel runs on: 4 where its result is quantized by Converts of
    its own (its quantize users not folded into it: an int8 program's pads, which XNNPACK runs as `Constant Pad
    (ND, X32)` between two Converts), else what the delegate stores (`elem_bytes`)."""
    from executorch.backends.xnnpack.utils.quant_utils import is_tagged_as_implicit_q_dq

    users = list(node.users)
    if users and all(is_quantize(u) and not is_tagged_as_implicit_q_dq(u) for u in users):
        return 4
    return elem_bytes(node)


def is_quantize(node) -> bool:
    """Whether the node is a quantize_per_tensor / per_channel call."""
    return short_target(node.target).startswith("quantize_per_") if node.op == "call_function" else False


def is_dequantize(node) -> bool:
    """Whether the node is a dequantize_per_tensor / per_channel call."""
    return short_target(node.target).startswith("dequantize_per_") if node.op == "call_function" else False


# Element-wise visitors (and per-tensor quantization): blind to the stored order at any rank.
ELEMENTWISE_TARGETS = (
    "add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "minimum.default", "maximum.default", "abs.default",
    "neg.default", "relu.default", "hardtanh.default", "clamp.default", "sigmoid.default", "tanh.default",
    "elu.default", "leaky_relu.default", "hardswish.default", "gelu.default", "exp.default", "log.default",
    "sqrt.default", "rsqrt.default", "square.default", "ceil.default", "floor.default", "sin.default",
    "cos.default", "pow.Tensor_Scalar", "clone.default", "quantize_per_tensor.default",
    "dequantize_per_tensor.default", "quantize_per_tensor.tensor", "dequantize_per_tensor.tensor",
)  # fmt: skip
# Visitors that remap their axis (or pads) under stock's NHWC tag: they know 4-D NHWC and nothing else.
NHWC_REMAPPING_TARGETS = ("cat.default", "slice_copy.Tensor", "constant_pad_nd.default", "getitem")
# Reshapes the stage serializes itself (`visitors.PhysicalReshapeVisitor`), so stock's NCHW-only rule for
# squeeze and unsqueeze (its visitors write logical shapes) does not bind them.
RESHAPE_TARGETS = ("view_copy.default", "squeeze_copy.dim", "unsqueeze_copy.default")

_REGISTRY: dict[str, OpRule] = {}


def register(name: str, rule: OpRule) -> None:
    """One rule per op target name ('convolution.default')."""
    if name in _REGISTRY:
        raise ValueError(f"XNNPACK op rule for {name!r} registered twice")
    _REGISTRY[name] = rule


@functools.cache
def _stock_sets() -> tuple[frozenset[str], frozenset[str]]:
    from executorch.backends.xnnpack._passes.channels_last_tagged_reshape_pass import ChannelsLastTaggedReshapePass

    def names(ops):
        return frozenset(short_target(op) for op in ops)

    stock = ChannelsLastTaggedReshapePass
    return names(stock.memory_sensitive_ops_nhwc), names(stock.memory_sensitive_ops_nchw)


for _name in ELEMENTWISE_TARGETS:
    register(_name, Follow())
for _name in NHWC_REMAPPING_TARGETS:
    order_us = strided_copy_us if _name in STRIDED_COPY_TARGETS else pad_rows_us if _name == PAD_TARGET else None
    register(_name, OrderPricedCopy(order_us) if order_us else Follow(ranks=(4,)))
for _name in RESHAPE_TARGETS:
    register(_name, Reshape())
register("permute_copy.default", Permute())
register("_to_copy.default", MemoryFormatCopy())
register("choose_qparams.tensor", WholeTensorReduction())


def rule_for(node) -> OpRule:
    """The rule of a call_function node: the stage's reshapes first (it serializes them itself), then stock's
    NHWC and NCHW sets, then the registry, else contiguous."""
    name = short_target(node.target)
    if name in RESHAPE_TARGETS:
        return _REGISTRY[name]
    channels_last, contiguous = _stock_sets()
    if name in channels_last:
        return ChannelsLastOp()
    if name in contiguous:
        return ContiguousOp()
    return _REGISTRY.get(name, OpRule())
