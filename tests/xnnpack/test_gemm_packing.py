"""XNNPACK runs a convolution or fully-connected op as a GEMM whose weights are packed in its microkernel's tiles
(input channels per tap to a multiple of kr, output channels to one of nr), and the padding runs as work. The
reader states each such op's GEMM, the calibration fits the tiles, and the profile prices the packed work. How
much closer that brings a program's prediction is the benchmark's to say (benchmarks/xnnpack/zoo.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cost_models import xnnpack as xnn_cost
from cost_models.xnnpack_fit import op_curves, packing


def _measured(gemm: xnn_cost.GemmShape, tiles=(8, 16), op_class="conv", threads=1, elem=1) -> xnn_cost.OpMeasurement:
    """A probe that runs 1 us per 1000 multiply-adds of its GEMM packed in `tiles`."""
    work = float(gemm.rows * gemm.taps * gemm.k * gemm.n)
    us = xnn_cost.packed_work(gemm, tiles) / 1000
    return xnn_cost.OpMeasurement(op_class=op_class, work=work, elem_bytes=elem, threads=threads, us=us, gemm=gemm)


PROBES = [xnn_cost.GemmShape(4096, 9, k, n) for k, n in ((1, 32), (2, 32), (4, 32), (6, 32), (12, 32), (32, 4),
                                                           (32, 8), (32, 24), (64, 64), (128, 128))]  # fmt: skip


def test_the_fit_finds_the_tiles_that_made_the_probes_times():
    for tiles in ((8, 16), (4, 8), (1, 16)):
        measured = [_measured(g, tiles) for g in PROBES] + [
            _measured(xnn_cost.GemmShape(256, 1, 4, 256), tiles, "gemm")
        ]
        assert packing(measured) == {"1": {"1": tiles}}


def test_the_tiles_are_read_at_the_fewest_threads_and_stated_for_every_thread_count():
    alone = [_measured(g, (8, 16)) for g in PROBES]
    split = [_measured(g, (16, 16), threads=2) for g in PROBES]  # how 2 threads split the work: steps of its own
    assert packing(alone + split) == {"1": {"1": (8, 16)}, "2": {"1": (8, 16)}}
    assert packing(split) == {"2": {"1": (16, 16)}}  # a calibration of 2 threads alone reads them there


def test_the_shipped_profile_is_what_its_own_measurements_fit():
    """The shipped profile's tiles, curves, per-unit costs and weight streaming are refitted from its measurements unchanged: no
    table in it was edited by hand or left from an older rule."""
    from cost_models.xnnpack_fit import refitted

    shipped = xnn_cost.load_profile()
    again = refitted(shipped)
    assert shipped.packing and again.packing == shipped.packing
    assert again.op_curves == shipped.op_curves and again.unit_us == shipped.unit_us
    assert again.streaming == shipped.streaming


def test_unpadded_probes_fit_no_tiles_and_a_tie_goes_to_the_smaller():
    # Channels a multiple of 16 everywhere: every tile agrees as well, and (1, 1) is chosen.
    measured = [_measured(xnn_cost.GemmShape(1024, 9, 16 * i, 16 * j)) for i in (1, 2, 4) for j in (1, 2, 3)]
    assert packing(measured) == {"1": {"1": (1, 1)}}


def test_probes_under_two_microseconds_and_other_classes_do_not_vote():
    tiny = [_measured(xnn_cost.GemmShape(8, 1, 1, 4))]  # 1 us on 8 x 16 tiles: under ETDump's resolution
    other = [xnn_cost.OpMeasurement(op_class="dwconv:9", work=9e5, elem_bytes=1, threads=1, us=900.0)]
    assert packing(tiny + other) == {}


def test_the_curves_are_by_packed_work_and_the_profile_prices_a_gemm_by_it():
    measured = [_measured(g) for g in PROBES]
    tiles = packing(measured)
    curves, _ = op_curves(measured, tiles)
    curves["1"]["1"]["elementwise"] = xnn_cost.WorkCurve(work=[1000.0], us=[1.0])
    shipped = xnn_cost.load_profile()
    profile = shipped.model_copy(update={"op_curves": curves, "packing": tiles, "unit_us": {}})
    three_channels = xnn_cost.GemmShape(1024, 9, 3, 16)  # 442,368 multiply-adds; packed as 8 channels: 1,179,648
    us = profile.op_us("conv", 442368.0, 1, 1, gemm=three_channels)
    assert us == pytest.approx(1179.648, rel=1e-6)
    # Without its GEMM (or in a profile measured before the tiles) an op is priced by its own work.
    assert profile.op_us("conv", 442368.0, 1, 1) == pytest.approx(442.368, rel=1e-6)
    unpacked = profile.model_copy(update={"packing": {}})
    assert unpacked.op_us("conv", 442368.0, 1, 1, gemm=three_channels) == pytest.approx(442.368, rel=1e-6)
    # A class XNNPACK does not run as a packed GEMM is never padded.
    assert profile.op_us("elementwise", 1000.0, 1, 1, gemm=three_channels) == profile.op_us("elementwise", 1000.0, 1, 1)


def test_the_reader_states_each_convolution_and_product_as_the_gemm_xnnpack_runs():
    from layout_solver.xnnpack.runtime_model import classify

    class Ops(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)  # 16x16 output pixels, 9 taps of 3 channels
            self.grouped = nn.Conv2d(16, 32, 3, padding=1, groups=2)  # two GEMMs of 8 -> 16 channels
            self.depthwise = nn.Conv2d(32, 32, 3, padding=1, groups=32)
            self.pointwise = nn.Conv2d(32, 8, 1)
            self.fc = nn.Linear(8, 10)

        def forward(self, x):
            x = self.pointwise(self.depthwise(self.grouped(self.stem(x))))
            return self.fc(x.mean((2, 3)))

    from executorch.exir import to_edge

    edge = to_edge(torch.export.export(Ops().eval(), (torch.randn(1, 3, 32, 32),))).exported_program()
    read = [r for r in (classify(n) for n in edge.graph.nodes if n.op == "call_function") if r is not None]
    gemms = {(r.op_class, r.gemm) for r in read if r.op_class in ("conv", "gemm") or r.op_class.startswith("dwconv")}
    assert gemms == {
        ("conv", xnn_cost.GemmShape(256, 9, 3, 16)),
        ("conv", xnn_cost.GemmShape(512, 9, 8, 16)),
        ("dwconv:9", None),  # XNNPACK's depthwise kernels tile channels, not a GEMM
        ("gemm", xnn_cost.GemmShape(256, 1, 32, 8)),
        ("gemm", xnn_cost.GemmShape(1, 1, 8, 10)),  # addmm(bias, input, weight): 8 inputs, 10 outputs
    }


def test_a_real_int8_probe_files_its_gemm_with_its_time():
    """A real probe run (one thread, a few rounds): the measurement of an int8 convolution of one input channel
    carries the GEMM the fit reads, from the lowered program's own graph."""
    from layout_solver.targets.xnnpack.calibrate_ops import op_measurements, run_probe
    from layout_solver.targets.xnnpack.op_probes import Probe, _conv

    probe = Probe("int8 conv(1, 8, 3, 1, 16)", "conv", _conv(1, 8, 3, 1, 16), int8=True)
    (run,) = run_probe(probe, [1], rounds=3)
    (measured,) = op_measurements([run])
    assert measured.elem_bytes == 1 and measured.gemm == xnn_cost.GemmShape(256, 9, 1, 8)
    assert measured.work == 256 * 9 * 8
