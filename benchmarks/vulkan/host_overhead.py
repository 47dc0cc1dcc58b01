"""What the device timestamps miss: each program's wall time against the sum of its dispatches' device times.

Run: LAYOUT_SOLVER_VULKAN_RUNTIME=/path/to/libvkbackend.so \\
     .venv/bin/python -m benchmarks.vulkan.host_overhead [--models a,b] [--profile lavapipe] [--rounds 21] [--runs 7] \\
     [--out benchmarks/results/vulkan_host_overhead.md]

The lavapipe profile is fitted on device times (the runtime's query pool), the issue's acceptance on wall
time (`execute`). Per zoo model the stock and solver programs are lowered, timed on the device (median wall
ms of interleaved rounds) and profiled (every dispatch's device time, median of runs); the residual wall -
device, against the number of dispatches, says what one more dispatch costs that the profile does not price.
"""

from __future__ import annotations

import numpy as np

from benchmarks import harness
from layout_solver.lowering.quiet import quiet
from layout_solver.targets.vulkan.measure import lower_vulkan
from layout_solver.targets.vulkan.runtime import execute, profile
from layout_solver.vulkan import solver_layouts, stock_layouts
from layout_solver.zoo.models import ZOO, build


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--models", default=",".join(ZOO))
    parser.add_argument("--profile", default="lavapipe")
    parser.add_argument("--rounds", type=int, default=21, help="timed wall-clock rounds per program")
    parser.add_argument("--runs", type=int, default=7, help="profiled runs per program (device times)")
    args = parser.parse_args()
    lines = [
        harness.provenance("the runtime's Vulkan device"),
        "",
        "| model | side | wall ms | device ms | wall - device ms | dispatches |",
        "|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    contexts = {"stock": lambda: stock_layouts(args.profile), "solver": lambda: solver_layouts(10.0, args.profile)}
    extra = []  # per model: (solver - stock dispatches, solver - stock residual ms)
    for name in args.models.split(","):
        module, inputs = build(name)
        buffers = {}
        for side, context in contexts.items():
            with quiet():
                buffers[side], _ = lower_vulkan(module, inputs, context)
        timed = execute(buffers, inputs, rounds=args.rounds)
        profiled = profile(buffers, inputs, runs=args.runs)
        residual, count = {}, {}
        for side in buffers:
            dispatches = profiled[side]
            if isinstance(dispatches, str) or timed[side].run_ms is None:
                row = (
                    f"| {name} | {side} | failed: {dispatches if isinstance(dispatches, str) else timed[side].error} |"
                )
            else:
                device_ms = sum(d.us for d in dispatches) / 1000.0
                residual[side], count[side] = timed[side].run_ms - device_ms, len(dispatches)
                row = (
                    f"| {name} | {side} | {timed[side].run_ms:.2f} | {device_ms:.2f} | {residual[side]:+.2f} | "
                    f"{count[side]} |"
                )
            lines.append(row)
            print(row, flush=True)
        if len(residual) == 2:
            extra.append((count["solver"] - count["stock"], residual["solver"] - residual["stock"]))
    more = [(d, r) for d, r in extra if d > 0]
    summary = [""]
    if more:
        d, r = np.array(more, dtype=float).T
        slope_us = 1000.0 * float(d @ r / (d @ d))  # least squares through the origin
        summary.append(
            f"- where the solver's program has more dispatches than stock's ({len(more)} models), its residual "
            f"grows by {slope_us:.0f} us per extra dispatch (least squares through the origin; per model: "
            + ", ".join(f"{int(a)} -> {1000 * b:+.0f} us" for a, b in more)
            + ")"
        )
    lines += summary
    print("\n".join(summary))
    harness.write(lines, args.out)


if __name__ == "__main__":
    main()
