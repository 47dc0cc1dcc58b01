"""The XNNPACK run-time model: how a program's ops are read and priced (the pure model on a made-up profile), the
CPU kernels priced by running them (the probe cache), and a real lowering's prediction by part. How close the
prediction comes to measured run times is the benchmark's to say (benchmarks/xnnpack/zoo.py), not a timed test's."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cost_models import xnnpack as xnn_cost
from layout_solver.targets.xnnpack.cpu_ops import CpuOpTimes, program_ops
from layout_solver.targets.xnnpack.measure import lower, predicted_run
from layout_solver.xnnpack import stock_layouts


def _profile(**overheads) -> xnn_cost.XnnpackProfile:
    shipped = xnn_cost.load_profile()
    line = xnn_cost.WorkCurve(work=[1000.0], us=[1.0])  # 1 us per 1000 units of work
    curves = {"elementwise": line, "gemm": line, "dwconv:9": line, "dwconv:49": xnn_cost.WorkCurve(work=[10.0], us=[1.0]),
              "cpu:other": xnn_cost.WorkCurve(work=[100.0], us=[1.0])}  # fmt: skip
    base = {"call_us": 5.0, "delegate_us": 2.0, "xnnpack_op_us": 0.5, "cpu_op_us": 1.0, "io_us_per_kib": 0.0}
    return shipped.model_copy(update={"op_curves": {"1": {"4": curves}},
                                      "overheads": {"1": xnn_cost.Overheads(**{**base, **overheads})}})  # fmt: skip


def test_a_programs_prediction_is_its_kernels_its_conversions_and_its_overheads():
    profile = _profile(io_us_per_kib=0.5, kernel_fraction=0.1)
    ops = [
        xnn_cost.PredictedOp("gemm", 4000.0, 4, True),
        xnn_cost.PredictedOp("elementwise", 2000.0, 4, True),
        xnn_cost.PredictedOp("conversion:transpose", 64.0, 4, True),
        xnn_cost.PredictedOp("cpu:native_layer_norm", 500.0, 4, False, key="k1"),
        xnn_cost.PredictedOp("cpu:erf", 300.0, 4, False),  # no curve, not measured: the CPU fallback's
    ]
    parts = xnn_cost.run_us(profile, ops, delegates=2, threads=1, io_kib=8.0, measured={"k1": 7.5})
    assert parts["gemm"] == 4.0 and parts["elementwise"] == 2.0
    assert parts["cpu:native_layer_norm"] == 7.5  # the measured kernel's own time
    assert parts["cpu:erf"] == 3.0
    assert parts["conversion"] == profile.curve(1, 4, "transpose").at(64.0)
    kernels = 4.0 + 2.0 + 7.5 + 3.0 + parts["conversion"]  # a tenth of their time runs beyond them
    assert abs(parts["overhead"] - (5.0 + 2 * 2.0 + 3 * 0.5 + 2 * 1.0 + 8.0 * 0.5 + 0.1 * kernels)) < 1e-9
    assert abs(parts["total"] - sum(v for k, v in parts.items() if k != "total")) < 1e-9


def test_the_thread_pool_wakes_only_after_cpu_kernels_longer_than_its_spin():
    # Three delegate calls: 30 us of CPU kernels before the second (the workers fall asleep), 10 before the third
    # (they still spin), none before the first or after the last (the call starts on spinning workers).
    profile = _profile(cpu_op_us=0.0, pool_wake_us=15.0, pool_spin_us=20.0)
    gemm = xnn_cost.PredictedOp("gemm", 1000.0, 4, True)

    def cpu(us, segment):
        return xnn_cost.PredictedOp("cpu:other", us * 100.0, 4, False, segment=segment)

    def wakes(ops, **overheads):
        priced = profile.model_copy(update={"overheads": {"1": profile.overhead(1).model_copy(update=overheads)}})
        without = _profile(cpu_op_us=0.0)
        return (xnn_cost.run_us(priced, ops, 3, 1)["overhead"] - xnn_cost.run_us(without, ops, 3, 1)["overhead"]) / 15.0

    program = [gemm, cpu(30.0, 1), gemm, cpu(10.0, 2), gemm]
    assert round(wakes(program), 9) == 1
    # The previous run's tail and this one's head add up past the spin: the first call pays it too.
    assert round(wakes([cpu(12.0, 0), *program, cpu(12.0, 3)]), 9) == 2
    assert round(wakes(program, pool_spin_us=None), 9) == 3  # a profile without the spin: every call pays
    assert round(wakes(program, pool_spin_us=40.0), 9) == 0


def test_operators_xnnpack_runs_without_the_pool_leave_its_workers_asleep_longer():
    # A delegate's first product after 10 us of CPU kernels and 15 us of small adds XNNPACK runs on the calling
    # thread: 25 us and more since the last product, past the 20 us spin. Read as blocks (the delegates' places
    # not known), each call starts on spinning workers.
    profile = _profile(cpu_op_us=0.0, pool_wake_us=15.0, pool_spin_us=20.0)
    overheads = profile.overhead(1)

    def run(small_adds_us: float, placed: bool) -> int:
        inside = [(0, "gemm", 1000.0), (1, "elementwise", 1000.0), (1, "gemm", 1000.0)]
        ops = [xnn_cost.PredictedOp(op_class, work, 4, True, segment=segment if placed else -1)
               for segment, op_class, work in inside]  # fmt: skip
        ops.append(xnn_cost.PredictedOp("cpu:other", 1000.0, 4, False, segment=1))  # 10 us between the calls
        steps = [xnn_cost.PoolStep(op.segment, op.in_delegate, small_adds_us if op.op_class == "elementwise" else 1.0,
                                   xnn_cost.splits_across_pool(op)) if op.in_delegate else
                 xnn_cost.PoolStep(op.segment, False, 10.0, False) for op in ops]  # fmt: skip
        return xnn_cost.pool_wakes(overheads, steps, 2)

    assert run(15.0, placed=True) == 1
    assert run(2.0, placed=True) == 0  # 10 + 2 us and the call's overhead: the workers still spin
    assert run(15.0, placed=False) == 0

    def splits(op_class, work, elem_bytes=4, in_delegate=True):
        return xnn_cost.splits_across_pool(xnn_cost.PredictedOp(op_class, work, elem_bytes, in_delegate))

    # An elementwise operator up to 16 KiB of output runs on the calling thread; a product always splits.
    assert not splits("elementwise", 4096) and splits("elementwise", 8192) and not splits("transcendental", 16384, 1)
    assert splits("gemm", 64.0) and splits("copy", 0.0) and not splits("cpu:other", 1e6, in_delegate=False)


class _TwoCalls(nn.Module):
    """Two XNNPACK delegates with a CPU cumsum between them."""

    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Linear(16, 16), nn.Linear(16, 8)

    def forward(self, x):
        return self.second(torch.cumsum(self.first(x).relu(), 0)).sigmoid()


def test_each_delegates_operators_are_placed_at_its_call():
    lowered = lower(_TwoCalls().eval(), (torch.randn(4, 16),), stock_layouts)
    outside = lowered.outside
    assert outside.delegates == 2 and outside.called == ["lowered_module_0", "lowered_module_1"]
    ops = outside.run_ops([r.run_ops for r in lowered.reports])
    by_segment = {(op.segment, op.in_delegate, op.op_class) for op in ops}
    assert {(0, True, "gemm"), (1, False, "cpu:cumsum"), (1, True, "gemm")} <= by_segment
    assert all(op.segment in (0, 1) for op in ops if op.in_delegate)
    # Calls that do not name each delegate once leave the delegates' operators unplaced.
    outside.called = ["lowered_module_0", "lowered_module_0"]
    assert all(op.segment == -1 for op in outside.run_ops([r.run_ops for r in lowered.reports]) if op.in_delegate)


def test_a_depthwise_kernel_of_taps_never_measured_is_priced_as_the_nearest_measured():
    profile = _profile()
    assert profile.op_us("dwconv:9", 1000.0, 4, 1) == 1.0
    assert profile.op_us("dwconv:49", 10.0, 4, 1) == 1.0
    assert profile.op_us("dwconv:25", 1000.0, 4, 1) == 1.0  # 25 taps: nearer 9 than 49
    assert profile.op_us("dwconv:36", 10.0, 4, 1) == 1.0  # nearer 49
    assert profile.op_us("cpu:upsample_nearest2d@channels_last", 100.0, 4, 1) == 1.0  # the CPU fallback


def test_a_schema_1_profile_predicts_no_run_time_and_the_shipped_one_does():
    old = xnn_cost.load_profile().model_copy(update={"op_curves": {}, "overheads": {}})
    assert not old.predicts_run_time
    shipped = xnn_cost.load_profile()
    assert shipped.predicts_run_time and shipped.thread_counts == [1, 2]
    for threads in ("1", "2"):
        assert {"conv", "gemm", "bmm", "softmax", "elementwise", "cpu:other"} <= set(shipped.op_curves[threads]["4"])
        for curve in shipped.op_curves[threads]["4"].values():
            assert curve.us == sorted(curve.us) and curve.work == sorted(curve.work)


class _Mixed(nn.Module):
    """A pointwise and a depthwise convolution in XNNPACK, a LayerNorm and a broadcast `where` on the CPU."""

    def __init__(self):
        super().__init__()
        self.pointwise, self.depthwise = nn.Conv2d(8, 16, 1), nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        y = self.norm(self.depthwise(self.pointwise(x)).permute(0, 2, 3, 1))
        return torch.where(y[..., :1] > 0, y, 0.5 * y)


def test_a_lowerings_ops_are_read_as_xnnpack_runs_them_and_its_cpu_kernels_priced_by_running_them(tmp_path):
    inputs = (torch.randn(1, 8, 10, 10),)
    lowered = lower(_Mixed().eval(), inputs, stock_layouts)
    classes = {op.op_class for r in lowered.reports for op in r.run_ops}
    assert {"gemm", "dwconv:9"} <= classes  # XNNPACK runs a 1x1 convolution as its GEMM
    cpu = {op.op_class for op in lowered.outside.ops}
    assert {"cpu:native_layer_norm", "cpu:where"} <= cpu and lowered.outside.delegates >= 1
    # Each CPU kernel knows how many delegate calls ran before it: the layer norm follows the convolutions' call,
    # the where the second one's (its 0.5 * y).
    segments = {op.op_class: op.segment for op in lowered.outside.ops}
    assert segments["cpu:native_layer_norm"] == 1 and segments["cpu:where"] == lowered.outside.delegates == 2

    times = CpuOpTimes(tmp_path / "cpu_ops.json")
    parts = predicted_run(lowered, xnn_cost.load_profile(), 1, times)
    assert parts["total"] > parts["cpu:where"] > 0 and parts["cpu:native_layer_norm"] > 0
    probed = times.probed
    assert probed == len([c for c in lowered.outside.calls.values() if not c.free])
    again = CpuOpTimes(tmp_path / "cpu_ops.json")
    assert predicted_run(lowered, xnn_cost.load_profile(), 1, again) == parts and again.probed == 0  # cached


def test_a_kernel_call_is_keyed_by_everything_its_speed_depends_on():
    from executorch.exir import to_edge

    class Where(nn.Module):
        def forward(self, c, a):
            return torch.where(c, a, a * 2.0)

    def calls(c, a):
        ops = program_ops(to_edge(torch.export.export(Where(), (c, a))).exported_program())
        return {call.name: call.key for call in ops.calls.values()}

    same = calls(torch.rand(4, 4, 2) > 0.5, torch.randn(4, 4, 2))["where"]
    broadcast = calls(torch.rand(1, 1, 2) > 0.5, torch.randn(4, 4, 2))["where"]
    integer = calls(torch.rand(4, 4, 2) > 0.5, torch.randint(0, 5, (4, 4, 2)))["where"]
    assert len({same, broadcast, integer}) == 3


def test_an_events_time_per_run_sums_its_instances_each_without_its_slowest_tenth():
    from layout_solver.targets.xnnpack.runtime import per_run_ms

    runs = 30
    small = [0.1] * (runs - 1) + [5.0]  # one run the machine interrupted
    large = [1.0] * runs
    # Inspector lists each instance's runs in turn: the large instance is counted whole, the interruption not.
    assert abs(per_run_ms(small + large, runs) - 1.1) < 1e-9
    assert abs(per_run_ms(large + small, runs) - 1.1) < 1e-9


def test_the_overheads_fit_recovers_the_costs_that_made_the_probes_run_times():
    """Probe runs made from known costs (per call, delegate and operator on chains of tiny adds; per KiB of I/O
    and a share of the kernels' time on single large adds) give those costs back; chains of a program's layers,
    where there are some, give the share, read from the runs their kernels were read from."""
    from types import SimpleNamespace

    from layout_solver.targets.xnnpack.calibrate_ops import ProbeRun, overheads

    call, delegate, per_op, per_kib, fraction = 5.0, 2.0, 0.5, 0.02, 0.1

    def run(op_class, ops, kernels, io_kib, kernel_bound=False, share=fraction, stream_probe=False):
        overhead = call + delegate + per_op * len(ops) + per_kib * io_kib + share * kernels
        probe = SimpleNamespace(name=f"{op_class} {len(ops)} {kernels}", op_class=op_class, kernel_bound=kernel_bound,
                                stream_probe=stream_probe)  # fmt: skip
        # A program chain's rounds met the machine in another state than the block its kernels came from.
        rounds_us = (kernels + overhead) * (1.4 if kernel_bound else 1.0)
        return ProbeRun(probe, 1, {"kernel": kernels}, rounds_us, ops, 1, io_kib, 300.0, kernels + overhead)

    add = xnn_cost.PredictedOp("elementwise", 8.0, 4, True)
    chains = [run(None, [add] * count, 0.01 * count, 0.0) for count in (1, 12, 36)]
    large = [xnn_cost.PredictedOp("elementwise", 1e6, 4, True)]
    singles = [run("elementwise", large, us, io) for us, io in ((2, 1), (40, 64), (900, 16), (3000, 1024), (8, 512))]
    # A weight-streaming chain's run holds what its weights cost beyond its kernels: no part of this fit.
    streaming = [run("gemm", large * 96, 4000.0, 4.0, share=0.5, stream_probe=True)]
    fitted = overheads(chains + singles + streaming, [1])["1"]
    assert abs(fitted.call_us + fitted.delegate_us - (call + delegate)) < 0.05  # one delegate per probe: one sum
    assert abs(fitted.xnnpack_op("elementwise") - per_op) < 0.01
    assert abs(fitted.io_us_per_kib - per_kib) < 1e-3 and abs(fitted.kernel_fraction - fraction) < 1e-3

    programs = [run(None, large * 8, us, 16.0, kernel_bound=True, share=0.25) for us in (800.0, 3000.0)]
    fitted = overheads(chains + singles + programs, [1])["1"]
    assert abs(fitted.io_us_per_kib - per_kib) < 1e-3 and abs(fitted.kernel_fraction - 0.25) < 1e-3


def test_a_probe_runs_its_op_twice_after_its_twin_and_files_the_second():
    """A real probe run (one thread, a few rounds, each after a run of its twin): its op twice in one delegate
    call, each XNNPACK event timed, the run (in the reference's rounds and in ETDump's block) and the reference
    timed, and one measurement of its class filed from the second op's events. (Whether the twin's state matches
    a paired timing is the benchmark's to measure.)"""
    from layout_solver.targets.xnnpack.calibrate_ops import op_measurements, run_probe
    from layout_solver.targets.xnnpack.op_probes import Probe, _binary

    probe = Probe("add(64, 256)", "elementwise", _binary(torch.add, (64, 256)))
    (run,) = run_probe(probe, [1], rounds=5)
    adds = [name for name in run.kernel_us if name.startswith("Add (ND)")]
    assert len(adds) == 2 and len([op for op in run.ops if op.op_class == "elementwise"]) == 2
    assert run.run_us > 0 and run.reference_us > 0 and run.io_kib > 0
    # The block's runs were clocked too: each longer than the kernels ETDump read in it.
    assert run.block_run_us > sum(run.kernel_us.values())
    (measured,) = op_measurements([run])
    assert measured.op_class == "elementwise" and measured.work == 64 * 256 and measured.threads == 1
    assert measured.us == round(run.kernel_us[adds[1]], 3)


def test_a_probe_runs_its_second_op_on_what_a_parallel_op_wrote():
    """A probe's second op reads the first's output (as a program's layers do; on two threads an op reading its
    inputs where the first op left them in cache ran faster): an op that keeps its input's shape runs after a copy
    of itself, one that does not after its probe's producer (its class, the shape kept), and is filed by its own
    work; an op with neither (a concatenation) runs twice on the same inputs."""
    from layout_solver.targets.xnnpack.calibrate_ops import _twice, lower_probe, op_measurements, run_probe
    from layout_solver.targets.xnnpack.op_probes import Probe, _binary, _linear, _linear_producer

    probe = Probe("gemm(16, 64, 32)", "gemm", _linear(16, 64, 32), producer=_linear_producer(16, 64, 32))
    lowered = lower_probe(probe)
    assert [op.work for op in lowered.ops if op.op_class == "gemm"] == [16 * 64 * 64, 16 * 64 * 32]
    (measured,) = op_measurements(run_probe(probe, [1], rounds=5, lowered=lowered))
    assert measured.work == 16 * 64 * 32 and measured.gemm.n == 32

    add, inputs = _binary(torch.add, (4, 8))()
    chained = _twice(add, inputs)
    x, y = inputs
    assert torch.equal(chained(x, y), (x + y) + y)  # the second add reads the first's sum
    assert all(torch.equal(s, x + y) for s in _twice(add, inputs, chained=False)(x, y))  # as it was: same inputs
    cat, inputs = _binary(lambda x, y: torch.cat([x, y], 1), (4, 8))()
    first, second = _twice(cat, inputs)(*inputs)
    assert torch.equal(first, second)


def test_etdump_events_and_prediction_parts_are_read_as_the_same_classes():
    """The prediction-by-class benchmark files ETDump's events and the predictor's parts under one name."""
    from benchmarks.xnnpack.prediction_parts import event_class, predicted_class

    pairs = [
        ("Convolution (NHWC, F32) DWConv", "dwconv:9"),
        ("Convolution (NHWC, QC8) IGEMM", "conv"),
        ("Fully Connected (NC, F32) GEMM", "gemm"),
        ("Batch Matrix Multiply (NC, F32) GEMM", "bmm"),
        ("Transpose (ND, X32)", "conversion:transpose"),
        ("Copy (NC, X8)", "copy"),
        ("GELU (NC)", "transcendental"),
        ("Invalid Unary Op", "transcendental"),  # an int8 GELU, as ETDump names it
        ("Convert (NC)", "convert"),
        ("Add (ND)", "elementwise"),
        ("native_call_native_layer_norm.out", "cpu:native_layer_norm"),
        ("native_call_upsample_nearest2d.vec_out", "cpu:upsample_nearest2d@channels_last"),
    ]
    for event, part in pairs:
        assert event_class(event) == predicted_class(part), (event, part)


def test_a_concatenation_along_nhwc_channels_is_priced_by_its_short_runs():
    """NHWC along channels, a cat copies each input C elements per pixel (NCHW: the whole input in one run): the
    order's price beyond whole runs is in the problem's modes (a profile with a strided-copy curve), and none where
    the profile has no such curve (it prices both orders as "copy": decisions as before it had one)."""
    from layout_solver.xnnpack.op_rules import (
        CHANNELS_LAST,
        CONTIGUOUS,
        Prices,
        contiguous_run,
        rule_for,
        strided_copy_us,
    )

    class Cat(nn.Module):
        def forward(self, x, y):
            return torch.cat([x, y], 1)

    exported = torch.export.export(Cat(), (torch.randn(1, 8, 16, 16), torch.randn(1, 24, 16, 16)))
    cat = next(n for n in exported.graph.nodes if n.op == "call_function")
    assert contiguous_run(cat, CONTIGUOUS) == 8 * 16 * 16 and contiguous_run(cat, CHANNELS_LAST) == 8

    per_thousand = {"copy": 1.0, xnn_cost.STRIDED_COPY: 10.0, "elementwise": 1.0}
    curves = {k: xnn_cost.WorkCurve(work=[1000.0], us=[v]) for k, v in per_thousand.items()}
    profile = xnn_cost.load_profile().model_copy(update={"op_curves": {"1": {"4": curves}}})
    elements = 32 * 16 * 16
    extra = profile.op_us(xnn_cost.STRIDED_COPY, elements, 4, 1) - profile.op_us("copy", elements, 4, 1)
    assert extra > 0

    def op_us(op_class, work, elem):
        return profile.op_us(op_class, work, elem, 1)

    assert strided_copy_us(cat, CONTIGUOUS, op_us) == 0.0
    assert abs(strided_copy_us(cat, CHANNELS_LAST, op_us) - extra) < 1e-9
    modes = rule_for(cat).modes(cat, list(cat.all_input_nodes), Prices(lambda *_: 0.0, op_us))
    assert {m["results"][0]: m["cost"] for m in modes} == {CONTIGUOUS: 0.0, CHANNELS_LAST: round(extra, 4)}

    without = {k: v for k, v in curves.items() if k != xnn_cost.STRIDED_COPY}
    plain = profile.model_copy(update={"op_curves": {"1": {"4": without}}})
    assert strided_copy_us(cat, CHANNELS_LAST, lambda c, w, e: plain.op_us(c, w, e, 1)) == 0.0


def test_a_softmax_is_read_with_its_rows_and_a_batched_product_with_its_matrices_each_priced_per_unit():
    """XNNPACK's softmax pays per row and its batched product per matrix beyond their curves of work: the reader
    counts them off the node, and the profile's `unit_us` prices them."""
    from layout_solver.xnnpack.runtime_model import classify

    class Attention(nn.Module):
        def forward(self, q, k):
            return torch.softmax(torch.bmm(q, k), -1)

    exported = torch.export.export(Attention(), (torch.randn(6, 16, 8), torch.randn(6, 8, 16)))
    read = [classify(n)[:3] for n in exported.graph.nodes if n.op == "call_function"]
    assert ("bmm", 6 * 16 * 16 * 8, 6) in read and ("softmax", 6 * 16 * 16, 6 * 16) in read

    profile = _profile().model_copy(update={"unit_us": {"1": {"4": {"elementwise": 0.5}}}})
    assert profile.op_us("elementwise", 1000.0, 4, 1, units=4) == 1.0 + 0.5 * 4
    assert profile.op_us("gemm", 1000.0, 4, 1, units=4) == 1.0  # no cost per unit: its curve alone


def test_the_curve_fit_passes_over_an_odd_probe_and_fits_the_cost_per_unit_on_its_own_probes():
    from cost_models.xnnpack_fit import op_curves

    def measured(op_class, work, us, units=0.0, unit_probe=False):
        return xnn_cost.OpMeasurement(op_class=op_class, work=work, elem_bytes=4, threads=1, us=us, units=units,
                                      unit_probe=unit_probe)  # fmt: skip

    # A convolution class at 1 us per 1000 MACs, one probe of an odd shape at 3x that among them.
    convs = [measured("conv", w, w / 1000 * (3.0 if w == 1e5 else 1.0)) for w in (1e3, 1e4, 1e5, 1e6)]
    # Softmax at 1 us per 1000 elements and 0.05 us per row: rows of 1000 on the curve, of 10 in the unit probes.
    softmax = [measured("softmax", w, w / 1000 + 0.05 * w / 1000, units=w / 1000) for w in (1e3, 1e4, 1e5, 1e6)]
    softmax += [measured("softmax", w, w / 1000 + 0.05 * w / 10, units=w / 10, unit_probe=True) for w in (1e4, 1e5)]
    curves, unit_us = op_curves(convs + softmax)
    assert abs(curves["1"]["4"]["conv"].at(1e5) - 100.0) < 1e-6  # the odd probe's neighbours set its rate
    assert abs(unit_us["1"]["4"]["softmax"] - 0.05) < 1e-3
    assert abs(curves["1"]["4"]["softmax"].at(1e5) - 100.0) < 0.1  # the curve's own probes' rows taken off


def test_an_int8_delegates_quantize_and_dequantize_run_as_converts_unless_folded_into_a_quantized_op():
    """XNNPACK folds a q / dq the partitioner tagged implicit into the quantized op beside it; any other (the
    delegate's fp32 input quantized, its result dequantized) is a Convert operator the prediction prices."""
    from layout_solver.targets.xnnpack.lowering import quantize

    module = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 8)).eval()
    inputs = (torch.randn(4, 16),)
    lowered = lower(quantize(module, inputs), inputs, stock_layouts)
    classes = [op.op_class for r in lowered.reports for op in r.run_ops]
    assert classes.count("gemm") == 2 and classes.count("convert") == 2  # the input's q, the result's dq
    assert "convert" in predicted_run(lowered, xnn_cost.load_profile(), 1, None)  # priced (64 elements: ~0 us)


def test_the_zoo_report_states_how_far_the_machines_multi_thread_speed_wanders():
    """The zoo benchmark's line on the reference program's 2-thread over 1-thread time, read off its records
    (deciles and extremes) beside the profile's own ratio; no line without enough records."""
    from benchmarks.xnnpack.zoo import reference_spread
    from cost_models import xnnpack as xnn_cost

    records = [{"reference_ms_by_threads": {"1": 0.5, "2": 0.5 * r}} for r in [0.8, *[1.0] * 9, 1.3]]
    (line,) = reference_spread(records, [1, 2])
    profile = xnn_cost.load_profile()
    assert "median 1.00" in line and "all 0.80 - 1.30 (11 records)" in line
    assert f"the profile's {profile.reference_us['2'] / profile.reference_us['1']:.2f}" in line
    assert reference_spread(records[:9], [1, 2]) == [] and reference_spread(records, [1]) == []


def test_repredicted_records_restate_their_run_times_at_the_new_profiles_speed():
    """A record's run times at the profile's speed, read again with a profile measured at another reference speed,
    are scaled to it (the ratio to the reference kept); a record that does not say its speed is left as it was."""
    from benchmarks.xnnpack.zoo import restate_at_reference

    record = {"profile_reference_us_by_threads": {"1": 500.0, "2": 400.0},
              "stock": {"run_ms_at_reference_by_threads": {"1": 1.0, "2": 0.8}},
              "solver": {"run_ms_at_reference_by_threads": {"1": 0.9, "2": 0.6}}}  # fmt: skip
    restate_at_reference(record, {"1": 500.0, "2": 480.0})
    assert record["stock"]["run_ms_at_reference_by_threads"] == {"1": 1.0, "2": 0.96}
    assert record["solver"]["run_ms_at_reference_by_threads"] == {"1": 0.9, "2": 0.72}
    assert record["profile_reference_us_by_threads"] == {"1": 500.0, "2": 480.0}
    unstated = {"stock": {"run_ms_at_reference_by_threads": {"2": 0.8}}}
    restate_at_reference(unstated, {"2": 480.0})
    assert unstated["stock"]["run_ms_at_reference_by_threads"] == {"2": 0.8}


def test_passes_of_a_calibration_merge_into_the_median_of_each_probe():
    """Each (probe, thread count) measured in several passes keeps the median run time and, per kernel event, the
    median time: one slow spell of the machine in one pass does not bend the curve."""
    from layout_solver.targets.xnnpack.calibrate_ops import ProbeRun, merged
    from layout_solver.targets.xnnpack.op_probes import Probe

    probe = Probe("add(64, 256)", "elementwise", lambda: None)
    other = Probe("gemm(4, 32, 32)", "gemm", lambda: None)

    def run(p, threads, run_us, add_us):
        return ProbeRun(
            p, threads, {"Add (ND) #1": add_us, "Add (ND) #2": 2 * add_us}, run_us, [], 1, 1.0, 500.0, run_us + 1.0
        )

    runs = [run(probe, 1, 10.0, 1.0), run(probe, 1, 30.0, 9.0), run(probe, 1, 12.0, 2.0), run(probe, 2, 8.0, 1.0),
            run(other, 1, 50.0, 4.0)]  # fmt: skip
    out = {(r.probe.name, r.threads): r for r in merged(runs)}
    assert set(out) == {("add(64, 256)", 1), ("add(64, 256)", 2), ("gemm(4, 32, 32)", 1)}
    assert out[("add(64, 256)", 1)].run_us == 12.0 and out[("add(64, 256)", 1)].block_run_us == 13.0
    assert out[("add(64, 256)", 1)].kernel_us == {"Add (ND) #1": 2.0, "Add (ND) #2": 4.0}
    assert out[("add(64, 256)", 2)].run_us == 8.0 and out[("gemm(4, 32, 32)", 1)].kernel_us["Add (ND) #1"] == 4.0


def test_a_profile_remeasured_at_one_thread_count_keeps_the_others_and_refuses_another_cpu():
    """`calibrate xnnpack --threads 2 --keep-from P`: P's 1-thread half kept whole, its 2-thread half replaced by
    the new measurement's (curves, overheads, reference, packing and transpose tiles, weight streaming, raw
    measurements), both commands recorded; a profile of another CPU is refused, not merged."""
    import pytest

    base = xnn_cost.load_profile()
    scaled = lambda curve: curve.model_copy(update={"us": [u / 2 for u in curve.us]})
    new = base.model_copy(update={
        "command": "layout-solver calibrate xnnpack --threads 2",
        "curves": {"2": {e: {k: scaled(c) for k, c in by.items()} for e, by in base.curves["2"].items()}},
        "measurements": [m for m in base.measurements if m.threads == 2][:3],
        "op_curves": {"2": base.op_curves["2"]}, "overheads": {"2": base.overheads["1"]},
        "op_measurements": [m for m in base.op_measurements if m.threads == 2][:2],
        "reference_us": {"2": 123.0}, "unit_us": {"2": {}}, "packing": {"2": {"1": (4, 4)}},
        "streaming": {"2": xnn_cost.Curve(kib=[1.0], us=[0.0])}, "transpose_tiles": {"2": {"1": (8, 8)}},
    })  # fmt: skip
    out = xnn_cost.remeasured(base, new)
    assert out.transpose_tiles == {"1": base.transpose_tiles["1"], "2": {"1": (8, 8)}}
    assert out.packing == {"1": base.packing["1"], "2": {"1": (4, 4)}}  # each half's tiles with its curves
    assert out.streaming == {"1": base.streaming["1"], "2": new.streaming["2"]}
    assert out.reference_us == {"1": base.reference_us["1"], "2": 123.0}
    assert out.curves["1"] == base.curves["1"] and out.curves["2"] == new.curves["2"]
    assert out.overheads == {"1": base.overheads["1"], "2": base.overheads["1"]} and out.unit_us["2"] == {}
    assert [m.threads for m in out.measurements].count(2) == 3
    assert [m for m in out.measurements if m.threads == 1] == [m for m in base.measurements if m.threads == 1]
    assert [m.threads for m in out.op_measurements].count(2) == 2
    assert out.command.startswith(base.command) and out.command.endswith("re-measured by: " + new.command)
    with pytest.raises(ValueError, match="two CPUs"):
        xnn_cost.remeasured(base, new.model_copy(update={"device": "riscv64 (Toy)"}))


def test_the_program_share_is_measured_into_a_profile_and_nothing_else_moves():
    """`calibrate xnnpack --only program-share --keep-from P --threads 1`: the chains of a program's layers run on
    this CPU (a few rounds, one pass), and P comes back with its 1-thread share beyond the kernels read again (from
    the runs the kernels came from) and every other field as it was."""
    from layout_solver.targets.xnnpack.calibrate import add_program_share

    base = xnn_cost.load_profile()
    lines: list[str] = []
    out = add_program_share(base, [1], rounds=3, passes=1, command="calibrate --only program-share", log=lines.append)
    share = out.overheads["1"].kernel_fraction
    assert 0.0 <= share < 0.5 and lines[-1].endswith(f"-> {share}")
    assert len([line for line in lines if line.startswith("[")]) == 6  # the six chains, each run once
    kept = out.overheads["1"].model_copy(update={"kernel_fraction": base.overheads["1"].kernel_fraction})
    assert kept == base.overheads["1"]
    assert out.overheads["2"] == base.overheads["2"] and out.op_curves == base.op_curves
    assert out.command == f"{base.command}; then the program share at threads 1 by: calibrate --only program-share"
    with pytest.raises(ValueError, match="no reference speed or overheads at \\[4\\] threads"):
        add_program_share(base, [4], rounds=3, passes=1)


def test_programs_run_with_torchs_own_pool_held_to_one_thread_and_it_is_given_back():
    """While a program is timed, torch's intra-op pool (which copies the inputs and outputs and would spin on the
    second core after each copy) is held to one thread; the caller's setting comes back after, error or not."""
    import pytest

    from layout_solver.targets.xnnpack.runtime import pinned

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pinned(2):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError), pinned(1):
            raise RuntimeError("a program failed")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_the_thread_pool_is_measured_into_a_profile_on_this_cpu_its_other_tables_kept():
    from layout_solver.targets.xnnpack.calibrate import add_thread_pool

    base = xnn_cost.load_profile()
    probed = add_thread_pool(base, [2], rounds=5, command="test")
    two = probed.overhead(2)
    # The spin lies within the gaps probed (6-36 us here) or at their ends; the wake-up is what a sleeping pool cost.
    assert two.pool_spin_us is not None and 0.0 <= two.pool_spin_us <= 100.0 and two.pool_wake_us >= 0.0
    same = {k: v for k, v in two.model_dump().items() if not k.startswith("pool_")}
    assert same == {k: v for k, v in base.overhead(2).model_dump().items() if not k.startswith("pool_")}
    assert probed.overheads["1"] == base.overheads["1"] and probed.op_curves == base.op_curves
    with pytest.raises(ValueError, match="no overheads at 3 threads"):
        add_thread_pool(base, [3], rounds=5)
