"""A constant pad priced by the rows XNNPACK's kernel runs on: its output's innermost stored dim, merged with the
unpadded dims outside it (`reshape_constant_pad_nd`), so NHWC with few channels is a row per pixel and NCHW a row
per line of a channel. The counts in both orders, the modes priced by them, the fit of the cost per row, and the
executor's own reading of the two orders."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cost_models import xnnpack as xnn_cost
from layout_solver.xnnpack.op_rules import (
    CHANNELS_LAST,
    CONTIGUOUS,
    LABELS,
    Prices,
    pad_rows,
    pad_rows_us,
    rule_for,
)


class Pad(nn.Module):
    def __init__(self, pads):
        super().__init__()
        self.pads = pads

    def forward(self, x):
        return F.pad(x, self.pads, value=0.5)


def _pad_node(pads, shape=(1, 3, 64, 64)):
    exported = torch.export.export(Pad(pads), (torch.randn(*shape),)).run_decompositions()  # to constant_pad_nd
    return next(n for n in exported.graph.nodes if n.op == "call_function")


@pytest.mark.parametrize(
    "pads, nchw_rows, nhwc_rows",
    [
        ((1, 1, 1, 1), 3 * 66, 66 * 66),  # H and W: a row of W per line of a channel; a pixel's 3 channels
        ((0, 0, 1, 1), 3 * 66, 66),  # H alone: NHWC merges W with the channels into one row of 192
        ((0, 0, 0, 0, 1, 1), 5, 64 * 64),  # the channels: NCHW a plane a row; NHWC a pixel a row
        ((2, 0), 3 * 64, 64 * 66),  # W on one side only
    ],
)
def test_a_pads_rows_in_either_order_are_those_xnnpack_calls_its_kernel_on(pads, nchw_rows, nhwc_rows):
    node = _pad_node(pads)
    assert pad_rows(node, CONTIGUOUS) == nchw_rows and pad_rows(node, CHANNELS_LAST) == nhwc_rows


def test_a_pads_modes_are_priced_by_its_rows_and_alike_where_the_profile_has_no_pad_class():
    """Each order's mode costs what the pad runs in it beyond its cheaper order (the curve of elements is the same
    in both: the rows tell them apart); a profile measured before the pad probes prices a pad as a copy of its
    elements in either order, so both cost nothing beyond the other and its decisions are as they were."""
    node = _pad_node((1, 1, 1, 1))
    curves = {k: xnn_cost.WorkCurve(work=[1000.0], us=[1.0]) for k in ("copy", xnn_cost.PAD_COPY, "elementwise")}
    profile = xnn_cost.load_profile().model_copy(
        update={"op_curves": {"1": {"4": curves}}, "unit_us": {"1": {"4": {xnn_cost.PAD_COPY: 0.01}}}}
    )

    def op_us(op_class, work, elem, units=0.0):
        return profile.op_us(op_class, work, elem, 1, units)

    modes = rule_for(node).modes(node, list(node.all_input_nodes), Prices(lambda *_: 0.0, op_us))
    assert {m["results"][0]: m["cost"] for m in modes} == {
        CONTIGUOUS: 0.0,
        CHANNELS_LAST: round(0.01 * (66 * 66 - 198), 4),
    }

    plain = profile.model_copy(update={"op_curves": {"1": {"4": {"copy": curves["copy"]}}}, "unit_us": {}})
    alike = {pad_rows_us(node, label, lambda c, w, e, u=0.0: plain.op_us(c, w, e, 1, u)) for label in LABELS}
    assert alike == {0.0}


def test_the_fit_reads_the_cost_per_row_off_the_pad_probes():
    from cost_models.xnnpack_fit import op_curves

    def measured(work, rows, us, unit_probe):
        return xnn_cost.OpMeasurement(op_class=xnn_cost.PAD_COPY, work=work, elem_bytes=4, threads=1, us=us,
                                      units=rows, unit_probe=unit_probe)  # fmt: skip

    # 1 us per 10,000 elements and 10 ns a row: the curve's probes few rows, the unit probes many.
    curve = [measured(w, 10, w / 1e4 + 0.1, False) for w in (1e4, 5e4, 2e5)]
    rows = [measured(2e4, r, 2.0 + 0.01 * r, True) for r in (1000, 4000)]
    curves, unit_us = op_curves(curve + rows)
    assert abs(unit_us["1"]["4"][xnn_cost.PAD_COPY] - 0.01) < 1e-3
    assert abs(curves["1"]["4"][xnn_cost.PAD_COPY].at(5e4) - 5.0) < 0.1


def test_the_executor_runs_a_pad_of_few_channels_dearer_nhwc_as_its_rows_say():
    """XNNPACK itself (ETDump, one thread): the pad probes of a 3-channel 64 x 64 map in both orders; the NHWC one
    runs its kernel on 22x the rows and takes several times as long (measured 43 against 2 us)."""
    from layout_solver.targets.xnnpack.calibrate_ops import op_measurements, run_probe
    from layout_solver.targets.xnnpack.op_probes import pad_probes

    chosen = {p.name: p for p in pad_probes()}
    read = {}
    for name in ("pad(1, 3, 64, 64)", "pad(1, 3, 64, 64) channels_last"):
        (measured,) = op_measurements(run_probe(chosen[name], [1], rounds=10))
        read[name] = measured
    nchw, nhwc = read.values()
    assert (nchw.units, nhwc.units) == (3 * 66, 66 * 66) and nchw.work == nhwc.work == 3 * 66 * 66
    assert nhwc.us > 4 * max(nchw.us, 1.0)


def test_an_int8_programs_pad_is_priced_as_the_float_kernel_xnnpack_runs_between_two_converts():
    """XNNPACK's quantizer leaves a pad between quantized convolutions in float: the delegate dequantizes its
    input, pads in fp32 and quantizes again (ETDump: `Constant Pad (ND, X32)` beside `Convert` events). The
    model prices it at 4 bytes an element, not at the 1 byte its neighbours store."""
    from layout_solver.targets.xnnpack.lowering import lower, quantize
    from layout_solver.targets.xnnpack.runtime import etdump_events
    from layout_solver.xnnpack import stock_layouts

    class ConvPadConv(nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.second = nn.Conv2d(3, 8, 1), nn.Conv2d(8, 8, 3)

        def forward(self, x):
            return self.second(F.pad(self.first(x), (1, 1, 1, 1), value=0.5))

    torch.manual_seed(0)
    inputs = (torch.randn(1, 3, 16, 16),)
    lowered = lower(quantize(ConvPadConv().eval(), inputs), inputs, stock_layouts)
    pads = [op for r in lowered.reports for op in r.run_ops if op.op_class == xnn_cost.PAD_COPY]
    assert [(op.elem_bytes, op.units) for op in pads] == [(4, 18 * 18)]  # NHWC after the convolution: a row a pixel
    events = etdump_events(lowered.buffer, inputs, 1, 3)
    assert any(name.startswith("Constant Pad (ND, X32)") for name in events)
    assert any(name.startswith("Convert") for name in events)


def test_a_zero_pad_stored_nhwc_into_a_convolution_runs_no_operator_as_xnnpack_folds_it():
    """XNNPACK folds a zero pad of H and W into the (depthwise) convolution it feeds where the pad is NHWC: ETDump
    shows no `Constant Pad` for it, and the model prices it at nothing; a pad of the delegate's NCHW input runs."""
    from layout_solver.targets.xnnpack.lowering import lower
    from layout_solver.targets.xnnpack.runtime import etdump_events
    from layout_solver.xnnpack import stock_layouts

    class PadThenConv(nn.Module):
        def __init__(self, after_conv: bool, value: float, kernel: int = 3, pads=(1, 1, 1, 1)):
            super().__init__()
            self.first = nn.Conv2d(3, 8, 1) if after_conv else nn.Identity()
            self.second, self.value, self.pads = nn.Conv2d(8 if after_conv else 3, 8, kernel), value, pads

        def forward(self, x):
            return self.second(F.pad(self.first(x), self.pads, value=self.value))

    inputs = (torch.randn(1, 3, 16, 16),)
    cases = [((True, 0.0), True), ((True, 0.5), False), ((False, 0.0), False), ((True, 0.0, 1, (0, 0, 0, 0)), False)]
    for args, folded in cases:  # the last: an empty pad before a 1x1 convolution (MobileNetV2's) runs
        lowered = lower(PadThenConv(*args).eval(), inputs, stock_layouts)
        priced = [op for r in lowered.reports for op in r.run_ops if op.op_class == xnn_cost.PAD_COPY]
        ran = [name for name in etdump_events(lowered.buffer, inputs, 1, 3) if name.startswith("Constant Pad")]
        assert (len(priced), len(ran)) == ((0, 0) if folded else (1, 1)), args


def test_the_stage_pads_a_few_channels_nchw_where_stock_pads_them_nhwc_and_xnnpack_agrees():
    """A 3-channel feature map padded by 0.5 between two convolutions: stock pads it NHWC, a row per pixel (4,356
    rows); the stage converts it to NCHW around the pad (198 rows, two transposes of 50 KiB), and keeps that only
    where its layout cost, pads included (`pricing.layout_cost`), is below stock's. ETDump reads the two pads."""
    from layout_solver.targets.xnnpack.lowering import lower
    from layout_solver.targets.xnnpack.runtime import etdump_events, per_run_ms
    from layout_solver.xnnpack import solver_layouts, stock_layouts

    class ThinPad(nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.second = nn.Conv2d(3, 3, 1), nn.Conv2d(3, 8, 3)

        def forward(self, x):
            return self.second(F.pad(self.first(x), (1, 1, 1, 1), value=0.5))

    torch.manual_seed(0)
    module, inputs = ThinPad().eval(), (torch.randn(1, 3, 64, 64),)
    pad_us = {}
    for name, context in (("stock", stock_layouts), ("stage", solver_layouts)):
        lowered = lower(module, inputs, context)
        (report,) = lowered.reports
        assert name == "stock" or not report.kept_stock
        events = etdump_events(lowered.buffer, inputs, 1, 10)
        pad_us[name] = sum(per_run_ms(raw, 10) * 1e3 for e, raw in events.items() if e.startswith("Constant Pad"))
    assert pad_us["stage"] * 4 < pad_us["stock"], pad_us
