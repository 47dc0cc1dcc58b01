"""The XNNPACK stage on real lowerings, run on this CPU through executorch.runtime: what it writes, that the programs
compute what stock's compute, and the rules it rests on (checked against executorch's own formulas and kernels)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch import nn

from benchmarks.xnnpack.issue_models import ChannelLayerNorm  # permute / LayerNorm / permute: left on the CPU
from cost_models import xnnpack as xnn_cost
from layout_solver.targets.xnnpack.measure import lower, max_rel_diff, quantize, run_outputs
from layout_solver.targets.xnnpack.runtime import profile_ops
from layout_solver.xnnpack import LayoutValidationError, solver_layouts, stock_layouts, validate
from layout_solver.xnnpack.op_rules import CHANNELS_LAST, CONTIGUOUS, physical_permutation


class LayerNormCNN(nn.Module):
    def __init__(self, widths=(3, 16, 32)):
        super().__init__()
        self.blocks = nn.Sequential(*[
            nn.Sequential(nn.Conv2d(a, b, 3, padding=1), nn.ReLU(), ChannelLayerNorm(b))
            for a, b in itertools.pairwise(widths)
        ])  # fmt: skip
        self.head = nn.Conv2d(widths[-1], 4, 1)

    def forward(self, x):
        return self.head(self.blocks(x))


class ErfUpsampleCNN(nn.Module):
    """Convolutions cut by ops XNNPACK 1.5.1 leaves on the CPU (erf, nearest upsampling), which run as well on
    channels-last data."""

    def __init__(self):
        super().__init__()
        self.stem, self.mid, self.head = (
            nn.Conv2d(3, 16, 3, padding=1),
            nn.Conv2d(16, 16, 3, padding=1),
            nn.Conv2d(16, 4, 1),
        )
        self.up = nn.Upsample(scale_factor=2)

    def forward(self, x):
        y = self.stem(x)
        y = self.mid(y * torch.erf(y)) + y
        return self.head(self.up(y))


def _lowered(module, inputs, context):
    buffer, reports = lower(module, inputs, context)[:2]
    return buffer, reports


def test_a_permute_stored_in_one_order_runs_stocks_permutation_when_both_orders_agree():
    """Where input and result share one order, the physical permutation is exactly stock's PermuteVisitor's."""
    from executorch.backends.xnnpack.utils.utils import PERM_NCHW_TO_NHWC, PERM_NHWC_TO_NCHW

    for perm in itertools.permutations(range(4)):
        stock = [[PERM_NHWC_TO_NCHW[i] for i in perm][k] for k in PERM_NCHW_TO_NHWC]
        assert physical_permutation(list(perm), CHANNELS_LAST, CHANNELS_LAST) == stock
        assert physical_permutation(list(perm), CONTIGUOUS, CONTIGUOUS) == list(perm)
    # NHWC in, contiguous [N, H, W, C] out: the bytes do not move.
    assert physical_permutation([0, 2, 3, 1], CHANNELS_LAST, CONTIGUOUS) == [0, 1, 2, 3]


def test_conversion_classes_follow_what_xnnpack_reduces_a_transpose_to():
    assert xnn_cost.normalized([1, 16, 64, 64], [0, 2, 3, 1]) == ([16, 4096], [1, 0])
    assert xnn_cost.conversion_kind([1, 1, 8, 8], [1, 0, 2, 3]) == "copy"  # only a size-1 dim moves
    assert xnn_cost.conversion_kind([2, 3, 4, 5], [0, 2, 1, 3]) == "block"  # the innermost dim stays
    assert xnn_cost.conversion_kind([2, 3, 4, 5], [0, 1, 3, 2]) == "transpose"


@pytest.mark.parametrize("name", sorted(xnn_cost.BUILT_IN))
def test_every_shipped_profile_is_measured_and_never_prices_a_larger_conversion_cheaper(name):
    profile = xnn_cost.load_profile(name)
    assert profile.measured and profile.measurements and profile.command.startswith("layout-solver calibrate")
    assert profile.thread_counts == [1, 2] and profile.predicts_run_time
    for by_elem in profile.curves.values():
        for by_kind in by_elem.values():
            assert set(by_kind) == set(xnn_cost.KINDS)
            for curve in by_kind.values():
                assert curve.us == sorted(curve.us) and curve.kib == sorted(curve.kib)
    with pytest.raises(OSError, match="no such file"):
        xnn_cost.load_profile("/nonexistent/profile.json")


def test_host_names_the_shipped_profile_of_the_cpu_and_the_default_is_fixed():
    cpus = {name: xnn_cost.load_profile(name).device for name in xnn_cost.BUILT_IN}
    assert len(set(cpus.values())) == len(cpus)  # one profile per CPU
    for name, device in cpus.items():
        cpu = device[device.index("(") + 1 : -1]  # "x86_64 (Intel(R) Xeon(R) Processor)" -> its model name
        assert xnn_cost.host_profile_name(cpu) == name
    with pytest.raises(
        OSError, match=r"no built-in XNNPACK profile was measured on this CPU \(RISC-V Toy\).*calibrate"
    ):
        xnn_cost.host_profile_name("RISC-V Toy")
    # The default never follows the host: the same program lowers to the same bytes on any machine.
    assert xnn_cost.load_profile() == xnn_cost.load_profile(xnn_cost.DEFAULT_PROFILE) == xnn_cost.load_profile("ci-x86")
    assert xnn_cost.profile_name(None) == "ci-x86" and xnn_cost.profile_name("my_cpu.json") == "my_cpu.json"
    here = [n for n in cpus if xnn_cost.measured_on(xnn_cost.load_profile(n), xnn_cost.cpu_model())]
    if here:  # "host" is this machine's own profile, else an error that says how to measure one
        assert xnn_cost.profile_name(xnn_cost.HOST) == here[0]
        assert xnn_cost.load_profile(xnn_cost.HOST) == xnn_cost.load_profile(here[0])
    else:
        with pytest.raises(OSError, match="calibrate xnnpack"):
            xnn_cost.load_profile(xnn_cost.HOST)


def test_the_stage_removes_the_transposes_stock_leaves_around_a_cpu_layer_norm():
    module, inputs = LayerNormCNN().eval(), (torch.randn(1, 3, 48, 48),)
    stock, _ = _lowered(module, inputs, stock_layouts)
    solver, reports = _lowered(module, inputs, solver_layouts)
    assert any(r.kind == "solver" for r in reports), [r.notes for r in reports]
    for a, b in zip(run_outputs(stock, inputs), run_outputs(solver, inputs)):
        np.testing.assert_array_equal(a, b)  # the same arithmetic, in another order of the bytes
    # Measured on the executor: XNNPACK runs fewer Transpose ops per inference.
    assert profile_ops(solver, inputs, 1, runs=3).conversions < profile_ops(stock, inputs, 1, runs=3).conversions


def test_an_int8_program_with_the_stage_is_bit_identical_to_stocks():
    module, inputs = LayerNormCNN().eval(), (torch.randn(1, 3, 48, 48),)
    quantized = quantize(module, inputs)
    stock, _ = _lowered(quantized, inputs, stock_layouts)
    solver, reports = _lowered(quantized, inputs, solver_layouts)
    assert any(r.kind == "solver" for r in reports)
    for a, b in zip(run_outputs(stock, inputs), run_outputs(solver, inputs)):
        np.testing.assert_array_equal(a, b)


def test_an_int8_delegates_float_image_is_converted_in_fp32_before_its_quantize():
    """XNNPACK's int8 transpose pads an image's 3 channels to its 16-wide tile (`XnnpackProfile.transpose_tiles`):
    stock converts the image after the delegate's quantize (an 8-bit transpose), the stage before it, in fp32,
    where no kernel wrote the value. The outputs stay bit-identical."""
    from layout_solver.targets.xnnpack.runtime import etdump_events

    module = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3)).eval()
    inputs = (torch.randn(1, 3, 64, 64),)
    quantized = quantize(module, inputs)
    stock, _ = _lowered(quantized, inputs, stock_layouts)
    solver, _ = _lowered(quantized, inputs, solver_layouts)

    def transposes(buffer: bytes) -> list[str]:
        return sorted(name.split(" #")[0] for name in etdump_events(buffer, inputs, 1, 3) if name.startswith("Trans"))

    assert "Transpose (ND, X32)" not in transposes(stock) and "Transpose (ND, X32)" in transposes(solver)
    assert transposes(solver).count("Transpose (ND, X8)") == transposes(stock).count("Transpose (ND, X8)") - 1
    for a, b in zip(run_outputs(stock, inputs), run_outputs(solver, inputs)):
        np.testing.assert_array_equal(a, b)


def test_where_nothing_is_gained_the_program_is_stocks_byte_for_byte():
    module = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3)).eval()
    inputs = (torch.randn(1, 3, 16, 16),)
    stock, _ = _lowered(module, inputs, stock_layouts)
    solver, reports = _lowered(module, inputs, solver_layouts)
    assert solver == stock
    assert all(r.kind == "stock-fallback" and r.kept_stock for r in reports)


def test_the_program_pass_keeps_the_data_channels_last_across_the_cpu_ops_between_delegates():
    module, inputs = ErfUpsampleCNN().eval(), (torch.randn(1, 3, 40, 40),)
    stock, _ = _lowered(module, inputs, stock_layouts)
    solver, reports = _lowered(module, inputs, solver_layouts)
    assert any("run channels-last" in n for n in reports.program_notes), reports.program_notes
    with torch.no_grad():
        eager = module(*inputs).numpy()
    out = run_outputs(solver, inputs)
    np.testing.assert_allclose(out[0], eager, atol=1e-3, rtol=1e-3)
    assert max_rel_diff(run_outputs(stock, inputs), out) <= 1e-5
    assert profile_ops(solver, inputs, 1, runs=3).conversions < profile_ops(stock, inputs, 1, runs=3).conversions


class GlobalGateWithSequence(nn.Module):
    """A global gate ([1, C, 1, 1]: both orders the same bytes) read by CPU ops between delegates, a delegate
    output the program also returns, a CPU layer norm (a tuple-valued node) and a 1-D convolution (3-D until
    XNNPACK makes it 4-D inside its delegate)."""

    def __init__(self):
        super().__init__()
        self.stem, self.head, self.seq = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 8, 1), nn.Conv1d(4, 8, 3)
        self.norm = ChannelLayerNorm(16)

    def forward(self, x, s):
        y = self.norm(self.stem(x))
        g = torch.erf(y.mean((2, 3), keepdim=True))
        return self.head(torch.erf(y) * g), g, y, self.seq(s)


def test_the_program_pass_reads_gates_outputs_and_1d_convolutions_and_the_program_runs():
    module, inputs = GlobalGateWithSequence().eval(), (torch.randn(1, 3, 24, 24), torch.randn(1, 4, 32))
    stock, _ = _lowered(module, inputs, stock_layouts)
    solver, reports = _lowered(module, inputs, solver_layouts)
    assert reports.program_notes and not any("kept: " in n and "saving" not in n for n in reports.program_notes)
    assert max_rel_diff(run_outputs(stock, inputs), run_outputs(solver, inputs)) <= 1e-5


def test_a_tensor_crosses_a_program_boundary_channels_last_only_where_every_reader_tells_the_orders_apart():
    from executorch.exir.tensor import TensorSpec

    from layout_solver.xnnpack.problem_builder import orders_distinct

    for shape in [(1, 16, 1, 1), (1, 1, 4, 4), (1, 16, 4, 4), (2, 8, 1, 5)]:
        emitted = tuple(TensorSpec.from_tensor(torch.empty(shape).to(memory_format=torch.channels_last)).dim_order)
        same_bytes = torch.empty(shape).to(memory_format=torch.channels_last).is_contiguous()
        assert orders_distinct(shape) == (emitted == (0, 2, 3, 1) and not same_bytes), shape


@pytest.mark.parametrize("op", ["erf", "upsample_nearest2d", "mean", "sum", "where", "log1p"])
def test_the_portable_kernels_the_program_pass_runs_channels_last_compute_the_same(op):
    """The CPU-side allow-list is checked against the kernels themselves: each op run on the CPU alone, on a
    channels-last input, against eager (layer_norm is left out because it differs, silently)."""
    from executorch.exir import to_edge
    from executorch.runtime import Runtime

    from layout_solver.xnnpack.program import PORTABLE_CHANNELS_LAST

    fns = {
        "erf": (torch.erf, "erf.default"),
        "upsample_nearest2d": (lambda y: nn.functional.interpolate(y, scale_factor=2), "upsample_nearest2d.vec"),
        "mean": (lambda y: y.mean(1, keepdim=True), "mean.dim"),
        "sum": (lambda y: y.sum((2, 3), keepdim=True), "sum.dim_IntList"),
        "where": (lambda y: torch.where(y > 0, y, torch.erf(y)), "where.self"),
        "log1p": (lambda y: torch.log1p(y.abs()), "log1p.default"),
    }
    fn, target = fns[op]
    assert target in PORTABLE_CHANNELS_LAST

    class OnTheCpu(nn.Module):
        def forward(self, x):
            return fn(x.to(memory_format=torch.channels_last)).contiguous()

    x = torch.randn(1, 6, 5, 7)
    buffer = to_edge(torch.export.export(OnTheCpu(), (x,))).to_executorch().buffer
    out = Runtime.get().load_program(buffer).load_method("forward").execute([x])[0]
    torch.testing.assert_close(out, OnTheCpu()(x), atol=1e-5, rtol=1e-5)


def test_the_post_condition_names_the_node_an_nhwc_kernel_would_misread():
    from executorch.exir import to_edge

    module, inputs = nn.Sequential(nn.Conv2d(3, 4, 3)).eval(), (torch.randn(1, 3, 8, 8),)
    edge = to_edge(torch.export.export(module, inputs)).exported_program()  # untagged: the conv reads NCHW
    with pytest.raises(LayoutValidationError, match=r"convolution.*NHWC kernel reading NCHW"):
        validate(edge.graph_module)


def test_verify_run_keeps_the_faster_program_and_reports_both_timings():
    from layout_solver.targets import compare

    result = compare(LayerNormCNN().eval(), (torch.randn(1, 3, 16, 16),), "xnnpack", threads=[1], rounds=5,
                     verify="run")  # fmt: skip
    assert result.solver.kept in ("stock", "solver")
    assert set(result.solver.verify_run_ms) == {"stock", "solver"}
    assert result.equivalent and result.solver.eager_within_tolerance


def test_bad_options_are_refused_before_any_lowering():
    from layout_solver.targets import compare

    with pytest.raises(ValueError, match="--threads takes positive integers"):
        compare(nn.Identity(), (torch.randn(1),), "xnnpack", threads=[0])
    with pytest.raises(ValueError, match="--verify takes model or run"):
        compare(nn.Identity(), (torch.randn(1),), "xnnpack", verify="vela")
    with pytest.raises(ValueError, match="threads must be a positive integer"), solver_layouts(threads=0):
        pass


def test_the_command_line_prices_an_xnnpack_conversion_and_refuses_bad_arguments(capsys, tmp_path):
    import json

    from layout_solver.cli import main

    assert main(["cost", "transpose", "--target", "xnnpack", "--shape", "1,64,56,56", "--perm", "0,2,3,1",
                 "--threads", "2", "--json"]) == 0  # fmt: skip
    priced = json.loads(capsys.readouterr().out)
    assert priced["kind"] == "transpose" and priced["threads"] == 2 and priced["us"] > 0
    assert main(["cost", "transpose", "--target", "xnnpack", "--shape", "1,64,56,56"]) == 2
    assert "--perm is required" in capsys.readouterr().err
    assert main(["cost", "transpose", "--target", "vulkan", "--shape", "1,8,8,8", "--threads", "2"]) == 2
    assert "XNNPACK" in capsys.readouterr().err
    assert main(["calibrate", "xnnpack", "--rounds", "1", "--out", str(tmp_path / "p.json")]) == 2
    assert "--rounds at least 3" in capsys.readouterr().err
    assert main(["compare", "resnet8", "--target", "vulkan", "--threads", "1"]) == 2
    assert "--threads: XNNPACK options" in capsys.readouterr().err


def test_a_quantized_delegate_input_a_dequantize_reads_never_takes_a_second_order(monkeypatch):
    """Stock's `is_nhwc_node` reads the order of a dequantize of a delegate input from the placeholder's own
    strides, so a conversion written in front of that dequantize is never seen: the problem must refuse it and
    convert after the dequantize. (An equal-cost tie once let the solver pick the refused one on mobilevit_like int8, and the
    post-condition rejected the program.) Checked on that model's every delegate."""
    from layout_solver.xnnpack import passes
    from layout_solver.xnnpack.op_rules import is_dequantize
    from layout_solver.xnnpack.problem_builder import SECOND_ORDER_REFUSED

    built = []
    real = passes.build_problem
    monkeypatch.setattr(passes, "build_problem", lambda *a, **k: built.append(real(*a, **k)) or built[-1])
    from layout_solver.zoo.models import build

    module, inputs = build("mobilevit_like")
    _lowered(quantize(module, inputs), inputs, solver_layouts)  # validated: it raised here before the fix
    read_by_dequantize = []
    for b in built:  # value ids repeat across delegates: each problem's own kinds
        kinds = {v.id: v.kind for v in b.problem.values}
        read_by_dequantize += [
            t
            for t in b.problem.transition_costs
            if kinds[t.value] == "input" and any(is_dequantize(u) for u in b.nodes[t.value].users)
        ]
    assert read_by_dequantize, "the model should have delegate inputs that a dequantize reads"
    assert all(t.cost >= SECOND_ORDER_REFUSED for t in read_by_dequantize)


def test_a_multi_method_program_is_compared_method_by_method_and_each_method_runs():
    from layout_solver.compare.methods import MultiMethodModel
    from layout_solver.targets import get_target

    built = MultiMethodModel(
        LayerNormCNN().eval(),
        inputs={"small": (torch.randn(1, 3, 24, 24),), "large": (torch.randn(1, 3, 48, 48),)},
        weights={"small": 4.0, "large": 1.0},
    )
    result = get_target("xnnpack").compare_methods(built, rounds=3, threads=[1])
    assert result.joint is None  # nothing the XNNPACK stage decides is shared between methods
    stock, solver = result.stock, result.per_method
    for method in built.inputs:
        # each method's delegates are told apart (naming_partitions), and the stage's conversions are fewer in each
        assert solver.per_method[method]["delegates"] == stock.per_method[method]["delegates"] > 0
        assert solver.per_method[method]["transitions"] < stock.per_method[method]["transitions"]
        for side in (stock, solver):
            assert side.per_method[method]["executed"] and side.per_method[method]["max_abs_diff_vs_eager"] < 1e-3
            assert side.per_method[method]["run_ms"] > 0
        assert solver.per_method[method]["paired_ratio"] > 0
    assert result.per_method_equivalent
    # the stage's own time (delegate passes and the program-level pass) is part of the lowering's
    assert 0 < solver.stage_seconds < solver.lower_seconds
    assert solver.weighted_run_ms == pytest.approx(
        sum(built.weights[m] * solver.per_method[m]["run_ms"] for m in built.weights), abs=1e-2
    )
    with pytest.raises(ValueError, match="verify"):
        get_target("xnnpack").compare_methods(built, verify="run")


def test_a_dequantize_two_ops_read_is_converted_for_the_one_that_wants_it_and_once():
    """Stock's insertion of a conversion after a dequantize (copy, q, dq) moves every reader of the dequantize onto
    the converted value. Under the Xeon profile's prices, mobilevit_like int8's SiLU (a sigmoid and a multiply reading
    one dequantize) had one reader converted and then the other: the second conversion, of a value stock had already
    moved, converted it again and failed the post-condition. Each reader now reads what it wants, one conversion per
    (value, order) (`SolverChannelsLastTaggedReshapePass._converted_for`); the program is validated and bit-identical
    to stock's."""
    from layout_solver.zoo.models import build

    module, inputs = build("mobilevit_like")
    quantized = quantize(module, inputs)
    stock, _ = _lowered(quantized, inputs, lambda: stock_layouts("ci-x86-xeon", 1))
    solver, reports = _lowered(quantized, inputs, lambda: solver_layouts(cost_profile="ci-x86-xeon", threads=1))
    assert any(r.kind == "solver" for r in reports)
    for a, b in zip(run_outputs(stock, inputs), run_outputs(solver, inputs)):
        np.testing.assert_array_equal(a, b)
