"""Vulkan: the solver pass inside a real ExecuTorch lowering (no GPU needed to lower)."""

import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("executorch.backends.vulkan")

from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner  # noqa: E402
from executorch.exir import to_edge_transform_and_lower  # noqa: E402

import executorch.backends.vulkan.vulkan_preprocess as vulkan_preprocess  # noqa: E402
from layout_solver.vulkan import LayoutValidationError, solver_layouts, stock_layouts, validate  # noqa: E402
from layout_solver.vulkan import passes as vk_passes  # noqa: E402
from layout_solver.vulkan import rules  # noqa: E402

TINY = Path(__file__).parent / "models" / "tiny.py"


def _lower(factory_name: str, context):
    from layout_solver.zoo.models import build

    module, inputs = build(f"{TINY}:{factory_name}")
    exported = torch.export.export(module, inputs)
    with context() as reports:
        program = to_edge_transform_and_lower(exported, partitioner=[VulkanPartitioner()])
        pte = program.to_executorch().buffer
    return reports, pte


def test_context_restores_stock_pass_on_every_exit():
    original = vulkan_preprocess.TagMemoryMetaPass
    with solver_layouts():
        assert vulkan_preprocess.TagMemoryMetaPass is not original
    assert vulkan_preprocess.TagMemoryMetaPass is original
    with pytest.raises(RuntimeError, match="boom"):
        with solver_layouts():
            raise RuntimeError("boom")
    assert vulkan_preprocess.TagMemoryMetaPass is original


@pytest.fixture(scope="module")
def mixed_lowerings():
    return {"stock": _lower("mixed", stock_layouts), "solver": _lower("mixed", solver_layouts)}


def test_solver_lowering_serializes_and_beats_stock(mixed_lowerings):
    stock_reports, _ = mixed_lowerings["stock"]
    reports, pte = mixed_lowerings["solver"]
    assert len(pte) > 1000
    assert reports and all(r.kind == "solver" for r in reports)
    assert all(r.gap == 0 for r in reports)
    assert sum(len(r.transitions) for r in reports) <= sum(len(r.transitions) for r in stock_reports)
    # The over-wide tensor cannot live in a texture: the registry's texture limits reached the problem.
    by_repr = sum((r.tensors_by_repr for r in reports), start=__import__("collections").Counter())
    assert any(k.startswith("BUFFER") for k in by_repr)


def test_problem_comes_from_the_registry():
    """Domains and modes are read from executorch's op registry: a conv wants channels-packed texture."""
    captured = {}

    class Capture(vk_passes.SolverTagMemoryMetaPass):
        def _call(self, gm):
            captured["problem"] = rules.build_problem(gm, self.texture_limits).problem
            return super()._call(gm)

    with vk_passes.collect_reports(), vk_passes._substituted_pass(Capture):
        from layout_solver.zoo.models import build

        module, inputs = build(f"{TINY}:mixed")
        to_edge_transform_and_lower(torch.export.export(module, inputs), partitioner=[VulkanPartitioner()])
    problem = captured["problem"]
    convs = [op for op in problem.ops if "convolution" in op.target]
    assert convs and all(m.operands[0] == "TEXTURE_3D:TENSOR_CHANNELS_PACKED" for op in convs for m in op.modes)
    norms = [op for op in problem.ops if "native_layer_norm" in op.target]
    assert norms and len(norms[0].results) == 3  # multi-output op, results read through getitem
    cats = [op for op in problem.ops if "cat" in op.target]
    assert cats and len(cats[0].operands) == 2  # each list entry is its own operand slot
    wide = [v for v in problem.values if v.shape and v.shape[-1] == 70000]
    assert wide and all(label.startswith("BUFFER") for v in wide for label in v.domain)


def test_validator_catches_a_wrong_representation():
    errors = []

    class Corrupting(vk_passes.SolverTagMemoryMetaPass):
        def _call(self, gm):
            result = super()._call(gm)
            from executorch.backends.vulkan import utils

            conv = next(n for n in gm.graph.nodes if "convolution" in str(n.target))
            utils.set_node_repr(conv.args[0], rules.label_repr("BUFFER:TENSOR_WIDTH_PACKED"))
            try:
                validate(gm, self.texture_limits)
            except LayoutValidationError as exc:
                errors.append(str(exc))
            return result

    with vk_passes.collect_reports(), vk_passes._substituted_pass(Corrupting):
        from layout_solver.zoo.models import build

        module, inputs = build(f"{TINY}:residual")
        to_edge_transform_and_lower(torch.export.export(module, inputs), partitioner=[VulkanPartitioner()])
    assert errors and errors[0].startswith("node '") and "not in TensorRepSet" in errors[0]


def test_unknown_node_falls_back_to_stock_with_warning(monkeypatch):
    real = rules.get_op_features

    def flaky(target):
        if "convolution" in str(target):
            raise KeyError("no features registered")
        return real(target)

    monkeypatch.setattr(rules, "get_op_features", flaky)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reports, pte = _lower("residual", solver_layouts)
    assert any("cannot describe" in str(w.message) and "convolution" in str(w.message) for w in caught)
    assert reports[0].kind == "stock-fallback" and len(pte) > 1000


def test_compare_cli_json(capsys):
    import json

    from layout_solver.cli import main

    assert main(["compare", f"{TINY}:residual", "--target", "vulkan", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["model"].endswith(":residual") and result["target"] == "vulkan"
    for side in ("stock", "solver"):
        assert {"transitions", "transition_cost", "tensors_by_repr", "lower_seconds"} <= set(result[side])
    assert {"pass_seconds", "objective", "bound", "gap"} <= set(result["solver"])
    assert result["solver"]["transitions"] <= result["stock"]["transitions"]


def test_compare_unknown_model_is_a_clear_error(capsys):
    from layout_solver.cli import main

    assert main(["compare", "no_such_model", "--target", "vulkan"]) == 2
    assert "unknown model 'no_such_model'" in capsys.readouterr().err
