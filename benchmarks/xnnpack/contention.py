"""Whether a 2-thread timing on this machine had both CPUs: rounds of the contention sentinel
(`layout_solver.targets.xnnpack.runtime.Sentinel`) and some programs at 2 threads for `--seconds`, each round a
sentinel reading first (as a checked timing reads it), then each program once; the rounds binned by the reading, and each
program's median microseconds per bin. Where the bins below `QUIET_SHARE` and above it read two distinct levels
for every program, the sentinel tells the machine's two states apart; the 1-thread column is each program's
median alone at one thread, for scale.

Run: .venv/bin/python -m benchmarks.xnnpack.contention [--models outside:mobilenet_v2,...] [--seconds 90] [--out FILE]
"""

from __future__ import annotations

from benchmarks import harness

MODELS = (
    "outside:mobilenet_v2,benchmarks/arm/transpose_count_cases.py:model_7_dwconv_batchnorm_linear,"
    "outside:llama_decode,resnet8"
)
EDGES = (0.0, 0.65, 0.7, 0.75, 0.8, 0.9, 1.0, 1.2, float("inf"))


def main() -> None:
    import itertools
    import statistics
    import time

    import numpy as np

    from layout_solver.lowering.quiet import quiet
    from layout_solver.targets.xnnpack import contention
    from layout_solver.targets.xnnpack.lowering import lower
    from layout_solver.targets.xnnpack.runtime import SENTINEL_RUNS, Sentinel, load_method, pinned, timed_us
    from layout_solver.xnnpack import stock_layouts
    from layout_solver.zoo.models import build

    args = harness.parser(__doc__)
    args.add_argument("--models", default=MODELS)
    args.add_argument("--seconds", type=float, default=90.0)
    opts = args.parse_args()
    names = opts.models.split(",")
    programs = []
    for name in names:
        module, inputs = build(name)
        with quiet():
            programs.append((lower(module, inputs, stock_layouts).buffer, list(inputs)))
    sentinel = Sentinel(2)
    one_thread = []
    with pinned(1):
        for buffer, args_ in programs:
            method = load_method(buffer)[1]
            one_thread.append(statistics.median(timed_us(method, args_) for _ in range(200)))
    rounds = []
    with pinned(2):
        sentinel.load()
        methods = [(load_method(b)[1], a) for b, a in programs]
        started = time.perf_counter()
        while time.perf_counter() - started < opts.seconds:
            rounds.append([sentinel.level()] + [timed_us(m, a) for m, a in methods])
    table = np.array(rounds)
    short = [n.split(":")[-1][:24] for n in names]
    rows = [("1 thread", "", *(f"{us:.1f}" for us in one_thread))]
    for low, high in itertools.pairwise(EDGES):
        picked = table[(table[:, 0] >= low) & (table[:, 0] < high)]
        if len(picked):
            rows.append((f"{low:g}-{high:g}", f"{len(picked) / len(table):.2f}",
                         *(f"{np.median(picked[:, i + 1]):.1f}" for i in range(len(names)))))  # fmt: skip
            print(harness.row(rows[-1]), flush=True)
    lines = ["# XNNPACK at 2 threads on this machine: the contention sentinel against programs", "",
             harness.provenance(), "",
             (f"{len(table):,} rounds in {opts.seconds:g} s; the sentinel's 1-thread time {sentinel.one_thread_us:.1f} "
              f"us, each reading the quickest of {SENTINEL_RUNS} runs; a round counts as quiet under {contention.QUIET_SHARE} of it. Each program's median "
              "microseconds by the bin of its round's sentinel reading (2 threads)."), ""]  # fmt: skip
    lines += harness.table(["sentinel / its 1-thread time", "share of rounds", *short], rows)
    harness.emit(lines, opts.out)


if __name__ == "__main__":
    main()
