"""Whether a timing beyond one thread had the CPUs it asked for.

On a shared machine (a VM whose virtual CPUs the host places on its cores as it likes) a 2-thread run moves
between states for seconds at a time, every program at once, while a 1-thread run reads the same throughout (two
busy processes, one per CPU, ran at full speed together; a cross-CPU round trip read 350 ns in some seconds and
156 in others). `benchmarks/xnnpack/contention.py` times a sentinel and four programs in rounds at 2 threads and
bins the rounds by the sentinel's time over its 1-thread time. On ci-x86, in one 90 s run outside:mobilenet_v2's
stock program read 170-189 us where the sentinel read under 0.8 and 416-423 us above (a fifth of the rounds); in
another, each reading the quickest of three runs (`benchmarks/results/xnnpack_contention.md`), 186 us under 0.65
(84% of the rounds), 243-308 at 0.65-0.8, up to 565 beyond.
A 2-thread figure was whichever state its timing fell in; a device runs a program on CPUs of its own.

So a timing beyond one thread runs in chunks, each between two readings of a sentinel (`runtime.Sentinel`, a
convolution that splits evenly across the pool: 0.6-0.7 of its 1-thread time at 2 threads when quiet), and keeps
the chunks where both readings were quiet (`QUIET_SHARE`). A reading is the quickest of three runs: the first
after another program reads its caches cold. This module is that rule alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

# A chunk counts as quiet where both sentinel readings took under this share of the sentinel's 1-thread time
# (ci-x86, readings the quickest of three runs: programs at their quiet times under 0.65, 1.2-2x slower from 0.65
# up; the 0.65-0.7 band, 5% of one run's rounds, still counts as quiet here).
QUIET_SHARE = 0.7
# A chunk runs at least this many rounds, and more until this many seconds passed (the states last seconds).
MIN_CHUNK_ROUNDS = 3
CHUNK_SECONDS = 0.05
# A timing that found too few quiet rounds stops after this many times an unchecked timing's length, or this many
# seconds if longer (a spell lasts seconds), once it ran as many rounds as asked, and keeps its quietest chunks
# (`GatedRounds.quiet` False).
BUDGET_FACTOR = 4
MIN_BUDGET_SECONDS = 3.0


@dataclass
class GatedRounds(Generic[T]):
    """What each kept round returned, how many rounds ran in chunks left out, and whether the kept rounds are
    all quiet ones (False: too few were found in the budget, and the quietest chunks were kept)."""

    rounds: list[T]
    contended: int = 0
    quiet: bool = True


def gated_rounds(run_round: Callable[[int], T], rounds: int, level: Callable[[], float] | None) -> GatedRounds[T]:
    """`rounds` rounds (`run_round(r)` for r = 0, 1, ...) from chunks that ran between two quiet sentinel readings
    (`level()`: the sentinel's time now over its 1-thread time; a chunk's level is the higher of its two readings,
    quiet under `QUIET_SHARE`); without a sentinel (one thread), plainly. Chunks run until `rounds` quiet rounds
    are in, or the budget (`BUDGET_FACTOR`, `MIN_BUDGET_SECONDS`) is spent and `rounds` rounds ran in all; then the
    quietest chunks that make up `rounds` rounds are kept."""
    if level is None:
        return GatedRounds([run_round(r) for r in range(rounds)])
    chunks: list[tuple[float, list[T]]] = []
    quiet_rounds = ran = r = 0
    started, budget_s = time.perf_counter(), None
    before = level()
    while quiet_rounds < rounds and (budget_s is None or time.perf_counter() - started < budget_s or ran < rounds):
        chunk, chunk_started = [], time.perf_counter()
        while len(chunk) < MIN_CHUNK_ROUNDS or (
            time.perf_counter() - chunk_started < CHUNK_SECONDS and quiet_rounds + len(chunk) < rounds
        ):
            chunk.append(run_round(r))
            r += 1
        if budget_s is None:
            per_round = (time.perf_counter() - chunk_started) / len(chunk)
            budget_s = max(MIN_BUDGET_SECONDS, BUDGET_FACTOR * rounds * per_round)
        after = level()
        chunks.append((max(before, after), chunk))
        quiet_rounds += len(chunk) if max(before, after) < QUIET_SHARE else 0
        ran, before = ran + len(chunk), after
    kept: list[T] = []
    # the quiet chunks in the order they ran, then the contended ones, least contended first
    for chunk_level, chunk in sorted(chunks, key=lambda c: c[0] if c[0] >= QUIET_SHARE else 0.0):
        if chunk_level >= QUIET_SHARE and len(kept) >= rounds:
            break
        kept += chunk
    return GatedRounds(kept, ran - len(kept), quiet=quiet_rounds >= rounds)
