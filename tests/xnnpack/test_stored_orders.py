"""Tensors stored in orders stock never writes inside an XNNPACK delegate: NLC 3-D activations, reshapes between
orders that run in place, and permutes that move no byte and are elided. Each rule is checked against a second
reading (byte offsets enumerated with numpy), and each program is run on this CPU against stock's and eager."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch import nn

from layout_solver.targets.xnnpack.measure import lower, max_rel_diff, quantize, run_outputs
from layout_solver.targets.xnnpack.runtime import profile_ops
from layout_solver.xnnpack import LayoutValidationError, solver_layouts, stock_layouts, validate
from layout_solver.xnnpack.op_rules import CHANNELS_LAST, CONTIGUOUS, LABELS, dim_order, keeps_bytes
from layout_solver.xnnpack.visitors import ORDER_KEY


class TokenMixer(nn.Module):
    """A feature map read as tokens and back, as vision transformers write it: conv, `flatten(2).transpose(1, 2)`,
    a linear over channels, `transpose(1, 2).reshape(...)`, a depthwise conv."""

    def __init__(self, channels: int = 32):
        super().__init__()
        self.embed = nn.Conv2d(8, channels, 3, padding=1)
        self.mix = nn.Linear(channels, channels)
        self.local = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)

    def forward(self, x):
        y = self.embed(x)
        b, c, h, w = y.shape
        tokens = self.mix(y.flatten(2).transpose(1, 2))
        return self.local(tokens.transpose(1, 2).reshape(b, c, h, w) + y)


class TemporalConvNet(nn.Module):
    """Conv1d blocks with residuals (XNNPACK lowers each Conv1d as unsqueeze, conv2d, squeeze)."""

    def __init__(self, channels: int = 24, blocks: int = 3):
        super().__init__()
        self.stem = nn.Conv1d(4, channels, 3, padding=1)
        self.blocks = nn.ModuleList(nn.Conv1d(channels, channels, 3, padding=2, dilation=2) for _ in range(blocks))

    def forward(self, x):
        y = self.stem(x)
        for conv in self.blocks:
            y = torch.relu(conv(y)) + y
        return y


class ChannelLayerNormCNN(nn.Module):
    """Convolutions with a channel LayerNorm written as permute / LayerNorm / permute (left on the CPU)."""

    def __init__(self, widths=(3, 16, 32)):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(a, b, 3, padding=1) for a, b in itertools.pairwise(widths))
        self.norms = nn.ModuleList(nn.LayerNorm(b) for b in widths[1:])

    def forward(self, x):
        for conv, norm in zip(self.convs, self.norms):
            x = norm(torch.relu(conv(x)).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return x


def _enumerated_keeps_bytes(src_shape, src, dst_shape, dst) -> bool:
    """The second reading: every element's memory offset, before and after the reshape."""

    def offsets(shape, label):
        order = dim_order(label, len(shape))
        return np.arange(int(np.prod(shape))).reshape([shape[d] for d in order]).transpose(np.argsort(order))

    return np.array_equal(offsets(src_shape, src).reshape(dst_shape), offsets(dst_shape, dst))


def _reshapes(shape):
    """Every rank-3 and rank-4 shape with `shape`'s element count whose dims are at most 6."""
    count = int(np.prod(shape))
    for ndim in (3, 4):
        for dims in itertools.product(range(1, 7), repeat=ndim):
            if int(np.prod(dims)) == count:
                yield list(dims)


@pytest.mark.parametrize("shape", [[1, 6, 2, 3], [2, 3, 2, 2], [1, 4, 1, 6], [1, 6, 6], [3, 4, 2]])
def test_a_reshape_keeps_its_bytes_exactly_where_the_enumerated_offsets_say(shape):
    checked = 0
    for target in _reshapes(shape):
        for src, dst in itertools.product(LABELS, LABELS):
            assert keeps_bytes(shape, src, target, dst) == _enumerated_keeps_bytes(shape, src, target, dst), (
                shape, src, target, dst)  # fmt: skip
            checked += 1
    assert checked > 100


def test_nhwc_feature_maps_and_nlc_tokens_are_the_same_bytes():
    assert keeps_bytes([1, 32, 8, 8], CHANNELS_LAST, [1, 32, 64], CHANNELS_LAST)  # flatten(2) of NHWC: NLC
    assert keeps_bytes([1, 24, 50], CHANNELS_LAST, [1, 24, 50, 1], CHANNELS_LAST)  # a Conv1d's unsqueeze
    assert not keeps_bytes([1, 32, 8, 8], CHANNELS_LAST, [1, 32, 64], CONTIGUOUS)


def _lowered_pair(module, inputs):
    stock = lower(module, inputs, stock_layouts).buffer
    solver, reports = lower(module, inputs, solver_layouts)[:2]
    return stock, solver, reports


@pytest.mark.parametrize(
    ("model", "inputs", "transposes_left"),
    [
        (TokenMixer, (torch.randn(1, 8, 12, 12),), 2),  # the program's input and output, nothing else
        (TemporalConvNet, (torch.randn(1, 4, 40),), 2),
        (ChannelLayerNormCNN, (torch.randn(1, 3, 24, 24),), 2),  # the input, and the last permute's NCHW result
    ],
)
def test_stored_orders_leave_only_the_programs_own_conversions_and_compute_what_stock_computes(
    model, inputs, transposes_left
):
    module = model().eval()
    stock, solver, reports = _lowered_pair(module, inputs)
    assert any(r.kind == "solver" for r in reports), [r.notes for r in reports]
    with torch.no_grad():
        eager = module(*inputs).numpy()
    out = run_outputs(solver, inputs)
    np.testing.assert_allclose(out[0], eager, atol=1e-3, rtol=1e-3)
    assert max_rel_diff(run_outputs(stock, inputs), out) <= 1e-5
    # Measured on the executor: XNNPACK runs only the conversions the program's boundaries need.
    ran = profile_ops(solver, inputs, 1, runs=3).conversions
    assert ran == transposes_left < profile_ops(stock, inputs, 1, runs=3).conversions


@pytest.mark.parametrize(("model", "shape"), [(TokenMixer, (1, 8, 12, 12)), (TemporalConvNet, (1, 4, 40))])
def test_int8_programs_with_stored_orders_are_bit_identical_to_stocks(model, shape):
    inputs = (torch.randn(*shape),)
    quantized = quantize(model().eval(), inputs)
    stock, solver, reports = _lowered_pair(quantized, inputs)
    assert any(r.kind == "solver" for r in reports), [r.notes for r in reports]
    for a, b in zip(run_outputs(stock, inputs), run_outputs(solver, inputs)):
        np.testing.assert_array_equal(a, b)
    assert profile_ops(solver, inputs, 1, runs=3).conversions < profile_ops(stock, inputs, 1, runs=3).conversions


def _edge_graph(module, inputs):
    from executorch.exir import to_edge

    return to_edge(torch.export.export(module, inputs)).exported_program().graph_module


def _node(graph_module, name_part):
    return next(n for n in graph_module.graph.nodes if n.op == "call_function" and name_part in n.name)


def test_the_post_condition_refuses_nlc_where_the_stored_bytes_would_be_misread():
    class Tokens(nn.Module):
        def forward(self, x):
            return torch.softmax(x.transpose(1, 2) * 2.0, dim=-1).reshape(1, 6, 2, 4)

    inputs = (torch.randn(1, 8, 6),)
    graph = _edge_graph(Tokens(), inputs)
    for node in graph.graph.nodes:  # stored NLC after the permute: the softmax over the last dim reads channels
        if node.op == "call_function" and node.meta["val"].dim() == 3 and "permute" not in node.name:
            node.meta[ORDER_KEY] = True
    _node(graph, "permute").meta[ORDER_KEY] = True
    with pytest.raises(LayoutValidationError, match=r"_softmax.*does not compute the same on NLC data"):
        validate(graph)

    graph = _edge_graph(Tokens(), inputs)
    for node in graph.graph.nodes:  # the multiply stored NLC is element-wise: the reshape of its NLC bytes is not
        if node.op == "call_function" and ("permute" in node.name or "mul" in node.name):
            node.meta[ORDER_KEY] = True
    with pytest.raises(LayoutValidationError, match="mixes NLC and other orders"):
        validate(graph)  # the softmax reads the NLC multiply as NCL

    graph = _edge_graph(nn.Sequential(nn.Conv1d(8, 8, 1)), inputs)
    next(n for n in graph.graph.nodes if n.op == "placeholder" and n.meta["val"].dim() == 3).meta[ORDER_KEY] = True
    with pytest.raises(LayoutValidationError, match="input or constant tagged NLC"):
        validate(graph)


def test_a_reshape_that_would_move_stored_bytes_is_refused():
    class Unsqueeze(nn.Module):
        def forward(self, x):
            return x.transpose(1, 2).unsqueeze(-1)

    graph = _edge_graph(Unsqueeze(), (torch.randn(1, 8, 6),))
    _node(graph, "permute").meta[ORDER_KEY] = True  # stored NLC, its bytes are x's: not an NCHW [1, 6, 8, 1]
    with pytest.raises(LayoutValidationError, match="reshape of stored bytes that moves them"):
        validate(graph)
