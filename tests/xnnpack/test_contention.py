"""Timings beyond one thread keep only the rounds run while the machine gave them every CPU: the chunking and
keeping rule (a scripted sentinel: which spell the machine is in cannot be chosen in a test), and the real
sentinel and paired timing on this machine's runtime."""

from __future__ import annotations

import itertools

import torch

from layout_solver.targets.xnnpack import contention
from layout_solver.targets.xnnpack.contention import GatedRounds, gated_rounds
from layout_solver.targets.xnnpack.lowering import lower
from layout_solver.targets.xnnpack.runtime import Sentinel, paired_times, sentinel_one_thread_us
from layout_solver.xnnpack import stock_layouts

QUIET, BUSY, WORSE = 0.5, 0.9, 1.5  # sentinel readings over its 1-thread time


def _scripted(readings):
    """A sentinel whose readings are given."""
    return iter(readings).__next__


def test_chunks_between_two_quiet_sentinel_runs_are_kept_and_the_others_left_out(monkeypatch):
    monkeypatch.setattr(contention, "CHUNK_SECONDS", 0.0)  # every chunk is MIN_CHUNK_ROUNDS rounds
    chunk = contention.MIN_CHUNK_ROUNDS
    # readings before chunk 1, after it (= before chunk 2), ...: chunk 2 ends contended, chunk 3 begins so
    gated = gated_rounds(lambda r: r, 2 * chunk, _scripted([QUIET, QUIET, BUSY, QUIET, QUIET, QUIET]))
    assert gated.rounds == [*range(chunk), *range(3 * chunk, 4 * chunk)]
    assert gated.contended == 2 * chunk and gated.quiet


def test_a_timing_that_finds_no_quiet_spell_keeps_its_quietest_chunks_and_says_so(monkeypatch):
    monkeypatch.setattr(contention, "CHUNK_SECONDS", 0.0)
    monkeypatch.setattr(contention, "MIN_BUDGET_SECONDS", 0.0)
    monkeypatch.setattr(contention, "BUDGET_FACTOR", 0)  # the budget is spent at once: 2 chunks run
    chunk = contention.MIN_CHUNK_ROUNDS
    # never quiet: after the budget, the two quietest chunks (the second, then the first; each later one WORSE)
    readings = itertools.chain([WORSE, BUSY, BUSY], itertools.repeat(WORSE))
    gated = gated_rounds(lambda r: r, 2 * chunk, _scripted(readings))
    assert not gated.quiet
    assert gated.rounds[: 2 * chunk] == [*range(chunk, 2 * chunk), *range(chunk)]
    assert len(gated.rounds) == 2 * chunk and gated.contended == 0


def test_one_thread_is_timed_plainly():
    sentinel = Sentinel(1)
    sentinel.load()
    assert sentinel.one_thread_us is None and sentinel.check is None
    assert gated_rounds(lambda r: r * r, 4, None) == GatedRounds([0, 1, 4, 9])


def test_the_sentinel_and_a_paired_timing_at_two_threads_on_this_runtime():
    one_thread = sentinel_one_thread_us()
    assert 5.0 < one_thread < 5000.0 and Sentinel(2).one_thread_us == one_thread
    torch.manual_seed(0)
    inputs = (torch.randn(1, 8, 16, 16),)
    buffer = lower(torch.nn.Conv2d(8, 8, 3, padding=1).eval(), inputs, stock_layouts).buffer
    timing = paired_times([buffer, buffer], inputs, threads=2, rounds=12)
    # whichever spell the machine was in: at least the rounds asked for, each program timed in each
    assert len(timing.ms) == 2 and len(timing.ms[0]) == len(timing.ms[1]) >= 12
    assert timing.contended_rounds >= 0 and all(ms > 0 for ms in timing.ms[0])
