"""The TOSA each Arm (pre-TOSA) op becomes, as executorch will serialize it: `TRANSLATIONS`, one function per op
family, registered once with `@translates` (as the op rules are). `add.Tensor` -> ADD, `sum.dim_IntList` ->
REDUCE_SUM along its remapped axis, `CONV2D` -> CONV2D with the node's own weights, ...

A translation writes the node into a probe (`layout_solver.arm.probes`' writer: its `builder`, the `written`
tensors and `tensor(node, order)` for an operand) reading its operands in the orders `reads` and storing its result
in `order`, and returns the indices of the operators it added. An op or dtype it cannot write raises Unpriced.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import Protocol

import numpy as np
import torch

from cost_models.tosa_probe import ProbeBuilder
from graph_io.fx import dtype_name, tensor_of
from layout_solver.arm.op_rules import Reduction, short_target
from layout_solver.arm.orders import Order

_DTYPES = {"int8": "int8", "int16": "int16", "int32": "int32", "bool": "bool", "float32": "fp32",
           "float16": "fp16", "bfloat16": "bf16", "uint8": "int8"}  # fmt: skip


def probe_dtype(val) -> str | None:
    """The TOSA dtype of a tensor, or None where TOSA has none (int64 at this stage is not serialized)."""
    return _DTYPES.get(dtype_name(val))


class ProbeWriter(Protocol):
    """What a translation writes into (`layout_solver.arm.probes`' writer): the probe being built, the tensors
    written so far by (node, order), and an operand's tensor in an order."""

    builder: ProbeBuilder
    written: dict

    def tensor(self, node: torch.fx.Node, order: Order | None = None) -> int:
        """The probe tensor of `node` stored in `order` (default: identity)."""


class Unpriced(Exception):
    """The probe cannot be written (an op or dtype the translation does not know)."""


Translation = Callable[[ProbeWriter, torch.fx.Node, list[Order], Order], list[int]]
TRANSLATIONS: dict[str, Translation] = {}


def translates(*targets: str):
    """Register a translation for op targets ("add.Tensor"); it returns the indices of the operators it adds."""

    def register(fn: Translation) -> Translation:
        taken = [t for t in targets if t in TRANSLATIONS]
        if taken:
            raise ValueError(f"two TOSA translations for {', '.join(taken)}")
        TRANSLATIONS.update(dict.fromkeys(targets, fn))
        return fn

    return register


def out_shape(node, order: Order) -> tuple[list[int], str]:
    """`node`'s result shape stored in `order`, and its TOSA dtype; Unpriced where TOSA has none."""
    val = tensor_of(node)
    dtype = probe_dtype(val)
    if dtype is None:
        raise Unpriced(f"{node.name} has dtype {val.dtype}")
    return [int(val.shape[i]) for i in order], dtype


def _emit(w: ProbeWriter, node, order: Order, name: str, inputs, attribute=None, **arguments) -> list[int]:
    shape, dtype = out_shape(node, order)
    index, out = w.builder.op(name, inputs, shape, dtype, attribute, **arguments)
    w.written[(node, tuple(order))] = out
    return [index]


_BINARY = {"add.Tensor": "ADD", "sub.Tensor": "SUB", "maximum.default": "MAXIMUM", "minimum.default": "MINIMUM",
           "eq.Tensor": "EQUAL", "ge.Tensor": "GREATER_EQUAL", "gt.Tensor": "GREATER",
           "bitwise_and.Tensor": "BITWISE_AND", "bitwise_or.Tensor": "BITWISE_OR", "bitwise_xor.Tensor": "BITWISE_XOR",
           "logical_and.default": "LOGICAL_AND", "logical_or.default": "LOGICAL_OR",
           "logical_xor.default": "LOGICAL_XOR", "pow.Tensor_Tensor": "POW"}  # fmt: skip


@translates(*_BINARY)
def _binary(w, node, reads, order):
    a, b = (w.tensor(arg, r) for arg, r in zip(node.args[:2], reads))
    attribute = {"MAXIMUM": "MaximumAttribute", "MINIMUM": "MinimumAttribute"}.get(_BINARY[short_target(node)])
    arguments = {"nan_mode": "NanPropagationMode.PROPAGATE"} if attribute else {}
    return _emit(w, node, order, _BINARY[short_target(node)], [a, b], attribute, **arguments)


@translates("mul.Tensor")
def _mul(w, node, reads, order):
    a, b = (w.tensor(arg, r) for arg, r in zip(node.args[:2], reads))
    return _emit(w, node, order, "MUL", [a, b, w.builder.const([0], "int8")], "MulAttribute")


_UNARY = {"abs.default": "ABS", "bitwise_not.default": "BITWISE_NOT", "logical_not.default": "LOGICAL_NOT",
          "exp.default": "EXP", "log.default": "LOG", "rsqrt.default": "RSQRT", "reciprocal.default": "RECIPROCAL",
          "sigmoid.default": "SIGMOID", "tanh.default": "TANH", "erf.default": "ERF", "sin.default": "SIN",
          "cos.default": "COS", "floor.default": "FLOOR", "ceil.default": "CEIL"}  # fmt: skip


@translates(*_UNARY)
def _unary(w, node, reads, order):
    return _emit(w, node, order, _UNARY[short_target(node)], [w.tensor(node.args[0], reads[0])])


@translates("neg.default")
def _negate(w, node, reads, order):
    x = w.tensor(node.args[0], reads[0])
    _, dtype = out_shape(node, order)
    zps = [w.builder.const([0], dtype), w.builder.const([0], dtype)]
    return _emit(w, node, order, "NEGATE", [x, *zps], "NegateAttribute")


def _clamp_bytes(value, dtype: torch.dtype) -> bytes:
    if dtype.is_floating_point:
        return struct.pack("<f", float(value))
    info = torch.iinfo(dtype)
    return int(min(max(int(value), info.min), info.max)).to_bytes(dtype.itemsize, "little", signed=True)


@translates("clamp.default", "CLAMP.default", "relu.default")
def _clamp(w, node, reads, order):
    x = w.tensor(node.args[0], reads[0])
    dtype = tensor_of(node).dtype
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    low = node.args[1] if len(node.args) > 1 and node.args[1] is not None else (0 if "relu" in str(node.target)
                                                                               else info.min)  # fmt: skip
    high = node.args[2] if len(node.args) > 2 and node.args[2] is not None else info.max
    return _emit(w, node, order, "CLAMP", [x], "ClampAttribute", min_val=_clamp_bytes(low, dtype),
                 max_val=_clamp_bytes(high, dtype), nan_mode="NanPropagationMode.PROPAGATE")  # fmt: skip


@translates("where.self")
def _select(w, node, reads, order):
    inputs = [w.tensor(arg, r) for arg, r in zip(node.args[:3], reads)]
    return _emit(w, node, order, "SELECT", inputs)


@translates("TABLE.default")
def _table(w, node, reads, order):
    x = w.tensor(node.args[0], reads[0])
    table = node.args[1]
    values = w.context.value(table) if isinstance(table, torch.fx.Node) else None
    if values is None:
        raise Unpriced(f"{node.name}: table values unknown")
    table_dtype = probe_dtype(tensor_of(table))
    return _emit(w, node, order, "TABLE", [x, w.builder.const(values.reshape(-1), table_dtype)], "TableAttribute")


@functools.lru_cache(maxsize=65536)
def _multipliers(scales: tuple[float, ...], width: int) -> tuple[list[int], list[int]]:
    """executorch's own integer multipliers and shifts of a RESCALE's scales."""
    from executorch.backends.arm.operators.op_tosa_rescale import _compute_multiplier_and_shift

    return _compute_multiplier_and_shift(list(scales), width)


@translates("RESCALE.default")
def _rescale(w, node, reads, order):
    x = w.tensor(node.args[0], reads[0])
    in_dtype, (_, out_dtype) = probe_dtype(tensor_of(node.args[0])), out_shape(node, order)
    scales = tuple(float(s) for s in node.args[2])
    multipliers, shifts = _multipliers(scales, 16 if in_dtype == "int48" else 32)
    consts = [
        w.builder.const(multipliers, "int16" if in_dtype == "int48" else "int32"),
        w.builder.const(shifts, "int8"),
        w.builder.const([int(node.args[3])], in_dtype),
        w.builder.const([int(node.args[4])], out_dtype),
    ]
    return _emit(w, node, order, "RESCALE", [x, *consts], "RescaleAttribute", scale32=in_dtype != "int48",
                 rounding_mode="RoundingMode.SINGLE_ROUND", per_channel=len(scales) > 1,
                 input_unsigned=bool(node.kwargs.get("input_unsigned", False)),
                 output_unsigned=bool(node.kwargs.get("output_unsigned", False)))  # fmt: skip


_REDUCE = {"sum.dim_IntList": "REDUCE_SUM", "amax.default": "REDUCE_MAX", "amin.default": "REDUCE_MIN"}


@translates(*_REDUCE)
def _reduce(w, node, reads, order):
    source, dims = node.args[0], Reduction.axes(node)
    x, ops = w.tensor(source, reads[0]), []
    shape = [int(tensor_of(source).shape[i]) for i in order]
    name = _REDUCE[short_target(node)]
    attribute = {"REDUCE_SUM": "ReduceSumAttribute", "REDUCE_MAX": "ReduceMaxAttribute",
                 "REDUCE_MIN": "ReduceMinAttribute"}[name]  # fmt: skip
    extra = {} if name == "REDUCE_SUM" else {"nan_mode": "NanPropagationMode.PROPAGATE"}
    _, dtype = out_shape(node, order)
    for axis in sorted(order.index(d) for d in dims):  # one reduction per axis, as executorch decomposes them
        shape[axis] = 1
        index, x = w.builder.op(name, [x], shape, dtype, attribute, axis=axis, **extra)
        ops.append(index)
    w.written[(node, tuple(order))] = x
    return ops


def _values(arg) -> list[int]:
    """A per-axis argument's values: given inline, or a CONST_SHAPE node's."""
    return [int(v) for v in (arg.args[0] if isinstance(arg, torch.fx.Node) else arg)]


@translates("SLICE.default")
def _slice(w, node, reads, order):
    x = w.tensor(node.args[0], reads[0])
    start, size = (_values(a) for a in node.args[1:3])
    bounds = [w.builder.const([v[i] for i in order], "shape") for v in (start, size)]
    return _emit(w, node, order, "SLICE", [x, *bounds], "SliceAttribute")


@translates("PAD.default")
def _pad(w, node, reads, order):
    x = w.tensor(node.args[0], reads[0])
    padding = _values(node.args[1])
    physical = [v for i in order for v in (padding[2 * i], padding[2 * i + 1])]
    _, dtype = out_shape(node, order)
    value = node.kwargs.get("value", 0)
    consts = [w.builder.const(physical, "shape"), w.builder.const([value], dtype)]
    return _emit(w, node, order, "PAD", [x, *consts], "PadAttribute")


@translates("view_copy.default")
def _reshape(w, node, reads, order):
    """A view is a RESHAPE of the stored tensor (its pair of orders keeps it one): free where Vela bypasses it,
    a MemoryCopy where it cannot (a CONCAT or a graph output reading it)."""
    x = w.tensor(node.args[0], reads[0])
    shape, _ = out_shape(node, order)
    return _emit(w, node, order, "RESHAPE", [x, w.builder.const(shape, "shape")], "ReshapeAttribute")


@translates("repeat.default")
def _tile(w, node, reads, order):
    """TILE (executorch serializes a repeat as one; BroadcastArgsPass and expand write repeats), its multiples
    in the stored order."""
    x = w.tensor(node.args[0], reads[0])
    multiples = _values(node.args[1])
    if len(multiples) != len(order):  # UnsqueezeBeforeRepeatPass has not run: not the TILE it will be
        raise Unpriced(f"{node.name}: {len(multiples)} multiples for a rank-{len(order)} input")
    return _emit(w, node, order, "TILE", [x, w.builder.const([multiples[i] for i in order], "shape")])


@translates("RESIZE.default")
def _resize(w, node, reads, order):
    """RESIZE of an NHWC tensor (the pipeline has already wrapped it in permutes: pinned to the identity)."""
    x = w.tensor(node.args[0], reads[0])
    consts = [w.builder.const(_values(a), "shape") for a in node.args[1:4]]  # scale, offset, border
    bilinear = node.kwargs.get("resize_mode") == "bilinear"
    return _emit(w, node, order, "RESIZE", [x, *consts], "ResizeAttribute",
                 mode="ResizeMode.BILINEAR" if bilinear else "ResizeMode.NEAREST")  # fmt: skip


@translates("GATHER.default")
def _gather(w, node, reads, order):
    """GATHER(values [N, K, C], indices [N, W]) (pinned: the pipeline has already canonicalised it)."""
    values, indices = (w.tensor(a, r) for a, r in zip(node.args[:2], reads))
    return _emit(w, node, order, "GATHER", [values, indices])


@translates("cat.default", "CONCAT.default")
def _concat(w, node, reads, order):
    tensors = [a for a in node.args[0] if isinstance(a, torch.fx.Node)]
    inputs = [w.tensor(a, r) for a, r in zip(tensors, reads)]
    rank = len(order)
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", node.kwargs.get("axis", 0))
    return _emit(w, node, order, "CONCAT", inputs, "ConcatAttribute", axis=order.index(int(dim) % rank))


@translates("MATMUL.default")
def _matmul(w, node, reads, order):
    from executorch.backends.arm._passes.fold_qdq_with_annotated_qparams_pass import get_input_qparams

    a, b = node.args[:2]
    try:
        qparams = get_input_qparams(node)
        zps = [int(qparams[0].get_zp_per_tensor()), int(qparams[1].get_zp_per_tensor())]
    except (KeyError, ValueError, AttributeError):
        zps = [0, 0]
    dtype = probe_dtype(tensor_of(a))
    transposed = tuple(order) == (0, 2, 1)
    first, second = (b, a) if transposed else (a, b)  # (A B)^T = B^T A^T
    zps = zps[::-1] if transposed else zps
    inputs = [w.tensor(first, order), w.tensor(second, order), *(w.builder.const([z], dtype) for z in zps)]
    return _emit(w, node, order, "MATMUL", inputs, "MatMulAttribute")


def _qparams_zp(node, index: int) -> int:
    from executorch.backends.arm._passes.fold_qdq_with_annotated_qparams_pass import get_input_qparams

    try:
        q = get_input_qparams(node)[index]
    except (KeyError, ValueError):
        return 0
    return int(np.asarray(q.zp).reshape(-1)[0])  # per-channel weights: one zero point per channel, all alike


def _conv_inputs(w, node, reads):
    x = w.tensor(node.args[0], reads[0])
    weight, bias = node.args[1], node.args[2]
    if w.context.value(weight) is None:
        raise Unpriced(f"{node.name}: weights are not a known constant")
    inputs = [x, w.tensor(weight), w.tensor(bias) if isinstance(bias, torch.fx.Node) else None]
    if inputs[2] is None:
        raise Unpriced(f"{node.name}: no bias tensor")
    x_dtype, w_dtype = probe_dtype(tensor_of(node.args[0])), probe_dtype(tensor_of(weight))
    zp_x = _qparams_zp(node, 0) if x_dtype in ("int8", "int16") else 0
    zp_w = _qparams_zp(node, 1) if w_dtype == "int8" else 0
    return [*inputs, w.builder.const([zp_x], x_dtype), w.builder.const([zp_w], w_dtype)]


def _acc(node, order) -> str:
    _, dtype = out_shape(node, order)
    return {"fp16": "DType.FP32", "bf16": "DType.FP32"}.get(dtype, f"DType.{dtype.upper()}")


@translates("CONV2D.default", "DEPTHWISE_CONV2D.default")
def _conv2d(w, node, reads, order):
    stride, pad, dilation = (list(node.args[i]) for i in (3, 4, 5))
    depthwise = short_target(node).startswith("DEPTHWISE")
    return _emit(w, node, order, "DEPTHWISE_CONV2D" if depthwise else "CONV2D", _conv_inputs(w, node, reads),
                 "DepthwiseConv2dAttribute" if depthwise else "Conv2dAttribute", pad=pad, stride=stride,
                 dilation=dilation, local_bound=False, acc_type=_acc(node, order))  # fmt: skip


@translates("CONV3D.default")
def _conv3d(w, node, reads, order):
    stride, pad, dilation = (list(node.args[i]) for i in (3, 4, 5))
    return _emit(w, node, order, "CONV3D", _conv_inputs(w, node, reads), "Conv3dAttribute", pad=pad, stride=stride,
                 dilation=dilation, local_bound=False, acc_type=_acc(node, order))  # fmt: skip


@translates("TRANSPOSE_CONV2D.default")
def _transpose_conv2d(w, node, reads, order):
    out_pad, stride = list(node.args[3]), list(node.args[4])
    return _emit(w, node, order, "TRANSPOSE_CONV2D", _conv_inputs(w, node, reads), "TransposeConv2dAttribute",
                 out_pad=out_pad, stride=stride, local_bound=False, acc_type=_acc(node, order))  # fmt: skip


@translates("MAX_POOL2D.default")
def _max_pool(w, node, reads, order):
    kernel, stride, pad = (list(node.args[i]) for i in (1, 2, 3))
    return _emit(w, node, order, "MAX_POOL2D", [w.tensor(node.args[0], reads[0])], "MaxPool2dAttribute",
                 kernel=kernel, stride=stride, pad=pad, nan_mode="NanPropagationMode.PROPAGATE")  # fmt: skip


@translates("AVG_POOL2D.default")
def _avg_pool(w, node, reads, order):
    x = w.tensor(node.args[0], reads[0])
    zps = [w.tensor(node.args[1]), w.tensor(node.args[2])]
    kernel, stride, pad = (list(node.args[i]) for i in (3, 4, 5))
    acc = node.args[6] if len(node.args) > 6 else torch.int32
    return _emit(w, node, order, "AVG_POOL2D", [x, *zps], "AvgPool2dAttribute", kernel=kernel, stride=stride,
                 pad=pad, acc_type=f"DType.{probe_dtype(acc).upper()}")  # fmt: skip
