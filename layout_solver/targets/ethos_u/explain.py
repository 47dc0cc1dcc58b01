"""An Ethos-U lowering as layout graphs: each delegate's TOSA operators (constants left out), each tensor's dim
order, and Vela's NPU cycles per operator, so a delegate's prices add up to Vela's total for it
(`EthosULowering.metrics()["vela_total_cycles"]` over all delegates).

TOSA tensors carry no dim order of their own (executorch 1.5.1 writes every layout change as a TRANSPOSE), so a
tensor's order is read off the graph: a delegate input is in the order it arrives in, a TRANSPOSE permutes its
input's order, a RESHAPE that only moves unit axes is the permutation it is (the Arm pipeline writes an
NCHW-to-NHWC change of a one-channel tensor that way), any other RESHAPE starts a new order (its axes are not the
old ones), any other op keeps its first input's.
"NHWC (0, 2, 3, 1)" on a 4-D tensor says its axes hold the input's N, H, W, C.

Vela's per-layer rows name the tensor an operation writes; an operation fused from several TOSA operators (a
CONV2D and the RESCALE after it) is named by the last, and is priced here on the operator of its own class up
the chain. A transpose Vela inserts itself (a MATMUL's second operand, a REDUCE_SUM along an inner axis) becomes
a conversion node of its own beside the operator it serves.
"""

from __future__ import annotations

from graph_io.layout_graph import GraphOp, LayoutGraph

_CONSTANTS = ("CONST", "CONST_SHAPE")
_NAMED_ORDERS = {(0, 1, 2, 3): "NCHW", (0, 2, 3, 1): "NHWC", (0, 1, 2): "CHW", (1, 2, 0): "HWC"}
_UP_THE_CHAIN = 4  # how far up a fused row's chain its operator of its own class is looked for


def order_label(order: tuple[int, ...] | None) -> str:
    """A dim order as a layout label: "NHWC (0, 2, 3, 1)"; the identity of another rank "(0, 1)"."""
    if order is None:
        return ""
    name = _NAMED_ORDERS.get(tuple(order))
    return f"{name} {tuple(order)}" if name else str(tuple(order))


def _same_class(tosa_op: str, vela_operator: str) -> bool:
    return tosa_op.replace("_", "").lower() == vela_operator.replace("_", "").lower()


def _priced_op(name: str, vela_operator: str, ops: dict[str, GraphOp]) -> str | None:
    """The op a Vela row prices: the one writing the row's tensor, or up its chain the one of the row's class."""
    if name not in ops:
        matches = [op_id for op_id in ops if name.startswith(op_id)]
        return max(matches, key=len) if matches else None
    current = name
    for _ in range(_UP_THE_CHAIN):
        if _same_class(ops[current].op, vela_operator):
            return current
        if not ops[current].inputs or ops[current].inputs[0] not in ops:
            break
        current = ops[current].inputs[0]
    return name


def unit_axis_moves(before: tuple[int, ...], after: tuple[int, ...]) -> tuple[int, ...] | None:
    """The permutation a reshape from `before` to `after` is when it only moves axes of size 1 (output axis i
    holds input axis p[i]), else None."""
    if len(before) != len(after) or [d for d in before if d != 1] != [d for d in after if d != 1]:
        return None
    units = iter(i for i, d in enumerate(before) if d == 1)
    others = iter(i for i, d in enumerate(before) if d != 1)
    return tuple(next(units) if d == 1 else next(others) for d in after)


def _orders(tosa_ops: list, produced: set[str]) -> dict[str, tuple[int, ...]]:
    """Each tensor's dim order relative to the delegate input it came from (see the module docstring)."""
    orders: dict[str, tuple[int, ...]] = {}
    for op in tosa_ops:
        for name, shape in zip(op.inputs, op.input_shapes):
            if name not in produced and name not in orders:
                orders[name] = tuple(range(len(shape)))
        if not op.outputs:
            continue
        rank = len(op.output_shapes[0]) if op.output_shapes else 0
        first = orders.get(op.inputs[0]) if op.inputs else None
        moves = (
            unit_axis_moves(op.input_shapes[0], op.output_shapes[0])
            if op.op == "RESHAPE" and op.output_shapes and op.input_shapes
            else None
        )
        if op.op == "TRANSPOSE" and first is not None and len(first) == len(op.perm):
            order = tuple(first[p] for p in op.perm)
        elif moves is not None and first is not None and len(first) == len(moves):
            order = tuple(first[p] for p in moves)
        elif op.op == "RESHAPE" or first is None or len(first) != rank:
            order = tuple(range(rank))
        else:
            order = first
        for out in op.outputs:
            orders[out] = order
    return orders


def delegate_graph(graph_id: str, unit: str, tosa_ops: list, rows: list[dict]) -> LayoutGraph:
    """One delegate's layout graph from its TOSA operators (`graph_io.tosa.tosa_ops`) and Vela's rows."""
    constants = {out for op in tosa_ops if op.op in _CONSTANTS for out in op.outputs}
    produced = {out for op in tosa_ops for out in op.outputs}
    dim_orders = _orders(tosa_ops, produced)
    ops: dict[str, GraphOp] = {}
    for op in tosa_ops:
        if op.op in _CONSTANTS:
            continue
        for name, shape in zip(op.inputs, op.input_shapes):
            if name not in produced and name not in ops:  # a delegate input
                ops[name] = GraphOp(name, "input", [], list(shape), op.dtype, order_label(dim_orders.get(name)))
        out = op.outputs[0]
        ops[out] = GraphOp(
            out,
            op.op,
            [name for name in op.inputs if name not in constants],
            list(op.output_shapes[0]) if op.output_shapes else [],
            op.dtype,
            order_label(dim_orders.get(out)),
            conversion=op.op == "TRANSPOSE",
            attrs={"perm": str(op.perm)} if op.op == "TRANSPOSE" else {},
        )
    graph = LayoutGraph(graph_id, unit, list(ops.values()))
    for row in rows:
        if row["Target"] != "NPU":
            continue
        cycles = float(int(float(row["Op Cycles"])))
        vela_operator = row.get("Original Operator") or row["NNG Operator"]
        target = _priced_op(row["Name"], vela_operator, ops)
        if row["NNG Operator"] == "Transpose" and (target is None or ops[target].op != "TRANSPOSE"):
            inserted = GraphOp(_fresh(f"{row['Name']} (Vela transpose)", graph), "TRANSPOSE (Vela)",
                               ops[target].inputs[:1] if target else [], conversion=True, cost=cycles,
                               attrs={"inserted by": f"Vela, for {vela_operator}"})  # fmt: skip
            graph.ops.append(inserted)
            continue
        if target is None:  # a row no operator of the file writes: drawn on its own so no cycle goes missing
            graph.ops.append(GraphOp(_fresh(row["Name"], graph), f"{row['NNG Operator']} (Vela)", cost=cycles))
            continue
        ops[target].cost = (ops[target].cost or 0.0) + cycles
    return graph


def _fresh(name: str, graph: LayoutGraph) -> str:
    """`name`, primed until no op of `graph` has it."""
    taken = {op.id for op in graph.ops}
    while name in taken:
        name += "'"
    return name


def tosa_graphs(lowering, unit: str) -> list[LayoutGraph]:
    """Every delegate of an `EthosULowering` as a layout graph."""
    return [
        delegate_graph(f"delegate {i}", unit, ops, rows)
        for i, (ops, rows) in enumerate(zip(lowering.tosa_ops, lowering.vela_rows_by_delegate))
    ]
