"""What an op costs in XNNPACK when it reads what a parallel op wrote, against reading its input where it last left
it in cache: the calibration's probe as it was (the op twice on the same inputs) and as it is (`calibrate_ops._twice`:
the second reads the first's output), and a chain of four layers of the op, each its own weights, as a program runs
them. ETDump's time of each op (the mean of `--rounds` runs, the slowest tenth left out), each run after its twin's.

Run: .venv/bin/python -m benchmarks.xnnpack.chained_probes [--threads 1,2] [--rounds 60] [--out FILE]
"""

from __future__ import annotations

import copy

from benchmarks import harness

# Name -> (a layer, its input's shape): products, convolutions and unary ops of a program's sizes, all keeping
# their input's shape so the same layer chains.
CASES = {
    "gemm [16, 64] x [64, 64]": ("linear", 64, (16, 64)),
    "gemm [36, 128] x [128, 128]": ("linear", 128, (36, 128)),
    "gemm [64, 256] x [256, 256]": ("linear", 256, (64, 256)),
    "gemm [196, 384] x [384, 384]": ("linear", 384, (196, 384)),
    "gemm [1024, 64] x [64, 64]": ("linear", 64, (1024, 64)),
    "conv 3x3 32 ch at 32x32": ("conv", 32, (1, 32, 32, 32)),
    "conv 1x1 128 ch at 14x14": ("pointwise", 128, (1, 128, 14, 14)),
    "dwconv 3x3 96 ch at 28x28": ("depthwise", 96, (1, 96, 28, 28)),
    "dwconv 3x3 128 ch at 14x14": ("depthwise", 128, (1, 128, 14, 14)),
    "gelu [196, 384]": ("gelu", 0, (196, 384)),
}


def _layer(kind: str, width: int):
    import torch

    return {
        "linear": lambda: torch.nn.Linear(width, width),
        "conv": lambda: torch.nn.Conv2d(width, width, 3, padding=1),
        "pointwise": lambda: torch.nn.Conv2d(width, width, 1),
        "depthwise": lambda: torch.nn.Conv2d(width, width, 3, padding=1, groups=width),
        "gelu": lambda: torch.nn.GELU(),
    }[kind]().eval()


def op_times(module, x, threads: int, rounds: int) -> list[float]:
    """ETDump's microseconds of each XNNPACK op of the lowered module, in the order they ran."""
    from layout_solver.lowering.quiet import quiet
    from layout_solver.targets.xnnpack.calibrate_ops import _HELPER_EVENTS, BOOKKEEPING
    from layout_solver.targets.xnnpack.clock import run_twin
    from layout_solver.targets.xnnpack.lowering import lower
    from layout_solver.targets.xnnpack.runtime import etdump_events, trimmed_mean
    from layout_solver.xnnpack import stock_layouts

    with quiet():
        buffer = lower(module.eval(), (x,), stock_layouts).buffer
    events = etdump_events(buffer, (x,), threads, rounds, between=run_twin(buffer, (x,), threads))
    skipped = _HELPER_EVENTS + BOOKKEEPING  # the kernels the calibration files, as it reads them
    return [trimmed_mean(raw) * 1e3 for name, raw in events.items() if not name.startswith(skipped)]


def main() -> None:
    import torch

    from layout_solver.targets.xnnpack.calibrate_ops import _twice

    args = harness.parser(__doc__)
    args.add_argument("--threads", default="1,2")
    args.add_argument("--rounds", type=int, default=60)
    opts = args.parse_args()
    threads = [int(t) for t in opts.threads.split(",")]

    lines = ["# An XNNPACK op reading what a parallel op wrote, against its input left in cache", "",
             harness.provenance(), "",
             "Microseconds of the second op (ETDump); the chain's: the median of its layers after the first.", ""]  # fmt: skip
    rows = []
    for name, (kind, width, shape) in CASES.items():
        torch.manual_seed(0)
        layer, x = _layer(kind, width), torch.randn(*shape)
        chain = torch.nn.Sequential(*[copy.deepcopy(layer) for _ in range(4)])
        for n in threads:
            same = op_times(_twice(layer, (x,), chained=False), x, n, opts.rounds)[-1]
            chained = op_times(_twice(layer, (x,)), x, n, opts.rounds)[-1]
            layers = sorted(op_times(chain, x, n, opts.rounds)[1:])
            in_chain = layers[len(layers) // 2]
            rows.append((name, n, f"{same:.1f}", f"{chained:.1f}", f"{in_chain:.1f}", f"{in_chain / same - 1:+.0%}",
                         f"{in_chain / chained - 1:+.0%}"))  # fmt: skip
            print(harness.row(rows[-1]), flush=True)
    lines += harness.table(["op", "threads", "same inputs (as it was)", "chained (as it is)", "a layer in a chain",
                            "chain over same inputs", "chain over chained"], rows)  # fmt: skip
    harness.emit(lines, opts.out)


if __name__ == "__main__":
    main()
