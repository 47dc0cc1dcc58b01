"""The stage's post-condition on a tagged XNNPACK delegate graph: an independent reading of what the serializer
assumes, not the stage's rule tables.

Read from executorch itself: the NHWC kernels and NCHW kernels are `ChannelsLastTaggedReshapePass`'s own sets;
what the serializer assumes is read from its visitors: `define_tensor` lays each tensor out by its own tag, a
visitor (other than a conversion's and the permute's) writes its result in the order it reads its inputs, a
`_to_copy(memory_format=...)` reads the order it does not write, and the delegate's outputs leave in the order
the program stores them. The executor settles the rest (the comparison runs both programs).
"""

from __future__ import annotations

import torch
from executorch.backends.xnnpack._passes.channels_last_tagged_reshape_pass import ChannelsLastTaggedReshapePass

from graph_io.fx import tensor_of

_STOCK = ChannelsLastTaggedReshapePass
# Visitors that write another order than they read (so they are exempt from "result order = input order").
_REORDERING = ("aten.permute_copy.default", "aten._to_copy.default")


class LayoutValidationError(AssertionError):
    """A tagged graph the serializer would lay out wrongly; names the node and the reason."""


def _nhwc(node) -> bool:
    return bool(node.meta.get(_STOCK.XNN_NHWC_NODE, False))


def _stored_nhwc(node) -> bool:
    val = tensor_of(node)
    if val is None or val.dim() != 4:
        return False
    return val.is_contiguous(memory_format=torch.channels_last) and not val.is_contiguous()


def validate(graph_module) -> None:
    """Raise LayoutValidationError at the first node whose tags the serializer would misread."""
    for node in graph_module.graph.nodes:
        if node.op == "output":
            for out in node.args[0]:
                if isinstance(out, torch.fx.Node) and tensor_of(out) is not None and _nhwc(out) != _stored_nhwc(out):
                    raise LayoutValidationError(
                        f"output {out.name}: leaves the delegate {'NHWC' if _nhwc(out) else 'NCHW'}, "
                        f"the program stores it {'NHWC' if _stored_nhwc(out) else 'NCHW'}"
                    )
            continue
        if node.op != "call_function":
            continue
        val = tensor_of(node)
        if _nhwc(node) and (val is None or val.dim() != 4):
            raise LayoutValidationError(f"{node.name}: tagged NHWC but not a 4-D tensor")
        inputs = [n for n in node.all_input_nodes if tensor_of(n) is not None]
        if node.target in _STOCK.memory_sensitive_ops_nhwc:
            first = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
            bad = [n.name for n in first if isinstance(n, torch.fx.Node) and not _STOCK.is_nhwc_node(n)]
            if bad or not _nhwc(node):
                raise LayoutValidationError(f"{node.name} ({node.target}): an NHWC kernel reading NCHW {bad}")
            continue
        if node.target in _STOCK.memory_sensitive_ops_nchw:
            bad = [n.name for n in inputs if _STOCK.is_nhwc_node(n)]
            if bad or _nhwc(node):
                raise LayoutValidationError(f"{node.name} ({node.target}): an NCHW kernel reading NHWC {bad}")
            continue
        name = getattr(node.target, "__name__", str(node.target))
        if name == "aten._to_copy.default" and "memory_format" in node.kwargs and val is not None and val.dim() == 4:
            if _STOCK.is_nhwc_node(node.args[0]) == _nhwc(node):
                raise LayoutValidationError(f"{node.name}: a memory-format copy whose input is already in its order")
            continue
        if name in _REORDERING:
            continue
        data = [n for n in inputs if tensor_of(n).dim() == 4 and not _is_weight_of(n, node)]
        bad = [n.name for n in data if _STOCK.is_nhwc_node(n) != _nhwc(node)]
        if bad:
            raise LayoutValidationError(
                f"{node.name} ({name}): writes {'NHWC' if _nhwc(node) else 'NCHW'} from inputs stored otherwise {bad}"
            )


def _is_weight_of(operand, node) -> bool:
    """Inputs past the first of an op whose visitor lays them out itself (weights, bias of a kernel)."""
    return node.target in _STOCK.memory_sensitive_ops_nhwc and operand is not node.args[0]
