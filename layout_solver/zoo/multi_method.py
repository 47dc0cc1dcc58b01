"""The zoo's multi-method models: one module exported as several methods that share its weights (a decoder's
prefill and decode; one network at two resolutions), each with how often it runs per use."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from layout_solver.compare.methods import MultiMethodModel
from layout_solver.zoo.models import ConvNeXtStack, ModelError


class CachedAttention(nn.Module):
    """Attention over a key/value cache of a fixed number of positions: the new keys and values enter at
    the end (a sliding window, so every shape is static) and the updated cache is returned."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x, k_cache, v_cache):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        k_all = torch.cat([k_cache[:, :, n:], k], dim=2)
        v_all = torch.cat([v_cache[:, :, n:], v], dim=2)
        attn = ((q @ k_all.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        return self.proj((attn @ v_all).transpose(1, 2).reshape(b, n, c)), k_all, v_all


class CachedDecoder(nn.Module):
    """Decoder blocks with a KV cache: one module serves prefill (many tokens) and decode (one token).

    The cache is an input and an output of every method (`[depth, 2, heads, positions, head_dim]`): the
    application keeps it between calls, as static-cache LLM exports do. (ExecuTorch 1.5.1's Vulkan
    delegate cannot run a cache kept as a mutated buffer: stock lowers it, and the runtime then rejects
    the call, "Vulkan graph declares 1 inputs and 5 outputs, but the delegate call supplied 2 arguments".)
    """

    def __init__(self, dim: int = 128, depth: int = 2, heads: int = 4):
        super().__init__()
        self.attn = nn.ModuleList(CachedAttention(dim, heads) for _ in range(depth))
        self.norm1 = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.norm2 = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.mlp = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)) for _ in range(depth)
        )
        self.lm_head = nn.Linear(dim, 256, bias=False)

    def forward(self, x, cache):
        updated = []
        for i, (attn, norm1, norm2, mlp) in enumerate(zip(self.attn, self.norm1, self.norm2, self.mlp)):
            y, k, v = attn(norm1(x), cache[i, 0:1], cache[i, 1:2])
            updated += [k, v]
            x = x + y
            x = x + mlp(norm2(x))
        return self.lm_head(x), torch.cat(updated).reshape(cache.shape)


def decoder_kv() -> MultiMethodModel:
    """Prefill 32 tokens once, then decode one token at a time (128 tokens per use)."""
    cache = torch.randn(2, 2, 4, 64, 32)  # depth, k/v, heads, positions, head_dim
    return MultiMethodModel(
        CachedDecoder().requires_grad_(False),
        {"prefill": (torch.randn(1, 32, 128), cache), "decode": (torch.randn(1, 1, 128), cache)},
        {"prefill": 1.0, "decode": 128.0},
    )


def convnext_two_res() -> MultiMethodModel:
    """One ConvNeXt at two input resolutions: a frequent low-resolution preview and an occasional full frame."""
    return MultiMethodModel(
        ConvNeXtStack(classes=100).requires_grad_(False),
        {"full": (torch.randn(1, 3, 96, 96),), "preview": (torch.randn(1, 3, 64, 64),)},
        {"full": 1.0, "preview": 10.0},
    )


def llama_decoder(layers: int = 32) -> MultiMethodModel:
    """A Llama-style decoder from transformers (LlamaConfig: RMSNorm, rotary embeddings, grouped-query attention,
    SwiGLU) of `layers` layers at small widths: prefill 16 tokens once, then decode one token at a time (64 per
    use); the KV cache (64 positions) is an input of both methods, as in `outside.llama_decode`."""
    import transformers

    from layout_solver.zoo.outside import DecodeStep

    kv_heads, head_dim, positions = 2, 16, 64
    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=kv_heads, max_position_embeddings=256, attn_implementation="eager",
    )  # fmt: skip
    past = torch.randn(layers, 2, 1, kv_heads, positions, head_dim)
    return MultiMethodModel(
        DecodeStep(transformers.LlamaForCausalLM(config), layers).requires_grad_(False),
        {"prefill": (torch.randint(0, 256, (1, 16)), past), "decode": (torch.tensor([[7]]), past)},
        {"prefill": 1.0, "decode": 64.0},
    )


MULTI_METHOD_ZOO: dict[str, Callable[[], MultiMethodModel]] = {
    "decoder_kv": decoder_kv,
    "convnext_two_res": convnext_two_res,
    "llama_decoder": llama_decoder,
}


def build_methods(name: str, seed: int = 0, **options) -> MultiMethodModel:
    """A built-in multi-method model by name (seeded random weights, eval mode); `options` go to its factory
    (`layers` for llama_decoder)."""
    if name not in MULTI_METHOD_ZOO:
        raise ModelError(f"unknown multi-method model {name!r}: expected one of {', '.join(MULTI_METHOD_ZOO)}")
    torch.manual_seed(seed)
    built = MULTI_METHOD_ZOO[name](**options)
    built.module.eval()
    return built
