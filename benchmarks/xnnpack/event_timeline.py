"""One program's run as ETDump sees it, event by event, at 1 and 2 threads: where each event starts within the run
and how long it takes (the medians over `--rounds` runs, each after its twin's, as a paired timing runs it). Says
where a 2-thread run spends what a 1-thread one does not: a wake-up of the thread pool (one operator some 10-20 us
dearer), or small operators each a little dearer.

Run: .venv/bin/python -m benchmarks.xnnpack.event_timeline --model outside:llama_decode [--int8] [--rounds 30]
     [--all] [--out FILE]

Rows: every event whose 2-thread time exceeds its 1-thread time by more than `--over` microseconds (all with
`--all`), CPU kernels and their OPERATOR_CALL left out unless `--all`. An event is matched by its place in the run
(the n-th event of each run), so both thread counts must run the same events in the same order.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from benchmarks import harness

SETUP_EVENTS = ("Method::init", "Program::load_method")


def run_events(buffer: bytes, inputs: tuple, threads: int, rounds: int) -> list[tuple[str, float, float]]:
    """(name, start microseconds after the run's first event, microseconds) of each event of a run, the medians
    over `rounds` runs."""
    from layout_solver.targets.xnnpack.clock import run_twin
    from layout_solver.targets.xnnpack.runtime import etdump_inspector

    inspector = etdump_inspector(buffer, inputs, threads, rounds, between=run_twin(buffer, inputs, threads))
    per_run: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    for block in inspector.event_blocks:
        for event in block.events:
            if event.name in SETUP_EVENTS or not (event.start_time and event.perf_data):
                continue
            for run, (start, ms) in enumerate(zip(event.start_time, event.perf_data.raw)):
                per_run[run].append((start, ms * 1e3, event.name))
    runs = [sorted(events) for _, events in sorted(per_run.items())]
    length = min(len(events) for events in runs)
    out = []
    for k in range(length):
        names = sorted({events[k][2] for events in runs})
        start = statistics.median((events[k][0] - events[0][0]) / 1e3 for events in runs)  # ns -> us
        out.append(("/".join(names), start, statistics.median(events[k][1] for events in runs)))
    return out


def main() -> None:
    from layout_solver.lowering.quiet import quiet
    from layout_solver.targets.xnnpack.lowering import lower, quantize
    from layout_solver.xnnpack import stock_layouts
    from layout_solver.zoo.models import build

    args = harness.parser(__doc__)
    args.add_argument("--model", default="outside:llama_decode")
    args.add_argument("--int8", action="store_true")
    args.add_argument("--rounds", type=int, default=30)
    args.add_argument("--over", type=float, default=2.0)
    args.add_argument("--all", action="store_true")
    opts = args.parse_args()
    module, inputs = build(opts.model)
    with quiet():
        buffer = lower(quantize(module, inputs) if opts.int8 else module, inputs, stock_layouts).buffer
    one, two = (run_events(buffer, inputs, n, opts.rounds) for n in (1, 2))
    rows = []
    for k, ((name, start1, us1), (_, start2, us2)) in enumerate(zip(one, two)):
        cpu = name.startswith(("native_call_", "OPERATOR_CALL"))
        if opts.all or (not cpu and us2 - us1 > opts.over):
            times = (start1, us1, start2, us2)
            rows.append((k, name[:60], *(f"{t:.1f}" for t in times), f"{us2 - us1:+.1f}"))
    lines = [f"# {opts.model}{' (int8)' if opts.int8 else ''}: its run event by event, 1 against 2 threads", "",
             harness.provenance(), "",
             (f"{len(one)} events a run; the medians of {opts.rounds} runs. Start: microseconds after the "
              "run's first event."), ""]  # fmt: skip
    lines += harness.table(["#", "event", "start 1t", "us 1t", "start 2t", "us 2t", "2t - 1t"], rows)
    harness.emit(lines, opts.out)


if __name__ == "__main__":
    main()
