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
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from cost_models import xnnpack as xnn_cost
from cost_models.xnnpack_fit import op_curves, packing, streaming

# ETDump events that are bookkeeping, not kernels.
QUANT = (("", False), ("int8 ", True))  # a probe's name prefix by whether it is quantized
BOOKKEEPING = ("Method::execute", "DELEGATE_CALL", "OPERATOR_CALL", "Program::load_method", "Method::init")


@dataclass(frozen=True)
class Probe:
    """A probe program: `build()` returns (module, inputs) of ops of `op_class` (and what it needs around them:
    I/O transposes, reshapes); `delegated` says whether they run in XNNPACK (else on the CPU, lowered without a
    partitioner); `int8` quantizes it as XNNPACK's static int8 flow does. An overhead probe has no class."""

    name: str
    op_class: str | None
    build: Callable[[], tuple]
    delegated: bool = True
    int8: bool = False
    unit_probe: bool = False  # made of many short rows / small matrices: measures its class's cost per unit
    # Made of channels off any tile (1-12 in, 4-24 out): reads the GEMM packing tiles, not its class's curve.
    tile_probe: bool = False
    # A chain of layers of a program's sizes (an overhead probe whose kernels dominate): it fits what a run spends
    # beyond its kernels in proportion to them, not the per-operator costs the chains of tiny ops fit.
    kernel_bound: bool = False
    # A chain of one-row products, each layer its own weights: what reading a program's weights of its size costs
    # beyond the cache (`cost_models.xnnpack_fit.streaming`), not a point of its class's curve.
    stream_probe: bool = False


def _module(forward, *params):
    import torch

    class Probe(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(params)

        def forward(self, *xs):
            return forward(self.layers, *xs)

    return Probe().eval()


def _conv(cin, cout, k, stride, side, groups=1):
    import torch

    def build():
        conv = torch.nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups)
        return _module(lambda layers, x: layers[0](x), conv), (torch.randn(1, cin, side, side),)

    return build


def _linear(m, k, n):
    import torch

    return lambda: (_module(lambda layers, x: layers[0](x), torch.nn.Linear(k, n)), (torch.randn(m, k),))


def _bmm(b, m, k, n):
    import torch

    return lambda: (_module(lambda layers, x, y: x @ y), (torch.randn(b, m, k), torch.randn(b, k, n)))


def _unary(fn, shape):
    import torch

    return lambda: (_module(lambda layers, x: fn(x)), (torch.randn(*shape),))


def _binary(fn, shape):
    import torch

    return lambda: (_module(lambda layers, x, y: fn(x, y)), (torch.randn(*shape), torch.randn(*shape)))


def _channels_last(fn, shape):
    import torch

    return lambda: (_module(lambda layers, x: fn(x.to(memory_format=torch.channels_last)).contiguous()),
                    (torch.randn(*shape),))  # fmt: skip


def _chain(fn, count, shape=(1, 8)):
    import torch

    def forward(layers, x):
        for _ in range(count):
            x = fn(x)
        return x

    return lambda: (_module(forward), (torch.randn(*shape),))


def _layer_chain(make, count, shape):
    """`count` layers made by `make()` applied in turn (each its own weights), on an input of `shape`."""
    import torch

    def build():
        def forward(layers, x):
            for layer in layers:
                x = layer(x)
            return x

        return _module(forward, *[make() for _ in range(count)]), (torch.randn(*shape),)

    return build


def _conv_then_erf():
    """A convolution (XNNPACK) and an erf (left on the CPU): one delegate per layer in a chain of them."""
    import torch

    class Erf(torch.nn.Module):
        def forward(self, x):
            return torch.erf(x)

    return torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1), Erf())


def _overhead_chains(count: int) -> list:
    """Chains of `count` small operators of each family: a family's per-operator overhead is their slope."""
    import torch
    import torch.nn.functional as F

    small = (1, 8, 8, 8)
    return [
        Probe(f"xnnpack chain {count}", None, _chain(lambda x: x + 1.0, count)),
        Probe(f"cpu chain {count}", None, _chain(torch.erf, count), False),
        Probe(f"transpose chain {count}", None, _chain(lambda x: x.t() + 0.0, count)),
        Probe(f"conv chain {count}", None, _layer_chain(lambda: torch.nn.Conv2d(8, 8, 3, padding=1), count, small)),
        Probe(f"dwconv chain {count}", None,
              _layer_chain(lambda: torch.nn.Conv2d(8, 8, 3, padding=1, groups=8), count, small)),
        Probe(f"gemm chain {count}", None, _layer_chain(lambda: torch.nn.Linear(16, 16), count, (4, 16))),
        Probe(f"softmax chain {count}", None, _chain(lambda x: torch.softmax(x, -1), count, (4, 16))),
        Probe(f"gelu chain {count}", None, _chain(F.gelu, count, (4, 16))),
        Probe(f"pool chain {count}", None, _chain(lambda x: F.max_pool2d(x, 3, 1, 1), count, small)),
        Probe(f"copy chain {count}", None, _chain(lambda x: torch.cat([x[:, 4:], x[:, :4]], 1), count, small)),
        Probe(f"bmm chain {count}", None, _chain(lambda x: x @ x, count, (2, 8, 8))),
    ]  # fmt: skip


def _copy_probes(maps) -> list[Probe]:
    """Concatenations: along the channels of NCHW feature maps (whole inputs in one run each), and of NHWC ones
    (C elements per pixel in each run: `cost_models.xnnpack.STRIDED_RUN_BYTES`), fp32 and int8."""
    import torch

    cl = torch.channels_last
    thin = [(1, 4, 32, 32), (1, 8, 32, 32), (1, 16, 32, 32), (1, 32, 32, 32), (1, 16, 64, 64), (1, 64, 16, 16)]
    whole = lambda x, y: torch.cat([x, y], 1)
    strided = lambda x, y: torch.cat([x.to(memory_format=cl), y.to(memory_format=cl)], 1)
    return [
        *[Probe(f"cat{m}", "copy", _binary(whole, m)) for m in maps],
        *[Probe(f"cat{m} channels_last", xnn_cost.STRIDED_COPY, _binary(strided, m)) for m in thin],
        *[Probe(f"int8 cat{m} channels_last", xnn_cost.STRIDED_COPY, _binary(strided, m), int8=True) for m in thin],
        *[Probe(f"int8 cat{m}", "copy", _binary(whole, m), int8=True) for m in thin],
    ]


def _attention_probes() -> list[Probe]:
    """Batched products and softmax: their curves, and many small matrices (window attention's heads x windows)
    and short rows for their cost per unit (`cost_models.xnnpack.OP_UNITS`)."""
    import torch

    bmms = [(2, 16, 16, 16), (4, 64, 32, 64), (8, 49, 32, 49), (2, 196, 32, 196), (4, 256, 64, 256), (2, 128, 128, 128)]
    small_bmms = [(48, 16, 16, 16), (192, 16, 16, 16), (96, 16, 8, 16), (64, 49, 32, 49), (24, 64, 16, 64)]
    rows = [(1, 256), (8, 512), (64, 256), (196, 384), (256, 1024), (1024, 1024)]
    short_rows = [(768, 16), (3072, 16), (1024, 49), (2048, 32), (512, 64)]
    softmax = lambda x: torch.softmax(x, -1)
    return [
        *[Probe(f"bmm{b}", "bmm", _bmm(*b)) for b in bmms],
        *[Probe(f"bmm{b}", "bmm", _bmm(*b), unit_probe=True) for b in small_bmms],
        *[Probe(f"softmax{s}", "softmax", _unary(softmax, s)) for s in rows],
        *[Probe(f"softmax{s}", "softmax", _unary(softmax, s), unit_probe=True) for s in short_rows],
    ]


def probes() -> list[Probe]:
    """Every op-class probe, and the overhead probes (chains of tiny ops, alternating delegates and CPU kernels)."""
    import torch
    import torch.nn.functional as F

    out: list[Probe] = []
    convs = [
        (3, 16, 3, 2, 64),
        (3, 32, 3, 2, 128),
        (16, 16, 3, 1, 16),
        (16, 32, 3, 1, 32),
        (32, 32, 3, 1, 32),
        (64, 64, 3, 1, 16),
        (64, 64, 3, 1, 32),
        (96, 96, 3, 1, 24),
        (128, 128, 3, 1, 16),
        (64, 256, 1, 1, 16),
        (256, 64, 1, 1, 16),
        (32, 128, 1, 1, 32),
        (128, 128, 3, 1, 32),
        (256, 256, 3, 1, 8),
        (8, 8, 3, 1, 8),
    ]
    out += [Probe(f"conv{c}", "conv", _conv(*c)) for c in convs]
    out += _tile_probes()
    depthwise = [(16, 3, 32), (32, 3, 32), (64, 3, 16), (64, 7, 24), (128, 3, 16), (128, 7, 12), (256, 3, 8),
                 (48, 7, 24), (8, 3, 8), (96, 3, 40), (32, 5, 32), (96, 5, 16), (24, 7, 48), (240, 3, 20)]  # fmt: skip
    out += [Probe(f"dwconv{c, k, s}", f"dwconv:{k * k}", _conv(c, c, k, 1, s, groups=c)) for c, k, s in depthwise]
    gemms = [
        (1, 64, 10),
        (1, 256, 256),
        (16, 64, 64),
        (64, 64, 256),
        (196, 192, 576),
        (64, 256, 256),
        (256, 256, 1024),
        (49, 768, 768),
        (1024, 64, 64),
        (16, 1024, 1024),
        (256, 64, 256),
        (4, 32, 32),
    ]
    out += [Probe(f"gemm{g}", "gemm", _linear(*g)) for g in gemms]
    out += _attention_probes()
    sizes = [(1, 256), (8, 512), (64, 256), (196, 384), (256, 1024), (1024, 1024)]
    out += [Probe(f"add{s}", "elementwise", _binary(torch.add, s)) for s in sizes]
    out += [Probe(f"gelu{s}", "transcendental", _unary(F.gelu, s)) for s in sizes]
    maps = [(1, 16, 16, 16), (1, 32, 32, 32), (1, 64, 32, 32), (1, 64, 56, 56), (1, 128, 28, 28)]
    out += [Probe(f"maxpool{m}", "pool", _unary(lambda x: F.max_pool2d(x, 3, 2, 1), m)) for m in maps]
    out += [Probe(f"mean{m}", "pool", _unary(lambda x: x.mean((2, 3), keepdim=True), m)) for m in maps]
    out += _copy_probes(maps)
    out += [Probe(f"bilinear{m}", "resize", _unary(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), m))
            for m in maps[:4]]  # fmt: skip
    # int8: the kernels that dominate quantized programs.
    out += [Probe(f"int8 conv{c}", "conv", _conv(*c), int8=True) for c in convs[::2]]
    out += [Probe(f"int8 dwconv{c, k, s}", f"dwconv:{k * k}", _conv(c, c, k, 1, s, groups=c), int8=True)
            for c, k, s in depthwise[::2]]  # fmt: skip
    out += [Probe(f"int8 gemm{g}", "gemm", _linear(*g), int8=True) for g in gemms[::2]]
    out += [Probe(f"int8 add{s}", "elementwise", _binary(torch.add, s), int8=True) for s in sizes]
    # The CPU's portable kernels that stock leaves between delegates (layer norm, expand, where, reductions, ...).
    rows = [(16, 64), (64, 192), (196, 384), (1024, 256), (4096, 64)]
    out += [
        Probe(f"cpu layer_norm{r}", "cpu:native_layer_norm", _unary(lambda x: F.layer_norm(x, x.shape[-1:]), r), False)
        for r in rows
    ]
    out += [
        Probe(f"cpu expand{r}", "cpu:expand_copy", _unary(lambda x: x[:1].expand(4, -1, -1), (1, *r)), False)
        for r in rows[:4]
    ]
    out += [
        Probe(f"cpu where{r}", "cpu:where", _unary(lambda x: torch.where(x > 0, x, x * 0.5), r), False) for r in rows
    ]
    out += [Probe(f"cpu mean{m}", "cpu:mean", _unary(lambda x: x.mean((2, 3)), m), False) for m in maps]
    out += [Probe(f"cpu sum{r}", "cpu:sum", _unary(lambda x: x.sum(-1), r), False) for r in rows]
    out += [
        Probe(f"cpu group_norm{m}", "cpu:native_group_norm", _unary(lambda x: F.group_norm(x, 8), m), False)
        for m in maps[:4]
    ]
    out += [Probe(f"cpu avg_pool2d{m}", "cpu:avg_pool2d", _unary(lambda x: F.avg_pool2d(x, 2), m), False) for m in maps]
    out += [Probe(f"cpu add{r}", "cpu:add", _binary(torch.add, r), False) for r in rows]
    out += [Probe(f"cpu erf{r}", "cpu:erf", _unary(torch.erf, r), False) for r in rows]
    nearest = lambda x: F.interpolate(x, scale_factor=2)
    out += [Probe(f"cpu upsample_nearest{m}", "cpu:upsample_nearest2d", _unary(nearest, m), False) for m in maps[:4]]
    out += [
        Probe(
            f"cpu upsample_nearest{m} channels_last",
            "cpu:upsample_nearest2d@channels_last",
            _channels_last(nearest, m),
            False,
        )
        for m in maps[:4]
    ]
    # Overheads: chains of tiny operators of each family, of CPU kernels, and of delegates.
    for count in (1, 12, 36):
        out += _overhead_chains(count)
    for count in (4, 16):  # delegates of one parallel convolution each, cut by a CPU kernel: each wakes the pool
        out.append(Probe(f"delegate chain {count}", None, _layer_chain(_conv_then_erf, count, (1, 8, 16, 16))))
    return out + stream_probes() + _program_chains()


def _tile_probes() -> list[Probe]:
    """Convolutions and products of input and output channels off any tile (1-12 in, 4-24 out), fp32 and int8,
    each past ETDump's tick: what `cost_models.xnnpack_fit.packing` reads the GEMM packing tiles on."""
    tiles = [(1, 32, 3, 1, 64), (2, 32, 3, 1, 64), (4, 32, 3, 1, 64), (6, 32, 3, 1, 64), (12, 32, 3, 1, 48),
             (32, 4, 3, 1, 64), (32, 8, 3, 1, 64), (32, 12, 3, 1, 64), (32, 24, 3, 1, 48)]  # fmt: skip
    out = [Probe(f"{prefix}conv{c}", "conv", _conv(*c), int8=int8, tile_probe=True)
           for c in tiles for prefix, int8 in QUANT]  # fmt: skip
    out += [Probe(f"{prefix}gemm{g}", "gemm", _linear(*g), int8=int8, tile_probe=True)
            for g in ((256, 4, 256), (256, 256, 4), (256, 256, 12)) for prefix, int8 in QUANT]  # fmt: skip
    return out


def stream_probes() -> list[Probe]:
    """Chains of fp32 products of one row by a 512 x 512 matrix (1 MiB of weights a layer, read once for little
    arithmetic), 2-96 MiB of weights in all (each chain twice, as every delegated probe runs): from weights that
    stay in cache between two runs to ones three times this EPYC's 32 MiB L3."""
    import torch

    return [Probe(f"stream chain {count}x512", "gemm", _layer_chain(lambda: torch.nn.Linear(512, 512), count, (1, 512)),
                  stream_probe=True) for count in (1, 2, 6, 12, 24, 48)]  # fmt: skip


def _program_chains() -> list[Probe]:
    """Chains of layers of a program's sizes, each layer its own weights (several MiB in all, as a model's are
    cold in cache from one call to the next): a single-op probe runs beyond its kernels a smaller share of them
    than a program does (MLP chains here: 7-10% of their kernels against 3-4%)."""
    import torch
    import torch.nn.functional as F

    class Mlp(torch.nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.up, self.down = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)

        def forward(self, x):
            return self.down(F.gelu(self.up(x))) + x

    def block(cin, cout):
        return torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 3, padding=1), torch.nn.ReLU())

    chains = [
        ("mlp chain 4x256", lambda: Mlp(256), 4, (64, 256)),
        ("mlp chain 3x384", lambda: Mlp(384), 3, (196, 384)),
        ("gemm chain 8x384", lambda: torch.nn.Linear(384, 384), 8, (196, 384)),
        ("conv chain 8x32", lambda: block(32, 32), 8, (1, 32, 32, 32)),
        ("conv chain 6x64", lambda: block(64, 64), 6, (1, 64, 16, 16)),
        ("dwconv chain 6x96", lambda: torch.nn.Conv2d(96, 96, 3, padding=1, groups=96), 6, (1, 96, 28, 28)),
    ]
    return [Probe(name, None, _layer_chain(make, count, shape), kernel_bound=True)
            for name, make, count, shape in chains]  # fmt: skip


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
    wake_us: float = 0.0  # the pool's wake-up at the run's thread count (the first parallel operator pays it)


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
    call, `_twice`), CPU kernels with no partitioner."""
    import torch
    from executorch.exir import to_edge

    from layout_solver.lowering.quiet import quiet
    from layout_solver.targets.xnnpack.cpu_ops import program_ops
    from layout_solver.targets.xnnpack.lowering import lower, quantize
    from layout_solver.xnnpack import stock_layouts

    with quiet():
        module, inputs = probe.build()
        if probe.delegated and probe.op_class is not None:
            module = _twice(module)
        if probe.int8:
            module = quantize(module, inputs)
        if probe.delegated:
            lowered = lower(module, inputs, stock_layouts)
            buffer, outside = lowered.buffer, lowered.outside
            ops = [op for r in lowered.reports for op in r.run_ops] + outside.ops
        else:
            edge = to_edge(torch.export.export(module, inputs))
            outside = program_ops(edge.exported_program())  # before to_executorch rewrites the graph
            buffer = edge.to_executorch().buffer
            ops = outside.ops
    return LoweredProbe(buffer, inputs, ops, outside.delegates, outside.io_kib)


def run_probe(probe: Probe, threads: list[int], rounds: int, lowered: LoweredProbe | None = None) -> list[ProbeRun]:
    """Time the probe (lowered by `lower_probe` unless given) at every thread count."""
    from layout_solver.targets.xnnpack.clock import reference_ratio, run_twin
    from layout_solver.targets.xnnpack.runtime import etdump_events, per_run_ms

    lowered = lowered or lower_probe(probe)
    buffer, inputs = lowered.buffer, lowered.inputs
    out = []
    for n in threads:
        # Each run after its twin's, as a paired timing runs a program after the other side's of the same model.
        events = etdump_events(buffer, inputs, n, rounds, between=run_twin(buffer, inputs, n))
        kernels = {name: per_run_ms(raw, rounds) * 1e3 for name, raw in events.items() if name not in BOOKKEEPING}
        ratio, reference_ms = reference_ratio(buffer, inputs, n, rounds)
        out.append(ProbeRun(probe, n, kernels, ratio * reference_ms * 1e3, lowered.ops, lowered.delegates,
                            lowered.io_kib, reference_ms * 1e3))  # fmt: skip
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
        out.append(dataclasses.replace(first, kernel_us=kernels,
                                       run_us=float(np.median([r.run_us for r in group]))))  # fmt: skip
    return out


def _twice(module):
    """The probe's op twice on the same inputs (each its own copy of the weights, as two layers of a program), in
    one delegate call: the second runs as a program's operators do, right after another. The first pays for waking
    the thread pool's workers, asleep since the last call (15-50 us on two threads here, from one probe to the
    next, where a one-op probe's op takes 1 us on one)."""
    import copy

    import torch

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.second = module, copy.deepcopy(module)

        def forward(self, *xs):
            return self.first(*xs), self.second(*xs)

    return Twice().eval()


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
        out.append(xnn_cost.OpMeasurement(op_class=op_class, work=mine[0].work, elem_bytes=mine[0].elem_bytes,
                                          threads=run.threads, us=round(us, 3), probe=run.probe.name,
                                          units=mine[0].units, unit_probe=run.probe.unit_probe,
                                          tile_probe=run.probe.tile_probe, gemm=mine[0].gemm,
                                          footprint_kib=sum(op.weight_kib for op in run.ops)
                                          if run.probe.stream_probe else 0.0))  # fmt: skip
    return out


def overheads(runs: list[ProbeRun], threads: list[int]) -> dict[str, xnn_cost.Overheads]:
    """Per thread count, fitted by non-negative least squares (relative errors: a probe of 5 us weighs as much as
    one of 5 ms) to what each probe's run time holds beyond its kernels (ETDump's): first on the chain probes,
    against their calls, delegates, CPU kernels and XNNPACK operators of each family (a family's chains of 1, 12
    and 36 small operators make its overhead their slope); then the single-op probes, whose inputs and outputs
    span 1 KiB to 1 MiB and whose kernels 1 us to 4 ms, give the cost per KiB of them and the share of the
    kernels' time the run spends beyond them (`kernel_fraction`), past what the first fit already prices; where
    there are chains of a program's layers (`_program_chains`), the share is theirs."""
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
        programs = [r for r in runs if r.threads == n and r.probe.kernel_bound]
        if programs:  # the share beyond the kernels as a program's layers run it, the I/O priced as fitted
            left = np.array([beyond(r) - float(np.dot(counts(r), coef)) - io[0] * r.io_kib for r in programs])
            kernels = np.array([sum(r.kernel_us.values()) for r in programs])
            io[1] = max(0.0, float(np.mean(left / np.maximum(kernels, 1.0))))
        by_family = {f: round(float(c), 3) for f, c in zip(families, coef[3:])}
        out[str(n)] = xnn_cost.Overheads(
            call_us=round(coef[0], 3), delegate_us=round(coef[1], 3), cpu_op_us=round(coef[2], 3),
            pool_wake_us=round(mine[0].wake_us, 3) if mine else 0.0,
            io_us_per_kib=round(float(io[0]), 5), kernel_fraction=round(float(io[1]), 4),
            xnnpack_op_us=round(float(np.median(coef[3:])), 3) if families else 0.0,
            xnnpack_op_us_by_class=by_family,
        )  # fmt: skip
    return out


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
    from layout_solver.targets.xnnpack.clock import at_reference_speed, pool_wake_us

    wake = {n: pool_wake_us(n, rounds) for n in threads}
    log(f"thread pool wake-up: {', '.join(f'{w:.1f} us ({n}t)' for n, w in wake.items())}")
    runs = run_passes(probes(), threads, rounds, passes, log)
    for run in runs:
        run.wake_us = wake[run.threads]
    reference = at_reference_speed(runs)
    runs = merged(runs)
    measurements = op_measurements(runs)
    tiles = packing(measurements)
    curves, unit_us = op_curves(measurements, tiles)
    return {"op_measurements": measurements, "op_curves": curves, "unit_us": unit_us,
            "overheads": overheads(runs, threads), "reference_us": reference, "packing": tiles,
            "streaming": streaming(measurements)}  # fmt: skip
