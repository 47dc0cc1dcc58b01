"""The stage's post-condition on a tagged XNNPACK delegate graph: an independent reading of what the serializer
assumes, not the stage's rule tables.

Read from executorch itself: the NHWC kernels and NCHW kernels are `ChannelsLastTaggedReshapePass`'s own sets;
what the serializer assumes is read from its visitors: `define_tensor` lays each tensor out by its own tag, a
visitor (other than a conversion's and the permute's) writes its result in the order it reads its inputs, a
`_to_copy(memory_format=...)` reads the order it does not write, and the delegate's outputs leave in the order
the program stores them. Where the stage goes past stock (its own serializers, `visitors.py`), the check is
computed, not looked up: a reshape between two orders, and a permute the serializer elides, must leave every
element at its byte offset (offsets enumerated with numpy), and an op stored NLC must give the same result on
the stored arrays as on the logical ones (run on random tensors of its shapes). The executor settles the rest
(the comparison runs both programs).
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from executorch.backends.xnnpack._passes.channels_last_tagged_reshape_pass import ChannelsLastTaggedReshapePass

from graph_io.fx import tensor_of
from layout_solver.xnnpack.op_rules import permute_elided
from layout_solver.xnnpack.visitors import ORDER_KEY, RESHAPES, label_of

_STOCK = ChannelsLastTaggedReshapePass
# Visitors that write another order than they read (so they are exempt from "result order = input order").
_REORDERING = ("aten.permute_copy.default", "aten._to_copy.default")
# What a tag means: physical dim k holds logical dim order[k].
_NHWC, _NLC = (0, 2, 3, 1), (0, 2, 1)


class LayoutValidationError(AssertionError):
    """A tagged graph the serializer would lay out wrongly; names the node and the reason."""


def _nhwc(node) -> bool:
    return bool(node.meta.get(_STOCK.XNN_NHWC_NODE, False))


def _order_free(node) -> bool:
    """A 4-D tensor with C = H = W = 1: NHWC and NCHW give it the same dims and the same bytes, so a tag there
    says nothing the serializer could misread."""
    val = tensor_of(node)
    return val is not None and val.dim() == 4 and tuple(val.shape[1:]) == (1, 1, 1)


def _stored_nhwc(node) -> bool:
    """Whether the program stores the tensor NHWC: the dim order the emitter writes into its TensorSpec, which
    XNNExecutor maps the delegate's output dims by."""
    from executorch.exir.tensor import TensorSpec

    val = tensor_of(node)
    if val is None or val.dim() != 4:
        return False
    return tuple(TensorSpec.from_tensor(val).dim_order) == _NHWC


def _order(node) -> tuple[int, ...]:
    """The dim order the serializer lays the node's tensor out in, read off its tags."""
    ndim = tensor_of(node).dim()
    if ndim == 4 and _nhwc(node):
        return _NHWC
    if ndim == 3 and node.meta.get(ORDER_KEY, False):
        return _NLC
    return tuple(range(ndim))


def _offsets(shape, order) -> np.ndarray:
    """Each logical element's offset in memory, for a tensor of `shape` stored in dim `order`."""
    stored = np.arange(int(np.prod(shape, dtype=np.int64))).reshape([int(shape[d]) for d in order])
    return stored.transpose(np.argsort(order))


def _bytes_stay(node) -> bool:
    """Whether the reshape or permute `node` leaves every element at its offset, stored as tagged."""
    source = node.args[0]
    moved = _offsets(tensor_of(source).shape, _order(source))
    if getattr(node.target, "__name__", "") == "aten.permute_copy.default":
        moved = moved.transpose([d % moved.ndim for d in node.args[1]])
    else:
        moved = moved.reshape(tuple(tensor_of(node).shape))
    return np.array_equal(moved, _offsets(tensor_of(node).shape, _order(node)))


@functools.lru_cache(maxsize=256)
def _commutes(target, shapes: tuple, dtypes: tuple, constants: tuple, order: tuple) -> bool:
    """Whether `target`, run on random tensors of `shapes` (with the non-tensor `constants` in place), gives the
    same result stored in `order` as it gives on the inputs stored in `order`: what a visitor that lays every
    tensor out by its tag computes."""
    generator = torch.Generator().manual_seed(0)
    tensors = [torch.randn(shape, generator=generator).to(dtype) if dtype.is_floating_point
               else torch.randint(-100, 100, shape, generator=generator).to(dtype)
               for shape, dtype in zip(shapes, dtypes)]  # fmt: skip
    args = [tensors.pop(0) if c is _TENSOR else c for c in constants]
    try:
        logical = target(*args)
        stored = target(*[a.permute(order).contiguous() if isinstance(a, torch.Tensor) and a.dim() == len(order)
                          else a for a in args])  # fmt: skip
    except Exception:  # noqa: BLE001 - an op that cannot run on permuted operands does not commute
        return False
    return torch.equal(logical.permute(order).contiguous(), stored)


_TENSOR = object()


def _check_stored_nlc(node, name: str) -> None:
    """A node whose operands or result the stage stores NLC: an op whose visitor lays every tensor out by its
    tag (all operands NLC, the result too) must compute the same on the stored arrays."""
    inputs = [n for n in node.all_input_nodes if tensor_of(n) is not None and tensor_of(n).numel() > 1]
    if not (_order(node) == _NLC or any(_order(n) == _NLC for n in inputs)):
        return
    if any(_order(n) != _NLC for n in [node, *inputs]):
        raise LayoutValidationError(f"{node.name} ({name}): mixes NLC and other orders")
    if node.kwargs:
        raise LayoutValidationError(f"{node.name} ({name}): stored NLC with keyword arguments")
    constants = tuple(_TENSOR if isinstance(a, torch.fx.Node) else a for a in node.args)
    if any(isinstance(a, (list, dict)) for a in constants):
        raise LayoutValidationError(f"{node.name} ({name}): stored NLC with a list argument")
    shapes = tuple(tuple(tensor_of(n).shape) for n in node.args if isinstance(n, torch.fx.Node))
    dtypes = tuple(tensor_of(n).dtype for n in node.args if isinstance(n, torch.fx.Node))
    if not _commutes(node.target, shapes, dtypes, constants, _NLC):
        raise LayoutValidationError(f"{node.name} ({name}): stored NLC, but it does not compute the same on NLC data")


def stored_outputs(graph_module) -> list[bool | None]:
    """Per graph output, whether the program stores it NHWC (None for a non-tensor): read before a pass
    rewrites the delegate, since the program outside keeps these orders whatever the pass does inside."""
    outputs = graph_module.graph.output_node().args[0]
    return [_stored_nhwc(o) if isinstance(o, torch.fx.Node) and tensor_of(o) is not None else None for o in outputs]


def validate(graph_module, stored: list[bool | None] | None = None) -> None:
    """Raise LayoutValidationError at the first node whose tags the serializer would misread. `stored`: the
    outputs' stored orders (`stored_outputs` of the graph as the program gave it), else read off this graph."""
    for node in graph_module.graph.nodes:
        if node.op in ("placeholder", "get_attr") and node.meta.get(ORDER_KEY, False):
            raise LayoutValidationError(f"{node.name}: a delegate input or constant tagged NLC")
        if node.op == "output":
            _check_outputs(node, stored)
        elif node.op == "call_function":
            _check_node(node)


def _check_outputs(node, stored) -> None:
    for index, out in enumerate(node.args[0]):
        if not isinstance(out, torch.fx.Node) or tensor_of(out) is None:
            continue
        if out.meta.get(ORDER_KEY, False):
            raise LayoutValidationError(f"output {out.name}: leaves the delegate NLC, the program stores it NCL")
        nhwc = stored[index] if stored is not None else _stored_nhwc(out)
        if _nhwc(out) != nhwc:
            raise LayoutValidationError(
                f"output {out.name}: leaves the delegate {'NHWC' if _nhwc(out) else 'NCHW'}, "
                f"the program stores it {'NHWC' if nhwc else 'NCHW'}"
            )


def _check_node(node) -> None:
    val = tensor_of(node)
    name = getattr(node.target, "__name__", str(node.target))
    if _nhwc(node) and (val is None or val.dim() != 4):
        raise LayoutValidationError(f"{node.name}: tagged NHWC but not a 4-D tensor")
    if node.meta.get(ORDER_KEY, False) and (val is None or val.dim() != 3):
        raise LayoutValidationError(f"{node.name}: tagged NLC but not a 3-D tensor")
    if name == "aten.permute_copy.default":  # the stage's visitor runs whatever the two orders need
        if permute_elided(node, label_of(node.args[0]), label_of(node)) and not _bytes_stay(node):
            raise LayoutValidationError(f"{node.name}: an elided permute that moves bytes")
        return
    stored = [_order(n) for n in (node.args[0], node)] if name in RESHAPES else []
    if any(order != tuple(range(len(order))) for order in stored):  # a reshape of stored bytes, in place
        if not _bytes_stay(node):
            raise LayoutValidationError(f"{node.name} ({name}): a reshape of stored bytes that moves them")
        return
    inputs = [n for n in node.all_input_nodes if tensor_of(n) is not None]
    if (val is not None and val.dim() == 3) or any(tensor_of(n).dim() == 3 for n in inputs):
        _check_stored_nlc(node, name)
    if node.target in _STOCK.memory_sensitive_ops_nhwc:
        first = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
        bad = [n.name for n in first
               if isinstance(n, torch.fx.Node) and not _STOCK.is_nhwc_node(n) and not _order_free(n)]  # fmt: skip
        if bad or not (_nhwc(node) or _order_free(node)):
            raise LayoutValidationError(f"{node.name} ({node.target}): an NHWC kernel reading NCHW {bad}")
        return
    if node.target in _STOCK.memory_sensitive_ops_nchw:
        bad = [n.name for n in inputs if _STOCK.is_nhwc_node(n) and not _order_free(n)]
        if bad or (_nhwc(node) and not _order_free(node)):
            raise LayoutValidationError(f"{node.name} ({node.target}): an NCHW kernel reading NHWC {bad}")
        return
    if name == "aten._to_copy.default" and "memory_format" in node.kwargs and val is not None and val.dim() == 4:
        if _STOCK.is_nhwc_node(node.args[0]) == _nhwc(node):
            raise LayoutValidationError(f"{node.name}: a memory-format copy whose input is already in its order")
        return
    if name in _REORDERING or (val is None and _writes_nothing(node)):
        return
    data = [n for n in inputs if tensor_of(n).dim() == 4 and not _is_weight_of(n, node) and not _order_free(n)]
    bad = [n.name for n in data if _STOCK.is_nhwc_node(n) != _nhwc(node)]
    if bad and not _order_free(node):
        raise LayoutValidationError(
            f"{node.name} ({name}): writes {'NHWC' if _nhwc(node) else 'NCHW'} from inputs stored otherwise {bad}"
        )


def _writes_nothing(node) -> bool:
    """A node whose serializer is one of stock's skip visitors (`OpSkipOps`: choose_qparams, ...): it defines no
    XNNPACK value, so it has no order to agree with its inputs."""
    from executorch.backends.xnnpack.operators import node_visitor
    from executorch.backends.xnnpack.operators.op_skip_ops import OpSkipOps

    visitor = node_visitor._node_visitor_dict.get(getattr(node.target, "__name__", ""))  # as preprocess looks it up
    return visitor is not None and issubclass(visitor, OpSkipOps)


def _is_weight_of(operand, node) -> bool:
    """Inputs past the first of an op whose visitor lays them out itself (weights, bias of a kernel)."""
    return node.target in _STOCK.memory_sensitive_ops_nhwc and operand is not node.args[0]
