"""What each op inside an XNNPACK delegate allows of its tensors' dim orders, registered once per op target.

A tensor is either *contiguous* (its logical dim order) or *channels_last* (a 4-D tensor stored NHWC: stock's
`XNN_NHWC_NODE` tag). Every rule answers, for one node:

* `operands(node)`: the input nodes whose dim order the op constrains (a conv's weight and bias are the
  visitor's own business, not operands);
* `modes(node, operands, price)`: the (operand labels -> result label, cost) combinations its XNNPACK visitor
  serializes correctly. `price(shape, elem_bytes, perm)` is a conversion's microseconds.

Which ops want which order is read from executorch's own pass (`ChannelsLastTaggedReshapePass`'s
`memory_sensitive_ops_nhwc` / `_nchw` sets), so a new channels-last op of a later executorch is one more member
there, not here. What is written here is what stock leaves implicit in its visitors: an op that follows its
inputs into channels_last is one whose visitor is layout-blind (element-wise ops) or remaps its axes under the
tag (cat, slice_copy, constant_pad_nd, a view that keeps N and C); any other op (softmax over the last dim,
bmm, ...) stays contiguous, where every visitor is right. A permute may read one order and write the other:
its physical permutation (`physical_permutation`) is what the delegate runs (`visitors.py`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ClassVar

import torch

from graph_io.fx import tensor_of

CONTIGUOUS = "contiguous"
CHANNELS_LAST = "channels_last"
LABELS = (CONTIGUOUS, CHANNELS_LAST)
# Physical dim k of a tensor stored in a label holds logical dim ORDER[label][k].
ORDER = {CONTIGUOUS: (0, 1, 2, 3), CHANNELS_LAST: (0, 2, 3, 1)}

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


def labels_for(node) -> tuple[str, ...]:
    """The labels a node's value may take: both for a 4-D tensor, contiguous otherwise."""
    return LABELS if rank(node) == 4 else (CONTIGUOUS,)


def physical_permutation(perm: list[int], src: str, dst: str) -> list[int]:
    """What a 4-D permute_copy(x, perm) runs on the bytes when x is stored in `src` and its result in `dst`:
    output physical dim k reads input physical dim q[k] = a^-1[perm[b[k]]] (a, b the two stored orders)."""
    a, b = ORDER[src], ORDER[dst]
    a_inv = [a.index(d) for d in range(4)]
    return [a_inv[perm[b[k]]] for k in range(4)]


def mode(operands: list[str], result: str, cost: float = 0.0, name: str | None = None) -> dict:
    """One problem mode."""
    return {"name": name or result, "operands": list(operands), "results": [result], "cost": cost}


def tensor_inputs(node) -> list:
    """The node's input nodes that hold a tensor (or a tuple of them), in argument order, each once."""
    return [n for n in node.all_input_nodes if rank(n) is not None]


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
    channels_last, and so its result; its other inputs are the visitor's (weights, bias)."""

    kind = "channels_last"

    def operands(self, node) -> list:
        """The input nodes whose dim order the op constrains (default: every tensor input)."""
        first = node.args[0]
        items = first if isinstance(first, (list, tuple)) else [first]
        return [n for n in items if isinstance(n, torch.fx.Node)]

    def modes(self, node, operands, price):
        """The op's problem modes (default: everything contiguous); `price` prices a data movement the op itself runs."""
        return [mode([CHANNELS_LAST] * len(operands), CHANNELS_LAST)]


class ContiguousOp(OpRule):
    """An NCHW-only op (linear, squeeze, unsqueeze): every tensor input and its result contiguous."""


class Follow(OpRule):
    """A layout-blind op: all its tensors in one label; channels_last where every one of them is 4-D."""

    kind = "follow"

    def modes(self, node, operands, price):
        """The op's problem modes (default: everything contiguous); `price` prices a data movement the op itself runs."""
        out = [mode([CONTIGUOUS] * len(operands), CONTIGUOUS)]
        if rank(node) == 4 and all(rank(n) == 4 for n in operands):
            out.append(mode([CHANNELS_LAST] * len(operands), CHANNELS_LAST))
        return out


class View(Follow):
    """A reshape is a byte copy: channels_last only where N and C stay as they are (H and W re-split), which
    is the one case where the NHWC bytes reshaped give the reshaped tensor's NHWC bytes."""

    def operands(self, node) -> list:
        """The input nodes whose dim order the op constrains (default: every tensor input)."""
        return [node.args[0]]

    def modes(self, node, operands, price):
        """The op's problem modes (default: everything contiguous); `price` prices a data movement the op itself runs."""
        out = [mode([CONTIGUOUS], CONTIGUOUS)]
        src, dst = tensor_of(node.args[0]), tensor_of(node)
        same_n_and_c = src is not None and dst is not None and src.dim() == dst.dim() == 4
        if same_n_and_c and src.shape[0] == dst.shape[0] and src.shape[1] == dst.shape[1]:
            out.append(mode([CHANNELS_LAST], CHANNELS_LAST))
        return out


class MemoryFormatCopy(OpRule):
    """`_to_copy(memory_format=...)`: a conversion the graph already holds. Its visitor always transposes (it
    reads the other order); read in its own order it copies nothing, and the write-back removes it, as stock's
    RemoveRedundantCopyPass would."""

    kind = "conversion"

    def operands(self, node) -> list:
        """The input nodes whose dim order the op constrains (default: every tensor input)."""
        return [node.args[0]]

    def modes(self, node, operands, price):
        """The op's problem modes (default: everything contiguous); `price` prices a data movement the op itself runs."""
        if rank(node) != 4:
            return [mode([CONTIGUOUS], CONTIGUOUS)]
        dst = CHANNELS_LAST if node.kwargs.get("memory_format") == torch.channels_last else CONTIGUOUS
        src = CONTIGUOUS if dst == CHANNELS_LAST else CHANNELS_LAST
        perm = physical_permutation([0, 1, 2, 3], src, dst)
        return [mode([src], dst, price(list(tensor_of(node).shape), elem_bytes(node), perm)),
                mode([dst], dst, 0.0, name=f"{dst} (removed)")]  # fmt: skip


class Permute(OpRule):
    """permute_copy: any order in, any order out, priced by the permutation the bytes go through."""

    kind = "permute"

    def operands(self, node) -> list:
        """The input nodes whose dim order the op constrains (default: every tensor input)."""
        return [node.args[0]]

    def modes(self, node, operands, price):
        """The op's problem modes (default: everything contiguous); `price` prices a data movement the op itself runs."""
        source = tensor_of(node.args[0])
        perm = [d % source.dim() for d in node.args[1]]
        shape = list(source.shape)
        if source.dim() != 4:
            return [mode([CONTIGUOUS], CONTIGUOUS, price(shape, elem_bytes(node), perm))]
        return [
            mode([src], dst, price(shape, elem_bytes(node), physical_permutation(perm, src, dst)), f"{src}->{dst}")
            for src in LABELS
            for dst in LABELS
        ]


def elem_bytes(node) -> int:
    """Bytes per element of the node's tensor as the delegate stores it: a quantized graph's dequantized
    values (a dq's output, or a value only quantize ops read) are int8 inside XNNPACK."""
    val = tensor_of(node)
    if val is None:
        return 4
    if is_dequantize(node) or (node.users and all(is_quantize(u) for u in node.users)):
        return 1
    return val.element_size()


def is_quantize(node) -> bool:
    """Whether the node is a quantize_per_tensor / per_channel call."""
    return short_target(node.target).startswith("quantize_per_") if node.op == "call_function" else False


def is_dequantize(node) -> bool:
    """Whether the node is a dequantize_per_tensor / per_channel call."""
    return short_target(node.target).startswith("dequantize_per_") if node.op == "call_function" else False


# Layout-blind visitors (element-wise, per-tensor quantization) and those that remap their axes under the tag.
FOLLOW_TARGETS = (
    "add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "minimum.default", "maximum.default", "abs.default",
    "neg.default", "relu.default", "hardtanh.default", "clamp.default", "sigmoid.default", "tanh.default",
    "elu.default", "leaky_relu.default", "hardswish.default", "gelu.default", "exp.default", "log.default",
    "sqrt.default", "rsqrt.default", "square.default", "ceil.default", "floor.default", "sin.default",
    "cos.default", "pow.Tensor_Scalar", "clone.default", "quantize_per_tensor.default",
    "dequantize_per_tensor.default", "quantize_per_tensor.tensor", "dequantize_per_tensor.tensor",
    "cat.default", "slice_copy.Tensor", "constant_pad_nd.default", "getitem",
)  # fmt: skip

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


for _name in FOLLOW_TARGETS:
    register(_name, Follow())
register("view_copy.default", View())
register("permute_copy.default", Permute())
register("_to_copy.default", MemoryFormatCopy())


def rule_for(node) -> OpRule:
    """The rule of a call_function node: stock's NHWC and NCHW sets first, then the registry, else contiguous."""
    name = short_target(node.target)
    channels_last, contiguous = _stock_sets()
    if name in channels_last:
        return ChannelsLastOp()
    if name in contiguous:
        return ContiguousOp()
    return _REGISTRY.get(name, OpRule())
