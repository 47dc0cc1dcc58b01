"""Zoo sources beyond the built-in models (issue 33): saved ExportedPrograms (`torch.export.save` -> .pt2; inputs
from the saved examples or generated from the input specs, clear per-model errors, globs in the zoo) and the
transformers catalog (`transformers:NAME`, `zoo --source transformers`)."""

from __future__ import annotations

import json

import pytest
import torch

from layout_solver.zoo.models import ModelError, build, expand_names
from layout_solver.zoo.runner import run_zoo


class ConvPermute(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x)).permute(0, 2, 3, 1).mean(dim=-1)


class TokenModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 8)
        self.position = torch.nn.Embedding(12, 8)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, ids, positions, mask):
        return self.head(self.embed(ids) + self.position(positions)) * mask.unsqueeze(-1)


def save(tmp_path, module, inputs, name, dynamic_shapes=None, keep_examples=True):
    program = torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes)
    if not keep_examples:
        program._example_inputs = None  # as a program saved without its examples
    path = tmp_path / name
    torch.export.save(program, path)
    return str(path)


def test_a_saved_program_is_a_model_with_its_saved_inputs(tmp_path):
    module, x = ConvPermute().eval(), torch.randn(1, 3, 8, 8)
    path = save(tmp_path, module, (x,), "conv.pt2")
    built, inputs = build(path)
    assert len(inputs) == 1 and torch.equal(inputs[0], x)
    torch.testing.assert_close(built(*inputs), module(x))


def test_inputs_are_generated_from_the_specs_integers_within_every_table(tmp_path):
    module = TokenModel().eval()
    examples = (torch.randint(0, 50, (1, 6)), torch.arange(6).unsqueeze(0), torch.ones(1, 6))
    path = save(tmp_path, module, examples, "tokens.pt2", keep_examples=False)
    built, (ids, positions, mask) = build(path, seed=3)
    assert ids.dtype == positions.dtype == torch.int64 and mask.dtype == torch.float32
    assert ids.shape == positions.shape == mask.shape == (1, 6)
    assert 0 <= int(ids.min()) and int(ids.max()) < 50 and int(positions.max()) < 12
    torch.testing.assert_close(built(ids, positions, mask), module(ids, positions, mask))
    _, again = build(path, seed=3)
    assert torch.equal(again[0], ids)  # seeded


DYNAMIC_BATCH = {"x": {0: torch.export.Dim("batch", min=2, max=8)}}


class Branchy(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda a: a.sin(), lambda a: a.cos(), [x])


@pytest.mark.parametrize(
    "make, words",
    [
        (
            lambda p: save(p, ConvPermute(), (torch.randn(2, 3, 8, 8),), "dyn.pt2", DYNAMIC_BATCH),
            "input 'x' has a dynamic shape (s",
        ),
        (lambda p: save(p, Branchy(), (torch.randn(4),), "cond.pt2"), "node 'cond' (cond) is control flow"),
        (lambda p: (p / "junk.pt2").write_text("not a program") and str(p / "junk.pt2"), "not a saved ExportedProgram"),
        (lambda p: str(p / "missing.pt2"), "file not found"),
    ],
)
def test_a_program_the_comparison_cannot_take_is_a_named_error(tmp_path, make, words):
    path = make(tmp_path)
    with pytest.raises(ModelError, match="model '.*pt2'") as caught:
        build(path)
    assert words in str(caught.value), str(caught.value)


def test_the_zoo_takes_a_glob_of_saved_programs_and_reports_each(tmp_path, capsys):
    save(tmp_path, ConvPermute().eval(), (torch.randn(1, 3, 8, 8),), "a.pt2")
    save(tmp_path, Branchy(), (torch.randn(4),), "b.pt2")
    models = expand_names([str(tmp_path / "*.pt2")])
    assert [m.rsplit("/", 1)[1] for m in models] == ["a.pt2", "b.pt2"]
    with pytest.raises(ModelError, match="no saved program matches"):
        expand_names([str(tmp_path / "none" / "*.pt2")])
    results = run_zoo(models, ["ethos-u55-128"], tmp_path / "zoo", jobs=1, log=lambda _: None)
    by = {r["model"].rsplit("/", 1)[1]: r for r in results}
    assert by["a.pt2"]["status"] == "ok" and by["a.pt2"]["equivalent"] is True
    assert by["a.pt2"]["solver"]["vela_total_cycles"] <= by["a.pt2"]["stock"]["vela_total_cycles"]
    failed = by["b.pt2"]
    assert failed["status"] != "ok" and "control flow" in json.dumps(failed)


def test_the_catalog_has_sixty_architectures_over_three_modalities():
    from layout_solver.zoo import catalog

    assert len(catalog.default_names()) >= 60
    for modality in catalog.MODALITIES:
        assert catalog.default_names(modality), modality
    assert catalog.find("transformers:convnext").task == "image-classification"
    assert {e.name for e in catalog.catalog()} >= {
        "transformers:perceiver/image-classification",
        "transformers:perceiver/text-classification",
    }
    assert catalog.find("transformers:dpt/depth").auto_class == "AutoModelForDepthEstimation"


# bit: GroupNorm's groups shrunk with the widths; bart: its token ids end a sentence; modernbert: layer_types cut
@pytest.mark.parametrize(
    "name", ["transformers:convnext", "transformers:vit", "transformers:dpt/depth", "transformers:wav2vec2",
             "transformers:bert", "transformers:bit", "transformers:bart/text-classification",
             "transformers:modernbert/text-classification"],
)  # fmt: skip
def test_catalog_models_are_small_and_export(name):
    module, inputs = build(name)
    assert sum(p.numel() for p in module.parameters()) < 4_000_000
    program = torch.export.export(module, inputs)
    assert any(n.op == "call_function" for n in program.graph.nodes)


def test_a_catalog_name_the_rule_cannot_build_is_a_model_error():
    with pytest.raises(ModelError, match="not in the transformers catalog"):
        build("transformers:no_such_architecture")
    with pytest.raises(ModelError, match="model 'transformers:timm_wrapper"):
        build("transformers:timm_wrapper")  # needs timm, which the project does not install


def test_a_catalog_model_that_does_not_run_in_eager_fails_at_build():
    """hgnet_v2's shrunk config builds but its grouped convolution rejects its input: the catalog's failure
    (the zoo's "export failed"), not the quantizer's or the lowering's."""
    with pytest.raises(ModelError, match="model 'transformers:hgnet_v2.*does not run in eager: RuntimeError"):
        build("transformers:hgnet_v2")


def test_a_model_neither_side_can_lower_is_not_checked_not_inequivalent():
    """A comparison with no pair of programs says `equivalent: null` with the reason, never `false`."""
    from layout_solver.targets import compare

    class Raises(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent control flow: export, and so quantization, refuses it
                return x + 1
            return x - 1

    result = compare(Raises(), (torch.ones(1, 4),), "ethos-u55-128").to_json()
    assert result["stock"]["error"].startswith("quantization failed") and result["solver"]["error"]
    assert result["equivalent"] is None and result["equivalence_notes"] == ["quantization failed, neither side lowered"]


def test_zoo_source_transformers_from_the_command_line(tmp_path, capsys):
    from layout_solver.cli import _source_models, main

    audio = _source_models("transformers:audio")
    assert audio and all(name.startswith("transformers:") for name in audio)
    assert main(["zoo", "--source", "huggingface", "--out", str(tmp_path)]) == 2
    assert "unknown --source" in capsys.readouterr().err


def test_the_zoo_runs_a_catalog_model_on_each_target(tmp_path):
    models = ["transformers:regnet"]
    results = run_zoo(models, ["ethos-u55-128", "ethos-u85-256", "vulkan"], tmp_path, jobs=2, log=lambda _: None)
    by = {r["target"]: r for r in results}
    for ethos_u in ("ethos-u55-128", "ethos-u85-256"):
        assert by[ethos_u]["status"] == "ok" and by[ethos_u]["equivalent"] is True
        assert by[ethos_u]["solver"]["vela_total_cycles"] <= by[ethos_u]["stock"]["vela_total_cycles"]
    assert by["vulkan"]["status"] == "ok"
    assert by["vulkan"]["solver"]["modelled_us"] <= by["vulkan"]["stock"]["modelled_us"] * (1 + 1e-9)


def test_outside_models_are_zoo_names():
    """`outside:NAME` is a model wherever a zoo name is; an unknown one names the known ones."""
    from layout_solver.zoo.models import ModelError, build
    from layout_solver.zoo.outside import MODELS

    module, inputs = build("outside:poolformer")
    assert module(*inputs).shape[0] == 1
    with pytest.raises(ModelError, match="the outside models are .*poolformer"):
        build("outside:nope")
    assert "llama_decode" in MODELS
