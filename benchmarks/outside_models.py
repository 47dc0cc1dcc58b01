"""Models from outside the zoo, for measuring rules on architectures they were not written against.

Built from Hugging Face `transformers` configs (published architectures, small sizes, random weights:
layouts do not depend on weight values). Each factory returns (module, example inputs), so any of them
can be named on the command line: `layout-solver compare benchmarks/outside_models.py:deit --target
ethos-u55-128`. Needs the `outside` extra: `.venv/bin/pip install -e .[outside]`.
"""

from __future__ import annotations

import torch
import transformers
from torch import nn

IMAGE = 64  # input side: big enough for every stage of each model, small enough for Vela and the reference model


class Logits(nn.Module):
    """A transformers vision model as a plain module: pixels in, logits (or the last hidden state) out."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixels):
        out = self.model(pixel_values=pixels)
        return out.logits if hasattr(out, "logits") else out.last_hidden_state


def _image() -> tuple[torch.Tensor]:
    return (torch.randn(1, 3, IMAGE, IMAGE),)


def deit():
    """DeiT (data-efficient ViT, distillation token): 2 blocks, 3 heads."""
    config = transformers.DeiTConfig(
        image_size=IMAGE, patch_size=8, hidden_size=96, num_hidden_layers=2, num_attention_heads=3,
        intermediate_size=192, num_labels=10, attn_implementation="eager",
    )  # fmt: skip
    return Logits(transformers.DeiTForImageClassification(config)), _image()


def levit():
    """LeViT (conv stem, attention with shrinking resolution, hardswish)."""
    config = transformers.LevitConfig(
        image_size=IMAGE, hidden_sizes=[64, 96, 128], num_attention_heads=[2, 3, 4], depths=[1, 1, 1],
        key_dim=[16, 16, 16], num_labels=10,
    )  # fmt: skip
    return Logits(transformers.LevitForImageClassification(config)), _image()


def segformer():
    """SegFormer (overlapping patch embeddings, efficient self-attention, all-MLP decode head)."""
    config = transformers.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[4, 2], hidden_sizes=[32, 64], num_attention_heads=[1, 2],
        decoder_hidden_size=64, num_labels=4, attn_implementation="eager",
    )  # fmt: skip
    return Logits(transformers.SegformerForSemanticSegmentation(config)), _image()


def convnextv2():
    """ConvNeXt V2 (depthwise 7x7, channels-last LayerNorm, global response normalisation)."""
    config = transformers.ConvNextV2Config(hidden_sizes=[32, 64], depths=[1, 1], num_stages=2, num_labels=10)
    return Logits(transformers.ConvNextV2ForImageClassification(config)), _image()


def efficientnet():
    """EfficientNet (MBConv with squeeze-excitation), width and depth scaled down."""
    config = transformers.EfficientNetConfig(
        image_size=IMAGE, width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320, num_labels=10
    )
    return Logits(transformers.EfficientNetForImageClassification(config)), _image()


def swin():
    """Swin (shifted windows, patch merging): 2 stages."""
    config = transformers.SwinConfig(
        image_size=IMAGE, patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4], window_size=4, num_labels=10
    )
    return Logits(transformers.SwinForImageClassification(config)), _image()


MODELS = ["deit", "levit", "segformer", "convnextv2", "efficientnet", "swin"]
