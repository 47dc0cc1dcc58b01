"""`layout-solver calibrate xnnpack`: measure this CPU's conversion costs (here) and op costs and overheads
(`calibrate_ops`) into an XnnpackProfile.

Each probe is a one-op XNNPACK program, a permute_copy of one shape by one permutation (fp32, or int8 between
a quantize and a dequantize, which XNNPACK runs as an 8-bit transpose), lowered with the stock partitioner and
run through `executorch.runtime`; the transpose's own time is read from ETDump, so delegate-call overhead and
the input copy are not in it (the mean of `rounds` runs: ETDump counts whole microseconds). Shapes span 4 KiB to 4 MiB in each class of `cost_models.xnnpack`
(copy / block / transpose), at every requested thread count; each class keeps its curve of time by size. Transposes
of a dim a few elements long (`TILE_PROBES`) read which tiles XNNPACK's transpose kernel pads such a dim to.
"""

from __future__ import annotations

import itertools
import platform

from cost_models import xnnpack as xnn_cost

# (shape, perm) per class; the element counts run 2^10 .. 2^20.
# Element counts 2^10 .. 2^20 (4 KiB .. 4 MiB of fp32), closer together where a tensor leaves L1 and L2.
_CHANNELS = (16, 32, 16, 64, 32, 64, 128, 64, 128, 256)
_SIDES = (8, 16, 32, 24, 48, 40, 32, 64, 64, 64)
PROBES = {
    "transpose": [([1, c, s, s], [0, 2, 3, 1] if i % 2 else [0, 3, 1, 2]) for i, (c, s) in
                  enumerate(zip(_CHANNELS, _SIDES))],
    "block": [([1, c, s, s], [0, 2, 1, 3]) for c, s in zip(_CHANNELS, _SIDES)],
    "copy": [([1, 1, c, s * s], [1, 0, 2, 3]) for c, s in zip(_CHANNELS, _SIDES)],
}  # fmt: skip
# Transposes with one transposed dim a few elements long (an image's 2-12 channels, to NHWC and back), which XNNPACK's
# kernel pads to its tiles: they fit `XnnpackProfile.transpose_tiles` and are on no curve.
TILE_PROBES = [shape_perm for c in (2, 3, 4, 6, 8, 12)
               for shape_perm in (([1, c, 96, 96], [0, 2, 3, 1]), ([1, 96, 96, c], [0, 3, 1, 2]))]  # fmt: skip
DTYPES = {"float32": 4, "int8": 1}


def probe_program(shape: list[int], perm: list[int], dtype: str) -> tuple[bytes, tuple]:
    """A one-transpose XNNPACK program and its input."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    ops = torch.ops.quantized_decomposed

    class Probe(torch.nn.Module):
        def forward(self, x):
            if dtype == "int8":
                x = ops.dequantize_per_tensor(ops.quantize_per_tensor(x, 0.05, 0, -128, 127, torch.int8),
                                              0.05, 0, -128, 127, torch.int8)  # fmt: skip
                y = x.permute(perm)
                return ops.dequantize_per_tensor(ops.quantize_per_tensor(y, 0.05, 0, -128, 127, torch.int8),
                                                 0.05, 0, -128, 127, torch.int8)  # fmt: skip
            return x.permute(perm)

    inputs = (torch.randn(shape),)
    program = to_edge_transform_and_lower(torch.export.export(Probe(), inputs), partitioner=[XnnpackPartitioner()])
    return program.to_executorch().buffer, inputs


def calibrate(threads: list[int], rounds: int = 60, dtypes=tuple(DTYPES), command: str = "",
              log=print, ops: bool = True, passes: int = 1) -> xnn_cost.XnnpackProfile:  # fmt: skip
    """Time every conversion probe (and, with `ops`, every op and overhead probe, `passes` times) at every thread
    count and fit each class."""
    from cost_models.xnnpack_fit import conversion_curves, transpose_tiles
    from layout_solver.targets.xnnpack.calibrate_ops import calibrate_ops

    measurements = conversion_measurements(threads, rounds, dtypes, log)
    return xnn_cost.XnnpackProfile(
        device=f"{platform.machine()} {platform.processor() or ''} ({xnn_cost.cpu_model()})".replace("  ", " "),
        measured=True,
        command=command,
        curves=(curves := conversion_curves(measurements)),
        transpose_tiles=transpose_tiles(measurements, curves),
        measurements=measurements,
        **(calibrate_ops(threads, rounds, log, passes) if ops else {}),
    )


def conversion_measurements(
    threads: list[int], rounds: int, dtypes=tuple(DTYPES), log=print, curve_probes: bool = True
) -> list[xnn_cost.Measurement]:
    """Every conversion probe (`PROBES` unless not `curve_probes`, then `TILE_PROBES`) timed at every thread
    count: ETDump's microseconds of its one transpose, less the pool's wake-up it pays as its call's first
    parallel operator."""
    from layout_solver.lowering.quiet import quiet
    from layout_solver.targets.xnnpack.clock import pool_wake_us
    from layout_solver.targets.xnnpack.runtime import event_means

    # A one-transpose probe's transpose is the first parallel operator of its call: it pays the pool's wake-up,
    # which a conversion inside a program does not (the run-time model charges it where the workers fell asleep,
    # `cost_models.xnnpack.pool_wakes`).
    wake = {n: pool_wake_us(n, rounds) for n in threads}
    chosen = [(kind, shape, perm, False) for kind, probes in PROBES.items() for shape, perm in probes if curve_probes]
    chosen += [("transpose", shape, perm, True) for shape, perm in TILE_PROBES]
    measurements = []
    for done, (dtype, (kind, shape, perm, tile_probe)) in enumerate(itertools.product(dtypes, chosen), 1):
        with quiet():
            buffer, inputs = probe_program(shape, perm, dtype)
        for n in threads:
            times = event_means(buffer, inputs, n, "Transpose (ND", runs=rounds)
            if len(times) != 1:
                raise RuntimeError(f"probe {shape} {perm} {dtype}: {len(times)} transposes, expected one")
            measurements.append(
                xnn_cost.Measurement(shape=shape, elem_bytes=DTYPES[dtype], perm=perm, threads=n,
                                     kind=xnn_cost.conversion_kind(shape, perm),
                                     us=round(max(0.0, times[0] - wake[n]), 3), tile_probe=tile_probe)
            )  # fmt: skip
        log(f"[{done}/{len(chosen) * len(dtypes)}] {dtype} {kind}{' tile' if tile_probe else ''} {shape} perm {perm}: "
            + ", ".join(f"{m.us:.1f} us ({m.threads}t)" for m in measurements[-len(threads):]))  # fmt: skip
    return measurements


def then_measured(base: xnn_cost.XnnpackProfile, what: str, threads: list[int], command: str) -> str:
    """`base`'s command with what was measured into it since, at which thread counts, by which command."""
    return f"{base.command}; then {what} at threads {','.join(map(str, threads))} by: {command}"


def add_transpose_tiles(
    base: xnn_cost.XnnpackProfile, threads: list[int], rounds: int, command: str = "", log=print
) -> xnn_cost.XnnpackProfile:
    """`base` (a profile of this CPU) with the transpose tile probes (`TILE_PROBES`) measured at `threads` and the
    tiles fitted against its own transpose curves, which stay as they were: what a profile measured before those
    probes needs to price a transpose of a dim a few elements long (an image's channels)."""
    from cost_models.xnnpack_fit import transpose_tiles

    fresh = conversion_measurements(threads, rounds, log=log, curve_probes=False)
    measurements = [m for m in base.measurements if not (m.tile_probe and m.threads in threads)] + fresh
    return base.model_copy(update={
        "measurements": measurements, "transpose_tiles": transpose_tiles(measurements, base.curves),
        "command": then_measured(base, "transpose tiles", threads, command),
    })  # fmt: skip


def add_thread_pool(
    base: xnn_cost.XnnpackProfile, threads: list[int], rounds: int, command: str = "", log=print
) -> xnn_cost.XnnpackProfile:
    """`base` (a profile of this CPU) with its thread pool's spin and wake-up (`clock.pool_spin_and_wake`)
    measured at `threads`, its other overheads as they were: what a profile measured before the spin was needs
    for the model to charge the wake-up only where the workers fell asleep."""
    from layout_solver.targets.xnnpack.calibrate_ops import pool_fields
    from layout_solver.targets.xnnpack.clock import pool_spin_and_wake

    overheads = dict(base.overheads)
    for n in threads:
        if str(n) not in overheads:
            raise ValueError(f"profile {base.device!r} has no overheads at {n} threads")
        spin_and_wake = pool_spin_and_wake(n, rounds) if n > 1 else None
        overheads[str(n)] = overheads[str(n)].model_copy(update=pool_fields(spin_and_wake))
        log(f"thread pool at {n} thread(s): {pool_fields(spin_and_wake)}")
    return base.model_copy(update={
        "overheads": overheads,
        "command": then_measured(base, "the thread pool", threads, command),
    })  # fmt: skip


def add_program_share(
    base: xnn_cost.XnnpackProfile, threads: list[int], rounds: int, passes: int, command: str = "", log=print
) -> xnn_cost.XnnpackProfile:
    """`base` (a profile of this CPU) with the share of the kernels' time a program's layers run beyond them
    (`Overheads.kernel_fraction`) measured again at `threads` on the chains of a program's layers
    (`op_probes._program_chains`), each run and its kernels read from the same runs
    (`calibrate_ops.with_program_share`), its other overheads as they were."""
    from layout_solver.targets.xnnpack.calibrate_ops import merged, run_passes, with_program_share
    from layout_solver.targets.xnnpack.clock import at_reference_speed
    from layout_solver.targets.xnnpack.op_probes import _program_chains

    missing = [n for n in threads if str(n) not in base.reference_us or str(n) not in base.overheads]
    if missing:
        raise ValueError(f"profile {base.device!r} has no reference speed or overheads at {missing} threads")
    runs = run_passes(_program_chains(), threads, rounds, passes, log)
    at_reference_speed(runs, base.reference_us)
    runs = merged(runs)
    overheads = dict(base.overheads)
    for n in threads:
        overheads[str(n)] = with_program_share(overheads[str(n)], [r for r in runs if r.threads == n])
        log(f"share beyond the kernels at {n} thread(s): {base.overheads[str(n)].kernel_fraction} -> "
            f"{overheads[str(n)].kernel_fraction}")  # fmt: skip
    return base.model_copy(update={
        "overheads": overheads,
        "command": then_measured(base, "the program share", threads, command),
    })  # fmt: skip


def add_probes(
    base: xnn_cost.XnnpackProfile, only: str, threads: list[int], rounds: int, passes: int, command: str = "", log=print
) -> xnn_cost.XnnpackProfile:
    """`base` (a profile of this CPU) with one set of op probes (`ONLY`: "streaming", `op_probes.stream_probes`;
    "pads", `op_probes.pad_probes`) measured again at `threads`, every run stated at `base`'s reference speed, and
    its tables fitted again (`xnnpack_fit.refitted`): what a profile measured before those probes needs (a program
    whose weights outgrow the cache; a pad priced by its rows)."""
    from cost_models.xnnpack_fit import refitted
    from layout_solver.targets.xnnpack.calibrate_ops import merged, op_measurements, run_passes
    from layout_solver.targets.xnnpack.clock import at_reference_speed
    from layout_solver.targets.xnnpack.op_probes import pad_probes, stream_probes

    chosen = {"streaming": stream_probes, "pads": pad_probes}[only]()
    missing = [n for n in threads if str(n) not in base.reference_us]
    if missing:
        raise ValueError(f"profile {base.device!r} has no reference speed at {missing} threads")
    runs = run_passes(chosen, threads, rounds, passes, log)
    at_reference_speed(runs, base.reference_us)
    names = {p.name for p in chosen}
    kept = [m for m in base.op_measurements if m.probe not in names or m.threads not in threads]
    return refitted(base.model_copy(update={
        "op_measurements": kept + op_measurements(merged(runs)),
        "command": then_measured(base, only, threads, command),
    }))  # fmt: skip
