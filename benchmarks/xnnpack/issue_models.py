"""The model the XNNPACK issue was measured on, as its text describes it: four convolution blocks, each with a
channel LayerNorm written as permute / LayerNorm / permute (XNNPACK 1.5.1 leaves it on the CPU), a global mean,
[1, 3, 64, 64] fp32. `layout-solver compare benchmarks/xnnpack/issue_models.py:channel_layer_norm_cnn --target
xnnpack` takes it like any model file; the benchmark's set "issue" is this model."""

from __future__ import annotations

import itertools

import torch
from torch import nn


class ChannelLayerNorm(nn.Module):
    """LayerNorm over channels of an NCHW tensor, as ConvNeXt-style code writes it."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.LayerNorm(channels)

    def forward(self, x):
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ChannelLayerNormCNN(nn.Module):
    def __init__(self, widths=(3, 32, 64, 64, 64)):
        super().__init__()
        self.blocks = nn.Sequential(*[
            nn.Sequential(nn.Conv2d(a, b, 3, padding=1), nn.ReLU(), ChannelLayerNorm(b))
            for a, b in itertools.pairwise(widths)
        ])  # fmt: skip

    def forward(self, x):
        return self.blocks(x).mean((2, 3))


def channel_layer_norm_cnn() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The issue's model with random weights, and its input."""
    torch.manual_seed(0)
    return ChannelLayerNormCNN().eval(), (torch.randn(1, 3, 64, 64),)
