"""Bad input to the Arm stage (issue 35 item 3): graphs it cannot lay out are lowered exactly as stock lowers
them, with a warning that names the node; ops it has no rule for are pinned, with a warning naming them."""

from __future__ import annotations

import contextlib
import io
import warnings

import pytest
import torch

pytest.importorskip("executorch.backends.arm")

from layout_solver.arm.admission import declined
from layout_solver.arm.hooks import solver_layouts


class DynamicBatch(torch.nn.Module):
    def forward(self, x):
        return (x.permute(0, 2, 1) * 2.0).permute(0, 2, 1) + 1.0


class Rank7(torch.nn.Module):
    def forward(self, x):
        y = x.reshape(1, 2, 2, 2, 2, 2, 4) * 2.0
        return (y + 1.0).permute(0, 1, 2, 3, 4, 6, 5).reshape(1, 8, 16)


class WithEmpty(torch.nn.Module):
    def forward(self, x, empty):
        return torch.cat([x, empty], dim=1).permute(0, 2, 1) + 1.0


class CondOnPermuted(torch.nn.Module):
    """A branch reads a value whose order the stage would otherwise be free to choose."""

    def forward(self, x):
        y = x.permute(0, 2, 1) * 2.0

        def true_branch(a):
            return torch.sin(a) + 1.0

        def false_branch(a):
            return torch.cos(a)

        return torch.cond(x.sum() > 0, true_branch, false_branch, [y]).permute(0, 2, 1) + x


class FlipAfterConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.flip(self.conv(x), dims=[1]) * 2.0


DYNAMIC = (DynamicBatch(), (torch.randn(2, 4, 8),), {"x": {0: torch.export.Dim("batch", min=2, max=8)}})


def tosa_fp_lowering(module, inputs, dynamic_shapes=None, stage=False, extensions=()):
    """Each delegate's TOSA flatbuffer, the layout-solver warnings and the stage's reports of one TOSA FP
    lowering (stock's, or with the stage)."""
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
    from executorch.exir import to_edge_transform_and_lower

    program = torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes)
    spec = TosaCompileSpec("TOSA-1.0+FP" + "".join(f"+{e}" for e in extensions))
    with (
        warnings.catch_warnings(record=True) as caught,
        solver_layouts() if stage else contextlib.nullcontext() as reports,
        contextlib.redirect_stdout(io.StringIO()),
    ):
        warnings.simplefilter("always")
        lowered = to_edge_transform_and_lower(program, partitioner=[TOSAPartitioner(spec)]).exported_program()
    blobs = [
        getattr(lowered.graph_module, name).processed_bytes
        for name, _ in lowered.graph_module.named_children()
        if name.startswith("lowered_module")
    ]
    return blobs, [str(w.message) for w in caught if "layout-solver" in str(w.message)], list(reports or [])


@pytest.mark.parametrize(
    "module, inputs, dynamic_shapes, words",
    [
        (*DYNAMIC, "node 'x': dynamic shape (s"),
        (Rank7(), (torch.randn(1, 8, 16),), None, "rank 7 is above TOSA's 6"),
        (WithEmpty(), (torch.randn(1, 4, 8), torch.randn(1, 0, 8)), None, "node 'empty': zero-sized tensor (1, 0, 8)"),
        (CondOnPermuted(), (torch.randn(1, 4, 8),), None, "node 'cond' (cond) runs the submodule"),
    ],
)
def test_graphs_the_stage_cannot_lay_out_are_named(module, inputs, dynamic_shapes, words):
    graph_module = torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes).graph_module
    reason = declined(graph_module)
    assert reason is not None and words in reason, reason


def test_a_static_graph_is_not_declined():
    graph_module = torch.export.export(FlipAfterConv(), (torch.randn(1, 3, 8, 8),)).graph_module
    assert declined(graph_module) is None


def test_dynamic_shapes_lower_as_stock_with_a_warning():
    """The stage used to write the example batch (2) into a dynamic-batch program's shapes."""
    stock, stock_warnings, _ = tosa_fp_lowering(*DYNAMIC)
    solver, caught, reports = tosa_fp_lowering(*DYNAMIC, stage=True)
    assert stock and solver == stock and not stock_warnings
    assert any("stock's pipeline" in w and "node 'x': dynamic shape" in w for w in caught), caught
    assert [r.kind for r in reports] == ["stock-fallback"] and "dynamic shape" in reports[0].notes[0]


def test_control_flow_lowers_as_stock_and_runs_like_eager():
    """A cond whose branch reads an intermediate value failed to lower with the stage (the stage keyed its
    answer on the branch submodules as if they were constants): it is lowered as stock lowers it, and the
    TOSA reference model agrees with eager."""
    from executorch.backends.arm.test.tester.test_pipeline import TosaPipelineFP

    module, inputs = CondOnPermuted(), (torch.randn(1, 4, 8),)
    stock, _, _ = tosa_fp_lowering(module, inputs, extensions=["cf"])
    solver, caught, reports = tosa_fp_lowering(module, inputs, stage=True, extensions=["cf"])
    assert stock and solver == stock
    assert any("(cond) runs the submodule" in w and "control flow" in w for w in caught), caught
    assert "stock-fallback" in [r.kind for r in reports]
    pipeline = TosaPipelineFP(module, inputs, aten_op=[], exir_op=[], tosa_extensions=["cf"])
    pipeline.pop_stage("check_count.exir")
    with solver_layouts(), contextlib.redirect_stdout(io.StringIO()):
        pipeline.run()  # lowering, then the reference model against eager


def test_an_op_without_a_rule_is_pinned_and_the_program_is_stock_s():
    module, inputs = FlipAfterConv(), (torch.randn(1, 3, 8, 8),)
    stock, _, _ = tosa_fp_lowering(module, inputs)
    solver, caught, reports = tosa_fp_lowering(module, inputs, stage=True)
    assert solver == stock
    assert any("pinned to the identity order" in w and "flip.default" in w for w in caught), caught
    assert any("flip.default" in p for r in reports for p in r.pinned_unknown)


def test_rank_above_six_never_reaches_a_delegate():
    """TOSA's partitioner keeps rank-7 ops on the CPU; the stage is not asked, and the program is stock's."""
    stock, _, _ = tosa_fp_lowering(Rank7(), (torch.randn(1, 8, 16),))
    solver, caught, reports = tosa_fp_lowering(Rank7(), (torch.randn(1, 8, 16),), stage=True)
    assert solver == stock and not caught and not reports


def test_a_zero_sized_operand_lowers_and_runs_like_eager():
    """Stock's passes drop the empty operand of the cat before the stage runs; the stage then lays out what
    is left, and the reference model agrees with eager."""
    from executorch.backends.arm.test.tester.test_pipeline import TosaPipelineFP

    pipeline = TosaPipelineFP(WithEmpty(), (torch.randn(1, 4, 8), torch.randn(1, 0, 8)), aten_op=[], exir_op=[])
    with solver_layouts() as reports, contextlib.redirect_stdout(io.StringIO()):
        pipeline.run()
    assert [r.kind for r in reports] == ["solver"]


def test_content_keys_read_bfloat16_constants():
    """The stage keys its stored answers by the graph's constants; a bfloat16 constant (executorch's own
    test_avg_pool2d_tosa_FP[rand_bf16]) has no numpy dtype and failed the lowering with the stage."""
    from layout_solver.arm.passes import answer_key
    from layout_solver.arm.pricing import MovedBytesPricing
    from layout_solver.lowering.provenance import tensor_bytes

    graph_module = torch.export.export(DynamicBatch(), (torch.randn(2, 4, 8),)).graph_module
    bf16 = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
    keys = {
        answer_key(graph_module, lambda n, c=c: c if n.op == "placeholder" else None, MovedBytesPricing(), frozenset())
        for c in (bf16, bf16 * 2)
    }
    assert len(keys) == 2  # the values are read, not just the dtype
    assert tensor_bytes(torch.tensor(1.5, dtype=torch.bfloat16)) == bf16[:1].view(torch.int16).numpy().tobytes()
