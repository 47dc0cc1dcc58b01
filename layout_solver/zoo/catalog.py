"""A catalog of transformers architectures as zoo models: `transformers:NAME` (e.g. `transformers:convnext`),
and `zoo --source transformers[:vision|audio|text]` for all of a modality.

The catalog is read from the installed transformers' own task mappings, so it is keyed by its version:
- vision: image classification, depth estimation, semantic segmentation and backbones
  (`transformers:NAME` is the classifier where there is one, else the first of depth, segmentation, backbone;
  `transformers:NAME/TASK` names one task);
- audio: audio classification;
- text: sequence classification of the architectures that have a masked-LM head (the text encoders).

Each model is its default config, shrunk by one rule (`shrink`, applied to every nested config too), with random
weights, wrapped so that its main input goes in and its first tensor result (logits, depth, hidden state or the
backbone's feature maps) comes out. The rule, by config field (each idea under the names transformers' configs give
it): layer counts at most 2 (per-stage depths 1; a backbone whose stages are its layers keeps as many as it hands
out); widths at most 64 per token (`hidden_size`, `d_model`, `dim`, `n_embd`, `emb_dim` and the other
`*_hidden_size` / `*_output_size` fields), heads at most 2 and dividing it, MLPs at most twice the width; per-stage
widths (`hidden_sizes`, `*_hidden_sizes`, `embed_dims`, `conv_dim`, ...) scaled so the widest is 256 (multiples of
8); patch embeddings at most 32; GroupNorm groups (`num_groups`) at most 8; a compound-scaling depth coefficient
at most 1; windows at most 2; images 64 x 64; vocabularies (`vocab_size`, `n_words`, `*_vocab_size`) at most 1,024
but above every special token id; 10 labels; audio of 4,000 samples or 128 frames; token inputs that end with the
config's end token, where it has one. Where the rule alone does not give a model its default code can build,
`OVERRIDES` names the field and why; nothing else is tuned per model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from layout_solver._moved import moved_attributes

PREFIX = "transformers:"
MODALITIES = ("vision", "audio", "text")
# (modality, task, transformers auto-mapping, auto model class)
TASKS = (
    (
        "vision",
        "image-classification",
        "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
        "AutoModelForImageClassification",
    ),
    ("vision", "depth", "MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES", "AutoModelForDepthEstimation"),
    ("vision", "segmentation", "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES", "AutoModelForSemanticSegmentation"),
    ("vision", "backbone", "MODEL_FOR_BACKBONE_MAPPING_NAMES", "AutoBackbone"),
    (
        "audio",
        "audio-classification",
        "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
        "AutoModelForAudioClassification",
    ),
    (
        "text",
        "text-classification",
        "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
        "AutoModelForSequenceClassification",
    ),
)
IMAGE, TOKENS, SAMPLES, FRAMES, WINDOW = 64, 16, 4000, 128, 2
MAX_LAYERS, MAX_WIDTH, MAX_STAGE_WIDTH, MAX_EMBED, MAX_HEADS, MAX_VOCAB = 2, 64, 256, 32, 2, 1024
MAX_GROUPS = 8
# The same idea goes by several names across transformers' configs.
LAYER_FIELDS = (
    "num_hidden_layers", "num_layers", "encoder_layers", "decoder_layers", "num_encoder_layers",
    "num_decoder_layers", "n_layers", "n_layer",
)  # fmt: skip
DEPTH_FIELDS = ("depths", "depth", "layers", "num_layers_per_stage", "stage_num_blocks", "block_sizes")
WIDTH_FIELDS = ("hidden_size", "d_model", "dim", "n_embd", "emb_dim")  # per token, shared with the heads
FFN_FIELDS = ("intermediate_size", "encoder_ffn_dim", "decoder_ffn_dim", "n_inner", "ffn_dim", "hidden_dim")
VOCAB_FIELDS = ("vocab_size", "n_words", "entity_vocab_size", "pronunciation_vocab_size", "shape_vocab_size")
STAGE_WIDTH_FIELDS = ("hidden_sizes", "embed_dims", "embed_dim", "channels", "stage_out_channels", "dims", "conv_dim")
HEAD_FIELDS = (
    "num_attention_heads", "num_heads", "encoder_attention_heads", "decoder_attention_heads", "n_heads", "n_head",
)  # fmt: skip
OUTPUTS = ("logits", "predicted_depth", "last_hidden_state", "feature_maps")
# Per model: config fields the rule leaves as its default config has them, or sets, and why (keep this short).
OVERRIDES: dict[str, dict] = {}


@dataclass(frozen=True)
class Entry:
    """One catalog model: transformers model type, modality, task and the auto class that builds it."""

    model_type: str
    modality: str
    task: str
    auto_class: str

    @property
    def name(self) -> str:
        """The zoo name: transformers:TYPE/TASK."""
        return f"{PREFIX}{self.model_type}/{self.task}"


def catalog(modality: str | None = None) -> list[Entry]:
    """Every catalog entry of the installed transformers (of one modality, if given), one per (type, task)."""
    from transformers.models.auto import modeling_auto

    if modality not in (None, *MODALITIES):
        raise ValueError(f"unknown modality {modality!r}: one of {', '.join(MODALITIES)}")
    encoders = set(getattr(modeling_auto, "MODEL_FOR_MASKED_LM_MAPPING_NAMES", {}))
    entries = []
    for kind, task, mapping, auto_class in TASKS:
        if modality not in (None, kind):
            continue
        for model_type in getattr(modeling_auto, mapping, {}):
            if kind == "text" and model_type not in encoders:
                continue
            entries.append(Entry(model_type, kind, task, auto_class))
    return entries


def default_names(modality: str | None = None) -> list[str]:
    """One model name per architecture: its first task in TASKS order (`transformers:NAME/TASK`)."""
    seen, names = set(), []
    for entry in catalog(modality):
        if entry.model_type not in seen:
            seen.add(entry.model_type)
            names.append(entry.name)
    return names


def find(name: str) -> Entry:
    """The entry `transformers:TYPE` (its first task) or `transformers:TYPE/TASK`; ValueError if none."""
    model_type, _, task = name.removeprefix(PREFIX).partition("/")
    for entry in catalog():
        if entry.model_type == model_type and task in ("", entry.task):
            return entry
    raise ValueError(f"{name!r} is not in the transformers catalog (installed transformers {transformers_version()})")


def build_entry(name: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """(module, inputs) of a catalog model, random weights, in eval mode."""
    import transformers

    entry = find(name)
    config = shrunk_config(entry.model_type)
    for field, value in OVERRIDES.get(entry.model_type, {}).items():
        setattr(config, field, value)
    if entry.task != "backbone":
        config.num_labels = 10
    config.architectures = config.architectures or []  # several classes per type (DeiT): the task's first
    auto = getattr(transformers, entry.auto_class)
    model = auto.from_config(config, attn_implementation="eager") if _eager_ok(auto) else auto.from_config(config)
    model.eval()
    inputs = example_inputs(model, config)
    wrapped = FirstTensor(model, getattr(model, "main_input_name", "pixel_values"))
    # A shrunk config that does not run is the catalog's failure (the zoo's "export failed"), not the
    # lowering's: without this run the first step to execute the model, quantization, would take the blame.
    try:
        with torch.no_grad():
            wrapped(*inputs)
    except Exception as exc:
        parameters = sum(p.numel() for p in wrapped.parameters())
        raise DoesNotRun(f"does not run in eager: {type(exc).__name__}: {exc}", parameters) from exc
    return wrapped, inputs


class DoesNotRun(RuntimeError):
    """A catalog model that builds but does not run in eager on its example inputs."""

    def __init__(self, message: str, parameters: int):
        super().__init__(message)
        self.parameters = parameters


class FirstTensor(torch.nn.Module):
    """A transformers model as a plain module: its main input in, its first result tensor(s) out."""

    def __init__(self, model: torch.nn.Module, input_name: str):
        super().__init__()
        self.model, self.input_name = model, input_name

    def forward(self, x):
        out = self.model(**{self.input_name: x})
        for key in OUTPUTS:
            value = getattr(out, key, None)
            if isinstance(value, torch.Tensor):
                return value
            if isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value):
                return tuple(value)
        return out[0]


def shrunk_config(model_type: str):
    """The default config of `model_type` made small by the catalog's one rule (module docstring), nested configs
    too; built afresh from the shrunk fields, so that what a config derives from them (a backbone's stage names
    and output stages) follows."""
    from transformers import AutoConfig

    fields = shrink(AutoConfig.for_model(model_type).to_dict())
    fields.pop("model_type", None)
    return AutoConfig.for_model(model_type, **fields)


DERIVED = ("stage_names", "out_features", "_name_or_path", "transformers_version", "architectures")


def shrink(fields: dict) -> dict:
    """A config's fields (`to_dict()`) made small by the catalog's rule; nested configs too."""
    fields = {k: v for k, v in fields.items() if k not in DERIVED}
    for field, value in fields.items():
        if isinstance(value, dict) and "model_type" in value:
            fields[field] = shrink(value)
    default_layers = fields.get("num_hidden_layers")
    # A model whose stages are its layers keeps as many layers as it hands out (DPT's neck reads four), the last
    # ones: out_indices count the embeddings as stage 0, backbone_out_indices count layers from 0.
    outputs = {f: fields[f] for f in ("out_indices", "backbone_out_indices") if _int_list(fields.get(f))}
    most = max([MAX_LAYERS, *(len(v) for v in outputs.values())]) if isinstance(default_layers, int) else MAX_LAYERS
    for field in LAYER_FIELDS:
        if isinstance(fields.get(field), int) and fields[field] > most:
            fields[field] = most
    layers = fields.get("num_hidden_layers")
    if isinstance(layers, int) and isinstance(fields.get("layer_types"), list):  # one type per layer, kept in order
        fields["layer_types"] = fields["layer_types"][:layers]
    if isinstance(default_layers, int) and layers != default_layers:
        for field, value in outputs.items():
            first = layers - len(value) + (1 if field == "out_indices" else 0)
            fields[field] = list(range(first, first + len(value)))
    for field in DEPTH_FIELDS:
        if _int_list(fields.get(field)):
            fields[field] = [min(d, 1) for d in fields[field]]
    for field in [
        *STAGE_WIDTH_FIELDS,
        *(f for f in fields if f.endswith("hidden_sizes") and f not in STAGE_WIDTH_FIELDS),
    ]:
        value = fields.get(field)
        if _int_list(value) and max(value) > MAX_STAGE_WIDTH:
            ratio = max(value) / MAX_STAGE_WIDTH
            fields[field] = [max(8, 8 * round(v / ratio / 8)) for v in value]
        elif isinstance(value, int) and field in ("embed_dim", "embed_dims") and value > MAX_EMBED:
            fields[field] = MAX_EMBED
    heads = None
    for field in HEAD_FIELDS:
        value = fields.get(field)
        if isinstance(value, int) and value > MAX_HEADS:
            fields[field] = heads = MAX_HEADS
        elif _int_list(value):
            fields[field] = [min(h, MAX_HEADS) for h in value]
    per = heads or next((fields[f] for f in HEAD_FIELDS if isinstance(fields.get(f), int)), 1)
    per = per if isinstance(per, int) and per > 0 else 1
    width = MAX_WIDTH - MAX_WIDTH % per
    narrowed = False
    for field in WIDTH_FIELDS:
        if isinstance(fields.get(field), int) and fields[field] > width:
            fields[field], narrowed = width, True
    if narrowed:
        if isinstance(fields.get("embedding_size"), int) and fields["embedding_size"] > width:
            fields["embedding_size"] = width  # embeddings no wider than the tokens they feed
        for field in FFN_FIELDS:
            if isinstance(fields.get(field), int) and fields[field] > 2 * width:
                fields[field] = 2 * width
        if isinstance(fields.get("head_dim"), int):
            fields["head_dim"] = width // per
    # Compound scaling (EfficientNet): the base model's depth (its width coefficient also sizes hidden_dim).
    if isinstance(fields.get("depth_coefficient"), float) and fields["depth_coefficient"] > 1.0:
        fields["depth_coefficient"] = 1.0
    for field, value in list(fields.items()):  # widths a head shares with its backbone (reassemble_hidden_size)
        widths = field.endswith(("hidden_size", "output_size"))  # heads' widths: DPT's fusion, its pooler
        if widths and field != "hidden_size" and isinstance(value, int) and value > MAX_WIDTH:
            fields[field] = MAX_WIDTH
    if isinstance(fields.get("num_key_value_heads"), int) and isinstance(heads, int):
        fields["num_key_value_heads"] = math.gcd(fields["num_key_value_heads"], heads) or 1
    # GroupNorm's group count divides every width it normalises: the rule's are multiples of 8 (BiT's bottlenecks
    # a quarter of a stage's 32), so at most 8
    if isinstance(fields.get("num_groups"), int) and fields["num_groups"] > MAX_GROUPS:
        fields["num_groups"] = MAX_GROUPS
    if isinstance(fields.get("window_size"), int) and fields["window_size"] > WINDOW:
        fields["window_size"] = WINDOW
    if isinstance(fields.get("image_size"), int):
        fields["image_size"] = IMAGE
    elif _int_list(fields.get("image_size")):
        fields["image_size"] = [IMAGE] * len(fields["image_size"])
    special = [v for k, v in fields.items() if k.endswith("token_id") and isinstance(v, int)]
    for field in VOCAB_FIELDS:
        if isinstance(fields.get(field), int) and fields[field] > MAX_VOCAB:
            fields[field] = max([MAX_VOCAB, *(s + 1 for s in special)])
    for field, small in (("max_length", FRAMES), ("max_source_positions", FRAMES // 2)):
        if isinstance(fields.get(field), int) and fields[field] > small:
            fields[field] = small
    return fields


def example_inputs(model: torch.nn.Module, config) -> tuple[torch.Tensor, ...]:
    """Seeded inputs of the model's main input: an image, token ids within the vocabulary, audio samples or
    spectrogram frames."""
    name = getattr(model, "main_input_name", "pixel_values")
    if name == "pixel_values":
        side = config.image_size if isinstance(getattr(config, "image_size", None), int) else IMAGE
        channels = getattr(config, "num_channels", 3) or 3
        return (torch.randn(1, channels, side, side),)
    if name == "input_ids":
        ids = torch.randint(0, int(getattr(config, "vocab_size", MAX_VOCAB)), (1, TOKENS))
        end = getattr(config, "eos_token_id", None)
        if isinstance(end, int):  # a sentence ends: encoder-decoder classifiers pool at the end token
            ids[0, -1] = end
        return (ids,)
    if name == "input_values":
        return (torch.randn(1, SAMPLES),)
    if name == "input_features":
        mels = int(getattr(config, "num_mel_bins", 80))
        if getattr(config, "model_type", "") == "audio-spectrogram-transformer":
            return (torch.randn(1, int(config.max_length), mels),)
        return (torch.randn(1, mels, 2 * int(getattr(config, "max_source_positions", FRAMES // 2))),)
    raise ValueError(f"main input {name!r} is not one the catalog can draw")


def _int_list(value) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, int) for v in value)


def _eager_ok(auto) -> bool:
    return "Backbone" not in auto.__name__


def transformers_version() -> str:
    """The installed transformers' version: the catalog is its task mappings."""
    import transformers

    return transformers.__version__


# Names that moved elsewhere, kept here one release (with a DeprecationWarning).
__getattr__ = moved_attributes(
    __name__,
    {
        "build": "layout_solver.zoo.catalog:build_entry",
    },
)
