"""A program's weights are read once per run, a whole run after they were last read: where they outgrow the cache,
each op reads its own from memory, where the op probes that priced it read them from cache. The calibration
measures what that costs by chains of one-row products (`op_probes.stream_probes`), the fit states it as a
curve by the program's weights in all (`xnnpack_fit.streaming`), and the run-time model charges each op with
weights its share. How much closer that brings a program's prediction is the benchmark's to say
(benchmarks/xnnpack/zoo.py), not a timed test's."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cost_models import xnnpack as xnn_cost
from cost_models.xnnpack_fit import op_curves, packing, streaming

ROW = xnn_cost.GemmShape(1, 1, 512, 512)  # a one-row product by a 512 x 512 matrix: 1 MiB of fp32 weights


def _chain(footprint_kib: float, us_per_kib: float, threads: int = 1) -> xnn_cost.OpMeasurement:
    """One layer's time in a weight-streaming chain whose weights are `footprint_kib` in all."""
    return xnn_cost.OpMeasurement(op_class="gemm", work=512.0 * 512, elem_bytes=4, threads=threads,
                                  us=us_per_kib * 1024, gemm=ROW, footprint_kib=footprint_kib)  # fmt: skip


def test_the_fit_states_what_reading_the_weights_costs_beyond_the_cache_by_the_programs_weights():
    rates = {2048.0: 0.011, 12288.0: 0.019, 49152.0: 0.038, 98304.0: 0.036}  # the last reads a little faster
    measured = [_chain(f, r) for f, r in rates.items()] + [_chain(f, r / 2, threads=2) for f, r in rates.items()]
    fitted = streaming(measured)
    assert set(fitted) == {"1", "2"}
    one = fitted["1"]
    assert one.kib == sorted(rates) and one.us[0] == 0.0  # the smallest chain's weights stay in cache
    assert one.us[1] == pytest.approx((0.019 - 0.011) * 12288, abs=1e-3)
    assert one.us[2] == pytest.approx((0.038 - 0.011) * 49152, abs=1e-3)
    assert one.us[3] >= one.us[2]  # never cheaper for more weights
    assert fitted["2"].us[2] == pytest.approx((0.019 - 0.0055) * 49152, abs=1e-3)


def test_the_streaming_chains_are_on_no_curve_and_vote_for_no_tiles():
    # Products of outputs or inputs off any tile, timed as if packed in (1, 16): the tiles the fit must find.
    shapes = [xnn_cost.GemmShape(256, 1, k, n) for k, n in ((256, 4), (256, 12), (4, 256), (64, 64))]
    plain = [xnn_cost.OpMeasurement(op_class="gemm", work=float(g.rows * g.k * g.n), elem_bytes=4, threads=1,
                                    us=xnn_cost.packed_work(g, (1, 16)) / 1000, gemm=g) for g in shapes]  # fmt: skip
    # Chains of the same family, far slower per multiply-add: counted in, they move the family's median rate
    # (the fit then reads (16, 16)) and bend the gemm curve.
    chains = [_chain(f, 0.05) for f in (2048.0, 4096.0, 12288.0, 49152.0, 98304.0)]
    assert packing(plain + chains) == packing(plain) == {"1": {"4": (1, 16)}}
    tiles = packing(plain)
    assert op_curves(plain + chains, tiles) == op_curves(plain, tiles)


def test_each_op_with_weights_pays_its_share_of_the_programs_streaming():
    shipped = xnn_cost.load_profile()
    line = xnn_cost.WorkCurve(work=[1000.0], us=[1.0])
    overheads = xnn_cost.Overheads(call_us=0.0, delegate_us=0.0, xnnpack_op_us=0.0, cpu_op_us=0.0, io_us_per_kib=0.0)
    profile = shipped.model_copy(update={
        "op_curves": {"1": {"4": {"gemm": line, "conv": line, "elementwise": line}}}, "unit_us": {}, "packing": {},
        "overheads": {"1": overheads},
        "streaming": {"1": xnn_cost.Curve(kib=[1024.0, 65536.0], us=[0.0, 2048.0])},
    })  # fmt: skip
    ops = [
        xnn_cost.PredictedOp("conv", 1e6, 4, True, weight_kib=36864.0),
        xnn_cost.PredictedOp("gemm", 1e5, 4, True, weight_kib=12288.0),
        xnn_cost.PredictedOp("elementwise", 1e4, 4, True),
    ]
    # 48 MiB of weights in all: the curve reads 1,536 us for them, 0.03125 us per KiB.
    per_kib = profile.streaming_us_per_kib(1, 49152.0)
    assert per_kib == pytest.approx(profile.streaming["1"].at(49152.0) / 49152.0)
    parts = xnn_cost.run_us(profile, ops, delegates=1, threads=1)
    assert parts["conv"] == pytest.approx(1000.0 + 36864.0 * per_kib)
    assert parts["gemm"] == pytest.approx(100.0 + 12288.0 * per_kib)
    assert parts["elementwise"] == pytest.approx(10.0)
    # Weights that fit the cache, or a profile measured before the streaming probes: the probes' prices alone.
    small = [op._replace(weight_kib=op.weight_kib / 64) for op in ops]
    assert xnn_cost.run_us(profile, small, delegates=1, threads=1)["conv"] == pytest.approx(1000.0)
    before = profile.model_copy(update={"streaming": {}})
    assert xnn_cost.run_us(before, ops, delegates=1, threads=1)["conv"] == pytest.approx(1000.0)


def test_the_reader_states_each_ops_weights_as_the_delegate_stores_them():
    from executorch.exir import to_edge

    from layout_solver.xnnpack.runtime_model import classify

    class Ops(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(16, 32, 3, padding=1)  # 32 x 16 x 9 weights
            self.depthwise = nn.Conv2d(32, 32, 3, padding=1, groups=32)  # 32 x 9
            self.fc = nn.Linear(32, 64)  # 64 x 32

        def forward(self, x):
            y = self.depthwise(self.conv(x)).mean((2, 3))
            return self.fc(y) @ self.fc.weight  # mm of two values: no weights of its own

    edge = to_edge(torch.export.export(Ops().eval(), (torch.randn(1, 16, 8, 8),))).exported_program()
    read = [r for r in (classify(n) for n in edge.graph.nodes if n.op == "call_function") if r is not None]
    weights = sorted(r.weight_kib for r in read if r.weight_kib)
    assert weights == [32 * 9 * 4 / 1024, 64 * 32 * 4 / 1024, 32 * 16 * 9 * 4 / 1024]
    assert all(
        r.weight_kib == 0 for r in read if r.op_class not in ("conv", "gemm") and not r.op_class.startswith("dw")
    )


def test_an_int8_programs_weights_are_one_byte_each():
    from layout_solver.targets.xnnpack.calibrate_ops import lower_probe
    from layout_solver.targets.xnnpack.op_probes import Probe, _linear

    lowered = lower_probe(Probe("int8 gemm(16, 64, 128)", "gemm", _linear(16, 64, 128), int8=True))
    gemms = [op for op in lowered.ops if op.op_class == "gemm"]
    assert len(gemms) == 2 and all(op.weight_kib == 64 * 128 / 1024 and op.elem_bytes == 1 for op in gemms)


def test_a_real_streaming_chain_files_its_weights_in_all():
    """A real probe run (one thread, a few rounds): the smallest streaming chain, run twice as every delegated
    probe is, files one layer's time with the chain's weights in all (two layers of 1 MiB)."""
    from layout_solver.targets.xnnpack.calibrate_ops import op_measurements, run_probe
    from layout_solver.targets.xnnpack.op_probes import stream_probes

    smallest = stream_probes()[0]
    (run,) = run_probe(smallest, [1], rounds=3)
    (measured,) = op_measurements([run])
    assert measured.footprint_kib == 2048.0  # the weight matrices (a bias is read once per row, not counted)
    assert measured.gemm == ROW and measured.us > 0


def test_the_shipped_profile_prices_streaming_at_each_thread_count_it_measured():
    shipped = xnn_cost.load_profile()
    assert set(shipped.streaming) == {"1", "2"}
    for threads in (1, 2):
        # Nothing while a program's weights stay in cache; more per KiB once they are three times this EPYC's L3.
        assert shipped.streaming_us_per_kib(threads, 1024.0) == 0.0
        assert shipped.streaming_us_per_kib(threads, 96 * 1024.0) > 0.01


def test_only_streaming_needs_a_profile_to_add_to():
    from layout_solver.targets import get_target

    with pytest.raises(ValueError, match="--keep-from"):
        get_target("xnnpack").calibrate("/tmp/unused.json", threads=(1,), only="streaming")
