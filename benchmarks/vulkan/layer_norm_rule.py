"""Where the Vulkan runtime computes a texture layer norm wrongly: stock's own lowering, run against eager.

Run: .venv/bin/python -m benchmarks.vulkan.layer_norm_rule [--shapes 1x3x5x7,1x65x96] [--out FILE]

The solver's problem refuses width- and height-packed texture layer norms where the runtime got them wrong
(`layout_solver.vulkan.runtime_rules.RUNTIME_LABEL_RULES`, read here through that registry). This reads the runtime itself: LayerNorm -> mul ->
Linear over the last dim, lowered with stock's TagMemoryMetaPass (which writes width-packed textures at every shape
here), executed on the Vulkan device (lavapipe here), compared with eager; the table gives each shape's labels, the
largest error and whether the rule refuses the label stock wrote. A shape the rule refuses whose error is within
1e-4 is a saving the rule leaves; an error above it where the rule allows the label is a wrong program.
"""

from __future__ import annotations

from collections import Counter

import torch
from executorch.exir.dialects._ops import ops as exir_ops

from benchmarks import harness
from layout_solver.targets.vulkan.measure import lower_vulkan
from layout_solver.targets.vulkan.runtime import execute
from layout_solver.vulkan import stock_layouts
from layout_solver.vulkan.runtime_rules import RUNTIME_LABEL_RULES

# 2026-12-04 on lavapipe: wrong only at shape[-3] == 3 with a width above 4.
DEFAULT_SHAPES = (
    "1x1x5x7,1x2x5x7,1x3x5x4,1x3x5x5,1x3x5x7,1x3x5x8,1x3x4x8,1x3x1x8,1x4x5x8,1x5x5x8,1x6x5x7,1x7x5x8,1x11x5x8,"
    "3x5x8,2x7x5,1x17x30,1x65x96"
)
TOLERANCE = 1e-4


class LayerNormBlock(torch.nn.Module):
    """A layer norm over the last dim between two ops the delegate runs, as in a transformer block."""

    def __init__(self, width: int):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.linear = torch.nn.Linear(width, width)

    def forward(self, x):
        """LayerNorm -> mul -> Linear."""
        return self.linear(self.norm(x) * 2.0)


def check(shape: list[int]) -> list[object]:
    """One table row: the shape, the labels stock wrote, the largest error against eager, whether the rule
    refuses stock's layer-norm label."""
    torch.manual_seed(0)
    module, x = LayerNormBlock(shape[-1]).eval(), torch.randn(*shape)
    program, reports = lower_vulkan(module, (x,), stock_layouts)
    labels = sum((r.tensors_by_repr for r in reports), start=Counter())
    result = execute({"stock": program}, (x,), time_runs=False)["stock"]
    if not result.executed:
        return ["x".join(map(str, shape)), ", ".join(labels), f"failed: {result.error}", ""]
    error = (torch.as_tensor(result.outputs[0]) - module(x)).abs().max().item()
    rule = RUNTIME_LABEL_RULES[exir_ops.edge.aten.native_layer_norm.default]
    refused = [label for label in labels if not rule(x, label)]
    return ["x".join(map(str, shape)), ", ".join(labels), f"{error:.2e}", "refuses" if refused else "allows"]


def main() -> None:
    """Check each shape; the table, and the shapes where the rule and the runtime disagree."""
    parser = harness.parser(__doc__)
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="shapes as AxBxC, comma-separated")
    args = parser.parse_args()
    rows = [check([int(d) for d in shape.split("x")]) for shape in args.shapes.split(",")]
    lines = [harness.provenance("stock's lowering on the Vulkan device"), ""]
    lines += harness.table(["shape", "labels stock wrote", "max abs error vs eager", "rule"], rows)
    right_refused = [r[0] for r in rows if r[3] == "refuses" and float(r[2]) <= TOLERANCE]
    wrong_allowed = [
        r[0] for r in rows if r[3] == "allows" and not r[2].startswith("failed") and float(r[2]) > TOLERANCE
    ]
    lines += ["", f"- refused where the runtime is right: {', '.join(right_refused) or 'none'}",
              f"- allowed where the runtime is wrong: {', '.join(wrong_allowed) or 'none'}"]  # fmt: skip
    harness.emit(lines, args.out)


if __name__ == "__main__":
    main()
