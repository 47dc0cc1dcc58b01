"""Small models of the kinds the Vulkan default-profile issue measured the solver on (none of them in the
zoo): a recurrent front end, a channel LayerNorm written as permute / LayerNorm / permute, a MobileNetV3-style
block stack, a dilated 1-D keyword spotter and linear attention. Random weights; names for `compare` and the
benchmarks are `benchmarks/vulkan/unseen_models.py:FACTORY`.
"""

from __future__ import annotations

import torch
from torch import nn


class _CRNN(nn.Module):
    """Conv front end over a spectrogram, then a GRU over 16 time steps, then a classifier."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d((2, 1)), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU()
        )
        self.gru = nn.GRU(32 * 8, 64, batch_first=True)
        self.head = nn.Linear(64, 12)

    def forward(self, x):  # [1, 1, 16 mel, 16 steps]
        y = self.conv(x)  # [1, 32, 8, 16]
        y = y.permute(0, 3, 1, 2).flatten(2)  # [1, 16 steps, 256]
        out, _ = self.gru(y)
        return self.head(out[:, -1])


def crnn():
    return _CRNN().eval(), (torch.randn(1, 1, 16, 16),)


class _ChannelNormBlock(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.norm = nn.LayerNorm(c)

    def forward(self, x):
        y = self.conv(x).permute(0, 2, 3, 1)
        return torch.relu(self.norm(y).permute(0, 3, 1, 2)) + x


def permute_layernorm():
    """Conv blocks with a channel LayerNorm written as permute / LayerNorm / permute."""
    model = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), *[_ChannelNormBlock(32) for _ in range(4)])
    return model.eval(), (torch.randn(1, 3, 64, 64),)


class _SE(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(c, c // 4), nn.ReLU(), nn.Linear(c // 4, c), nn.Hardsigmoid())

    def forward(self, x):
        return x * self.fc(x.mean((2, 3))).unsqueeze(-1).unsqueeze(-1)


class _InvertedResidual(nn.Module):
    def __init__(self, c: int, expand: int, stride: int):
        super().__init__()
        hidden = c * expand
        self.body = nn.Sequential(
            nn.Conv2d(c, hidden, 1),
            nn.Hardswish(),
            nn.Conv2d(hidden, hidden, 3, stride=stride, padding=1, groups=hidden),
            nn.Hardswish(),
            _SE(hidden),
            nn.Conv2d(hidden, c, 1),
        )
        self.residual = stride == 1

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


def mobilenet_v3():
    """MobileNetV3-style: hardswish, depthwise convolutions, squeeze-excitation, pooled classifier."""
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.Hardswish(),
        _InvertedResidual(16, 4, 2),
        _InvertedResidual(16, 4, 1),
        _InvertedResidual(16, 6, 2),
        _InvertedResidual(16, 6, 1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )
    return model.eval(), (torch.randn(1, 3, 64, 64),)


def dilated_kws():
    """Keyword spotting over 40 MFCCs x 98 frames: dilated Conv1d stack, global pooling."""
    layers: list[nn.Module] = [nn.Conv1d(40, 64, 3, padding=1), nn.ReLU()]
    for d in (1, 2, 4, 8):
        layers += [nn.Conv1d(64, 64, 3, padding=d, dilation=d), nn.BatchNorm1d(64), nn.ReLU()]
    layers += [nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(64, 12)]
    return nn.Sequential(*layers).eval(), (torch.randn(1, 40, 98),)


class _LinearAttention(nn.Module):
    """Kernelised attention: softmax over the key tokens replaced by elu + 1 features, (K^T V) first."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = nn.functional.elu(q) + 1, nn.functional.elu(k) + 1
        context = k.transpose(-2, -1) @ v  # [b, h, dh, dh]
        y = (q @ context).transpose(1, 2).reshape(b, n, d)
        x = x + self.out(y)
        return x + self.mlp(self.norm(x))


def linear_attention():
    """Two linear-attention blocks over 64 tokens of width 64."""
    model = nn.Sequential(_LinearAttention(64, 4), _LinearAttention(64, 4))
    return model.eval(), (torch.randn(1, 64, 64),)


MODELS = ["crnn", "permute_layernorm", "mobilenet_v3", "dilated_kws", "linear_attention"]
