"""Ethos-U55 measurement harness: a real quantized lowering through Vela."""

import pytest

pytest.importorskip("executorch.backends.arm")

from executorch.backends.arm._passes import arm_pass_manager as apm

from layout_solver.targets.ethos_u.measure import lower_ethos_u, recording_transposes


def test_pass_registry_restored_on_every_exit():
    before = dict(apm._registered_pass_insertions)
    with pytest.raises(RuntimeError, match="boom"), recording_transposes():
        assert apm._registered_pass_insertions
        raise RuntimeError("boom")
    assert dict(apm._registered_pass_insertions).keys() == before.keys()


def test_stock_lowering_is_measured_through_vela():
    from pathlib import Path

    from layout_solver.zoo.models import build

    module, inputs = build(f"{Path(__file__).parents[1] / 'models' / 'tiny.py'}:residual")
    metrics = lower_ethos_u(module, inputs).metrics()
    assert metrics["npu_ops"] > 0 and metrics["vela_total_cycles"] > 0
    # The NCHW graph input feeds a conv: stock keeps at least that transpose, and Vela prices it.
    assert metrics["tosa_transposes"] >= 1
    assert metrics["vela_transpose_rows"] >= metrics["tosa_transposes"]
    assert metrics["vela_transpose_cycles"] > 0
    # The cost model, reading the same TOSA file back, predicts Vela's Transpose rows.
    assert metrics["predicted_transpose_cycles"] == pytest.approx(metrics["vela_transpose_cycles"], rel=0.1)


def test_canonical_write_back_is_cheaper_and_equivalent(tmp_path):
    """Stock versus stock + canonical transposes, on a real lowering: Vela cheaper, TOSA outputs identical."""
    import contextlib
    import io
    from pathlib import Path

    from layout_solver.arm.hooks import canonical_transposes
    from layout_solver.targets.ethos_u.equivalence import compare_lowerings
    from layout_solver.zoo.models import build

    module, inputs = build(f"{Path(__file__).parents[1] / 'models' / 'tiny.py'}:attention")
    before = dict(apm._registered_pass_insertions)
    with contextlib.redirect_stdout(io.StringIO()):
        stock = lower_ethos_u(module, inputs, keep_tosa=tmp_path / "stock")
        with canonical_transposes() as stats:
            canon = lower_ethos_u(module, inputs, keep_tosa=tmp_path / "canonical")
    assert dict(apm._registered_pass_insertions).keys() == before.keys()
    assert stats.get("reduced_rank", 0) >= 1
    s, c = stock.metrics(), canon.metrics()
    assert c["vela_transpose_cycles"] < s["vela_transpose_cycles"]
    assert c["vela_total_cycles"] <= s["vela_total_cycles"]
    same = compare_lowerings(stock.tosa_files, canon.tosa_files)
    assert same.equivalent and same.max_abs_diff == 0 and same.delegates >= 1
    for m in (s, c):  # matmul operands, reductions and Vela's own reshape moves included
        assert m["predicted_transpose_cycles"] == pytest.approx(m["vela_transpose_cycles"], rel=0.1)


def test_one_quantization_lowers_twice_to_the_same_program_and_rejections_become_a_status(tmp_path):
    """compare quantizes once and lowers each side from a copy: two stock lowerings of one quantized
    program write the same TOSA bytes. A program the reference model cannot run is reported with a
    status ("error: ..." / "unpredictable"), never as an exception that loses the comparison."""
    import contextlib
    import copy
    import io
    from pathlib import Path

    import numpy as np

    from graph_io.tosa import tosa_inputs
    from layout_solver.targets.ethos_u.equivalence import ReferenceRejected, random_inputs, run_tosa
    from layout_solver.targets.ethos_u.measure import quantize_for
    from layout_solver.zoo.models import build

    module, inputs = build(f"{Path(__file__).parents[1] / 'models' / 'tiny.py'}:residual")
    quantized = quantize_for(module, inputs)
    with contextlib.redirect_stdout(io.StringIO()):
        first = lower_ethos_u(module, inputs, keep_tosa=tmp_path / "a", quantized=copy.deepcopy(quantized))
        second = lower_ethos_u(module, inputs, keep_tosa=tmp_path / "b", quantized=copy.deepcopy(quantized))
    assert [f.read_bytes() for f in first.tosa_files] == [f.read_bytes() for f in second.tosa_files]
    program = first.tosa_files[0]
    specs = tosa_inputs(program)
    assert run_tosa(program, random_inputs(specs, np.random.default_rng(0)))  # a valid program runs
    wrong = [np.zeros([d + 1 for d in shape], dtype) for _, shape, dtype in specs]
    with pytest.raises(ReferenceRejected) as rejected:
        run_tosa(program, wrong)
    assert rejected.value.status.startswith("error: ")


def test_each_program_is_checked_against_the_quantized_eager_model(tmp_path):
    """The lowered program runs with its delegates on the TOSA reference model and its CPU ops in eager, and
    is held to executorch's INT test tolerance against the quantized eager model: a program lowered from the
    same int8 model passes; the same program held against another quantized model of the same shapes (other
    weights) does not."""
    import contextlib
    import copy
    import io
    from pathlib import Path

    import torch

    from layout_solver.arm.hooks import solver_layouts
    from layout_solver.targets.ethos_u.equivalence import EagerCheck, same_outputs, versus_quantized_eager
    from layout_solver.targets.ethos_u.measure import quantize_for
    from layout_solver.zoo.models import build

    module, inputs = build(f"{Path(__file__).parents[1] / 'models' / 'tiny.py'}:attention")
    quantized = quantize_for(module, inputs)
    with contextlib.redirect_stdout(io.StringIO()), solver_layouts():
        lowered = lower_ethos_u(module, inputs, keep_tosa=tmp_path / "solver", quantized=copy.deepcopy(quantized))
    check = versus_quantized_eager(quantized, lowered.program, lowered.tosa_files, inputs)
    assert check.status == "ok" and check.within_tolerance and check.max_quant_steps <= 1
    other_module, _ = build(f"{Path(__file__).parents[1] / 'models' / 'tiny.py'}:attention", seed=1)
    with torch.no_grad():
        for p in other_module.parameters():
            p.mul_(-1)
    other = versus_quantized_eager(quantize_for(other_module, inputs), lowered.program, lowered.tosa_files, inputs)
    assert other.status == "ok" and not other.within_tolerance and other.max_quant_steps > 1
    missing = versus_quantized_eager(quantized, lowered.program, [], inputs)
    assert missing.status.startswith("error: ") and missing.within_tolerance is None
    # The fallback for equivalence when the reference model refuses random inputs: two programs' outputs on
    # the example inputs, bit for bit; not checked when either could not run.
    assert same_outputs(check, other) == (True, 0.0)
    off_by_one = EagerCheck("ok", outputs=[t + 1 for t in check.outputs])
    assert same_outputs(check, off_by_one) == (False, pytest.approx(1.0, abs=1e-5))
    assert same_outputs(check, missing) == (None, None)
    # A delegate output the program declares as float but whose TOSA graph writes int8 (executorch 1.5.1 does
    # this to a split_with_sizes output at a partition boundary in MobileViTV2) is named, not run on.
    graph_module = lowered.program.exported_program().graph_module
    delegate = next(m for name, m in graph_module.named_children() if name.startswith("lowered_module"))
    output = delegate.original_module.graph.output_node().args[0][0]
    output.meta["val"] = output.meta["val"].to(torch.float32)
    mistyped = versus_quantized_eager(quantized, lowered.program, lowered.tosa_files, inputs)
    assert "declares torch.float32, its TOSA graph writes torch.int8" in mistyped.status


def test_a_transpose_vela_runs_cheaper_in_two_steps_is_written_in_two(tmp_path):
    """Windowed attention's head split swaps two middle axes under the window axis: one Vela op per window as
    given, two single ops when the head axis is moved out first. The canonical write-back writes the pair,
    Vela's transpose cycles fall, and the reference model computes the same outputs."""
    import contextlib
    import io
    from pathlib import Path

    from layout_solver.arm.hooks import canonical_transposes
    from layout_solver.targets.ethos_u.equivalence import compare_lowerings
    from layout_solver.zoo.models import build

    module, inputs = build(f"{Path(__file__).parents[1] / 'models' / 'tiny.py'}:window_heads")
    with contextlib.redirect_stdout(io.StringIO()):
        stock = lower_ethos_u(module, inputs, keep_tosa=tmp_path / "stock")
        with canonical_transposes() as stats:
            canon = lower_ethos_u(module, inputs, keep_tosa=tmp_path / "canonical")
    assert stats.get("two_steps", 0) >= 1
    s, c = stock.metrics(), canon.metrics()
    assert c["tosa_transposes"] > s["tosa_transposes"]  # more TRANSPOSE ops ...
    assert c["vela_transpose_cycles"] < 0.5 * s["vela_transpose_cycles"]  # ... and far fewer cycles
    assert c["vela_total_cycles"] < s["vela_total_cycles"]
    assert c["predicted_transpose_cycles"] == pytest.approx(c["vela_transpose_cycles"], rel=0.05)
    same = compare_lowerings(stock.tosa_files, canon.tosa_files)
    assert same.equivalent and same.max_abs_diff == 0


@pytest.mark.parametrize(("model", "merged"), [("patch_embed", True), ("shared_input", False)])
def test_delegate_input_transpose_is_merged_only_when_its_reshape_folds(model, merged, tmp_path):
    """Vela folds the RESHAPE in front of a canonical transpose only into its input's sole reader
    (bypass_memory_only_ops); otherwise the reshape becomes a MemoryCopy. The NCHW input read by the
    patch conv alone gets the merged 2-D transpose (one NPU op instead of two, cheaper in Vela); the
    input the residual add also reads keeps its transpose as written, so no MemoryCopy appears. The
    stage's program is equivalent to stock's on the reference model either way."""
    import contextlib
    import io
    from pathlib import Path

    from layout_solver.arm.hooks import canonical_transposes
    from layout_solver.targets.ethos_u.equivalence import compare_lowerings
    from layout_solver.zoo.models import build

    module, inputs = build(f"{Path(__file__).parents[1] / 'models' / 'tiny.py'}:{model}")
    with contextlib.redirect_stdout(io.StringIO()):
        stock = lower_ethos_u(module, inputs, keep_tosa=tmp_path / "stock")
        with canonical_transposes() as stats:
            canon = lower_ethos_u(module, inputs, keep_tosa=tmp_path / "canonical")
    s, c = stock.metrics(), canon.metrics()
    assert not any(r["NNG Operator"] == "MemoryCopy" for r in canon.npu_rows)
    if merged:
        assert stats.get("reduced_rank", 0) >= 1
        assert c["vela_transpose_rows"] < s["vela_transpose_rows"]
        assert c["vela_transpose_cycles"] < s["vela_transpose_cycles"]
    else:
        assert stats.get("kept", 0) >= 1
        assert c["vela_transpose_cycles"] <= s["vela_transpose_cycles"]
    assert c["vela_total_cycles"] <= s["vela_total_cycles"]
    same = compare_lowerings(stock.tosa_files, canon.tosa_files)
    assert same.equivalent and same.max_abs_diff == 0


def test_random_inputs_index_within_the_dim_a_gather_reads(tmp_path):
    """An int32 input a GATHER indexes with (here through a TILE, as executorch writes index_select) gets
    random values in [0, K): the reference model aborts the process on any other."""
    import numpy as np

    from cost_models.tosa_probe import ProbeBuilder
    from graph_io.tosa import index_bounds, tosa_inputs
    from layout_solver.targets.ethos_u.equivalence import random_inputs, run_tosa

    b = ProbeBuilder()
    values, indices = b.input((2, 4, 3), "int8"), b.input((1, 2), "int32")
    _, tiled = b.op("TILE", [indices, b.const([2, 1], "shape")], (2, 2), "int32")
    b.op("GATHER", [values, tiled], (2, 2, 3), "int8")
    program = tmp_path / "gather.tosa"
    program.write_bytes(b.build().serialize())
    assert index_bounds(program.read_bytes()) == {"t1": 4}
    specs = tosa_inputs(program)
    for seed in range(5):
        arrays = random_inputs(specs, np.random.default_rng(seed), index_bounds(program.read_bytes()))
        assert arrays[1].min() >= 0 and arrays[1].max() < 4 and arrays[0].dtype == np.int8
        assert run_tosa(program, arrays)


def test_a_reference_model_that_crashes_is_a_rejection_not_a_dead_process(monkeypatch, tmp_path):
    """The TOSA reference model segfaults on some programs' random inputs (text encoders' delegates on
    ethos-u85-256); it runs in a child process, so the comparison lives to record the side as rejected and
    goes on to the example inputs. A child killed by SIGSEGV stands in for it here."""
    import numpy as np

    from layout_solver.targets.ethos_u import equivalence

    monkeypatch.setattr(equivalence, "_ISOLATED_REFERENCE", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    with pytest.raises(equivalence.ReferenceRejected) as rejected:
        equivalence.run_tosa(tmp_path / "any.tosa", [np.zeros(4, np.int8)])
    assert rejected.value.status == "error: the reference model crashed (signal SIGSEGV)"


def _rescaled(tmp_path, name: str, layout: str = "identity", shift: int = 28):
    """An int32 input RESCALEd to int8 (by 2**20 / 2**shift) with a shift the reference model calls unpredictable
    for values beyond ±2**(shift - 1) (full-range int32 inputs: funnel's attention delegate on ethos-u55-128),
    read through a transpose and its inverse ("pair") or a transpose and a reshape back to the shape (a
    "scrambled" layout)."""
    from cost_models.tosa_probe import ProbeBuilder

    b = ProbeBuilder()
    tensor = b.input((1, 4, 6), "int32")
    if layout != "identity":
        tensor = b.op("TRANSPOSE", [tensor], (1, 6, 4), "int32", "TransposeAttribute", perms=(0, 2, 1))[1]
        tensor = (
            b.op("TRANSPOSE", [tensor], (1, 4, 6), "int32", "TransposeAttribute", perms=(0, 2, 1))[1]
            if layout == "pair"
            else b.op("RESHAPE", [tensor, b.const([1, 4, 6], "shape")], (1, 4, 6), "int32")[1]
        )
    consts = [b.const([1 << 20], "int32"), b.const([shift], "int8"), b.const([0], "int32"), b.const([0], "int8")]
    b.op("RESCALE", [tensor, *consts], (1, 4, 6), "int8", "RescaleAttribute", rounding_mode="RoundingMode.SINGLE_ROUND",
         per_channel=False, input_unsigned=False, output_unsigned=False, scale32=True)  # fmt: skip
    path = tmp_path / name / "output_tag0_TOSA.tosa"
    path.parent.mkdir()
    path.write_bytes(b.build().serialize())
    return [path]


def test_a_delegate_unpredictable_on_both_sides_is_compared_on_narrower_inputs(tmp_path):
    """Full-range int32 inputs make both sides unpredictable: a property of the program they share, so the delegate
    is compared on the widest narrower inputs both run, where a wrong layout is still caught. Unpredictable on one
    side only is that side's: it stays unchecked."""
    from layout_solver.targets.ethos_u.equivalence import compare_lowerings

    stock = _rescaled(tmp_path, "stock")
    same = compare_lowerings(stock, _rescaled(tmp_path, "pair", "pair"))
    assert same.equivalent is True and same.max_abs_diff == 0
    narrowed = "compared on integer inputs within ±32768: on full-range inputs the reference model calls both sides"
    assert same.notes == [f"output_tag0_TOSA.tosa: {narrowed} unpredictable"]
    scrambled = compare_lowerings(stock, _rescaled(tmp_path, "scrambled", "scrambled"))
    assert scrambled.equivalent is False and scrambled.max_abs_diff > 0
    one_sided = compare_lowerings(stock, _rescaled(tmp_path, "predictable", shift=40))  # ±2**39: any int32
    assert one_sided.equivalent is None and one_sided.reference == {"left": "unpredictable", "right": "ok"}


def _two_outputs(tmp_path, name: str, outputs: tuple[str, str]) -> list:
    """A delegate reading one int8 (1, 4, 6) tensor and writing two of shape (1, 6, 4), in the order `outputs` names
    them: "transposed" (its transpose), "reshaped" (the same bytes read as (1, 6, 4)) or "reshaped_again" (the same
    as "reshaped")."""
    from cost_models.tosa_probe import ProbeBuilder

    b = ProbeBuilder()
    tensor = b.input((1, 4, 6), "int8")
    for which in outputs:  # only the named ops: build() makes every unread result an output too
        if which == "transposed":
            b.output(b.op("TRANSPOSE", [tensor], (1, 6, 4), "int8", "TransposeAttribute", perms=(0, 2, 1))[1])
        else:
            b.output(b.op("RESHAPE", [tensor, b.const([1, 6, 4], "shape")], (1, 6, 4), "int8")[1])
    path = tmp_path / name / "output_tag0_TOSA.tosa"
    path.parent.mkdir()
    path.write_bytes(b.build().serialize())
    return [path]


def test_a_delegate_listing_the_same_outputs_in_another_order_is_paired_by_value(tmp_path):
    """Stock's fusion order can list a delegate's same-shaped outputs in another order than the stage's (swinv2 on
    ethos-u85-256, in some processes): each output is paired with the one that equals it in every trial. Where
    one has no equal, tensors of one shape cannot be told apart by position: not paired (the caller compares the
    whole programs on the example inputs)."""
    from layout_solver.targets.ethos_u.equivalence import compare_lowerings

    stock = _two_outputs(tmp_path, "stock", ("transposed", "reshaped"))
    swapped = compare_lowerings(stock, _two_outputs(tmp_path, "swapped", ("reshaped", "transposed")))
    assert swapped.equivalent is True and swapped.max_abs_diff == 0
    assert swapped.notes == ["output_tag0_TOSA.tosa: the same outputs in another order"]
    other = compare_lowerings(stock, _two_outputs(tmp_path, "other", ("reshaped", "reshaped_again")))
    assert other.equivalent is None and "not paired" in other.notes[0]
    assert compare_lowerings(stock, _two_outputs(tmp_path, "same", ("transposed", "reshaped"))).equivalent is True
