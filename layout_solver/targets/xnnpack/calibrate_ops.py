"""`layout-solver calibrate xnnpack`, the run-time half: each op class's curve and the overheads, timed on this CPU.

Every probe is a small program of one kind of op at one size (XNNPACK ops lowered with the stock partitioner,
CPU kernels with none), lowered inside `stock_layouts`, so the (class, work) it is filed under is what the
predictor reads off any program (`layout_solver.xnnpack.runtime_model`). The op's own time is ETDump's (the mean
of `rounds` runs, the slowest tenth left out); each class keeps its curve of time by work, made non-decreasing.
The overheads (per call, delegate, XNNPACK operator, CPU kernel and KiB of inputs and outputs) are what the
probes' measured run times hold beyond their kernels, fitted by non-negative least squares over every probe and
a few made of many tiny ops; never fitted on the models the prediction is judged on. Every probe is timed in
rounds interleaved with the reference program (`clock.reference_program`) and stated at the reference's
median speed over the whole calibration, so the machine's drift while it runs does not bend the curves.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from cost_models import xnnpack as xnn_cost
from cost_models.xnnpack_fit import op_curves, packing, streaming
from layout_solver.targets.xnnpack.op_probes import Probe, probes

# ETDump events that are bookkeeping, not kernels.
BOOKKEEPING = ("Method::execute", "DELEGATE_CALL", "OPERATOR_CALL", "Program::load_method", "Method::init")


@dataclass
class ProbeRun:
    """What one probe measured at one thread count: ETDump's mean microseconds per kernel event, the median
    run time, and the ops the predictor reads off the probe program."""

    probe: Probe
    threads: int
    kernel_us: dict[str, float]
    run_us: float
    ops: list
    delegates: int
    io_kib: float
    reference_us: float  # the reference program's median in the rounds the run was timed in
    # The wall time of the runs ETDump's kernel times come from (their trimmed mean): at 2 threads here a program's
    # speed moved by up to 40% between the run's rounds and that block, where what one block spends beyond its
    # kernels holds within a few percent.
    block_run_us: float


@dataclass(frozen=True)
class LoweredProbe:
    """A probe lowered once (inside `stock_layouts`): its program, inputs, and what the predictor reads off it."""

    buffer: bytes
    inputs: tuple
    ops: list
    delegates: int
    io_kib: float


def lower_probe(probe: Probe) -> LoweredProbe:
    """Lower the probe as a program of its kind is lowered: XNNPACK's ops delegated (their op twice in one
    call, the second reading the first's output, `_twice`), CPU kernels with no partitioner."""
    import torch
    from executorch.exir import to_edge

    from layout_solver.lowering.quiet import quiet
    from layout_solver.targets.xnnpack.cpu_ops import program_ops
    from layout_solver.targets.xnnpack.lowering import lower, quantize
    from layout_solver.xnnpack import stock_layouts

    with quiet():
        module, inputs = probe.build()
        if probe.delegated and probe.op_class is not None:
            module = _twice(module, inputs, probe.producer)
        if probe.int8:
            module = quantize(module, inputs)
        if probe.delegated:
            lowered = lower(module, inputs, stock_layouts)
            buffer, outside = lowered.buffer, lowered.outside
            ops = outside.run_ops([r.run_ops for r in lowered.reports])
        else:
            edge = to_edge(torch.export.export(module, inputs))
            outside = program_ops(edge.exported_program())  # before to_executorch rewrites the graph
            buffer = edge.to_executorch().buffer
            ops = outside.ops
    return LoweredProbe(buffer, inputs, ops, outside.delegates, outside.io_kib)


def run_probe(probe: Probe, threads: list[int], rounds: int, lowered: LoweredProbe | None = None) -> list[ProbeRun]:
    """Time the probe (lowered by `lower_probe` unless given) at every thread count."""
    from layout_solver.targets.xnnpack.clock import reference_ratio, run_twin
    from layout_solver.targets.xnnpack.runtime import etdump_events, per_run_ms, trimmed_mean

    lowered = lowered or lower_probe(probe)
    buffer, inputs = lowered.buffer, lowered.inputs
    out = []
    for n in threads:
        # Each run after its twin's, as a paired timing runs a program after the other side's of the same model.
        block_ms: list[float] = []
        events = etdump_events(buffer, inputs, n, rounds, between=run_twin(buffer, inputs, n), run_ms=block_ms)
        kernels = {name: per_run_ms(raw, rounds) * 1e3 for name, raw in events.items() if name not in BOOKKEEPING}
        ratio, reference_ms = reference_ratio(buffer, inputs, n, rounds)
        out.append(ProbeRun(probe, n, kernels, ratio * reference_ms * 1e3, lowered.ops, lowered.delegates,
                            lowered.io_kib, reference_ms * 1e3, trimmed_mean(block_ms) * 1e3))  # fmt: skip
    return out


def merged(runs: list[ProbeRun]) -> list[ProbeRun]:
    """One run per (probe, thread count) out of several passes' (all at one reference speed): the median run time
    and, per kernel event, the median of its times (a pass can meet the machine slow in one op and not the next:
    one probe's time moved by up to 2x from one pass to the next here, where their median moves a few percent)."""
    groups: dict[tuple[str, int], list[ProbeRun]] = defaultdict(list)
    for run in runs:
        groups[(run.probe.name, run.threads)].append(run)
    out = []
    for group in groups.values():
        first = group[0]
        kernels = {name: float(np.median([r.kernel_us[name] for r in group if name in r.kernel_us]))
                   for name in first.kernel_us}  # fmt: skip
        out.append(dataclasses.replace(first, kernel_us=kernels, run_us=float(np.median([r.run_us for r in group])),
                                       block_run_us=float(np.median([r.block_run_us for r in group]))))  # fmt: skip
    return out


def _twice(module, inputs: tuple, producer=None, chained: bool = True):
    """The probe's op twice in one delegate call, the second reading what the first wrote, as a program's layers
    do: where the op keeps its first input's shape, the op then a copy of it (each its own weights); else
    `producer()` (a module of the op's class that keeps the shape) then the op; else (neither) the op twice on the
    same inputs (so too where not `chained`: the probe as it was, which `benchmarks.xnnpack.chained_probes` times
    against). The first pays for waking the thread pool's workers, asleep since the last call (15-50 us on two
    threads here, from one probe to the next, where a one-op probe's op takes 1 us on one). On two threads an op
    reading its inputs where the first op's run left them in cache read up to a quarter faster than a layer of a
    chain (a [36, 128] x [128, 128] product 9.0 us against 11.7 in one run; the same in another); one thread reads
    the same either way (benchmarks/xnnpack/chained_probes.py)."""
    import copy

    import torch

    with torch.no_grad():
        out = module(*inputs)
    keeps = isinstance(out, torch.Tensor) and out.shape == inputs[0].shape
    first, second = (module, copy.deepcopy(module)) if keeps else (producer(), module) if producer else (None, None)
    first = first if chained else None

    class Chained(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.second = first, second

        def forward(self, x, *rest):  # the op's other inputs (a sum's second term) read as given, by both
            return self.second(self.first(x, *rest) if keeps else self.first(x), *rest)

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.second = module, copy.deepcopy(module)

        def forward(self, *xs):
            return self.first(*xs), self.second(*xs)

    return (Chained() if first is not None else Twice()).eval()


# XNNPACK's events that are not the kernel a probe measures: its I/O conversions, reshapes and int8 converts.
_HELPER_EVENTS = ("Transpose", "Static Reshape", "Convert", "native_call_")


def op_measurements(runs: list[ProbeRun]) -> list[xnn_cost.OpMeasurement]:
    """Per probe run, the time of one op of its class: a CPU kernel's own event over the number of its calls; in
    a delegate (where the probe runs its op twice), the second op's events (XNNPACK's kernels besides the helpers,
    in the order they ran: their second half), else all of them over the number of ops the predictor reads."""
    out = []
    for run in runs:
        op_class = run.probe.op_class
        mine = [op for op in run.ops if op.op_class == op_class]
        if op_class is None or not mine:
            continue
        if op_class.startswith(xnn_cost.CPU_PREFIX):
            name = op_class.removeprefix(xnn_cost.CPU_PREFIX).split("@")[0]
            us = sum(v for k, v in run.kernel_us.items() if k.startswith(f"native_call_{name}.")) / len(mine)
        else:
            kernels = [v for k, v in run.kernel_us.items() if not k.startswith(_HELPER_EVENTS)]
            second = kernels[len(kernels) // 2 :]
            us = sum(second) if len(mine) == 2 and len(kernels) % 2 == 0 else sum(kernels) / len(mine)
        measured = mine[-1]  # the second op (after its producer, where the probe has one)
        out.append(xnn_cost.OpMeasurement(op_class=op_class, work=measured.work, elem_bytes=measured.elem_bytes,
                                          threads=run.threads, us=round(us, 3), probe=run.probe.name,
                                          units=measured.units, unit_probe=run.probe.unit_probe,
                                          tile_probe=run.probe.tile_probe, gemm=measured.gemm,
                                          footprint_kib=sum(op.weight_kib for op in run.ops)
                                          if run.probe.stream_probe else 0.0))  # fmt: skip
    return out


def overheads(
    runs: list[ProbeRun], threads: list[int], pool: dict[int, tuple[float, float]] | None = None
) -> dict[str, xnn_cost.Overheads]:
    """Per thread count, fitted by non-negative least squares (relative errors: a probe of 5 us weighs as much as
    one of 5 ms) to what each probe's run time holds beyond its kernels (ETDump's): first on the chain probes,
    against their calls, delegates, CPU kernels and XNNPACK operators of each family (a family's chains of 1, 12
    and 36 small operators make its overhead their slope); then the single-op probes, whose inputs and outputs
    span 1 KiB to 1 MiB and whose kernels 1 us to 4 ms, give the cost per KiB of them and the share of the
    kernels' time the run spends beyond them (`kernel_fraction`), past what the first fit already prices; where
    there are chains of a program's layers (`_program_chains`), the share is theirs. `pool`: per thread count,
    the thread pool's spin and wake-up (`clock.pool_spin_and_wake`), measured apart."""
    from scipy.optimize import nnls

    chains = [r for r in runs if r.probe.op_class is None and not r.probe.kernel_bound]
    families = sorted({xnn_cost.op_family(op.op_class) for r in chains for op in r.ops if op.in_delegate})

    def counts(r: ProbeRun) -> list[float]:
        return [1.0, r.delegates, sum(not op.in_delegate for op in r.ops)] + [
            sum(op.in_delegate and xnn_cost.op_family(op.op_class) == f for op in r.ops) for f in families
        ]

    def beyond(r: ProbeRun) -> float:
        return max(0.0, r.run_us - sum(r.kernel_us.values()))

    out = {}
    for n in threads:
        mine = [r for r in chains if r.threads == n]
        weights = 1.0 / np.maximum([r.run_us for r in mine], 1.0)
        coef, _ = nnls(
            np.array([counts(r) for r in mine]) * weights[:, None], np.array([beyond(r) for r in mine]) * weights
        )
        singles = [r for r in runs if r.threads == n and r.probe.op_class is not None and r.io_kib > 0
                   and not r.probe.stream_probe]  # fmt: skip
        left = np.array([beyond(r) - float(np.dot(counts(r), coef)) for r in singles])
        weights = 1.0 / np.maximum([r.run_us for r in singles], 1.0)
        per_io_and_kernel = np.array([[r.io_kib, sum(r.kernel_us.values())] for r in singles])
        io, _ = nnls(per_io_and_kernel * weights[:, None], left * weights)
        by_family = {f: round(float(c), 3) for f, c in zip(families, coef[3:])}
        fitted = xnn_cost.Overheads(
            call_us=round(coef[0], 3), delegate_us=round(coef[1], 3), cpu_op_us=round(coef[2], 3),
            **pool_fields((pool or {}).get(n)),
            io_us_per_kib=round(float(io[0]), 5), kernel_fraction=round(float(io[1]), 4),
            xnnpack_op_us=round(float(np.median(coef[3:])), 3) if families else 0.0,
            xnnpack_op_us_by_class=by_family,
        )  # fmt: skip
        programs = [r for r in runs if r.threads == n and r.probe.kernel_bound]
        out[str(n)] = with_program_share(fitted, programs) if programs else fitted
    return out


def with_program_share(fitted: xnn_cost.Overheads, programs: list[ProbeRun]) -> xnn_cost.Overheads:
    """`fitted` with the share of the kernels' time a program's layers run beyond them (`kernel_fraction`): the
    mean over the chains of a program's layers (`op_probes._program_chains`) of what each run spends beyond its
    kernels, past what `fitted` prices by count (`Overheads.counted_us`), over its kernels. The run and the
    kernels are read from the same runs (`ProbeRun.block_run_us`)."""
    shares = []
    for r in programs:
        kernels = sum(r.kernel_us.values())
        beyond = r.block_run_us - kernels - fitted.counted_us(r.ops, r.delegates, r.io_kib)
        shares.append(beyond / max(kernels, 1.0))
    return fitted.model_copy(update={"kernel_fraction": round(max(0.0, float(np.mean(shares))), 4)})


def pool_fields(spin_and_wake: tuple[float, float] | None) -> dict:
    """`Overheads`' thread-pool fields from `clock.pool_spin_and_wake`'s reading (none: no wake-up)."""
    if not spin_and_wake:
        return {"pool_wake_us": 0.0, "pool_spin_us": None}
    return {"pool_spin_us": round(spin_and_wake[0], 1), "pool_wake_us": round(spin_and_wake[1], 1)}


def run_passes(chosen: list[Probe], threads: list[int], rounds: int, passes: int, log=print) -> list[ProbeRun]:
    """Run every probe at every thread count, `passes` times (each pass after the first in its own shuffled order,
    so a slow spell of the machine falls on different probes), each lowered once; every run as measured."""
    import random

    runs: list[ProbeRun] = []
    lowered: dict[str, LoweredProbe] = {}
    for k in range(passes):
        order = chosen if k == 0 else random.Random(k).sample(chosen, len(chosen))
        for i, probe in enumerate(order, 1):
            if probe.name not in lowered:
                lowered[probe.name] = lower_probe(probe)
            measured = run_probe(probe, threads, rounds, lowered[probe.name])
            runs += measured
            log(f"[{f'pass {k + 1}/{passes}, ' if passes > 1 else ''}{i}/{len(chosen)}] {probe.name}: "
                + ", ".join(f"{r.run_us:.1f} us run, {sum(r.kernel_us.values()):.1f} us kernels ({r.threads}t)"
                            for r in measured))  # fmt: skip
    return runs


def calibrate_ops(threads: list[int], rounds: int, log=print, passes: int = 1) -> dict:
    """Run every probe at every thread count, `passes` times (`run_passes`; the median of the passes kept,
    `merged`): the profile's run-time fields (`XnnpackProfile`: op measurements, op curves, per-unit costs,
    overheads, the reference program's microseconds, the GEMM packing tiles, weight streaming), all at the
    reference's median speed."""
    from layout_solver.targets.xnnpack.clock import at_reference_speed, pool_spin_and_wake

    pool = {n: pool_spin_and_wake(n, rounds) for n in threads}
    log(
        "thread pool: "
        + ", ".join(f"sleeps after {s:.1f} us, wakes in {w:.1f} us ({n}t)" for n, (s, w) in pool.items())
    )
    runs = run_passes(probes(), threads, rounds, passes, log)
    reference = at_reference_speed(runs)
    runs = merged(runs)
    measurements = op_measurements(runs)
    tiles = packing(measurements)
    curves, unit_us = op_curves(measurements, tiles)
    return {"op_measurements": measurements, "op_curves": curves, "unit_us": unit_us,
            "overheads": overheads(runs, threads, pool), "reference_us": reference, "packing": tiles,
            "streaming": streaming(measurements)}  # fmt: skip
