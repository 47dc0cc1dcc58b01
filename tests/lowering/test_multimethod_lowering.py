"""Multi-method lowering through ExecuTorch's preprocess_multimethod hook, on both targets.

The joint solve must leave single-method programs alone, give every partition an answer, and be
checked where it counts: on the Vulkan device against eager, on the TOSA reference model against stock.
"""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("executorch.backends.vulkan")

from layout_solver.targets import get_target
from layout_solver.zoo.multi_method import CachedDecoder, MultiMethodModel


def tiny_decoder() -> MultiMethodModel:
    torch.manual_seed(0)
    cache = torch.randn(1, 2, 2, 16, 16)
    return MultiMethodModel(
        CachedDecoder(dim=32, depth=1, heads=2).eval().requires_grad_(False),
        {"prefill": (torch.randn(1, 8, 32), cache), "decode": (torch.randn(1, 1, 32), cache)},
        {"prefill": 1.0, "decode": 16.0},
    )


def test_vulkan_joint_lowering_runs_every_method_on_the_device(runtime):
    r = (
        get_target("vulkan")
        .compare_methods(tiny_decoder(), execute=True, runtime=runtime, cost_profile="lavapipe", rounds=1)
        .to_json()
    )
    for side in ("stock", "per_method", "joint"):
        assert "error" not in r[side], r[side]
        for method, row in r[side]["per_method"].items():
            assert row["executed"], (side, method, row.get("execute_error"))
            assert row["delegates"] == 1
            assert row["max_abs_diff_vs_eager"] <= 1.05 * max(
                r["stock"]["per_method"][method]["max_abs_diff_vs_eager"], 1e-4
            )
    joint = r["joint"]
    assert joint["joint_groups"] == 2  # nothing links the two partitions: Vulkan constants are prepacked TensorRefs
    assert joint["weighted_modelled_us"] <= r["per_method"]["weighted_modelled_us"] + 1e-6
    assert joint["constant_bytes"] == r["stock"]["constant_bytes"]  # content-hashed: nothing duplicated


def test_ethos_u_joint_lowering_is_bit_exact_with_stock():
    # verify="model": the stage's own layouts are compared (verify="vela" could keep stock's delegates).
    r = get_target("ethos-u55-128").compare_methods(tiny_decoder(), verify="model").to_json()
    assert r["per_method_equivalent"] is True and r["joint_equivalent"] is True
    joint = r["joint"]
    assert joint["linked_values"] > 0  # the weights both methods read are one object...
    assert joint["joint_groups"] == 2  # ...but each delegate stores its own, so storing them costs nothing
    assert joint["weighted_total_cycles"] <= r["per_method"]["weighted_total_cycles"]
    assert joint["delegate_bytes"] <= r["stock"]["delegate_bytes"]


def test_single_method_programs_are_lowered_as_without_weights():
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
    from executorch.backends.vulkan.vulkan_preprocess import VulkanBackend
    from executorch.exir import to_edge_transform_and_lower

    from layout_solver.vulkan import solver_layouts

    model = tiny_decoder()
    before = VulkanBackend.__dict__.get("preprocess_multimethod")
    buffers = []
    for weights in (None, {"forward": 3.0}):
        exported = torch.export.export(copy.deepcopy(model.module), model.inputs["prefill"])
        with solver_layouts(method_weights=weights) as reports:
            buffers.append(
                to_edge_transform_and_lower(exported, partitioner=[VulkanPartitioner()]).to_executorch().buffer
            )
        assert reports.joint == [] and [r.partition for r in reports] == [""]
    assert buffers[0] == buffers[1]
    assert VulkanBackend.__dict__.get("preprocess_multimethod") is before  # restored


def test_a_method_without_a_weight_is_named():
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from layout_solver.vulkan import solver_layouts

    model = tiny_decoder()
    exported = {m: torch.export.export(copy.deepcopy(model.module), i) for m, i in model.inputs.items()}
    with pytest.raises(Exception, match="decode"), solver_layouts(method_weights={"prefill": 1.0}):
        to_edge_transform_and_lower(exported, partitioner=[VulkanPartitioner()])
    with pytest.raises(ValueError, match="positive"), solver_layouts(method_weights={"prefill": 0}):
        pass


def test_links_name_buffers_by_fqn_and_constants_by_their_bytes():
    from layout_solver.lowering.joint_lowering import program_links

    class Shared(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Parameter(torch.ones(4))
            self.b = torch.nn.Parameter(torch.ones(4))  # same bytes as `a`: one object wherever it is stored
            self.c = torch.nn.Parameter(torch.zeros(4))
            self.register_buffer("state", torch.zeros(4))

        def forward(self, x):
            return x * self.a + self.b + self.c + self.state

    program = torch.export.export(Shared(), (torch.randn(4),))
    names = {n.name for n in program.graph.nodes if n.op == "placeholder"}
    links = program_links(program, names)
    assert links["p_a"] == links["p_b"] != links["p_c"]
    assert links["b_state"] == "buffer:state"
    assert "x" not in links


def _joint_lowering(model, monkeypatch, fail_in: str | None = None):
    """A joint Vulkan lowering of `model`, counting VulkanBackend.preprocess calls per partition; `fail_in`: a
    partition whose preprocess raises after its solve."""
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
    from executorch.backends.vulkan.vulkan_preprocess import VulkanBackend
    from executorch.exir import to_edge_transform_and_lower

    from layout_solver.lowering.joint_lowering import bound_to_joint_answer
    from layout_solver.lowering.pass_report import current_partition
    from layout_solver.vulkan import solver_layouts

    calls: list[str] = []
    bound: list[bool] = []
    preprocess = VulkanBackend.preprocess.__func__

    def counted(cls, program, specs):
        calls.append(current_partition())
        out = preprocess(cls, program, specs)
        bound.append(bound_to_joint_answer())
        if current_partition() == fail_in:
            raise RuntimeError(f"{fail_in} failed after its solve")
        return out

    monkeypatch.setattr(VulkanBackend, "preprocess", classmethod(counted))
    exported = {m: torch.export.export(copy.deepcopy(model.module), i) for m, i in model.inputs.items()}
    with solver_layouts(method_weights=model.weights) as reports:
        buffer = to_edge_transform_and_lower(exported, partitioner=[VulkanPartitioner()]).to_executorch().buffer
    return buffer, reports, calls, bound


def test_a_joint_lowering_preprocesses_each_partition_once(monkeypatch):
    buffer, reports, calls, bound = _joint_lowering(tiny_decoder(), monkeypatch)
    assert sorted(calls) == ["decode#0", "prefill#0"]  # the collect phase runs the backend's passes no second time
    assert bound == [False, False]  # Vulkan links nothing between them: each may take an answer of its own
    assert len(reports.joint) == 1 and reports.joint[0].groups == 2
    assert sorted(r.partition for r in reports) == ["decode#0", "prefill#0"]
    assert buffer


def test_a_partition_that_fails_in_a_joint_lowering_raises_and_releases_the_others(monkeypatch):
    import threading

    with pytest.raises(Exception, match="prefill#0 failed after its solve"):
        _joint_lowering(tiny_decoder(), monkeypatch, fail_in="prefill#0")
    assert not [t for t in threading.enumerate() if t.name.startswith("layout-solver ")]  # none left waiting


def test_the_llama_decoder_is_one_transformers_model_exported_as_prefill_and_decode():
    from layout_solver.zoo.multi_method import build_methods, llama_decoder

    assert build_methods("llama_decoder").module.layers == 32
    model = llama_decoder(layers=2)
    assert model.weights == {"prefill": 1.0, "decode": 64.0}
    for method, tokens in (("prefill", 16), ("decode", 1)):
        program = torch.export.export(model.module, model.inputs[method])
        assert tuple(program.module()(*model.inputs[method]).shape) == (1, tokens, 256)
