"""Ethos-U55 transpose costs, modelled on how Vela 5.1 compiles a TOSA TRANSPOSE for ethos-u55-128.

The model has a structural half and a calibrated half.

1. Decomposition (structural, no parameters). The U55 has no general
   transpose: one NPU op can only swap two of the three innermost axes of a
   tensor whose leading axes are all 1 (H<->W, W<->C or H<->C). Vela reaches
   any other permutation with a selection sort over the axes; each swap runs on
   a 3D view of the tensor, first moving the two axes to the edges of the shape
   when they are not already there (regor's DecomposeTranspose / SwapAxes in
   scheduler_decompose.cpp). `npu_transposes()` replays that sequence, so the
   op count and every op's 3D shape are known without running Vela. Vela does
   not drop unit dims first, which is why the cheapest form (`canonical_transpose`)
   often needs fewer ops than the form a graph happens to contain.

2. Price per NPU op (calibrated). Vela prices a transpose op by its memory
   traffic: elements x rate, where the rate reflects the burst lengths of the
   input read and the output write. Those follow the input's innermost dim
   (exactly, up to 32 elements; beyond that they no longer change), whether
   the output's innermost dim is 4, 8 or 16 elements (where Vela can write whole
   blocks) and whether the view's middle axis is at most 2 (which caps the block
   width). The rates are measured with one-op Vela runs by
   `cost_models.calibration.fit_ethos_u55` and stored in `data/ethos_u55_v<N>.json`.

A transpose whose permutation only moves unit dims is a reshape in our
rewrite (free) but a MemoryCopy if left as a TOSA TRANSPOSE; MemoryCopy is
priced as bytes x rate + fixed cost, also calibrated. A transpose Vela cannot
place (some 3D view has an axis over 65536) is priced the way
DecomposePermuteForU55Pass would emit it: split along input axes into chunks
Vela accepts, one transpose per chunk, plus a copy of the data for the slices
and the concatenation.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources

DTYPE_BYTES = {"int8": 1, "uint8": 1, "int16": 2, "int32": 4, "bool": 1}
# The configuration this module's model was calibrated for (executorch's compile spec of it, Vela 5.1).
CALIBRATED_FOR = "ethos-u55-128"
MAX_AXIS = 1 << 16  # largest axis one U55 transpose op accepts
MAX_INNER_32BIT_HW = 1 << 14  # and the largest innermost axis of a 32-bit H<->W swap
WIDEST_INNER = 32  # input innermost dims above this all read at the same burst length
PARAMS_VERSION = 2

# One U55 transpose op swaps two of the three innermost axes of a 3D view.
SWAP_HW, SWAP_WC, SWAP_HC = "HW", "WC", "HC"
_SWAP_OF_PAIR = {(0, 1): SWAP_HW, (1, 2): SWAP_WC, (0, 2): SWAP_HC}


class UnsupportedTranspose(ValueError):
    """Vela cannot place this transpose on the U55 as written."""


# --- forms ---------------------------------------------------------------------------------------------------------


def canonical_transpose(shape, perm) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Cheapest equivalent transpose: unit dims dropped, adjacent-staying axes merged."""
    shape, perm = list(shape), list(perm)
    if sorted(perm) != list(range(len(shape))):
        raise ValueError(f"{perm} is not a permutation of {len(shape)} axes")
    keep = [a for a in range(len(shape)) if shape[a] != 1]
    rank = {a: i for i, a in enumerate(keep)}
    perm = [rank[a] for a in perm if a in rank]
    shape = [shape[a] for a in keep]
    # Merge runs of output axes that read consecutive input axes.
    groups: list[list[int]] = []
    for a in perm:
        if groups and groups[-1][-1] + 1 == a:
            groups[-1].append(a)
        else:
            groups.append([a])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])  # groups in input order
    new_index = {g: i for i, g in enumerate(order)}
    merged_shape = tuple(math.prod(shape[a] for a in groups[g]) for g in order)
    merged_perm = tuple(new_index[g] for g in range(len(groups)))
    return merged_shape, merged_perm


def is_identity(perm) -> bool:
    """True if `perm` leaves every axis in place."""
    return list(perm) == sorted(perm)


def moves_no_data(shape, perm) -> bool:
    """True if transposing `shape` by `perm` only moves unit axes (a reshape)."""
    return is_identity(canonical_transpose(shape, perm)[1])


# --- decomposition -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NpuTranspose:
    """One U55 transpose op: a 3D view (h, w, c) with two of its axes swapped."""

    view: tuple[int, int, int]
    swap: str

    @property
    def elements(self) -> int:
        """Elements moved."""
        return math.prod(self.view)

    @property
    def inner_in(self) -> int:
        """The innermost dim read."""
        return self.view[2]

    @property
    def inner_out(self) -> int:
        """The innermost dim written."""
        h, w, c = self.view
        return {SWAP_HW: c, SWAP_WC: w, SWAP_HC: h}[self.swap]


def _view3d(shape: list[int], outer: int, middle: int) -> list[int]:
    """Merge shape into 3 groups of axes: the first `outer`, the next `middle`, the rest."""
    return [math.prod(shape[:outer]), math.prod(shape[outer : outer + middle]), math.prod(shape[outer + middle :])]


def _swap_axes(shape: list[int], a: int, b: int, ops: list[NpuTranspose], dtype: str) -> None:
    """Append the U55 ops that swap axes a < b of `shape`; updates `shape` in place."""
    n = len(shape)
    if n <= 3 or (a >= n - 3 and math.prod(shape[: n - 3]) == 1):
        pair = (a - (n - 3), b - (n - 3))
        if pair == (0, 2) and DTYPE_BYTES[dtype] == 4:
            # 32-bit H<->C is not native: W<->C, H<->W, W<->C.
            for x, y in ((n - 2, n - 1), (n - 3, n - 2), (n - 2, n - 1)):
                _swap_axes(shape, x, y, ops, dtype)
            return
        view = [1] * (3 - n) + shape[-3:] if n < 3 else shape[-3:]
        ops.append(NpuTranspose(tuple(view), _SWAP_OF_PAIR[pair]))
        shape[a], shape[b] = shape[b], shape[a]
        return
    if (a, b) == (0, 1):  # one op on the view (A, B, rest)
        _swap_axes(_view3d(shape, 1, 1), 0, 1, ops, dtype)
        shape[a], shape[b] = shape[b], shape[a]
    elif (a, b) == (n - 2, n - 1):  # one op on the view (rest, A, B)
        _swap_axes(_view3d(shape, n - 2, 1), 1, 2, ops, dtype)
        shape[a], shape[b] = shape[b], shape[a]
    elif a != 0:  # bring A to the front, swap it with B, put it back
        _swap_axes(_view3d(shape, a, 1), 0, 1, ops, dtype)
        shape.insert(0, shape.pop(a))
        _swap_axes(shape, 0, b, ops, dtype)
        _swap_axes(_view3d(shape, 1, a), 0, 1, ops, dtype)
        shape.insert(a, shape.pop(0))
    elif b != n - 1:  # A is in front: bring B to the back, swap the edges, put B back
        _swap_axes(_view3d(shape, b, 1), 1, 2, ops, dtype)
        shape.append(shape.pop(b))
        _swap_axes(shape, 0, n - 1, ops, dtype)
        _swap_axes(_view3d(shape, b, n - b - 1), 1, 2, ops, dtype)
        shape.insert(b, shape.pop())
    else:  # the two edges: one op on the view (A, middle, B)
        _swap_axes(_view3d(shape, 1, n - 2), 0, 2, ops, dtype)
        shape[a], shape[b] = shape[b], shape[a]


def npu_transposes(shape, perm, dtype: str = "int8") -> list[NpuTranspose]:
    """The U55 transpose ops Vela emits for TRANSPOSE(shape, perm), in order.

    Raises UnsupportedTranspose when one of them has an axis Vela cannot place.
    """
    shape, perm = [int(d) for d in shape], [int(p) for p in perm]
    if sorted(perm) != list(range(len(shape))):
        raise ValueError(f"{perm} is not a permutation of {len(shape)} axes")
    given = f"transpose {tuple(shape)} by {tuple(perm)}"
    position = [0] * len(perm)  # position[input axis] = output position
    for out_axis, in_axis in enumerate(perm):
        position[in_axis] = out_axis
    ops: list[NpuTranspose] = []
    for target in range(len(shape)):  # selection sort: fill output slots left to right
        if position[target] == target:
            continue
        source = position.index(target, target + 1)
        _swap_axes(shape, target, source, ops, dtype)
        position[target], position[source] = position[source], position[target]
    for op in ops:
        if max(op.view) > MAX_AXIS:
            raise UnsupportedTranspose(f"{given}: NPU op on view {op.view} has an axis over {MAX_AXIS}")
        if op.swap == SWAP_HW and DTYPE_BYTES[dtype] == 4 and op.inner_in > MAX_INNER_32BIT_HW:
            raise UnsupportedTranspose(
                f"{given}: 32-bit H<->W swap on view {op.view} has an innermost axis over {MAX_INNER_32BIT_HW}"
            )
    return ops


# --- parameters ----------------------------------------------------------------------------------------------------


def out_class(inner_out: int) -> str:
    """Output innermost dims Vela can write as whole blocks."""
    return str(inner_out) if inner_out in (4, 8, 16) else "other"


def rate_key(op: NpuTranspose) -> str:
    """The calibrated rate class of an NPU transpose op (its kind and innermost-dim classes)."""
    kind = "keep_inner" if op.swap == SWAP_HW else "move_inner"
    # A middle axis of 1-2 caps Vela's block width at 2, which halves the read burst when the input's
    # innermost dim exactly fills a block.
    width = "narrow" if op.view[1] <= 2 else "wide"
    return f"{kind}:{min(op.inner_in, WIDEST_INNER + 1)}:{out_class(op.inner_out)}:{width}"


@dataclass(frozen=True)
class DtypeRates:
    """Calibrated rates of one dtype: cycles per element per rate class, a default, the per-op floor, copy rates."""

    op_rates: dict[str, float]  # rate_key -> cycles per element of one NPU transpose op
    default_rate: float  # for a key the calibration did not reach
    min_op_cycles: float  # a tiny op is not memory bound: Vela's floor per op
    copy_cycles_per_byte: float  # MemoryCopy: bytes * this + copy_fixed_cycles
    copy_fixed_cycles: float


@dataclass(frozen=True)
class EthosU55Params:
    """The fitted cost-model parameters (per dtype), with the Vela version they were fitted against."""

    version: int
    vela_version: str
    tables: dict[str, DtypeRates]
    # "int8->int32" etc. -> cycles per element of a RESCALE Vela cannot fuse into a neighbouring op
    standalone_rescale: dict[str, float] = field(default_factory=dict)
    notes: dict = field(default_factory=dict)

    def rates(self, dtype: str) -> DtypeRates:
        """The rates of `dtype` (int8's for a dtype the calibration did not cover)."""
        return self.tables.get(dtype) or self.tables["int8"]


@cache
def load_params(version: int = PARAMS_VERSION) -> EthosU55Params:
    """The packaged cost-model parameters of `version` (cost_models/data/ethos_u55_vN.json)."""
    data = json.loads((resources.files("cost_models") / "data" / f"ethos_u55_v{version}.json").read_text())
    tables = {
        dtype: DtypeRates(
            t["op_rates"], t["default_rate"], t["min_op_cycles"], t["copy_cycles_per_byte"], t["copy_fixed_cycles"]
        )
        for dtype, t in data["tables"].items()
    }
    return EthosU55Params(
        data["version"], data["vela_version"], tables, data.get("standalone_rescale", {}), data.get("fit", {})
    )


def op_cycles(op: NpuTranspose, dtype: str, params: EthosU55Params | None = None) -> float:
    """Modelled cycles of one NPU transpose op."""
    rates = (params or load_params()).rates(dtype)
    return max(op.elements * rates.op_rates.get(rate_key(op), rates.default_rate), rates.min_op_cycles)


def copy_cycles(elements: int, dtype: str, params: EthosU55Params | None = None) -> float:
    """Modelled cycles of a memory copy of `elements` elements."""
    rates = (params or load_params()).rates(dtype)
    return elements * DTYPE_BYTES[dtype] * rates.copy_cycles_per_byte + rates.copy_fixed_cycles


# Vela folds a RESCALE into the op that produces its input (the op's output scaling) or into the op that
# consumes its output (input scaling), never into a transpose. Op names as in the Arm pre-TOSA graph.
RESCALE_FOLDS_INTO_OUTPUT_OF = frozenset(
    {
        "CONV2D.default",
        "DEPTHWISE_CONV2D.default",
        "TRANSPOSE_CONV2D.default",
        "MATMUL.default",
        "MAX_POOL2D.default",
        "AVG_POOL2D.default",
        "AVG_POOL2D_ADAPTIVE.default",
        "add.Tensor",
        "sub.Tensor",
        "mul.Tensor",
        "sum.dim_IntList",
        "TABLE.default",
    }
)
RESCALE_FOLDS_INTO_INPUT_OF = frozenset(
    {"add.Tensor", "sub.Tensor", "mul.Tensor", "maximum.default", "minimum.default"}
)


def standalone_rescale_cycles(
    elements: int, dtype_in: str, dtype_out: str, params: EthosU55Params | None = None
) -> float:
    """A RESCALE Vela cannot fold into the compute op next to it runs as its own elementwise ops.

    Vela fuses a RESCALE into its producer's output or its consumer's input,
    but never into a data-layout op; a transpose between a RESCALE and its
    compute neighbour leaves it standalone. Measured per element with Vela.
    """
    rates = (params or load_params()).standalone_rescale
    return elements * rates.get(f"{dtype_in}->{dtype_out}", max(rates.values(), default=0.0))


# --- costs ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransposeCost:
    """A priced transpose: cycles, NPU ops, the form priced (shape, perm) and where the figure came from (model,
    reshape, copy, chunked or vela).
    """

    cycles: float
    npu_ops: int
    shape: tuple[int, ...]  # the form priced
    perm: tuple[int, ...]
    source: str  # "model", "reshape", "copy", "chunked" or "vela"

    @property
    def canonical_shape(self) -> tuple[int, ...]:
        """The shape of the priced form."""
        return canonical_transpose(self.shape, self.perm)[0]

    @property
    def canonical_perm(self) -> tuple[int, ...]:
        """The permutation of the priced form."""
        return canonical_transpose(self.shape, self.perm)[1]


def _chunk_plan(shape: list[int], perm: list[int], dtype: str) -> list[list[int]]:
    """Chunk shapes that split the largest input axes until Vela accepts every chunk."""
    chunk = list(shape)
    while True:
        try:
            npu_transposes(chunk, perm, dtype)
            break
        except UnsupportedTranspose:
            axis = max(range(len(chunk)), key=lambda a: chunk[a])
            if chunk[axis] == 1:
                raise
            chunk[axis] = -(-chunk[axis] // 2)
    # Full chunks plus the remainders, as slicing at the chunk size leaves them.
    shapes = [[]]
    for size, step in zip(shape, chunk):
        parts = [step] * (size // step) + ([size % step] if size % step else [])
        shapes = [s + [p] for s in shapes for p in parts]
    return shapes


def _as_given(shape, perm, dtype: str, params: EthosU55Params | None) -> TransposeCost:
    shape, perm = tuple(int(d) for d in shape), tuple(int(p) for p in perm)
    if is_identity(perm):
        return TransposeCost(0.0, 0, shape, perm, "reshape")
    if moves_no_data(shape, perm):  # Vela turns it into a MemoryCopy
        return TransposeCost(copy_cycles(math.prod(shape), dtype, params), 1, shape, perm, "copy")
    try:
        ops = npu_transposes(shape, perm, dtype)
        return TransposeCost(sum(op_cycles(op, dtype, params) for op in ops), len(ops), shape, perm, "model")
    except UnsupportedTranspose:
        pass
    chunks = _chunk_plan(list(shape), list(perm), dtype)
    ops = [op for c in chunks for op in npu_transposes(c, perm, dtype)]
    # Every element is sliced out and concatenated back once: two copies of the tensor.
    copies = 2 * copy_cycles(math.prod(shape), dtype, params)
    return TransposeCost(
        sum(op_cycles(op, dtype, params) for op in ops) + copies, len(ops) + 2 * len(chunks), shape, perm, "chunked"
    )


def materialisations(shape, perm) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The forms a write-back can give Vela for TRANSPOSE(shape, perm), as Vela will compile them.

    The transpose as given; and its canonical form, reached with reshapes
    around it. If the canonical form merges axes, Vela compiles it as written.
    If it only drops unit axes, Vela moves the reshape back past the transpose
    (its CanonicaliseReshapeTransposePattern), so what runs is the original
    shape with the unit axes left in place.
    """
    shape, perm = tuple(int(d) for d in shape), tuple(int(p) for p in perm)
    forms = [(shape, perm)]
    cshape, cperm = canonical_transpose(shape, perm)
    squeezed = tuple(d for d in shape if d != 1)
    if cshape != squeezed:
        forms.append((cshape, cperm))
    elif not is_identity(cperm):
        forms.append((shape, _unit_fixed_perm(list(shape), list(cshape), list(cperm))))
    else:
        forms.append((cshape, cperm))  # moves no data: a reshape
    return list(dict.fromkeys(forms))


# Prices one TRANSPOSE exactly as written: (shape, perm, dtype) -> TransposeCost; and a memory copy of a tensor:
# (elements, dtype) -> cycles. The defaults are this module's model of ethos-u55-128; a target's compiler can
# stand in for both (layout_solver.arm.pricing asks Vela).
AsGiven = Callable[[tuple, tuple, str], "TransposeCost"]
Copy = Callable[[int, str], float]


def transpose_cost(
    shape,
    perm,
    dtype: str = "int8",
    params: EthosU55Params | None = None,
    form: str = "cheapest",
    as_given: AsGiven | None = None,
    copy: Copy | None = None,
) -> TransposeCost:
    """Cycles of TRANSPOSE(shape, perm) on ethos-u55-128 (or as `as_given` and `copy` price it).

    form="as_given" prices the transpose exactly as written; form="cheapest"
    prices the cheapest of its materialisations(); form="shared" is the
    cheapest when the transposed tensor has other readers: a form that needs a
    RESHAPE in front then also pays a memory copy (Vela folds a reshape only
    into its input's sole consumer, bypass_memory_only_ops). Vela's own price is
    cost_models.vela.transpose_cost.
    """
    if dtype not in DTYPE_BYTES and as_given is None:
        raise ValueError(f"unsupported dtype {dtype!r} for Ethos-U55 transposes")
    if form not in ("as_given", "cheapest", "shared"):
        raise ValueError(f"form must be 'as_given', 'cheapest' or 'shared', not {form!r}")
    shape, perm = tuple(int(d) for d in shape), tuple(int(p) for p in perm)
    forms = materialisations(shape, perm) if form != "as_given" else [(shape, perm)]
    price = as_given or (lambda s, p, d: _as_given(s, p, d, params))
    copy = copy or (lambda elements, d: copy_cycles(elements, d, params))
    priced = []
    for s, p in forms:
        cost = price(s, p, dtype)
        if form == "shared" and s != shape:
            cost = replace(cost, cycles=cost.cycles + copy(math.prod(shape), dtype))
        priced.append(cost)
    best = min(priced, key=lambda c: c.cycles)
    return best


def two_step_transposes(
    shape, perm, dtype: str = "int8", params: EthosU55Params | None = None, as_given: AsGiven | None = None
) -> tuple[float, list[tuple[tuple[int, ...], tuple[int, ...]]]] | None:
    """The cheapest way to run TRANSPOSE(shape, perm) as two transposes in a row (None if there is no such pair).

    The first moves one axis elsewhere, the second finishes the permutation; each runs in its cheapest
    form (materialisations()). A swap of two middle axes under an outer one, (W, T, h, d) -> (W, h, T, d)
    as in windowed attention's head split, is one op per outer index as given (16 x 16 x 2 x 16 int8: 19,456
    cycles in Vela 5.1), but moving h out first, (W*T, h, d) -> (h, W*T, d), then (h, W, T*d) ->
    (W, h, T*d) is two single ops (2,048 + 3,072). Returns (cycles, [(shape, perm) of each step, in the
    logical shapes]); the caller compares it with the single transpose.
    """
    shape, perm = tuple(int(d) for d in shape), tuple(int(p) for p in perm)
    rank = len(shape)
    best = None
    for src in range(rank):
        for dst in range(rank):
            first = list(range(rank))
            first.insert(dst, first.pop(src))
            second = tuple(first.index(p) for p in perm)
            if src == dst or is_identity(second) or moves_no_data(shape, first):
                continue
            mid = tuple(shape[p] for p in first)
            try:
                cycles = (
                    transpose_cost(shape, first, dtype, params, as_given=as_given).cycles
                    + transpose_cost(mid, second, dtype, params, as_given=as_given).cycles
                )
            except UnsupportedTranspose:
                continue
            if best is None or cycles < best[0]:
                best = (cycles, [(shape, tuple(first)), (mid, second)])
    return best


def reduce_sum_cycles(shape, axis: int, dtype: str = "int32", params: EthosU55Params | None = None) -> float:
    """Cycles of the transpose Vela inserts before REDUCE_SUM along `axis`; only the innermost axis is native.

    For any other axis Vela views the input as (outer, axis, inner) and
    transposes it to (outer, inner, axis), even when inner is 1. The reduction
    itself then runs along the innermost axis in every mode; its own cost
    varies by a few percent with the mode and is not modelled.
    """
    shape = [int(d) for d in shape]
    axis %= len(shape)
    if axis == len(shape) - 1:
        return 0.0
    view = (math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :]))
    return sum(op_cycles(op, dtype, params) for op in npu_transposes(view, (0, 2, 1), dtype))


# --- whole graphs --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TosaOp:
    """The facts about one TOSA operator that decide which transposes Vela compiles for it."""

    op: str  # TOSA op name, e.g. "TRANSPOSE", "RESHAPE", "REDUCE_SUM", "MATMUL"
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    dtype: str  # of the first input
    perm: tuple[int, ...] = ()  # TRANSPOSE
    axis: int = 0  # REDUCE_SUM
    output_shapes: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class GraphTranspose:
    """One transpose Vela compiles in a whole graph (a TRANSPOSE, or one it inserts before a REDUCE_SUM), with its
    modelled cycles.
    """

    origin: str  # the TOSA tensor the transpose produces (or the op it serves)
    reason: str  # "transpose", "transpose after a unit-axis reshape", "reduce_sum", "matmul operand"
    shape: tuple[int, ...]
    perm: tuple[int, ...]
    dtype: str
    cycles: float
    # where it sits: "graph input" / "graph output" (it reads a delegate input or feeds a delegate output
    # through data-preserving ops only, so the I/O contract decides it) or "inside"
    site: str = "inside"


# Ops that keep every element (or a block of them) as they are: a transpose reached through these from a
# delegate input, or reaching a delegate output, sits at the graph boundary.
_PASS_THROUGH = frozenset({"RESHAPE", "PAD", "SLICE", "RESCALE", "CLAMP", "TABLE", "CAST"})


def _from_inputs(tensor: str, writer: dict) -> bool:
    """Is `tensor` a delegate input, or made from delegate inputs by pass-through ops and concatenation? (A tensor
    no op writes is a delegate input; constant transposes are folded before Vela, so none reaches here.)"""
    source = writer.get(tensor)
    if source is None:
        return True
    if source.op in _PASS_THROUGH:
        return _from_inputs(source.inputs[0], writer)
    return source.op == "CONCAT" and all(_from_inputs(t, writer) for t in source.inputs)


def _site(tensor_in: str, tensor_out: str, writer: dict, reader: dict) -> str:
    if _from_inputs(tensor_in, writer):
        return "graph input"
    t = tensor_out
    while (users := reader.get(t, [])) and len(users) == 1 and users[0].op in _PASS_THROUGH:
        t = users[0].outputs[0]
    return "graph output" if not reader.get(t) else "inside"


def _unit_fixed_perm(pre: list[int], post: list[int], perm: list[int]) -> tuple[int, ...]:
    """A transpose of `post` by `perm`, re-expressed on `pre` (same non-unit axes): unit axes stay put."""
    pre_axes = [i for i, d in enumerate(pre) if d != 1]
    post_rank = {}
    for i, d in enumerate(post):
        if d != 1:
            post_rank[i] = len(post_rank)
    mapped = iter(pre_axes[post_rank[p]] for p in perm if p in post_rank)
    return tuple(i if d == 1 else next(mapped) for i, d in enumerate(pre))


def graph_transposes(ops: list[TosaOp], params: EthosU55Params | None = None) -> list[GraphTranspose]:
    """The U55 transposes Vela 5.1 compiles for a TOSA graph (its Transpose rows), after its own rewrites.

    * A RESHAPE that only adds or drops unit axes and feeds a TRANSPOSE on a
      single path is moved after it, so the transpose runs on the
      pre-reshape shape with the unit axes left in place.
    * Two TRANSPOSEs in a row on a single path are merged into one.
    * A TRANSPOSE that moves no data becomes a reshape (no Transpose row).
    * REDUCE_SUM along any but the innermost axis transposes its input first
      (the input of a RESCALE folded into it, when there is one).
    * MATMUL transposes its second operand (N, C, W) to (N, W, C).
    """
    writer = {t: op for op in ops for t in op.outputs}
    reader: dict[str, list[TosaOp]] = {}
    for op in ops:
        for t in op.inputs:
            reader.setdefault(t, []).append(op)
    single_path = lambda t: len(reader.get(t, ())) == 1

    # Effective (shape, perm) of every TRANSPOSE after the reshape move and merges, in graph order.
    effective: dict[str, tuple[list[int], tuple[int, ...], str]] = {}
    reads: dict[str, str] = {}  # effective transpose -> the tensor it reads (before any merge)
    for op in ops:
        if op.op != "TRANSPOSE":
            continue
        shape, perm, reason = list(op.input_shapes[0]), tuple(op.perm), "transpose"
        read = op.inputs[0]
        source = writer.get(op.inputs[0])
        if source is not None and source.op == "RESHAPE" and single_path(op.inputs[0]):
            pre = list(source.input_shapes[0])
            if [d for d in pre if d != 1] == [d for d in shape if d != 1]:
                perm, shape, reason = (
                    _unit_fixed_perm(pre, shape, list(perm)),
                    pre,
                    "transpose after a unit-axis reshape",
                )
        elif (
            source is not None
            and source.op == "TRANSPOSE"
            and single_path(op.inputs[0])
            and source.outputs[0] in effective
        ):
            first_shape, first_perm, _ = effective.pop(source.outputs[0])
            read = reads.pop(source.outputs[0])
            first_out = [first_shape[p] for p in first_perm]
            if first_out != shape:  # the first one was moved past a unit-axis reshape: so is this one
                perm = _unit_fixed_perm(first_out, shape, list(perm))
            shape, perm, reason = first_shape, tuple(first_perm[p] for p in perm), "merged transposes"
        effective[op.outputs[0]] = (shape, perm, reason)
        reads[op.outputs[0]] = read

    found = []
    for origin, (shape, perm, reason) in effective.items():
        dtype = writer[origin].dtype
        if dtype in DTYPE_BYTES and not moves_no_data(shape, perm):
            cost = _as_given(shape, perm, dtype, params)
            site = _site(reads[origin], origin, writer, reader)
            found.append(GraphTranspose(origin, reason, tuple(shape), perm, dtype, cost.cycles, site))
    for op in ops:
        if op.dtype not in DTYPE_BYTES:
            continue
        if op.op == "REDUCE_SUM" and op.axis % len(op.input_shapes[0]) != len(op.input_shapes[0]) - 1:
            shape = op.input_shapes[0]
            axis = op.axis % len(shape)
            view = (math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :]))
            # Vela folds a RESCALE feeding the reduction into it first, so the transpose moves the narrower data.
            source = writer.get(op.inputs[0])
            dtype = (
                source.dtype
                if source is not None
                and source.op == "RESCALE"
                and single_path(op.inputs[0])
                and source.dtype in DTYPE_BYTES
                else op.dtype
            )
            found.append(
                GraphTranspose(
                    op.outputs[0], "reduce_sum", view, (0, 2, 1), dtype, reduce_sum_cycles(shape, axis, dtype, params)
                )
            )
        elif op.op == "MATMUL":
            b = op.input_shapes[1]
            view = (math.prod(b[:-2]), b[-2], b[-1])
            cycles = sum(op_cycles(o, op.dtype, params) for o in npu_transposes(view, (0, 2, 1), op.dtype))
            found.append(GraphTranspose(op.outputs[0], "matmul operand", view, (0, 2, 1), op.dtype, cycles))
    return found
