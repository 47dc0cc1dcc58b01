"""Arm (pre-TOSA) ops as the TOSA operators executorch will serialize them into, written as small probe graphs
(cost_models.tosa_probe) a target's compiler can price in any dim order.

Each op is written as the TOSA it becomes (`layout_solver.arm.tosa_translations.TRANSLATIONS`); an op with no
translation is not priced (`op_probe` returns None).

`op_probe(node, reads, order)` writes the node reading its operands in the orders `reads` and storing its
result in `order`, together with its chain neighbours (a producer whose only reader is the node, the node's
only reader) when they can run in the same order: Vela fuses such pairs (a RESCALE into the CONV2D or ADD
next to it, a CLAMP into its producer), so a probe of the node alone would price work the whole program
does not do. The caller prices only the rows Vela attributes to the node itself. Constants are written
with their data, stored in the order they are read (their transposes fold at compile time), because where
a constant lives (Flash) and what its values compress to are part of the cost.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from cost_models.tosa_probe import ProbeBuilder, ProbeGraph, clamp_through
from graph_io.fx import tensor_of
from layout_solver._moved import moved_attributes
from layout_solver.arm.op_rules import WINDOW_OPS, MatMul, SameOrder, rule_for, short_target
from layout_solver.arm.orders import Order, compose, inverse, units_in_place, view_output_order
from layout_solver.arm.tosa_translations import TRANSLATIONS, Unpriced, out_shape, probe_dtype

log = logging.getLogger(__name__)
_CLAMPABLE = ("int8", "int16")  # the dtypes a stand-in CLAMP is written for


@dataclass
class ProbeContext:
    """What a probe needs beyond the nodes: which placeholders are constants, and their values."""

    constants: set[str] = field(default_factory=set)
    constant_value: Callable[[torch.fx.Node], torch.Tensor | None] = lambda node: None
    chains: dict = field(default_factory=dict)  # chain_of's answers while one problem is built
    _values: dict = field(default_factory=dict)

    def value(self, node: torch.fx.Node):
        """A constant's values as a numpy array (read from the program once), or None."""
        if node not in self._values:
            data = self.constant_value(node) if node.name in self.constants else None
            self._values[node] = None if data is None else data.detach().contiguous().numpy()
        return self._values[node]


@dataclass
class _Writer:
    """Writes nodes into one probe: operands become graph inputs, constants or earlier probe tensors."""

    context: ProbeContext
    intermediates: bool = True  # operands an op computes arrive as intermediates (False: as graph inputs)
    transposed: frozenset = frozenset()  # nodes whose result arrives from a transpose: as a graph input
    # ... or, where the node's stored order is given here, from that graph input through the TRANSPOSE itself
    transposed_from: dict = field(default_factory=dict)
    stand_ins: list = field(default_factory=list)  # (node, order) read so: the operators written for it below
    stand_in_ops: list = field(default_factory=list)
    builder: ProbeBuilder = field(default_factory=ProbeBuilder)
    written: dict = field(default_factory=dict)  # (node, order) -> tensor index

    def tensor(self, node: torch.fx.Node, order: Order | None = None) -> int:
        """The probe tensor of `node` stored in `order` (default: identity)."""
        order = tuple(range(tensor_of(node).dim())) if order is None else tuple(order)
        node, order = _unaliased(node, order)
        val = tensor_of(node)
        if (node, order) in self.written:
            return self.written[(node, order)]
        dtype = probe_dtype(val)
        if dtype is None:
            raise Unpriced(f"{node.name} has dtype {val.dtype}")
        shape = [int(val.shape[i]) for i in order]
        data = self.context.value(node)
        if data is not None:
            array = np.ascontiguousarray(data.transpose(order)) if order else data
            found = self.builder.const(array, dtype, shape)
        elif node in self.transposed_from and tuple(self.transposed_from[node]) != order:
            found = self._through_transpose(node, order, shape, dtype)
        else:
            found = self.builder.input(shape, dtype)
            if node.op == "call_function" and self.intermediates and node not in self.transposed:
                found = _intermediate(self.builder, found, shape, dtype, shared=len(node.users) > 1)
        self.written[(node, order)] = found
        return found

    def _through_transpose(self, node: torch.fx.Node, order: Order, shape, dtype: str) -> int:
        """`node`'s result read in `order` through the TRANSPOSE the program writes from the order it is stored
        in (`transposed_from`), with the node itself in front where Vela writes that transpose as its output
        (IN_PLACE_WRITERS: what a transpose composed into a SLICE's copy costs is not what the TRANSPOSE op
        costs), else from a graph input. Those operators are stand-ins (`stand_in_ops`)."""
        stored = tuple(self.transposed_from[node])
        first = len(self.builder.ops)
        self.stand_ins.append((node, order))
        found = None
        if node.op == "call_function" and short_target(node) in IN_PLACE_WRITERS and translatable(node):
            found = member(node, stored, produced=True)
        if found is not None:
            _translate(self, node, found[0], stored)
            data = self.written[(node, stored)]
        else:
            data = self.builder.input([int(tensor_of(node).shape[i]) for i in stored], dtype)
        perm = compose(inverse(stored), order)
        result = self.builder.op("TRANSPOSE", [data], shape, dtype, "TransposeAttribute", perms=perm)[1]
        self.stand_in_ops.extend(range(first, len(self.builder.ops)))
        return result


def _unaliased(node: torch.fx.Node, order: Order) -> tuple[torch.fx.Node, Order]:
    """The data `node` stored in `order` is: a permute is an alias of its input, in the composed order."""
    while _is_permute(node):
        node, order = node.args[0], compose(_perm_of(node), order)
    return node, order


def _aliased_reader(node: torch.fx.Node, order: Order) -> tuple[torch.fx.Node, Order]:
    """`node`, read in `order`, if it is not a permute; else the op reading it through permutes that each have
    one reader (a permute is an alias), with the order that op reads the data in (as `_chain` reaches it)."""
    while _is_permute(node) and len(node.users) == 1:
        node, order = next(iter(node.users)), compose(inverse(_perm_of(node)), order)
    return node, order


def chain_edge(producer: torch.fx.Node, consumer: torch.fx.Node, src: Order, dst: Order) -> tuple:
    """The edge `_chain` sees where a transpose sits on `producer`'s value (stored in `src`, read by its only
    reader `consumer` in `dst`): permutes are aliases, so the ops on either side of them, with the orders they
    store and read the data in. (producer, consumer, src, dst), resolved."""
    data, stored = _unaliased(producer, tuple(src))
    reader, read = _aliased_reader(consumer, tuple(dst))
    return data, reader, stored, read


def _intermediate(b: ProbeBuilder, tensor: int, shape, dtype: str, shared: bool) -> int:
    """`tensor` passed through a cheap op of its own, so Vela stores it as the intermediate it is in the
    program (in its brick format, where the op reading it allows one) rather than as a graph input, which must
    be plain NHWC: a convolution reading NHWC runs up to twice as long. The op's rows are not the probed op's.
    A CLAMP (int8, int16) never takes a RESCALE after it in; int32 tensors are left as inputs, since every op that
    writes int32 would. Where the operand has other readers in the program (`shared`), a second CLAMP reads the
    stand-in too: Ethos-U85 chains an elementwise op into a producer whose result only it reads (the op's work
    would land in the stand-in's row), and Vela bypasses a RESHAPE of such a result but copies a shared one."""
    if dtype in _CLAMPABLE:
        found = clamp_through(b, tensor, shape, dtype)
        if shared:
            clamp_through(b, found, shape, dtype)
        return found
    return tensor  # int32 (between a compute op and its RESCALE): any op would take the RESCALE's scaling in


# What a probe holds around the op it prices (see _chain): glue ops Vela folds into their neighbours (or, for a
# view, bypasses), and at most
# CHAIN_STEPS other ops away; never more than MAX_PROBE_OPS ops.
GLUE = frozenset({"RESCALE.default", "CLAMP.default", "clamp.default", "TABLE.default", "view_copy.default"})
CHAIN_STEPS = 1
MAX_PROBE_OPS = 24


def translatable(node: torch.fx.Node) -> bool:
    """Whether `node` is a call with a TOSA translation."""
    return node.op == "call_function" and short_target(node) in TRANSLATIONS


def _can_run_in(node: torch.fx.Node, order: Order) -> bool:
    """Whether a neighbour could run in `order` alongside the node (same order, same rank, or the identity)."""
    if not translatable(node) or tensor_of(node) is None or len(order) != tensor_of(node).dim():
        return False
    if order == tuple(range(len(order))):
        return True
    rule = rule_for(node)
    return isinstance(rule, SameOrder) and all(tensor_of(a).dim() == len(order) for a in rule.operands(node))


def _translate(w: _Writer, node, reads: list[Order], order: Order) -> list[int]:
    rule = rule_for(node)
    operands = rule.operands(node)
    identity = lambda o: tuple(range(tensor_of(o).dim())) if tensor_of(o) is not None else ()  # a shape operand
    full = list(reads) + [identity(o) for o in operands[len(reads) :]]
    return TRANSLATIONS[short_target(node)](w, node, full, tuple(order))


def _is_permute(node) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and rule_for(node).kind == "permute"


def reads_in(node: torch.fx.Node, order: Order) -> list[Order] | None:
    """The orders `node` reads its rule's operands in when it runs in `order` (a product in its transposed
    order reads both operands transposed); None if it cannot run in `order`."""
    rule = rule_for(node)
    if isinstance(rule, (SameOrder, MatMul)):
        return [tuple(order)] * len(rule.operands(node))
    if tuple(order) != tuple(range(len(order))):
        return None
    return [tuple(range(tensor_of(o).dim())) if tensor_of(o) is not None else () for o in rule.operands(node)]


def member(m: torch.fx.Node, order: Order, produced: bool) -> tuple[list[Order], Order] | None:
    """(reads, result order) of a neighbour `m` whose result (`produced`) or input is in `order`, or None if it
    cannot run that way. A view changes the order along with the shape (one that keeps it a pure reshape)."""
    if rule_for(m).kind == "view":
        if tensor_of(m) is None or tensor_of(m.args[0]) is None:
            return None
        s_in, s_out = list(tensor_of(m.args[0]).shape), list(tensor_of(m).shape)
        other = view_output_order(s_out, s_in, order) if produced else view_output_order(s_in, s_out, order)
        if other is None:
            return None
        # the unit axes where they are in the identity: the op beyond is then priced in the order it runs in
        # (a SLICE whose [1, 16, 4, 16] result is reshaped read as (1, 0, 2, 3), a strided copy in its probe)
        other = units_in_place(s_in if produced else s_out, other)
        return ([tuple(other)], tuple(order)) if produced else ([tuple(order)], tuple(other))
    if not _can_run_in(m, order):
        return None
    return reads_in(m, order), tuple(order)


Barrier = tuple  # (producer, consumer): an edge a chain does not cross (a transpose will sit there)


def _chain(
    node: torch.fx.Node, reads: list[Order], order: Order, barrier: Barrier | None = None
) -> dict[torch.fx.Node, tuple]:
    """The ops Vela may fuse or chain with `node` (running in `order`, reading in `reads`), each with (its reads,
    its result order). They are reached along chain edges (a producer whose only reader is the consumer),
    through the permutes between them (a permute is bookkeeping: the write-back removes it when the orders
    agree), and must run in the orders the edge leaves them in. Glue ops (RESCALE, CLAMP, TABLE: what Vela
    folds into a neighbour's input or output; views, which it bypasses or copies) cost no step; any other op is
    one step, and at most CHAIN_STEPS are taken: an ADD fed by a CONV2D through two RESCALEs is chained to it
    on Ethos-U85 and costs nothing there. The edge `barrier` is not crossed."""
    members, steps = {node: (list(reads), tuple(order))}, {node: 0}
    queue = collections.deque([node])
    while queue and len(members) < MAX_PROBE_OPS:
        n = queue.popleft()
        n_reads, n_order = members[n]
        around = []
        for a, r in zip(rule_for(n).operands(n), n_reads):
            while _is_permute(a) and len(a.users) == 1:
                a, r = a.args[0], compose(_perm_of(a), r)
            if isinstance(a, torch.fx.Node) and a.op == "call_function" and len(a.users) == 1 and (a, n) != barrier:
                around.append((a, tuple(r), True))
        if len(n.users) == 1:
            reader, r = _aliased_reader(next(iter(n.users)), n_order)
            if (n, reader) != barrier:
                around.append((reader, tuple(r), False))
        for m, m_order, produced in around:
            step = steps[n] + (0 if short_target(m) in GLUE else 1)
            if m in members or step > CHAIN_STEPS or not translatable(m):
                continue
            found = member(m, m_order, produced)
            if found is not None:
                members[m], steps[m] = found, step
                queue.append(m)
    del members[node]
    return members


def _perm_of(node: torch.fx.Node) -> Order:
    rank = max(tensor_of(node).dim(), 1)
    return tuple(int(p) % rank for p in node.args[1])


def chain_of(
    node: torch.fx.Node, reads: list[Order], order: Order, barrier: Barrier | None = None, memo: dict | None = None
) -> dict:
    """`node` and the ops a probe of it holds, each with (its reads, its result order); `memo` keeps answers
    while one problem is built (the graph does not change meanwhile)."""
    key = (node, tuple(map(tuple, reads)), tuple(order), barrier)
    if memo is not None and key in memo:
        return memo[key]
    found = {node: (list(reads), tuple(order)), **_chain(node, reads, order, barrier)}
    if memo is not None:
        memo[key] = found
    return found


def op_probe(
    node: torch.fx.Node,
    reads: list[Order],
    order: Order,
    context: ProbeContext,
    neighbours: bool = True,
    barrier: Barrier | None = None,
    stored: Order | None = None,
) -> tuple[ProbeGraph, list[int], list[tuple]] | None:
    """The probe of `node` reading its rule's operands in `reads` and writing its result in `order`, with the
    ops Vela may fuse or chain it with (`_chain`: an ADD's input RESCALEs fuse only when its other input is
    rescaled too) when `neighbours`, none across the edge `barrier`; returns (graph, TOSA operator indices of the
    node's own operators, and of the stand-in transposes), or None when the node cannot be written (no
    translation, a dtype TOSA does not serialize). `stored`: the order the barrier's producer stores its result
    in; the probe then reads it through the TRANSPOSE the program has there (`_Writer._through_transpose`),
    stand-ins counted with the node's own operators (Vela composes a MATMUL's own transpose of its second
    operand with it, at anything from nothing to many times that transpose's price), where without it the
    transpose's result is a graph input. The stand-ins come back as (node, order) for
    `through_transpose_probe`: their price alone is the transition's, not the node's."""
    written = _op_writer(node, reads, order, context, neighbours, barrier, stored)
    if written is None:
        return None
    w, own = written
    graph = w.builder.build()
    return graph, [graph.tosa_index(i) for i in [*own, *w.stand_in_ops]], list(w.stand_ins)


def through_transpose_probe(node: torch.fx.Node, stored: Order, order: Order, context: ProbeContext):
    """The stand-in operators `op_probe` writes for `node` stored in `stored` and read in `order`, alone:
    (graph, their TOSA operator indices); what they cost here is the transition's, not the reader's."""
    w = _Writer(context, transposed_from={node: tuple(stored)})
    try:
        w.tensor(node, order)
    except Unpriced:
        return None
    graph = w.builder.build()
    return graph, [graph.tosa_index(i) for i in w.stand_in_ops]


def _op_writer(node, reads, order, context, neighbours, barrier, stored=None) -> tuple[_Writer, list[int]] | None:
    """The writer holding op_probe's operators (not yet built), and the probe indices of the node's own."""
    if not translatable(node):
        return None
    # Alone (no neighbours: a transpose before and after it in the program) its operands come from transposes,
    # which write plain NHWC: graph inputs are that.
    # Across `barrier` a transpose will sit: what it writes (plain NHWC, nothing chained) is a graph input.
    w = _Writer(context, intermediates=neighbours, transposed=frozenset(barrier[:1]) if barrier else frozenset(),
                transposed_from={barrier[0]: stored} if barrier and stored is not None else {})  # fmt: skip
    group = chain_of(node, reads, order, barrier, context.chains) if neighbours else {node: None}
    group = {n: m for n, m in group.items() if n is not node}
    position = {n: i for i, n in enumerate(node.graph.nodes)}
    own = []
    try:
        for n in sorted([*group, node], key=position.__getitem__):
            if n is node:
                own = _translate(w, node, reads, order)
            else:
                _translate(w, n, *group[n])
    except Unpriced:
        return None
    except (KeyError, ValueError, TypeError, IndexError, AttributeError) as exc:  # an op the translation misreads
        log.warning("layout-solver: no TOSA probe for %s (%s): %s: %s", node.name, node.target, type(exc).__name__, exc)
        return None
    for n, result in [*((n, m[1]) for n, m in group.items()), (node, tuple(order))]:
        _read_on(w, n, result)
    return w, own


_FOLDED_INTO_OUTPUT = GLUE - {"view_copy.default"}  # what Vela folds into the output of the op before it
# Producers whose probe reproduces the transpose Vela packs into them: convolutions and pooling, and SLICE, whose
# MemoryCopy Vela writes transposed (a SLICE -> TRANSPOSE pair of LeViT-style attention: one 744-cycle copy on
# ethos-u85-256 where the slice alone is a 776-cycle copy).
IN_PLACE_WRITERS = WINDOW_OPS | {"SLICE.default"}


def write_transpose_probes(value: torch.fx.Node, order: Order, perm, context: ProbeContext):
    """Where Vela may write TRANSPOSE(perm) of `value` (stored in `order`) as the output of the op that computes
    that data (Ethos-U85 packs a transpose into its producer when the producer's result has no other reader):
    [the producer's probe, the same probe with the TRANSPOSE appended]; what the transpose costs there is the
    difference of their totals. A permute is an alias of its input (`_unaliased`), so a transition on the
    pipeline's own NHWC -> NCHW permute after a convolution is written as that convolution's output.

    Only the result of a convolution, pooling (through the RESCALE, CLAMP or TABLE Vela folds into its output) or
    a SLICE (IN_PLACE_WRITERS) is priced so: the probe of an elementwise group does not reproduce how the program chains it
    (group_norm_8 on ethos-u85-256: a MUL priced 2,048 cycles with or without the transpose in its probe runs at
    4,096 and 8,192 in the program). None there, where the data has other readers on the way, or where the
    producer cannot be written."""
    producer, stored = _unaliased(value, tuple(order))
    n = value
    while True:
        if len(n.users) != 1:
            return None
        if n is producer:
            break
        n = n.args[0]
    computed = producer
    while short_target(computed) in _FOLDED_INTO_OUTPUT and isinstance(computed.args[0], torch.fx.Node):
        if len(computed.args[0].users) != 1:
            return None
        computed = computed.args[0]
    if short_target(computed) not in IN_PLACE_WRITERS or not translatable(producer):
        return None
    found = member(producer, stored, produced=True)
    if found is None:
        return None
    reader, _ = _aliased_reader(next(iter(value.users)), tuple(order))
    graphs = []
    for appended in (False, True):
        written = _op_writer(producer, found[0], stored, context, True, (producer, reader))
        if written is None:
            return None
        b = written[0].builder
        if appended:
            x = written[0].written[(producer, stored)]
            shape, dtype = b.shape_of(x), b.tensors[x].dtype
            b.op("TRANSPOSE", [x], [shape[p] for p in perm], dtype, "TransposeAttribute",
                 perms=tuple(int(p) for p in perm))  # fmt: skip
        graphs.append(b.build())
    return graphs


def _read_on(w: _Writer, node: torch.fx.Node, order: Order) -> None:
    """A view's result that no op of the probe reads, but an op of the program does, is read by a stand-in
    CLAMP: left as the probe's graph output, Vela would have to copy it out, where in the program it bypasses
    the RESHAPE (a view of a delegate input into a transpose costs nothing). Not the view before a barrier: a
    transpose reads it there, and Vela copies a SLICE out before a RESHAPE into a TRANSPOSE, as it does one
    left as the probe's output."""
    tensor = w.written.get((node, tuple(order)))
    if rule_for(node).kind != "view" or tensor is None or any(tensor in o.inputs for o in w.builder.ops):
        return
    if node in w.transposed:
        return
    if all(u.op == "output" for u in node.users):
        return
    shape, dtype = out_shape(node, order)
    if dtype in _CLAMPABLE:
        for _ in node.users:  # as many readers as it has in the program
            clamp_through(w.builder, tensor, shape, dtype)


def read_transpose_probe(shape, perm, dtype: str, value: torch.fx.Node, context: ProbeContext):
    """TRANSPOSE(shape, perm) whose result is `value` (in its identity order), read by every reader of `value` as
    the program reads it; returns (graph, the TRANSPOSE's TOSA operator index), or None where a reader cannot be
    written. What a transpose costs on Ethos-U85 depends on who reads its result: Vela writes a feature map a
    convolution or pooling reads in a form of its own, and which form depends on the reader's window (the image
    input's [1, 3, 96, 96] to channels-last: 18,641 cycles on ethos-u85-1024 into a 3x3 convolution, 86,400 into
    a 4x4 stride-4 one or as a graph output)."""
    w = _Writer(context)
    out = [int(shape[p]) for p in perm]
    index, result = w.builder.op("TRANSPOSE", [w.builder.input(list(shape), dtype)], out, dtype,
                                 "TransposeAttribute", perms=tuple(perm))  # fmt: skip
    w.written[_unaliased(value, tuple(range(tensor_of(value).dim())))] = result
    try:
        for reader in value.users:
            if not translatable(reader):
                return None
            _translate(w, reader, [], tuple(range(tensor_of(reader).dim())))
    except Unpriced:
        return None
    except (KeyError, ValueError, TypeError, IndexError, AttributeError) as exc:  # an op the translation misreads
        log.warning("layout-solver: no TOSA probe for the readers of %s: %s: %s", value.name, type(exc).__name__, exc)
        return None
    graph = w.builder.build()
    return graph, graph.tosa_index(index)


# Names that moved elsewhere, kept here one release (with a DeprecationWarning).
__getattr__ = moved_attributes(
    __name__,
    {
        "translates": "layout_solver.arm.tosa_translations",
        "Translation": "layout_solver.arm.tosa_translations",
    },
)
