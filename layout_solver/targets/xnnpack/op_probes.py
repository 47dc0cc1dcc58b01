"""What `layout-solver calibrate xnnpack` times, the run-time half: its probe programs, each a small program of one
kind of op at one size (its class filed as the predictor reads it off any program,
`layout_solver.xnnpack.runtime_model`), and the overhead probes (chains of tiny ops, alternating delegates and CPU
kernels, chains of layers of a program's sizes). Running and fitting them is `calibrate_ops`'.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cost_models import xnnpack as xnn_cost

QUANT = (("", False), ("int8 ", True))  # a probe's name prefix by whether it is quantized


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
    # A delegated probe whose op does not keep its first input's shape: a module of the same class that does, run
    # before the op so the op reads what a parallel op wrote (`calibrate_ops._twice`).
    producer: Callable[[], object] | None = None


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


def _conv_producer(cin, cout, k, stride, side, groups=1):
    """A convolution of the same class as `_conv(...)`'s (its taps: a 1 x 1 one runs as a GEMM) that keeps its
    input's shape."""
    import torch

    return lambda: torch.nn.Conv2d(cin, cin, k, 1, k // 2, groups=cin if groups > 1 else 1)


def _linear_producer(m, k, n):
    """A product that keeps `_linear(m, k, n)`'s input's shape."""
    import torch

    return lambda: torch.nn.Linear(k, k)


def _pool_producer():
    """A max pool that keeps its input's shape."""
    import torch

    return lambda: torch.nn.MaxPool2d(3, 1, 1)


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


def pad_probes() -> list[Probe]:
    """Constant pads (of 0.5: XNNPACK folds a zero pad into a convolution it feeds): of the channels of NCHW maps
    (C + 2 rows of H x W: the class's curve), and of H and W both NCHW (C x (H + 2) rows of W) and NHWC (a row per
    pixel: few channels make many short rows), for its cost per row (`cost_models.xnnpack.OP_UNITS`). fp32 only:
    XNNPACK's quantizer leaves a pad in float (an int8 program's pads run as `Constant Pad (ND, X32)`)."""
    import torch.nn.functional as F

    channels = lambda x: F.pad(x, (0, 0, 0, 0, 1, 1), value=0.5)
    sides = lambda x: F.pad(x, (1, 1, 1, 1), value=0.5)
    maps = [(1, 8, 32, 32), (1, 16, 64, 64), (1, 32, 32, 32), (1, 64, 56, 56), (1, 128, 28, 28)]
    thin = [(1, 3, 32, 32), (1, 3, 64, 64), (1, 8, 64, 64), (1, 16, 32, 32), (1, 32, 64, 64)]
    return [
        *[Probe(f"pad channels{m}", xnn_cost.PAD_COPY, _unary(channels, m)) for m in maps],
        *[Probe(f"pad{m}", xnn_cost.PAD_COPY, _unary(sides, m), unit_probe=True) for m in thin],
        *[Probe(f"pad{m} channels_last", xnn_cost.PAD_COPY, _channels_last(sides, m), unit_probe=True) for m in thin],
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
    out += [Probe(f"conv{c}", "conv", _conv(*c), producer=_conv_producer(*c)) for c in convs]
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
    out += [Probe(f"gemm{g}", "gemm", _linear(*g), producer=_linear_producer(*g)) for g in gemms]
    out += _attention_probes()
    sizes = [(1, 256), (8, 512), (64, 256), (196, 384), (256, 1024), (1024, 1024)]
    out += [Probe(f"add{s}", "elementwise", _binary(torch.add, s)) for s in sizes]
    out += [Probe(f"gelu{s}", "transcendental", _unary(F.gelu, s)) for s in sizes]
    maps = [(1, 16, 16, 16), (1, 32, 32, 32), (1, 64, 32, 32), (1, 64, 56, 56), (1, 128, 28, 28)]
    out += [Probe(f"maxpool{m}", "pool", _unary(lambda x: F.max_pool2d(x, 3, 2, 1), m), producer=_pool_producer())
            for m in maps]  # fmt: skip
    out += [Probe(f"mean{m}", "pool", _unary(lambda x: x.mean((2, 3), keepdim=True), m), producer=_pool_producer())
            for m in maps]  # fmt: skip
    out += _copy_probes(maps) + pad_probes()
    out += [Probe(f"bilinear{m}", "resize", _unary(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), m))
            for m in maps[:4]]  # fmt: skip
    # int8: the kernels that dominate quantized programs.
    out += [Probe(f"int8 conv{c}", "conv", _conv(*c), int8=True, producer=_conv_producer(*c)) for c in convs[::2]]
    out += [Probe(f"int8 dwconv{c, k, s}", f"dwconv:{k * k}", _conv(c, c, k, 1, s, groups=c), int8=True)
            for c, k, s in depthwise[::2]]  # fmt: skip
    out += [Probe(f"int8 gemm{g}", "gemm", _linear(*g), int8=True, producer=_linear_producer(*g)) for g in gemms[::2]]
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
    out = [Probe(f"{prefix}conv{c}", "conv", _conv(*c), int8=int8, tile_probe=True, producer=_conv_producer(*c))
           for c in tiles for prefix, int8 in QUANT]  # fmt: skip
    out += [Probe(f"{prefix}gemm{g}", "gemm", _linear(*g), int8=int8, tile_probe=True, producer=_linear_producer(*g))
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
