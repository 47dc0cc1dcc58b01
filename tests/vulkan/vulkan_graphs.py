"""Seeded random graphs of Vulkan-supported ops, for differential execution tests.

A graph is a list of steps, each applied to the running tensor `x` (rank 4,
fp32) and possibly to an earlier tensor. Steps cover what moves layouts
around: views and flattening, permutes, cat, reductions, binary ops with
broadcasting, softmax, layer norm, linear and conv (which pin packings), and a
texture-limit-sized input (buffers only). `shrink` removes steps one at a time
while a predicate still fails, so a failure is reported as the smallest graph.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

STEP_KINDS = (
    "unary",
    "binary_same",
    "binary_bcast",
    "permute",
    "view",
    "cat",
    "mean_keep",
    "softmax",
    "layer_norm",
    "linear",
    "conv",
    "transpose_back",
)


@dataclass(frozen=True)
class Step:
    kind: str
    arg: int = 0  # which earlier tensor (binary, cat), or a variant number

    def __str__(self) -> str:
        return f"{self.kind}({self.arg})"


class Graph(nn.Module):
    """Applies `steps` to x; every shape-changing step is undone by its own construction (rank stays 4)."""

    def __init__(self, steps: list[Step], channels: int):
        super().__init__()
        self.steps = steps
        c = channels
        self.convs = nn.ModuleList(nn.Conv2d(c, c, 3, padding=1) for s in steps if s.kind == "conv")
        self.fcs = nn.ModuleList()  # built by build_linears, once the width is known
        self._fc_specs = [s for s in steps if s.kind == "linear"]

    def build_linears(self, width: int) -> None:
        self.fcs = nn.ModuleList(nn.Linear(width, width) for _ in self._fc_specs)
        # The Vulkan runtime's layer norm needs an affine weight (NativeLayerNorm.cpp).
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        seen = [x]
        convs, fcs = iter(self.convs), iter(self.fcs)
        for step in self.steps:
            k = step.arg
            if step.kind == "unary":
                x = (torch.relu, torch.sigmoid, torch.tanh, F.gelu)[k % 4](x)
            elif step.kind == "binary_same":
                other = seen[k % len(seen)]
                x = (x + other) if k % 2 == 0 else (x * other)
            elif step.kind == "binary_bcast":
                dims = ((2, 3), (1,), (3,), (1, 2))[k % 4]
                x = x - x.mean(dim=dims, keepdim=True)
            elif step.kind == "permute":
                perm = ((0, 1, 3, 2), (0, 2, 1, 3), (0, 3, 2, 1))[k % 3]
                x = x.permute(perm).contiguous().permute(perm)  # two permutes, same shape back
            elif step.kind == "view":
                n, c, h, w = x.shape
                x = x.reshape(n, c, h * w).transpose(1, 2).reshape(n, h * w, c).transpose(1, 2).reshape(n, c, h, w)
            elif step.kind == "cat":
                other = seen[k % len(seen)]
                dim = (1, 2, 3)[k % 3]
                x = torch.cat([x, other], dim=dim).narrow(dim, 0, x.shape[dim]) * 0.5 + other * 0.5
            elif step.kind == "mean_keep":
                x = x + x.mean(dim=(1, 2, 3)[k % 3], keepdim=True)
            elif step.kind == "softmax":
                x = torch.softmax(x, dim=(1, 2, 3)[k % 3])
            elif step.kind == "layer_norm":
                x = self.norm(x)
            elif step.kind == "linear":
                x = next(fcs)(x)
            elif step.kind == "conv":
                x = next(convs)(x)
            elif step.kind == "transpose_back":
                x = x.transpose(1, 3).contiguous()
                x = torch.relu(x).transpose(1, 3)
            seen.append(x)
        return x


def make(steps: list[Step], shape: tuple[int, int, int, int], seed: int = 0) -> tuple[nn.Module, tuple]:
    torch.manual_seed(seed)
    graph = Graph(steps, shape[1])
    graph.build_linears(shape[3])
    return graph.eval(), (torch.randn(shape),)


def random_graph(seed: int, length: int = 6) -> tuple[list[Step], tuple[int, int, int, int]]:
    rng = random.Random(seed)
    steps = [Step(rng.choice(STEP_KINDS), rng.randrange(12)) for _ in range(length)]
    shapes = [(1, 8, 12, 16), (1, 4, 6, 10), (1, 16, 8, 8), (1, 3, 5, 7)]
    if seed % 7 == 6:
        # Wider than any texture row (16384 texels) in every packing: buffers only.
        steps = [s for s in steps if s.kind not in ("conv", "linear", "transpose_back", "permute")] or [Step("unary")]
        return steps, (1, 2, 2, 70000)
    return steps, shapes[seed % len(shapes)]


def shrink(steps: list[Step], still_fails) -> list[Step]:
    """The shortest sub-list of `steps` (removing one step at a time) for which still_fails() holds."""
    current = list(steps)
    changed = True
    while changed and len(current) > 1:
        changed = False
        for i in range(len(current)):
            candidate = current[:i] + current[i + 1 :]
            if still_fails(candidate):
                current, changed = candidate, True
                break
    return current
