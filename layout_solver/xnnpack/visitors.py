"""The XNNPACK serializer changes the stage needs: tensors stored in an order stock never writes, and the ops that
read one order and write another.

* `label_of` / `set_label`: a 4-D tensor's order is stock's NHWC tag (`XNN_NHWC_NODE`, read by every visitor);
  a 3-D tensor stored NLC carries the stage's own tag (`ORDER_KEY`), and `define_tensor` gives it its stored dims
  (a scoped replacement of the `get_shape` it calls). Constants are never stored NLC (their data would need
  permuting as stock does for NHWC weights), which the rules guarantee.
* `PhysicalPermuteVisitor`: reads the input's and the result's order and serializes the permutation the bytes
  really go through (`op_rules.physical_permutation`); where that moves no byte it writes no operator at all and
  the result is its input's XNNPACK value (`op_rules.permute_elided` says when). Where both orders agree it is
  stock's visitor, so a stock-tagged graph serializes to the same bytes.
* `PhysicalReshapeVisitor` (view, squeeze, unsqueeze): a reshape between two orders in which the bytes stay put
  (`op_rules.keeps_bytes`) is XNNPACK's static reshape to the result's stored dims; within one order it is
  stock's visitor.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from executorch.backends.xnnpack import operators  # noqa: F401 - registers every visitor
from executorch.backends.xnnpack._passes.channels_last_tagged_reshape_pass import ChannelsLastTaggedReshapePass
from executorch.backends.xnnpack.operators import node_visitor
from executorch.backends.xnnpack.operators.node_visitor import get_tensor_value
from executorch.backends.xnnpack.operators.quant_params import QuantParams
from executorch.backends.xnnpack.serialization.xnnpack_graph_schema import (
    XNNStaticReshape,
    XNNStaticTranspose,
    XNode,
)
from executorch.backends.xnnpack.utils.utils import get_input_node

from layout_solver.xnnpack.op_rules import (
    CHANNELS_LAST,
    CONTIGUOUS,
    permute_elided,
    physical_permutation,
    physical_shape,
    rank,
)

TAG = ChannelsLastTaggedReshapePass.XNN_NHWC_NODE
# The stage's tag of a 3-D tensor stored channels-last (NLC); stock's visitors never read it.
ORDER_KEY = "layout_solver_channels_last"
PERMUTE = "aten.permute_copy.default"
RESHAPES = ("aten.view_copy.default", "aten.squeeze_copy.dim", "aten.unsqueeze_copy.default")


def label_of(node) -> str:
    """The order a node is stored in, read off its tag (stock's NHWC tag at rank 4, the stage's at rank 3)."""
    if rank(node) == 3:
        return CHANNELS_LAST if node.meta.get(ORDER_KEY, False) else CONTIGUOUS
    return CHANNELS_LAST if node.meta.get(TAG, False) else CONTIGUOUS


def set_label(node, label: str) -> None:
    """Tag a node with the order it is stored in. cat, slice_copy and view_copy read stock's tag's presence, not
    its value: a contiguous node carries none."""
    key = ORDER_KEY if rank(node) == 3 else TAG
    if label == CHANNELS_LAST:
        node.meta[key] = True
    else:
        node.meta.pop(key, None)


def _stored_dims(node):
    """`get_shape` as `define_tensor` calls it, with a 3-D tensor's dims in the order the stage stored it."""
    dims = _STOCK_GET_SHAPE(node)
    if rank(node) == 3 and node.meta.get(ORDER_KEY, False):
        return physical_shape(dims, CHANNELS_LAST)
    return dims


_STOCK_GET_SHAPE = node_visitor.get_shape
# register_node_visitor returns None: stock's classes are only reachable through the table.
_STOCK = {target: node_visitor._node_visitor_dict[target] for target in (PERMUTE, *RESHAPES)}


class PhysicalPermuteVisitor(_STOCK[PERMUTE]):
    """permute_copy serialized from both tensors' stored orders (see the module docstring)."""

    def define_node(self, node, xnn_graph, vals_to_ids, debug_handle) -> None:
        """Stock's where both orders agree; else no operator where the bytes stay put, or the physical transpose."""
        source = get_input_node(node, 0)
        ndim = source.meta["val"].dim()
        perm = [d % ndim for d in node.args[1]]
        src, dst = label_of(source), label_of(node)
        if src == dst:
            super().define_node(node, xnn_graph, vals_to_ids, debug_handle)
            return
        if permute_elided(node, src, dst) and self._alias(node, source, xnn_graph, vals_to_ids):
            return
        self.define_nodes_tensor_inputs_outputs(node, xnn_graph, vals_to_ids)
        xnn_graph.xnodes.append(
            XNode(
                xnode_union=XNNStaticTranspose(
                    input_id=vals_to_ids[source],
                    num_dims=ndim,
                    perm=physical_permutation(perm, src, dst),
                    output_id=vals_to_ids[node],
                    flags=0,
                ),
                debug_handle=debug_handle,
            )
        )

    def _alias(self, node, source, xnn_graph, vals_to_ids) -> bool:
        """Make `node` the XNNPACK value `source` is: where the result is internal, its readers read the input's
        value; where the result is a delegate output (by its serialized flags, quantized boundaries included),
        every reference to the internal input's value so far is redirected to the output's, so the input's
        producer writes the output directly. False where both are the delegate's own values: the caller then
        writes the transpose."""
        self.define_tensor(source, xnn_graph, vals_to_ids,
                           quant_params=QuantParams.from_inputs(source, self._exported_program))  # fmt: skip
        held = vals_to_ids[source]
        self.define_tensor(node, xnn_graph, vals_to_ids, quant_params=QuantParams.from_outputs(node))
        made = vals_to_ids[node]
        if not _is_external_value(xnn_graph, made):
            if get_tensor_value(xnn_graph.xvalues[-1]).id_out == made:
                xnn_graph.xvalues.pop()  # the value just made has no reader: ids are positions, so only the last
            vals_to_ids[node] = held
            return True
        if _is_external_value(xnn_graph, held):
            return False
        for xnode in xnn_graph.xnodes:
            fields = vars(xnode.xnode_union)
            for name, value in fields.items():
                if name.endswith("_id") and value == held:
                    fields[name] = made
        for other, value in list(vals_to_ids.items()):
            if value == held:
                vals_to_ids[other] = made
        return True


def _is_external_value(xnn_graph, value_id: int) -> bool:
    """Whether the serialized value `value_id` is one of the delegate's inputs or outputs."""
    for xvalue in xnn_graph.xvalues:
        tensor = get_tensor_value(xvalue)
        if tensor.id_out == value_id:
            return tensor.flags != 0
    return False


def _physical_reshape(stock_visitor):
    class PhysicalReshapeVisitor(stock_visitor):
        """A reshape serialized from both tensors' stored orders (see the module docstring)."""

        def define_node(self, node, xnn_graph, vals_to_ids, debug_handle) -> None:
            """Stock's within one order; else a static reshape to the result's stored dims."""
            source = get_input_node(node, 0)
            src, dst = label_of(source), label_of(node)
            same_order = src == dst and (src == CONTIGUOUS or (rank(source) == rank(node) == 4))
            if same_order:
                super().define_node(node, xnn_graph, vals_to_ids, debug_handle)
                return
            self.define_nodes_tensor_inputs_outputs(node, xnn_graph, vals_to_ids)
            new_shape = physical_shape(list(node.meta["val"].shape), dst)
            xnn_graph.xnodes.append(
                XNode(
                    xnode_union=XNNStaticReshape(
                        num_dims=len(new_shape),
                        new_shape=new_shape,
                        input_id=vals_to_ids[source],
                        output_id=vals_to_ids[node],
                        flags=0,
                    ),
                    debug_handle=debug_handle,
                )
            )

    return PhysicalReshapeVisitor


PHYSICAL_VISITORS = {PERMUTE: PhysicalPermuteVisitor, **{t: _physical_reshape(_STOCK[t]) for t in RESHAPES}}


@contextlib.contextmanager
def physical_serializers() -> Iterator[None]:
    """Scoped: XNNPACK preprocess serializes permutes and reshapes with the visitors above and gives NLC tensors
    their stored dims; restored on exit."""
    table = node_visitor._node_visitor_dict
    original = {target: table[target] for target in PHYSICAL_VISITORS}
    table.update(PHYSICAL_VISITORS)
    node_visitor.get_shape = _stored_dims
    try:
        yield
    finally:
        table.update(original)
        node_visitor.get_shape = _STOCK_GET_SHAPE
