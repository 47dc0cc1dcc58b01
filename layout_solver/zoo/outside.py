"""Models from outside the zoo, for measuring rules on architectures they were not written against.

Built from Hugging Face `transformers` configs (published architectures: vision backbones, hybrids, one LLM
decode step; small sizes, random weights: layouts do not depend on weight values). Each factory returns
(module, example inputs); any of them is named `outside:NAME` wherever a zoo model is: `layout-solver compare
outside:deit --target ethos-u55-128`, `zoo --models outside:deit,outside:levit`.
"""

from __future__ import annotations

import torch
import transformers
from torch import nn

IMAGE = 64  # input side: big enough for every stage of each model, small enough for Vela and the reference model


OUTPUTS = ("logits", "predicted_depth", "last_hidden_state")  # the first a model has is its result


class Logits(nn.Module):
    """A transformers vision model as a plain module: pixels in, logits (or depth, or the last hidden state) out."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixels):
        out = self.model(pixel_values=pixels)
        return next(getattr(out, key) for key in OUTPUTS if getattr(out, key, None) is not None)


class DecodeStep(nn.Module):
    """One decode step of a causal LM whose KV cache is a graph input: [layers, 2 (k, v), 1, kv heads, positions,
    head dim]. The cache is an input, not a buffer, so export sees plain tensors (a static cache does not survive
    stock quantization in executorch 1.5.1) and the step is what a deployed decoder runs per token."""

    def __init__(self, model: nn.Module, layers: int):
        super().__init__()
        self.model, self.layers = model, layers

    def forward(self, input_ids, past):
        cache = transformers.DynamicCache()
        for layer in range(self.layers):
            cache.update(past[layer, 0], past[layer, 1], layer)
        position = torch.full((1, input_ids.shape[1]), past.shape[-2], dtype=torch.long)
        return self.model(input_ids=input_ids, past_key_values=cache, use_cache=True, position_ids=position).logits


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


def vit():
    """ViT (patch embedding, class token, pre-norm blocks)."""
    config = transformers.ViTConfig(
        image_size=IMAGE, patch_size=8, hidden_size=96, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=192, num_labels=10, attn_implementation="eager",
    )  # fmt: skip
    return Logits(transformers.ViTForImageClassification(config)), _image()


def beit():
    """BEiT (relative position bias gathered from a table, layer scale)."""
    config = transformers.BeitConfig(
        image_size=IMAGE, patch_size=8, hidden_size=96, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=192, num_labels=10, use_relative_position_bias=True, attn_implementation="eager",
    )  # fmt: skip
    return Logits(transformers.BeitForImageClassification(config)), _image()


def dinov2():
    """DINOv2 (interpolated position embeddings, layer scale)."""
    config = transformers.Dinov2Config(
        image_size=IMAGE, patch_size=8, hidden_size=96, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2,
        num_labels=10, attn_implementation="eager",
    )  # fmt: skip
    return Logits(transformers.Dinov2ForImageClassification(config)), _image()


def siglip():
    """SigLIP vision tower (attention-pooling head)."""
    config = transformers.SiglipVisionConfig(
        image_size=IMAGE, patch_size=8, hidden_size=96, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=192, attn_implementation="eager",
    )  # fmt: skip
    return Logits(transformers.SiglipVisionModel(config)), _image()


def mobilevit():
    """MobileViT (MobileNetV2 blocks, unfold-to-patches transformer blocks, fold back)."""
    config = transformers.MobileViTConfig(
        image_size=IMAGE, hidden_sizes=[48, 64, 80], neck_hidden_sizes=[16, 24, 32, 48, 64, 80, 160],
        num_attention_heads=2, num_labels=10, attn_implementation="eager",
    )  # fmt: skip
    return Logits(transformers.MobileViTForImageClassification(config)), _image()


def mobilevitv2():
    """MobileViTV2 (separable linear attention)."""
    config = transformers.MobileViTV2Config(image_size=IMAGE, width_multiplier=0.5, num_labels=10)
    return Logits(transformers.MobileViTV2ForImageClassification(config)), _image()


def poolformer():
    """PoolFormer (average pooling as the token mixer, group norm)."""
    config = transformers.PoolFormerConfig(
        hidden_sizes=[32, 64], depths=[1, 1], num_encoder_blocks=2, patch_sizes=[7, 3], strides=[4, 2],
        padding=[2, 1], num_labels=10,
    )  # fmt: skip
    return Logits(transformers.PoolFormerForImageClassification(config)), _image()


def convnext():
    """ConvNeXt (depthwise 7x7, channels-last LayerNorm, layer scale)."""
    config = transformers.ConvNextConfig(hidden_sizes=[32, 64], depths=[1, 1], num_stages=2, num_labels=10)
    return Logits(transformers.ConvNextForImageClassification(config)), _image()


def regnet():
    """RegNet (grouped 3x3 bottlenecks)."""
    config = transformers.RegNetConfig(
        embedding_size=16, hidden_sizes=[32, 64], depths=[1, 1], groups_width=8, num_labels=10
    )
    return Logits(transformers.RegNetForImageClassification(config)), _image()


def mobilenet_v2():
    """MobileNetV2 (inverted residuals, ReLU6), Hugging Face's implementation."""
    config = transformers.MobileNetV2Config(image_size=IMAGE, depth_multiplier=0.35, num_labels=10)
    return Logits(transformers.MobileNetV2ForImageClassification(config)), _image()


def pvt_v2():
    """PVTv2 (overlapping patch embedding, spatial-reduction attention, depthwise conv in the MLP)."""
    config = transformers.PvtV2Config(
        image_size=IMAGE, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[4, 2], hidden_sizes=[32, 64],
        num_attention_heads=[1, 2], mlp_ratios=[2, 2], patch_sizes=[7, 3], strides=[4, 2], num_labels=10,
    )  # fmt: skip
    return Logits(transformers.PvtV2ForImageClassification(config)), _image()


def focalnet():
    """FocalNet (focal modulation: depthwise context aggregation and gating instead of attention)."""
    config = transformers.FocalNetConfig(
        image_size=IMAGE, patch_size=4, embed_dim=32, depths=[1, 1], focal_levels=[2, 2], focal_windows=[3, 3],
        num_labels=10,
    )  # fmt: skip
    return Logits(transformers.FocalNetForImageClassification(config)), _image()


def swinv2():
    """Swin V2 (cosine attention, log-spaced continuous position bias)."""
    config = transformers.Swinv2Config(
        image_size=IMAGE, patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4], window_size=4, num_labels=10
    )
    return Logits(transformers.Swinv2ForImageClassification(config)), _image()


def glpn():
    """GLPN depth estimation (SegFormer-style encoder, upsampling decoder)."""
    config = transformers.GLPNConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[4, 2], hidden_sizes=[32, 64], num_attention_heads=[1, 2],
        patch_sizes=[7, 3], strides=[4, 2], decoder_hidden_size=32,
    )  # fmt: skip
    return Logits(transformers.GLPNForDepthEstimation(config)), _image()


def llama_decode():
    """Llama (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU): one decode step over a 64-token cache."""
    layers, kv_heads, head_dim, positions = 2, 2, 32, 64
    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=kv_heads, max_position_embeddings=256, attn_implementation="eager",
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    past = torch.randn(layers, 2, 1, kv_heads, positions, head_dim)
    return DecodeStep(model, layers), (torch.tensor([[7]]), past)


MODELS = [
    "deit", "levit", "segformer", "convnextv2", "efficientnet", "swin",
    "vit", "beit", "dinov2", "siglip", "mobilevit", "mobilevitv2", "poolformer", "convnext", "regnet",
    "mobilenet_v2", "pvt_v2", "focalnet", "swinv2", "glpn", "llama_decode",
]  # fmt: skip
