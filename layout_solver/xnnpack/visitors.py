"""The one XNNPACK serializer change the stage needs: a permute_copy whose input and result are stored in
different orders.

Stock's `PermuteVisitor` reads one tag, the node's own, and so assumes the input is stored as the result is
(stock's pass only ever writes it so). `PhysicalPermuteVisitor` reads the input's tag and the node's tag and
serializes the permutation the bytes really go through (`op_rules.physical_permutation`); where the two tags
agree it writes exactly stock's permutation, so a stock-tagged graph serializes to the same bytes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from executorch.backends.xnnpack import operators  # noqa: F401 - registers every visitor
from executorch.backends.xnnpack._passes.channels_last_tagged_reshape_pass import ChannelsLastTaggedReshapePass
from executorch.backends.xnnpack.operators import node_visitor
from executorch.backends.xnnpack.serialization.xnnpack_graph_schema import XNNStaticTranspose, XNode
from executorch.backends.xnnpack.utils.utils import get_input_node

from layout_solver.xnnpack.op_rules import CHANNELS_LAST, CONTIGUOUS, physical_permutation

TAG = ChannelsLastTaggedReshapePass.XNN_NHWC_NODE
PERMUTE = "aten.permute_copy.default"
# register_node_visitor returns None: stock's class is only reachable through the table.
StockPermuteVisitor = node_visitor._node_visitor_dict[PERMUTE]


def label_of(node) -> str:
    """The order a node is stored in, read off stock's NHWC tag."""
    return CHANNELS_LAST if node.meta.get(TAG, False) else CONTIGUOUS


class PhysicalPermuteVisitor(StockPermuteVisitor):
    """permute_copy serialized from both tensors' stored orders."""

    def define_node(self, node, xnn_graph, vals_to_ids, debug_handle) -> None:
        """Serialize the permute as the permutation its bytes go through (stock's where both orders agree)."""
        source = get_input_node(node, 0)
        rank = source.meta["val"].dim()
        perm = [d % rank for d in node.args[1]]
        src, dst = label_of(source), label_of(node)
        if rank != 4 or src == dst:
            super().define_node(node, xnn_graph, vals_to_ids, debug_handle)
            return
        self.define_nodes_tensor_inputs_outputs(node, xnn_graph, vals_to_ids)
        xnn_graph.xnodes.append(
            XNode(
                xnode_union=XNNStaticTranspose(
                    input_id=vals_to_ids[source],
                    num_dims=4,
                    perm=physical_permutation(perm, src, dst),
                    output_id=vals_to_ids[node],
                    flags=0,
                ),
                debug_handle=debug_handle,
            )
        )


@contextlib.contextmanager
def physical_permutes() -> Iterator[None]:
    """Scoped: XNNPACK preprocess serializes permute_copy with `PhysicalPermuteVisitor`; restored on exit."""
    table = node_visitor._node_visitor_dict
    original = table[PERMUTE]
    table[PERMUTE] = PhysicalPermuteVisitor
    try:
        yield
    finally:
        table[PERMUTE] = original
