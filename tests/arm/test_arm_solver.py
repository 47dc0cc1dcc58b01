"""Arm: the solver's TOSA memory-format stage inside a real Ethos-U55 lowering."""

import copy
import json
import warnings
from pathlib import Path

import pytest

pytest.importorskip("executorch.backends.arm")

import executorch.backends.arm._passes as arm_passes
from executorch.backends.arm._passes import arm_pass_manager as apm

from layout_solver.arm import op_rules, solver_layouts

TINY = Path(__file__).parents[1] / "models" / "tiny.py"


def test_scoped_changes_restored_on_every_exit():
    from executorch.backends.arm._passes.insert_const_shapes import InsertConstShapesPass

    from layout_solver.targets.ethos_u.measure import RecordTransposes

    users_pass = RecordTransposes([])  # a pass the user registered before us
    apm.register_pass_insertions_after(InsertConstShapesPass, [users_pass])
    try:
        manager = arm_passes.ArmPassManager
        with pytest.raises(RuntimeError, match="boom"), solver_layouts():
            assert arm_passes.ArmPassManager is not manager
            assert len(apm._registered_pass_insertions[InsertConstShapesPass].before_passes) == 1  # solver + canonical
            raise RuntimeError("boom")
        assert arm_passes.ArmPassManager is manager
        restored = apm._registered_pass_insertions[InsertConstShapesPass]
        assert restored.before_passes == [] and restored.after_passes[0] is users_pass  # the user's own object
    finally:
        apm.clear_registered_pass_insertions()


@pytest.mark.parametrize("factory", ["residual", "attention", "cat_pad"])
def test_compare_cli_solver_beats_stock_and_is_equivalent(factory, capsys):
    from layout_solver.cli import main

    assert main(["compare", f"{TINY}:{factory}", "--target", "ethos-u55-128", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    keys = {"tosa_transposes", "vela_transpose_cycles", "vela_total_cycles", "npu_ops", "cpu_ops", "lower_seconds"}
    assert keys <= set(result["stock"]) and keys <= set(result["solver"])
    assert {"solve_seconds", "objective", "bound", "gap"} <= set(result["solver"])
    assert result["equivalent"] is True and result["max_abs_diff"] == 0.0
    assert result["solver"]["vela_total_cycles"] <= result["stock"]["vela_total_cycles"]
    assert result["solver"]["vela_transpose_cycles"] <= result["stock"]["vela_transpose_cycles"]
    assert result["solver"]["gap"] == 0


def test_unknown_op_is_pinned_with_a_warning(monkeypatch, tmp_path):
    import contextlib
    import io

    from layout_solver.targets.ethos_u.equivalence import compare_lowerings
    from layout_solver.targets.ethos_u.measure import lower_ethos_u
    from layout_solver.zoo.models import build

    monkeypatch.delitem(op_rules.RULES, "add.Tensor")  # now unknown to the rules
    module, inputs = build(f"{TINY}:residual")
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("always")
        stock = lower_ethos_u(module, inputs, keep_tosa=tmp_path / "stock")
        with solver_layouts() as reports:
            solver = lower_ethos_u(module, inputs, keep_tosa=tmp_path / "solver")
    assert any("pinned to the identity order" in str(w.message) and "add.Tensor" in str(w.message) for w in caught)
    assert any("add.Tensor" in p for r in reports for p in r.pinned_unknown)
    assert compare_lowerings(stock.tosa_files, solver.tosa_files).equivalent


def test_channels_last_input_contract_removes_the_input_transpose(capsys):
    """--input-order nhwc: the application feeds channels-last frames, both sides lower under that contract
    (ExecuTorch's dim-order mechanism), and the input transpose goes; the default keeps it."""
    from layout_solver.cli import main

    results = {}
    for order in ("nchw", "nhwc"):
        assert main(["compare", f"{TINY}:residual", "--target", "ethos-u55-128", "--input-order", order, "--json"]) == 0
        results[order] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    nchw, nhwc = results["nchw"], results["nhwc"]
    assert nhwc["input_order"] == "nhwc" and nhwc["equivalent"] is True
    assert nhwc["stock_reference"] == nhwc["solver_reference"] == "ok"
    assert nhwc["solver"]["tosa_transposes"] < nchw["solver"]["tosa_transposes"]
    assert nhwc["solver"]["vela_total_cycles"] < nchw["solver"]["vela_total_cycles"]
    assert nhwc["solver"]["vela_total_cycles"] <= nhwc["stock"]["vela_total_cycles"]
    assert main(["compare", f"{TINY}:residual", "--target", "vulkan", "--input-order", "nhwc"]) == 2
    assert "Ethos-U option" in capsys.readouterr().err


def test_a_one_row_product_runs_transposed_and_stays_exact(tmp_path):
    """Decode attention (one query token against a 48-position cache): the solver computes both MATMULs as
    their transposed products, (B^T A^T)^T, which Vela runs in fewer cycles; the program is bit-exact with
    stock on the TOSA reference model and cheaper than the solver with the MATMUL rule pinned."""
    import contextlib
    import io

    from layout_solver.targets.ethos_u.equivalence import compare_lowerings
    from layout_solver.targets.ethos_u.measure import lower_ethos_u, quantize_for
    from layout_solver.zoo.models import build

    module, inputs = build(f"{TINY}:decode_attention")
    quantized = quantize_for(module, inputs)
    lowered, chosen = {}, {}
    for side, pinned in (("stock", None), ("pinned", ("matmul",)), ("solver", ())):
        with contextlib.ExitStack() as stack:
            stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
            reports = stack.enter_context(solver_layouts(pinned_kinds=pinned)) if pinned is not None else []
            lowered[side] = lower_ethos_u(module, inputs, keep_tosa=tmp_path / side, quantized=copy.deepcopy(quantized))
        chosen[side] = [m for r in reports for m in r.modes_chosen if m.startswith("MATMUL")]
    cycles = {side: low.metrics()["vela_total_cycles"] for side, low in lowered.items()}
    assert chosen["solver"] and all(m.endswith("(B^T A^T)^T") for m in chosen["solver"])
    assert cycles["solver"] < cycles["pinned"] <= cycles["stock"]
    assert compare_lowerings(lowered["stock"].tosa_files, lowered["solver"].tosa_files).equivalent
    with pytest.raises(ValueError, match="unknown op-rule kinds"), solver_layouts(pinned_kinds=("no_such_kind",)):
        pass


def _lower_stock_and_solver(model: str, tmp_path) -> dict:
    """{"stock": ..., "solver": ...}: both Ethos-U lowerings of one quantization of `model`, TOSA kept."""
    import contextlib
    import io

    from layout_solver.targets.ethos_u.measure import lower_ethos_u, quantize_for
    from layout_solver.zoo.models import build

    module, inputs = build(model)
    quantized = quantize_for(module, inputs)
    lowered = {}
    for side in ("stock", "solver"):
        with contextlib.ExitStack() as stack:
            stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
            if side == "solver":
                stack.enter_context(solver_layouts())
            lowered[side] = lower_ethos_u(module, inputs, keep_tosa=tmp_path / side, quantized=copy.deepcopy(quantized))
    return lowered


def test_pad_runs_in_the_order_vela_copies_fastest(tmp_path):
    """Vela runs a PAD as memory copies whose speed follows the innermost dim; the Pad rule prices each order
    with Vela. The 3-channel stem pad stays W-innermost (before the input transpose), so the solver's
    MemoryCopy and total cycles are no more than stock's even though its input transpose is cheaper to merge
    right at the delegate input; the program is bit-exact with stock on the reference model."""
    from layout_solver.targets.ethos_u.equivalence import compare_lowerings

    lowered = _lower_stock_and_solver(f"{TINY}:padded_stem", tmp_path)
    copies = {
        side: sum(int(float(r["Op Cycles"])) for r in low.npu_rows if r["NNG Operator"] == "MemoryCopy")
        for side, low in lowered.items()
    }
    cycles = {side: low.metrics()["vela_total_cycles"] for side, low in lowered.items()}
    assert copies["solver"] <= copies["stock"]
    assert cycles["solver"] <= cycles["stock"]
    assert compare_lowerings(lowered["stock"].tosa_files, lowered["solver"].tosa_files).equivalent


def test_group_norm_stays_channels_last(tmp_path):
    """GroupNorm reshapes [1, C, H, W] to [1, G, C/G, H*W]; from a channels-last tensor that is still a pure
    reshape once unit axes may sit anywhere, so the solver keeps the whole normalisation channels-last: no
    transpose inside the graph, and its REDUCE_SUMs reduce (nearly) innermost axes. Bit-exact with stock."""
    from layout_solver.targets.ethos_u.equivalence import compare_lowerings

    lowered = _lower_stock_and_solver(f"{TINY}:group_norm", tmp_path)
    metrics = {side: low.metrics() for side, low in lowered.items()}
    causes = metrics["solver"]["transpose_cycles_by_cause"]
    assert causes["inside"] == 0
    assert causes["reduction_axis"] < metrics["stock"]["transpose_cycles_by_cause"]["reduction_axis"] / 10
    assert metrics["solver"]["vela_transpose_cycles"] < metrics["stock"]["vela_transpose_cycles"] / 4
    assert metrics["solver"]["vela_total_cycles"] < metrics["stock"]["vela_total_cycles"]
    assert compare_lowerings(lowered["stock"].tosa_files, lowered["solver"].tosa_files).equivalent


def test_views_only_propagation_does_not_retrace_an_unchanged_graph(tmp_path, monkeypatch):
    """Inside a propagation pass, stock retraces graphs a retrace has just produced (after the view/permute
    canonicalizer's own retrace, and once more at its end); the views-only variant the solver stage runs
    skips those retraces (the metadata is the last retrace's), and the solver's program stays equivalent to
    stock's."""
    from executorch.backends.transforms import propagate_view_copy_permute_pass as shared
    from executorch.exir.pass_base import ExportPass

    from layout_solver.targets.ethos_u.equivalence import compare_lowerings

    export_call, propagate_call = ExportPass.call, shared.PropagateViewCopyPermutePass.call
    inside: dict = {"pass": None, "last": None}  # the propagation pass running, the graph its last retrace made
    repeats = {"ViewsOnly": 0, "stock": 0}  # retraces of a graph that reads exactly as a retrace left it

    def propagate(self, graph_module):
        inside.update({"pass": "ViewsOnly" if type(self).__name__.startswith("ViewsOnly") else "stock", "last": None})
        try:
            return propagate_call(self, graph_module)
        finally:
            inside["pass"] = None

    def retrace(self, graph_module):
        if inside["pass"] is None:
            return export_call(self, graph_module)
        repeats[inside["pass"]] += str(graph_module.graph) == inside["last"]  # FX's own printout, not the pass's
        result = export_call(self, graph_module)
        inside["last"] = str(result.graph_module.graph)
        return result

    monkeypatch.setattr(shared.PropagateViewCopyPermutePass, "call", propagate)
    monkeypatch.setattr(ExportPass, "call", retrace)
    lowered = _lower_stock_and_solver(f"{TINY}:residual", tmp_path)
    assert repeats["stock"] > 0  # what there is to skip
    assert repeats["ViewsOnly"] == 0
    assert compare_lowerings(lowered["stock"].tosa_files, lowered["solver"].tosa_files).equivalent
