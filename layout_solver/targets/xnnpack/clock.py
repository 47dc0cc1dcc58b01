"""The reference clock and the thread pool's wake-up: what lets a run time measured on a shared machine be stated at
the speed the profile was measured at, and what the first parallel operator after the pool's workers fell asleep
pays beyond one thread (and after how long a gap they do)."""

from __future__ import annotations

import functools
import statistics
import time

from layout_solver.targets.xnnpack.runtime import Sentinel, etdump_events, load_method, pinned, set_threads


@functools.cache
def reference_program() -> tuple[bytes, tuple]:
    """The reference clock: a fixed small program (a convolution, a transpose, a linear layer in XNNPACK, a layer
    norm on the CPU; about 0.3 ms on one core) timed in the same rounds as what is measured, so a run time can be
    stated at the speed the profile was measured at (a shared machine's speed drifts by tens of percent within
    seconds; a program's ratio to the reference moves a few percent)."""
    import torch

    from layout_solver.lowering.quiet import quiet
    from layout_solver.targets.xnnpack.lowering import lower
    from layout_solver.xnnpack import stock_layouts

    class Reference(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.linear, self.norm = (
                torch.nn.Conv2d(3, 32, 3, padding=1),
                torch.nn.Linear(32, 64),
                torch.nn.LayerNorm(64),
            )

        def forward(self, x):
            return self.norm(self.linear(self.conv(x).permute(0, 2, 3, 1)))

    torch.manual_seed(0)
    inputs = (torch.randn(1, 3, 48, 48),)
    with quiet():
        return lower(Reference().eval(), inputs, stock_layouts).buffer, inputs


def run_twin(buffer: bytes, inputs: tuple, threads: int):
    """A callable that runs a second load of the program once (its own weights, at `threads`): what runs before
    each run that is measured, as in a paired timing, where the run before is the other side's program of the same
    model. Not the reference: after a program of another kind a one-convolution program took 16 us here, against
    6.5 us after its twin or itself (a small zoo model 81 against 67), and that state priced every call ~10 us
    dearer than the paired timings the predictions are judged against."""
    set_threads(threads)
    method = load_method(buffer)[1]
    args = list(inputs)
    return lambda: method.execute(args)


def pool_wake_us(threads: int, runs: int = 60) -> float:
    """What the first parallel operator of a delegate call pays for waking the thread pool's workers (asleep
    after the gap between two calls, or a CPU kernel), in microseconds: per run, ETDump's time of the first of
    eight identical matrix products in one delegate (XNNPACK splits a GEMM over every thread, however small) over
    the median of the others, each run after its twin's as in a paired timing; the median over the runs of five
    loads. 0 on one thread."""
    import torch

    from layout_solver.lowering.quiet import quiet
    from layout_solver.targets.xnnpack.lowering import lower
    from layout_solver.xnnpack import stock_layouts

    if threads <= 1:
        return 0.0
    torch.manual_seed(0)
    layers = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)]).eval()
    inputs = (torch.randn(64, 256),)
    with quiet():
        buffer = lower(layers, inputs, stock_layouts).buffer
    differences = []
    for _ in range(5):
        # Each run after its twin's, as every probe and every paired timing runs.
        events = etdump_events(buffer, inputs, threads, runs, between=run_twin(buffer, inputs, threads))
        gemms = [raw for name, raw in events.items() if name.startswith("Fully")]
        if len(gemms) == 8:
            differences += [first - statistics.median(rest) for first, *rest in zip(*gemms)]
    return max(0.0, statistics.median(differences) * 1e3) if differences else 0.0


# The CPU gaps the pool's spin is read across: one cumsum over this many rows of 256 floats between two delegates
# (about 0.75 us a row here: 6 to 36 us).
SPIN_PROBE_ROWS = (8, 12, 16, 20, 24, 28, 32, 40, 48)


def pool_spin_and_wake(threads: int, runs: int = 60) -> tuple[float, float]:
    """(how long the thread pool's workers spin before they sleep, what the first parallel operator after that
    pays for waking them), in microseconds, from programs of six delegates of two matrix products each, one CPU
    cumsum between two delegates, its rows `SPIN_PROBE_ROWS`: per program, the gap (ETDump's cumsum) and the
    first product's time over the second's, the mean over the runs and the delegates after the first (whose gap
    is the previous run's tail). The wake-up: the median excess of the three longest gaps; the spin: midway
    between the longest gap that paid under half of it and the shortest that paid more (the longest probed gap
    where none paid more; 0 where every one did). (0, 0) on one thread."""
    import torch

    from layout_solver.lowering.quiet import quiet
    from layout_solver.targets.xnnpack.lowering import lower
    from layout_solver.xnnpack import stock_layouts

    if threads <= 1:
        return 0.0, 0.0

    class Chain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(256, 256) for _ in range(12)])

        def forward(self, x):
            for first, second in zip(self.layers[::2], self.layers[1::2]):
                x = torch.cumsum(second(first(x)), 0)  # the cumsum runs on the CPU, between two delegates
            return x

    torch.manual_seed(0)
    read = []
    for rows in SPIN_PROBE_ROWS:
        inputs = (torch.randn(rows, 256),)
        with quiet():
            buffer = lower(Chain().eval(), inputs, stock_layouts).buffer
        events = etdump_events(buffer, inputs, threads, runs, between=run_twin(buffer, inputs, threads))
        firsts, seconds, gaps = (
            next((raw for name, raw in events.items() if name.startswith(prefix) and name.endswith(suffix)), None)
            for prefix, suffix in (("Fully", "#1"), ("Fully", "#2"), ("native_call_cumsum", ""))
        )
        if not (firsts and seconds and gaps) or len(firsts) != len(seconds):
            raise RuntimeError(f"thread pool probe of {rows} rows: ETDump has not two products a delegate and a "
                               f"cumsum ({sorted(events)})")  # fmt: skip
        per_run = len(firsts) // runs
        excess = [first - second for i, (first, second) in enumerate(zip(firsts, seconds)) if i % per_run]
        read.append((statistics.median(gaps) * 1e3, statistics.mean(excess) * 1e3))
    read.sort()
    wake = statistics.median(excess for _, excess in read[-3:])
    slept = [gap for gap, excess in read if excess >= wake / 2]
    if not slept:
        return read[-1][0], max(0.0, wake)
    awake = [gap for gap, excess in read if excess < wake / 2 and gap < slept[0]]
    return ((awake[-1] + slept[0]) / 2 if awake else 0.0), max(0.0, wake)


# The reference's runs per round: the first follows the measured program and runs on the caches it left (a program
# of many MiB of weights slowed the reference by up to 35% here, and so read itself 25% fast); the rest read the
# machine's speed alone.
REFERENCE_RUNS_PER_ROUND = 3
# The program's runs per round, each after its twin's; the last is timed. The first run after the reference pays
# for the code the reference left in the caches (a one-convolution program 34 us, then 10-12, where it runs in 6.5
# alternating with its twin), and a paired timing never runs a program right after another kind.
TWIN_PAIRS_PER_ROUND = 2


def reference_ratio(buffer: bytes, inputs: tuple, threads: int, rounds: int = 30) -> tuple[float, float]:
    """(the program's run time over the reference's: the median over rounds of their ratio, the reference's median
    milliseconds in those rounds). Each round runs the program's twin (`run_twin`) and the program
    `TWIN_PAIRS_PER_ROUND` times (the last run timed, in the state a paired timing runs it in), then the reference
    `REFERENCE_RUNS_PER_ROUND` times; the program's time is paired with the median of the reference's runs after
    its first, which the program's own caches would slow. Beyond one thread, rounds the machine did not give both
    CPUs to are dropped (`contention.gated_rounds`)."""
    from layout_solver.targets.xnnpack.contention import gated_rounds

    reference, reference_inputs = reference_program()
    sentinel = Sentinel(threads)
    with pinned(threads):
        methods = [load_method(reference)[1], load_method(buffer)[1]]
        args = [list(reference_inputs), list(inputs)]
        twin = run_twin(buffer, inputs, threads)
        sentinel.load()
        for method, given in zip(methods, args):
            for _ in range(5):
                method.execute(given)

        def timed(i: int) -> float:
            started = time.perf_counter()
            methods[i].execute(args[i])
            return (time.perf_counter() - started) * 1e3

        def one_round(_: int) -> tuple[float, float]:
            for _ in range(TWIN_PAIRS_PER_ROUND):
                twin()
                program_ms = timed(1)
            reference_ms = statistics.median([timed(0) for _ in range(REFERENCE_RUNS_PER_ROUND)][1:])
            return program_ms / reference_ms, reference_ms

        gated = gated_rounds(one_round, rounds, sentinel.check)
    return statistics.median(r for r, _ in gated.rounds), statistics.median(ms for _, ms in gated.rounds)


def at_reference_speed(runs: list, speed: dict[str, float] | None = None) -> dict[str, float]:
    """State every run's times at one machine speed, per thread count: the reference program's microseconds in
    `speed` (a profile's `reference_us`), else its median over all the runs (returned), each run scaled by that
    over the reference's time in its own rounds. `runs`: calibrate_ops.ProbeRun, scaled in place."""
    reference = {}
    for n in sorted({r.threads for r in runs}):
        mine = [r for r in runs if r.threads == n]
        given = (speed or {}).get(str(n))
        reference[str(n)] = given if given else round(float(statistics.median([r.reference_us for r in mine])), 3)
        for r in mine:
            scale = reference[str(n)] / r.reference_us
            r.run_us *= scale
            r.block_run_us *= scale
            r.kernel_us = {k: v * scale for k, v in r.kernel_us.items()}
            r.reference_us = reference[str(n)]
    return reference
