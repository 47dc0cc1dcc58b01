"""Running XNNPACK programs on this CPU through the wheel's own runtime (`executorch.runtime`): threads pinned,
programs timed in interleaved paired rounds, per-op times from ETDump (`executorch.devtools.Inspector`)."""

from __future__ import annotations

import contextlib
import functools
import re
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

# XNNPACK's operator events ("Transpose (ND, X32) #3") name their class before the instance number.
_INSTANCE = re.compile(r"\s+#\d+$")
# What the profile counts as layout conversion: XNNPACK's transposes (stock's stubs and the stage's permutes).
CONVERSION_EVENTS = ("Transpose (ND",)


def set_threads(threads: int) -> None:
    """Pin the runtime's thread pool (XNNPACK's and the portable kernels') to `threads`."""
    from executorch.extension.pybindings import portable_lib

    portable_lib._unsafe_reset_threadpool(int(threads))


@contextlib.contextmanager
def pinned(threads: int):
    """The runtime's thread pool pinned to `threads` and torch's own intra-op pool held to one thread while
    programs run (restored after). A worker of torch's pool (likely woken by the pybindings' copies of inputs and
    outputs above torch's grain, 32 Ki elements) spun on the second core while XNNPACK's worker needed it: a
    program of two [49, 768] x [768, 768] products read 1,080 us at 2 threads against 1,025 at 1 here, and 563
    with torch's pool held to one. A device runs the program without torch, so no timing should pay
    for torch's pool."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        set_threads(threads)
        yield
    finally:
        torch.set_num_threads(before)


def load_method(buffer: bytes, etdump: bool = False, method: str = "forward"):
    """(program, its `method`) of a .pte buffer."""
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(bytes(buffer), enable_etdump=etdump)
    return program, program.load_method(method)


@functools.cache
def sentinel_program() -> tuple[bytes, tuple]:
    """The contention sentinel (`contention`): a 32 x 32 channel 3 x 3 convolution on a 24 x 24 map (about 100 us
    on one core), lowered to XNNPACK as executorch lowers it; its rows split evenly across the thread pool."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    torch.manual_seed(0)
    inputs = (torch.randn(1, 32, 24, 24),)
    exported = torch.export.export(torch.nn.Conv2d(32, 32, 3, padding=1).eval(), inputs)
    return to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()]).to_executorch().buffer, inputs


@functools.cache
def sentinel_one_thread_us(runs: int = 100) -> float:
    """The sentinel's median microseconds at one thread (a second CPU, ours or not, costs it nothing)."""
    buffer, inputs = sentinel_program()
    with pinned(1):
        method = load_method(buffer)[1]
        return statistics.median(timed_us(method, list(inputs)) for _ in range(runs))


def timed_us(method, args: list) -> float:
    """Microseconds of one run of a loaded `method` on `args`."""
    started = time.perf_counter()
    method.execute(args)
    return (time.perf_counter() - started) * 1e6


SENTINEL_RUNS = 3


class Sentinel:
    """The contention check between chunks of a timing at `threads` (`contention.gated_rounds`). Build it before
    the thread pool is pinned (beyond one thread it times the sentinel at one thread first, which resets the pool),
    `load` it after (a delegate keeps the pool it was loaded under)."""

    def __init__(self, threads: int):
        self.one_thread_us = sentinel_one_thread_us() if threads > 1 else None
        self._run = None

    @property
    def check(self):
        """`level`, for `contention.gated_rounds`, once loaded beyond one thread; else None (time plainly)."""
        return self.level if self._run is not None else None

    def load(self) -> None:
        """Load the sentinel under the pinned pool (a no-op at one thread) and warm it."""
        if self.one_thread_us is None:
            return
        buffer, inputs = sentinel_program()
        method, args = load_method(buffer)[1], list(inputs)
        self._run = lambda: timed_us(method, args)
        for _ in range(5):
            self._run()

    def level(self) -> float:
        """The sentinel's quickest of `SENTINEL_RUNS` runs now over its 1-thread time: its first run after another
        program reads its caches cold (1.33-1.37 of its 1-thread time after convnext_stack's or mobilenet_v2's
        program here, in a spell where its third run read 0.58-0.81), a contended spell slows every run."""
        return min(self._run() for _ in range(SENTINEL_RUNS)) / self.one_thread_us


@dataclass
class PairedTiming:
    """Interleaved rounds of several programs: each one's per-round milliseconds, and each one's paired ratio
    to the first (the median over rounds of its time / the first's in the same round). Beyond one thread, the
    rounds the machine did not give every CPU to are left out (`contention.gated_rounds`): how many, and whether
    enough quiet ones were found (else the quietest were kept)."""

    ms: list[list[float]]
    contended_rounds: int = 0
    quiet: bool = True

    @property
    def medians(self) -> list[float]:
        """Each program's median milliseconds over the rounds."""
        return [statistics.median(t) for t in self.ms]

    def ratio(self, index: int) -> float:
        """Program `index`'s paired ratio to the first: the median over rounds of its time over the first's."""
        return statistics.median(b / a for a, b in zip(self.ms[0], self.ms[index]))


def paired_times(
    buffers: list[bytes],
    inputs: tuple,
    threads: int,
    rounds: int = 30,
    warmup: int = 5,
    inputs_of=None,
    method: str = "forward",
) -> PairedTiming:
    """Run every program's `method` once per round, in an order that alternates round to round, with `threads`
    threads, on `inputs` (or program i on `inputs_of[i]`); beyond one thread, in chunks checked for contention
    (`contention.gated_rounds`)."""
    from layout_solver.targets.xnnpack.contention import gated_rounds

    args = [list(x) for x in inputs_of] if inputs_of is not None else [list(inputs)] * len(buffers)
    order = list(range(len(buffers)))
    sentinel = Sentinel(threads)
    with pinned(threads):
        loaded = [load_method(b, method=method) for b in buffers]  # each program kept alive beside its method
        methods = [m for _, m in loaded]
        sentinel.load()
        for loaded_method, given in zip(methods, args):
            for _ in range(warmup):
                loaded_method.execute(given)

        def one_round(r: int) -> list[float]:
            ms = [0.0] * len(buffers)
            for i in order if r % 2 == 0 else order[::-1]:
                started = time.perf_counter()
                methods[i].execute(args[i])
                ms[i] = (time.perf_counter() - started) * 1e3
            return ms

        gated = gated_rounds(one_round, rounds, sentinel.check)
    return PairedTiming([list(t) for t in zip(*gated.rounds)], gated.contended, gated.quiet)


@dataclass
class OpProfile:
    """Per-run milliseconds by ETDump event class (XNNPACK ops, portable kernels), medians over runs."""

    runs: int
    by_class: dict[str, float] = field(default_factory=dict)
    by_event: dict[str, float] = field(default_factory=dict)
    count_by_class: dict[str, float] = field(default_factory=dict)  # events per run

    @property
    def conversions(self) -> int:
        """XNNPACK transposes run per inference."""
        return round(sum(v for k, v in self.count_by_class.items() if k.startswith(CONVERSION_EVENTS)))

    @property
    def conversion_ms(self) -> float:
        """Milliseconds per run in XNNPACK's transposes (the layout conversions)."""
        return sum(v for k, v in self.by_class.items() if k.startswith(CONVERSION_EVENTS))

    @property
    def total_ms(self) -> float:
        """Milliseconds per run of the whole method."""
        return self.by_class.get("Method::execute", 0.0)

    @property
    def conversion_share(self) -> float:
        """The conversions' share of the whole run (0 where the run was not timed)."""
        return self.conversion_ms / self.total_ms if self.total_ms else 0.0


def etdump_inspector(
    buffer: bytes, inputs: tuple, threads: int, runs: int, warmup: int = 3, between=None, run_ms: list | None = None
):
    """An `executorch.devtools.Inspector` of `runs` runs (after `warmup` runs in another load); `between()` runs
    before each run (another program, so the run starts with the caches as an interleaved timing leaves them);
    each run's wall milliseconds appended to `run_ms` where given (as a paired timing clocks a run: the call from
    Python, its inputs' and outputs' copies included)."""
    from executorch.devtools import Inspector

    with pinned(threads):
        _, warm = load_method(buffer)
        program, method = load_method(buffer, etdump=True)
        for _ in range(warmup):
            warm.execute(list(inputs))
        for _ in range(runs):
            if between is not None:
                between()
            started = time.perf_counter()
            method.execute(list(inputs))
            if run_ms is not None:
                run_ms.append((time.perf_counter() - started) * 1e3)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.etdp"
        program.write_etdump_result_to_file(str(path), str(Path(tmp) / "debug.bin"))
        return Inspector(etdump_path=str(path))


def etdump_events(
    buffer: bytes, inputs: tuple, threads: int, runs: int, warmup: int = 3, between=None, run_ms: list | None = None
) -> dict[str, list[float]]:
    """Each ETDump event's milliseconds in each of `runs` runs of `etdump_inspector` (its arguments), by name in
    the order the events first ran."""
    inspector = etdump_inspector(buffer, inputs, threads, runs, warmup, between, run_ms)
    events: dict[str, list[float]] = defaultdict(list)
    for block in inspector.event_blocks:
        for event in block.events:
            if event.perf_data is not None:
                events[event.name].extend(event.perf_data.raw)
    return dict(events)


def profile_ops(buffer: bytes, inputs: tuple, threads: int, runs: int = 20) -> OpProfile:
    """ETDump's per-op times of one program, per run, by event and by event class."""
    events = etdump_events(buffer, inputs, threads, runs)
    by_event = {name: sum(raw) / runs for name, raw in events.items()}
    by_class: dict[str, float] = defaultdict(float)
    counts: dict[str, float] = defaultdict(float)
    for name, raw in events.items():
        by_class[_INSTANCE.sub("", name)] += sum(raw) / runs
        counts[_INSTANCE.sub("", name)] += len(raw) / runs
    return OpProfile(runs, dict(by_class), by_event, dict(counts))


def trimmed_mean(raw: list[float]) -> float:
    """The mean with the slowest tenth left out. ETDump counts whole microseconds; where a tick falls is independent
    of the op, so the mean of many runs resolves an op shorter than one tick (a median would read it 0 or 1), and a
    run the machine interrupted is left out."""
    kept = sorted(raw)[: max(1, len(raw) - len(raw) // 10)]
    return statistics.fmean(kept) if kept else 0.0


def per_run_ms(raw: list[float], runs: int) -> float:
    """One ETDump event name's milliseconds per run: Inspector lists each instance's `runs` times in turn (the 34
    `native_call_expand_copy.out` of a BEiT, 0.2 to 99 us each), so each instance gets its own `trimmed_mean`; the
    slowest tenth of all of them together would be the largest instances' times."""
    return sum(trimmed_mean(raw[i : i + runs]) for i in range(0, len(raw), max(1, runs)))


def event_means(buffer: bytes, inputs: tuple, threads: int, prefix: str, runs: int = 60) -> list[float]:
    """Microseconds per run of each event whose name starts with `prefix` (`per_run_ms`)."""
    events = etdump_events(buffer, inputs, threads, runs)
    return [per_run_ms(raw, runs) * 1e3 for name, raw in events.items() if name.startswith(prefix)]


def time_in_fresh_process(buffers: list[bytes], inputs: tuple, threads: int, rounds: int = 30) -> PairedTiming:
    """`paired_times` in a new Python process (a fresh heap, caches and thread pool), for a second reading."""
    import json
    import subprocess
    import sys

    import torch

    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, buffer in enumerate(buffers):
            paths.append(str(Path(tmp) / f"p{i}.pte"))
            Path(paths[-1]).write_bytes(buffer)
        torch.save(tuple(inputs), Path(tmp) / "inputs.pt")
        done = subprocess.run(
            [sys.executable, "-m", __name__, "--threads", str(threads), "--rounds", str(rounds),
             str(Path(tmp) / "inputs.pt"), *paths],
            capture_output=True, text=True, check=False, timeout=600,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"timing process failed: {done.stderr.strip().splitlines()[-1:]}")
        return PairedTiming(**json.loads(done.stdout.strip().splitlines()[-1]))


def _main() -> None:
    import argparse
    import dataclasses
    import json

    import torch

    parser = argparse.ArgumentParser(description="time .pte programs in interleaved paired rounds (JSON: PairedTiming)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("inputs")
    parser.add_argument("programs", nargs="+")
    args = parser.parse_args()
    inputs = torch.load(args.inputs)
    timing = paired_times([Path(p).read_bytes() for p in args.programs], inputs, args.threads, args.rounds)
    print(json.dumps(dataclasses.asdict(timing)))


if __name__ == "__main__":
    _main()
