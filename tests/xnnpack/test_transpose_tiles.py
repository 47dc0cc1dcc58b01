"""XNNPACK's transpose kernel moves whole tiles: a transposed dim a few elements long (an NCHW image's 3 channels
going to NHWC) is padded to the tile, so such a transpose costs what one of its tiled size does, not its bytes
(this EPYC, int8: a 12 KiB image of 3 channels 9 us, a 16 KiB tensor of 16 channels 2 us). The calibration's
tile probes vote for the tiles against the curve the wide probes drew (`xnnpack_fit.transpose_tiles`), and every
price of a transpose, the solver's and the run-time model's, reads its curve at the tiled size. How much closer
that brings a program's prediction is the benchmark's to say (benchmarks/xnnpack/zoo.py), not a timed test's."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cost_models import xnnpack as xnn_cost
from cost_models.xnnpack_fit import conversion_curves, transpose_tiles

TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


def test_a_transposes_two_transposed_dims_are_rounded_up_to_the_tiles_and_nothing_else_is():
    image = [1, 3, 64, 64]  # NCHW, 3 channels: the output's innermost dim is the 3 channels
    assert xnn_cost.transposed_dims(image, TO_NHWC) == (3, 4096)
    assert xnn_cost.tiled_kib(image, 1, TO_NHWC, (16, 8)) == pytest.approx(12.0 * 16 / 3)
    assert xnn_cost.tiled_kib([1, 64, 64, 3], 1, TO_NCHW, (16, 8)) == pytest.approx(12.0 * 8 / 3)  # the input's
    assert xnn_cost.tiled_kib([1, 32, 64, 64], 4, TO_NHWC, (16, 8)) == 512.0  # both dims already whole tiles
    assert xnn_cost.tiled_kib(image, 1, TO_NHWC, None) == 12.0  # a profile without tiles: its bytes
    assert xnn_cost.tiled_kib([1, 3, 64, 64], 1, [0, 2, 1, 3], (16, 16)) == 12.0  # a block move keeps its rows


def _measured(shape, perm, us, tile_probe=False, elem=1, threads=1) -> xnn_cost.Measurement:
    return xnn_cost.Measurement(shape=shape, elem_bytes=elem, perm=perm, threads=threads, us=us,
                                kind=xnn_cost.conversion_kind(shape, perm), tile_probe=tile_probe)  # fmt: skip


def _probes(rate_us_per_kib: float, tiles: tuple[int, int]) -> list[xnn_cost.Measurement]:
    """Wide probes (every transposed dim 16 or more) and tile probes (one dim of 2-12), timed as a kernel of
    `tiles` at one rate per tiled KiB would run them, at one and two threads."""
    wide = [([1, c, s, s], TO_NHWC if i % 2 else TO_NCHW) for i, (c, s) in enumerate(((16, 16), (32, 32), (64, 48)))]
    narrow = [([1, c, 96, 96], TO_NHWC) for c in (2, 3, 6)] + [([1, 96, 96, c], TO_NCHW) for c in (2, 3, 6)]
    out = []
    for threads in (1, 2):
        for probes, tile_probe in ((wide, False), (narrow, True)):
            out += [_measured(shape, perm, rate_us_per_kib / threads * xnn_cost.tiled_kib(shape, 1, perm, tiles),
                              tile_probe, threads=threads) for shape, perm in probes]  # fmt: skip
    return out


def test_the_tile_probes_vote_for_the_tiles_and_are_on_no_curve():
    measured = _probes(0.1, (16, 4))
    curves = conversion_curves(measured)
    assert transpose_tiles(measured, curves) == {"1": {"1": (16, 4)}, "2": {"1": (16, 4)}}  # read at one thread
    wide = [m for m in measured if not m.tile_probe]
    assert curves == conversion_curves(wide)  # the tile probes bend no curve
    # Counted as the curve's own probes, they would: their few bytes at a tiled run's time.
    assert conversion_curves([m.model_copy(update={"tile_probe": False}) for m in measured]) != curves
    assert transpose_tiles(wide, curves) == {}  # no tile probes, no tiles: every transpose priced by its bytes


def test_every_price_of_a_transpose_reads_the_curve_at_its_tiled_size():
    shipped = xnn_cost.load_profile()
    curve = xnn_cost.Curve(kib=[16.0, 1024.0], us=[1.6, 102.4])  # 0.1 us per KiB
    tables = {"1": {"1": {"transpose": curve, "block": curve, "copy": curve}}}
    tiled = shipped.model_copy(update={"curves": tables, "transpose_tiles": {"1": {"1": (16, 16)}}})
    untiled = tiled.model_copy(update={"transpose_tiles": {}})
    image = [1, 3, 64, 64]
    assert xnn_cost.conversion_us(tiled, image, "int8", TO_NHWC) == pytest.approx(0.1 * 64)
    assert xnn_cost.conversion_us(untiled, image, "int8", TO_NHWC) == pytest.approx(0.1 * 12)
    moved = xnn_cost.PredictedOp("conversion:transpose", 12.0, 1, True, moved=(tuple(image), tuple(TO_NHWC)))
    as_bytes = moved._replace(moved=None)
    kernels = lambda profile, op: xnn_cost.run_us(profile, [op], 1, 1)["conversion"]
    assert kernels(tiled, moved) == pytest.approx(0.1 * 64) and kernels(tiled, as_bytes) == pytest.approx(1.2)
    assert kernels(untiled, moved) == pytest.approx(1.2)


def test_the_shipped_profile_prices_an_int8_image_to_nhwc_as_its_tiles():
    shipped = xnn_cost.load_profile()
    assert shipped.tiles(1, 1) is not None
    image, wide = [1, 3, 64, 64], [1, 16, 32, 32]  # 12 KiB of 3 channels, 16 KiB of 16
    assert xnn_cost.conversion_us(shipped, image, "int8", TO_NHWC) > xnn_cost.conversion_us(
        shipped, wide, "int8", TO_NHWC
    )


class _ImageConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)

    def forward(self, x):
        return self.conv(x).relu()


def test_a_lowerings_conversions_carry_their_shape_and_permutation_to_the_run_time_model():
    from layout_solver.targets.xnnpack.lowering import lower
    from layout_solver.xnnpack import stock_layouts

    torch.manual_seed(0)
    lowered = lower(_ImageConv().eval(), (torch.randn(1, 3, 32, 32),), stock_layouts)
    conversions = [op for r in lowered.reports for op in r.run_ops if op.op_class.startswith("conversion:")]
    assert conversions and all(op.moved is not None for op in conversions)
    into_nhwc = [op for op in conversions if xnn_cost.transposed_dims(*op.moved)[0] == 3]
    assert into_nhwc, [op.moved for op in conversions]  # the image's 3 channels become the innermost dim


def test_only_transpose_tiles_needs_a_profile_to_add_to():
    from layout_solver.targets import get_target

    with pytest.raises(ValueError, match="--only transpose-tiles adds to a profile: name it with --keep-from"):
        get_target("xnnpack").calibrate("/tmp/unused.json", threads=(1,), only="transpose-tiles")
