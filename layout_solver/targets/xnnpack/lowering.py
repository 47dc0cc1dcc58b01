"""One XNNPACK lowering as the measurements see it: the static int8 quantization XNNPACK's flow uses, the lowering
inside a layout context (stock's or the stage's), what the program runs outside its delegates, and the profile's
prediction of its run time."""

from __future__ import annotations

import time
from typing import NamedTuple


def quantize(module, inputs: tuple):
    """The module quantized as XNNPACK's static int8 flow does it: XNNPACKQuantizer, symmetric, per-channel
    weights, calibrated on `inputs`."""
    import torch
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    exported = torch.export.export(module, inputs)
    prepared = prepare_pt2e(exported.module(check_guards=False), quantizer)
    prepared(*inputs)
    return convert_pt2e(prepared)


class Lowered(NamedTuple):
    """One XNNPACK lowering: the program's bytes, the layout passes' reports (one per delegate), its seconds, and
    what it runs outside its delegates (`cpu_ops.ProgramOps`: CPU kernels, delegate calls, I/O)."""

    buffer: bytes
    reports: list
    seconds: float
    outside: object


def lower(module, inputs: tuple, context) -> Lowered:
    """One XNNPACK lowering inside `context()` (a `solver_layouts` or `stock_layouts` block)."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from layout_solver.targets.xnnpack.cpu_ops import program_ops

    started = time.perf_counter()
    exported = torch.export.export(module, inputs)
    with context() as reports:
        edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
        outside = program_ops(edge.exported_program())  # before to_executorch rewrites the graph in place
        buffer = edge.to_executorch().buffer
    seconds = time.perf_counter() - started
    return Lowered(buffer, reports, seconds, outside)


def predicted_run(lowered: Lowered, profile, threads: int, cpu_times=None) -> dict[str, float]:
    """The profile's prediction of one lowered program's microseconds per run at `threads`, by part
    (`cost_models.xnnpack.run_us`: what each delegate's pass recorded it runs, the CPU kernels at the times
    `cpu_times` (a `cpu_ops.CpuOpTimes`) measured for them, the overheads); empty where the profile has no op
    costs or a delegate was not read (dynamic shapes)."""
    from cost_models import xnnpack as xnn_cost

    if not profile.predicts_run_time or any(not r.run_ops for r in lowered.reports):
        return {}
    outside = lowered.outside
    measured = cpu_times.times(list(outside.calls.values()), threads) if cpu_times is not None else {}
    ops = outside.run_ops([r.run_ops for r in lowered.reports])
    parts = xnn_cost.run_us(profile, ops, outside.delegates, threads, outside.io_kib, measured)
    return {k: round(v, 3) for k, v in sorted(parts.items())}
