"""An XNNPACK delegate's ops as the run-time model sees them (`cost_models.xnnpack.run_us`), read off its graph
after the layout pass, each as (op class, work, element size); the CPU kernels between delegates are read off the
finished program (`layout_solver.targets.xnnpack.cpu_ops`).

Work is what the class's curve is measured in: multiply-accumulates for convolutions and matrix products,
elements otherwise (the result's, or the input's for a reduction). Layout conversions and permutes are priced
apart, by the conversion curves (`pricing.layout_cost`); a q / dq the partitioner tagged implicit runs no operator,
any other one a Convert.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from executorch.backends.xnnpack.utils.quant_utils import is_tagged_as_implicit_q_dq

from cost_models import xnnpack as xnn_cost
from graph_io.fx import tensor_of
from layout_solver.xnnpack.op_rules import (
    PAD_TARGET,
    RESHAPE_TARGETS,
    copy_op_class,
    elem_bytes,
    folded_pad,
    is_dequantize,
    is_quantize,
    kernel_elem_bytes,
    pad_rows,
    short_target,
)
from layout_solver.xnnpack.pricing import LayoutCost
from layout_solver.xnnpack.program import has_symbolic_shapes
from layout_solver.xnnpack.visitors import label_of

TRANSCENDENTAL = ("gelu.default", "sigmoid.default", "tanh.default", "exp.default", "log.default", "sqrt.default",
                  "rsqrt.default", "elu.default", "hardswish.default", "sin.default", "cos.default",
                  "pow.Tensor_Scalar", "leaky_relu.default")  # fmt: skip
POOLS = ("max_pool2d.default", "max_pool2d_with_indices.default", "avg_pool2d.default", "mean.dim", "amax.default",
         "max.dim")  # fmt: skip
COPIES = ("cat.default", "slice_copy.Tensor", "constant_pad_nd.default", "clone.default")
MATMULS = {"linear.default": "gemm", "addmm.default": "gemm", "mm.default": "gemm", "bmm.default": "bmm"}
# The operand holding a fully-connected product's weight matrix (addmm(bias, input, weight)); mm's second operand
# may be a value, so it counts no weights.
WEIGHT_OPERAND = {"linear.default": 1, "addmm.default": 2}


class OpWork(NamedTuple):
    """What `classify` reads off one node: its op class, work, OP_UNITS count and GEMM (where it runs as one)."""

    op_class: str
    work: float
    units: float = 0.0
    gemm: xnn_cost.GemmShape | None = None
    weight_kib: float = 0.0  # a convolution's or fully-connected product's constant weights


# Priced apart (conversion curves) or not run at all (implicit q / dq, getitem, a weight's dequantize).
NOT_OPERATORS = ("permute_copy.default", "_to_copy.default", "getitem")


def _numel(node) -> int:
    val = tensor_of(node)
    return int(val.numel()) if val is not None else 0


def classify(node) -> OpWork | None:
    """The op class, work, count of units (`cost_models.xnnpack.OP_UNITS`: a softmax's rows, a batched product's
    matrices; 0 for any other class) and, for a convolution or matrix product, the GEMM XNNPACK runs it as, of a
    call_function node of a delegate graph, or None where it runs no operator."""
    name = short_target(node.target)
    if name in NOT_OPERATORS or name.startswith("dequantize_per_channel"):
        return None
    if is_quantize(node) or is_dequantize(node):
        # Folded into the quantized op next to it where the partitioner tagged it so; else XNNPACK runs it as a
        # Convert operator (an int8 delegate's fp32 inputs and outputs, a float op's inputs and result inside it).
        return None if is_tagged_as_implicit_q_dq(node) else OpWork("convert", _numel(node))
    if name == "convolution.default":
        return _convolution(node)
    if name in MATMULS:
        product_input = node.args[1] if name == "addmm.default" else node.args[0]  # addmm(bias, input, weight)
        out, k = tensor_of(node), int(tensor_of(product_input).shape[-1])
        macs = _numel(node) * k
        if MATMULS[name] == "bmm":  # and its matrices: every dim but the last two
            return OpWork("bmm", macs, int(torch.Size(out.shape[:-2]).numel()))
        n = int(out.shape[-1]) if out.dim() else 1
        gemm = xnn_cost.GemmShape(max(1, out.numel() // max(1, n)), 1, k, n)
        weights = _weight_kib(node.args[WEIGHT_OPERAND[name]]) if name in WEIGHT_OPERAND else 0.0
        return OpWork(MATMULS[name], macs, gemm=gemm, weight_kib=weights)
    if name in ("_softmax.default", "softmax.int"):  # and its rows: every dim but the reduced one
        out = tensor_of(node)
        return OpWork("softmax", out.numel(), out.numel() // max(1, int(out.shape[node.args[1]])) if out.dim() else 1)
    if name in TRANSCENDENTAL:
        return OpWork("transcendental", _numel(node))
    if name in POOLS:
        return OpWork("pool", _numel(node.args[0]))
    if name == PAD_TARGET:  # and the rows its kernel runs on in the order it is stored in, unless folded
        label = label_of(node)
        return None if folded_pad(node, label) else OpWork(xnn_cost.PAD_COPY, _numel(node), pad_rows(node, label) or 0)
    if name in COPIES:
        return OpWork(copy_op_class(node, label_of(node)), _numel(node))  # a cat or slice in short runs: its own curve
    if name.startswith("upsample_bilinear2d"):
        return OpWork("resize", _numel(node))
    if name in RESHAPE_TARGETS:
        return OpWork("copy", 0.0)  # XNNPACK's reshape runs in place: an operator, no work
    return OpWork("elementwise", _numel(node))


def _convolution(node) -> OpWork:
    """A convolution's class and work: depthwise by its taps, pointwise as the GEMM XNNPACK runs it as, any other
    as its indirect GEMM (one per group) over the output pixels."""
    weight, out, weights = tensor_of(node.args[1]), tensor_of(node), _weight_kib(node.args[1])
    macs = _numel(node) * int(torch.Size(weight.shape[1:]).numel())
    stride, padding, dilation, transposed, _, groups = node.args[3:9]
    taps = int(torch.Size(weight.shape[2:]).numel())
    if groups > 1 and groups == tensor_of(node.args[0]).shape[1]:
        # XNNPACK picks its depthwise microkernel by the kernel's taps (3x3 and 7x7 run at 10x apart per MAC).
        return OpWork(f"dwconv:{taps}", macs, weight_kib=weights)
    pointwise = list(weight.shape[2:]) == [1, 1] and set(stride) | set(dilation) == {1} and not any(padding)
    gemm = None
    if not transposed:  # a deconvolution packs its weights another way
        n = int(weight.shape[0]) // groups
        rows = int(out.numel()) // max(1, int(weight.shape[0])) * groups
        gemm = xnn_cost.GemmShape(rows, taps, int(weight.shape[1]), n)
    # XNNPACK runs a pointwise convolution as its GEMM over the NHWC pixels.
    op_class = "gemm" if pointwise and not transposed else "conv"
    return OpWork(op_class, macs, gemm=gemm, weight_kib=weights)


def _weight_kib(weight) -> float:
    """The KiB a weight operand holds as the delegate stores it (an int8 program's dequantized weights: 1 byte)."""
    val = tensor_of(weight)
    return float(val.numel()) * elem_bytes(weight) / 1024 if val is not None else 0.0


def delegate_ops(graph_module) -> list[xnn_cost.PredictedOp]:
    """The operators one XNNPACK delegate's graph (after its layout pass) runs, conversions left out."""
    out = []
    for node in graph_module.graph.nodes:
        if node.op == "call_function":
            classified = classify(node)
            if classified is not None:
                out.append(xnn_cost.PredictedOp(classified.op_class, float(classified.work), kernel_elem_bytes(node), True,
                                                units=float(classified.units), gemm=classified.gemm,
                                                weight_kib=classified.weight_kib))  # fmt: skip
    return out


def delegate_run_ops(graph_module, cost: LayoutCost) -> list[xnn_cost.PredictedOp]:
    """What one delegate runs, for the run-time prediction: its operators (`delegate_ops`) and `cost`'s
    conversions (the graph's, as `pricing.layout_cost` read them)."""
    if has_symbolic_shapes(graph_module.graph):  # the model prices static shapes
        return []
    conversions = [
        xnn_cost.PredictedOp(f"{xnn_cost.CONVERSION_PREFIX}{c.kind}", c.bytes / 1024,
                             c.bytes // max(1, int(torch.Size(c.shape).numel())), True,
                             moved=(tuple(c.shape), tuple(c.perm)) if c.perm else None)
        for c in cost.conversions
    ]  # fmt: skip
    return delegate_ops(graph_module) + conversions
