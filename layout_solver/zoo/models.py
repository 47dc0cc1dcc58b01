"""Built-in model zoo: layout-relevant architectures built from code, random weights.

Every factory returns (module in eval mode, example inputs). Weights are
random (seeded): layouts do not depend on weight values, and nothing here
downloads anything.
"""

from __future__ import annotations

import glob
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from layout_solver._moved import moved_attributes
from layout_solver.zoo import catalog, saved

Factory = Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]


def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: type[nn.Module] | None = nn.ReLU):
    """Conv2d + BatchNorm2d (+ activation) as one Sequential."""
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


# ---------------------------------------------------------------- CNNs -----


class BasicBlock(nn.Module):
    """ResNet basic block (two 3x3 convs and a residual)."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(conv_bn(cin, cout, 3, stride), conv_bn(cout, cout, 3, act=None))
        self.short = conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x):
        return F.relu(self.body(x) + self.short(x))


class ResNet(nn.Module):
    """A ResNet of BasicBlocks: stem, stages of (channels, blocks, stride), pooling, linear classifier."""

    def __init__(self, stem: nn.Module, stages: list[tuple[int, int, int]], width: int, classes: int, pool: int | None):
        super().__init__()
        self.stem = stem
        blocks, cin = [], width
        for cout, n, stride in stages:
            for i in range(n):
                blocks.append(BasicBlock(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AvgPool2d(pool) if pool else nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.pool(self.blocks(self.stem(x)))
        return self.fc(torch.flatten(x, 1))


def resnet8():
    """MLPerf Tiny image classification (CIFAR-10)."""
    model = ResNet(conv_bn(3, 16, 3), [(16, 1, 1), (32, 1, 2), (64, 1, 2)], 16, 10, pool=8)
    return model, (torch.randn(1, 3, 32, 32),)


def resnet18():
    """ResNet-18 on a 128x128 input."""
    stem = nn.Sequential(conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1))
    model = ResNet(stem, [(64, 2, 1), (128, 2, 2), (256, 2, 2), (512, 2, 2)], 64, 1000, pool=None)
    return model, (torch.randn(1, 3, 128, 128),)


def mobilenet_v1_025():
    """MLPerf Tiny visual wake words: MobileNetV1, width 0.25, 96x96."""
    alpha = 0.25
    cfg = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    layers, cin = [conv_bn(3, int(32 * alpha), 3, 2)], int(32 * alpha)
    for cout, stride in cfg:
        cout = int(cout * alpha)
        layers += [conv_bn(cin, cin, 3, stride, groups=cin), conv_bn(cin, cout, 1)]
        cin = cout
    model = nn.Sequential(*layers, nn.AvgPool2d(3), nn.Flatten(), nn.Linear(cin, 2))
    return model, (torch.randn(1, 3, 96, 96),)


def ds_cnn():
    """MLPerf Tiny keyword spotting: DS-CNN (small) on 49x10 MFCC."""
    layers = [nn.Conv2d(1, 64, (10, 4), (2, 2), (5, 1)), nn.BatchNorm2d(64), nn.ReLU()]
    for _ in range(4):
        layers += [conv_bn(64, 64, 3, groups=64), conv_bn(64, 64, 1)]
    model = nn.Sequential(*layers, nn.AvgPool2d((25, 5)), nn.Flatten(), nn.Linear(64, 12))
    return model, (torch.randn(1, 1, 49, 10),)


class InvertedResidual(nn.Module):
    """MobileNetV2 inverted residual block."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers = [] if expand == 1 else [conv_bn(cin, hidden, 1, act=nn.ReLU6)]
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6), conv_bn(hidden, cout, 1, act=None)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


def mobilenet_v2():
    """MobileNetV2 (width 1.0) on a 160x160 input."""
    cfg = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
    layers, cin = [conv_bn(3, 32, 3, 2, act=nn.ReLU6)], 32
    for t, c, n, s in cfg:
        for i in range(n):
            layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
            cin = c
    layers += [conv_bn(cin, 1280, 1, act=nn.ReLU6), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, 1000)]
    return nn.Sequential(*layers), (torch.randn(1, 3, 160, 160),)


# -------------------------------------------------------- transformers -----


class Attention(nn.Module):
    """Hand-written multi-head attention (timm style: one qkv projection)."""

    def __init__(self, dim: int, heads: int, causal: bool = False):
        super().__init__()
        self.heads, self.scale, self.causal = heads, (dim // heads) ** -0.5, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        if self.causal:
            mask = torch.full((n, n), float("-inf")).triu(1)
            attn = attn + mask
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(x)


class Block(nn.Module):
    """Pre-norm transformer block (attention + MLP)."""

    def __init__(self, dim: int, heads: int, causal: bool = False, mlp: int = 4):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim), Attention(dim, heads, causal)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp * dim), nn.GELU(), nn.Linear(mlp * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """A small vision transformer: patch embedding, blocks, classification head."""

    def __init__(self, image: int, patch: int, dim: int, depth: int, heads: int, classes: int):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        tokens = (image // patch) ** 2
        self.pos = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        x = self.norm(self.blocks(x))
        return self.head(x.mean(dim=1))


def vit_small():
    """ViT-small-ish: dim 192, 4 blocks, 3 heads, patch 16 on 96x96 (36 tokens)."""
    return ViT(96, 16, 192, 4, 3, 1000), (torch.randn(1, 3, 96, 96),)


class LayerNorm2d(nn.Module):
    """Channel LayerNorm on NCHW (SAM/EdgeTAM neck): mean over dim 1."""

    def __init__(self, channels: int, eps: float = 1e-6):
        super().__init__()
        self.weight, self.bias, self.eps = nn.Parameter(torch.ones(channels)), nn.Parameter(torch.zeros(channels)), eps

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class EdgeTamLikeEncoder(nn.Module):
    """Conv patch embedding, ViT blocks, tokens back to NCHW, conv neck with LayerNorm2d."""

    def __init__(
        self, image: int = 128, patch: int = 16, dim: int = 192, depth: int = 6, heads: int = 3, neck: int = 128
    ):
        super().__init__()
        self.grid = image // patch
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.pos = nn.Parameter(torch.randn(1, self.grid * self.grid, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.neck = nn.Sequential(
            nn.Conv2d(dim, neck, 1, bias=False),
            LayerNorm2d(neck),
            nn.Conv2d(neck, neck, 3, padding=1, bias=False),
            LayerNorm2d(neck),
        )

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        x = self.blocks(x)
        b, _n, c = x.shape
        x = x.transpose(1, 2).reshape(b, c, self.grid, self.grid)
        return self.neck(x)


def edgetam_like():
    """EdgeTamLikeEncoder on a 128x128 input."""
    return EdgeTamLikeEncoder(), (torch.randn(1, 3, 128, 128),)


class ConvNeXtBlock(nn.Module):
    """ConvNeXt block: depthwise 7x7 conv, LayerNorm over channels (via permutes), MLP, residual."""

    def __init__(self, dim: int):
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.pw1, self.pw2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-1))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.pw2(F.gelu(self.pw1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


class ConvNeXtStack(nn.Module):
    """Stem (patchify conv + LayerNorm via permutes), stage 1, downsample, stage 2."""

    def __init__(self, dims: tuple[int, int] = (48, 96), depths: tuple[int, int] = (2, 2), classes: int = 1000):
        super().__init__()
        self.stem, self.stem_norm = nn.Conv2d(3, dims[0], 4, 4), nn.LayerNorm(dims[0])
        self.stage1 = nn.Sequential(*[ConvNeXtBlock(dims[0]) for _ in range(depths[0])])
        self.down_norm, self.down = nn.LayerNorm(dims[0]), nn.Conv2d(dims[0], dims[1], 2, 2)
        self.stage2 = nn.Sequential(*[ConvNeXtBlock(dims[1]) for _ in range(depths[1])])
        self.head_norm, self.head = nn.LayerNorm(dims[1]), nn.Linear(dims[1], classes)

    def forward(self, x):
        x = self.stem_norm(self.stem(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        x = self.stage1(x)
        x = self.down(self.down_norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2))
        x = self.stage2(x)
        return self.head(self.head_norm(x.mean((2, 3))))


def convnext_stack():
    """ConvNeXtStack on a 96x96 input."""
    return ConvNeXtStack(), (torch.randn(1, 3, 96, 96),)


class DecoderStack(nn.Module):
    """Decoder-only transformer blocks (causal attention) over hidden states."""

    def __init__(self, dim: int = 256, depth: int = 4, heads: int = 4):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(dim, heads, causal=True) for _ in range(depth)])
        self.norm, self.lm_head = nn.LayerNorm(dim), nn.Linear(dim, 512, bias=False)

    def forward(self, x):
        return self.lm_head(self.norm(self.blocks(x)))


def decoder_stack():
    """DecoderStack (4 causal blocks, width 256) over 64 tokens."""
    return DecoderStack(), (torch.randn(1, 64, 256),)


class ModelError(ValueError):
    """A model that cannot be built: the message names the model and the reason."""


def build(name: str, seed: int = 0) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """A zoo model by name, `path/to/file.py:factory` returning (module, inputs), a saved ExportedProgram
    `path/to/model.pt2` (`layout_solver.zoo.saved`), `transformers:NAME[/TASK]` (`layout_solver.zoo.catalog`) or
    `outside:NAME` (`layout_solver.zoo.outside`).

    Raises ModelError for an unknown name, a missing or broken file, a factory
    that raises or exits, or one that returns anything but (nn.Module, tensors).
    """
    torch.manual_seed(seed)
    if name in ZOO:
        factory = ZOO[name]
    elif name.startswith(catalog.PREFIX):
        try:
            return catalog.build_entry(name)
        except Exception as exc:  # an architecture the rule cannot build is that model's error
            raise ModelError(f"model {name!r}: {type(exc).__name__}: {str(exc)[:300]}") from exc
    elif saved.is_saved_program(name):
        try:
            module, inputs = saved.load(name)
        except saved.UnsupportedProgram as exc:
            raise ModelError(f"model {name!r}: {exc}") from exc
        return module, inputs  # an exported program's module runs as exported (it has no train mode to leave)
    elif name.startswith(GENERATED):
        factory = _generated_factory(name)
    elif name.startswith(OUTSIDE):
        factory = _outside_factory(name)
    elif ":" in name:
        factory = _load_factory(name)
    else:
        raise ModelError(f"unknown model {name!r}: not in the zoo ({', '.join(ZOO)}) and not path.py:factory")
    try:
        built = factory()
    except (Exception, SystemExit) as exc:  # a user's factory may do anything, sys.exit included
        raise ModelError(f"model {name!r}: the factory raised {type(exc).__name__}: {exc}") from exc
    if not (isinstance(built, tuple) and len(built) == 2 and isinstance(built[0], nn.Module)):
        raise ModelError(
            f"model {name!r}: the factory must return (torch.nn.Module, tuple of input tensors), "
            f"got {type(built).__name__}"
        )
    model, inputs = built
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    if not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise ModelError(f"model {name!r}: the inputs must be tensors, got {[type(t).__name__ for t in inputs]}")
    return model.eval(), inputs


GENERATED = "generated:"
OUTSIDE = "outside:"  # the models the rules were not written against (layout_solver.zoo.outside)


def _outside_names() -> list[str]:
    from layout_solver.zoo.outside import MODELS

    return [OUTSIDE + m for m in MODELS]


SETS = {"zoo": lambda: list(ZOO), "outside": _outside_names}


def expand_names(names: list[str]) -> list[str]:
    """Model names with every `generated:A-B` range written out as `generated:A` .. `generated:B`, every
    glob of saved programs ('DIR/*.pt2') as the files it matches, and `zoo` / `outside` as the built-ins / the
    outside set."""
    out = []
    for name in names:
        if name in SETS:  # "zoo": the built-ins; "outside": the outside set
            out += SETS[name]()
            continue
        if saved.is_saved_program(name) and glob.has_magic(name):  # 'DIR/*.pt2', as the shell would
            found = sorted(glob.glob(name))
            if not found:
                raise ModelError(f"no saved program matches {name!r}")
            out += found
            continue
        first, dash, last = name.removeprefix(GENERATED).partition("-")
        if name.startswith(GENERATED) and dash and first.isdigit() and last.isdigit():
            out += [f"{GENERATED}{seed}" for seed in range(int(first), int(last) + 1)]
        else:
            out.append(name)
    return out


def _generated_factory(name: str) -> Factory:
    """`generated:SEED`: the seeded random Arm test graph of layout_solver.zoo.generated."""
    from layout_solver.zoo import generated

    seed = name.removeprefix(GENERATED)
    if not seed.isdigit():
        raise ModelError(f"model {name!r}: a generated graph is named generated:SEED (a non-negative integer)")
    return lambda: generated.build_module(generated.random_graph(int(seed)))


def _outside_factory(name: str) -> Factory:
    """`outside:NAME`: a published architecture of layout_solver.zoo.outside (transformers configs)."""
    from layout_solver.zoo import outside

    model = name.removeprefix(OUTSIDE)
    if model not in outside.MODELS:
        raise ModelError(f"unknown model {name!r}: the outside models are {', '.join(outside.MODELS)}")
    return getattr(outside, model)


def _load_factory(spec: str) -> Factory:
    import importlib.util
    from pathlib import Path

    path, _, attr = spec.rpartition(":")
    file = Path(path)
    if not file.is_file():
        raise ModelError(f"model {spec!r}: file {path!r} not found")
    module_spec = importlib.util.spec_from_file_location(f"user_model_{file.stem}", file)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # syntax errors, failing imports, exit at import time
        raise ModelError(f"model {spec!r}: loading {path} raised {type(exc).__name__}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ModelError(f"model {spec!r}: {path} has no callable {attr!r}")
    return factory


# ------------------------------------------------- more zoo architectures -----


class MobileViTBlock(nn.Module):
    """MobileViT-style: local conv, unfold to patches, transformer over patches, fold back, fuse."""

    def __init__(self, channels: int, dim: int, depth: int = 2, patch: int = 2, heads: int = 2):
        super().__init__()
        self.patch = patch
        self.local = nn.Sequential(conv_bn(channels, channels, 3, act=nn.SiLU), nn.Conv2d(channels, dim, 1))
        self.blocks = nn.Sequential(*[Block(dim, heads, mlp=2) for _ in range(depth)])
        self.proj = conv_bn(dim, channels, 1, act=nn.SiLU)
        self.fuse = conv_bn(2 * channels, channels, 3, act=nn.SiLU)

    def forward(self, x):
        y = self.local(x)
        b, d, h, w = y.shape
        p = self.patch
        # (B, D, H, W) -> (B*p*p, H/p*W/p, D): tokens per patch position
        y = y.reshape(b, d, h // p, p, w // p, p).permute(0, 3, 5, 2, 4, 1).reshape(b * p * p, (h // p) * (w // p), d)
        y = self.blocks(y)
        y = y.reshape(b, p, p, h // p, w // p, d).permute(0, 5, 3, 1, 4, 2).reshape(b, d, h, w)
        return self.fuse(torch.cat([x, self.proj(y)], dim=1))


def mobilevit_like():
    """MobileViT-style network (conv stem, inverted residual, MobileViT block) on a 64x64 input."""
    model = nn.Sequential(
        conv_bn(3, 16, 3, 2, act=nn.SiLU),
        InvertedResidual(16, 24, 2, 4),
        MobileViTBlock(24, 48),
        InvertedResidual(24, 32, 2, 4),
        MobileViTBlock(32, 64),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )
    return model, (torch.randn(1, 3, 64, 64),)


class WindowBlock(nn.Module):
    """Swin-style block: attention inside non-overlapping windows of a token grid."""

    def __init__(self, dim: int, heads: int, window: int, grid: int):
        super().__init__()
        self.window, self.grid = window, grid
        self.norm1, self.attn = nn.LayerNorm(dim), Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        b, n, c = x.shape
        g, w = self.grid, self.window
        h = self.norm1(x).reshape(b, g // w, w, g // w, w, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, w * w, c)
        h = self.attn(h).reshape(b, g // w, g // w, w, w, c).permute(0, 1, 3, 2, 4, 5).reshape(b, n, c)
        x = x + h
        return x + self.mlp(self.norm2(x))


class SwinLike(nn.Module):
    """Patch embedding, window-attention blocks, mean-pooled classifier."""

    def __init__(self, image: int = 64, patch: int = 4, dim: int = 48, depth: int = 2, window: int = 4):
        super().__init__()
        self.grid = image // patch
        self.embed = nn.Conv2d(3, dim, patch, patch)
        self.blocks = nn.Sequential(*[WindowBlock(dim, 3, window, self.grid) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, 10)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(x)).mean(dim=1))


def swin_like():
    """SwinLike on a 64x64 input."""
    return SwinLike(), (torch.randn(1, 3, 64, 64),)


class UNetLike(nn.Module):
    """Two-level U-Net: conv encoder, nearest upsampling decoder with skip concatenations."""

    def __init__(self, c: int = 16, classes: int = 4):
        super().__init__()
        self.enc1 = nn.Sequential(conv_bn(3, c, 3), conv_bn(c, c, 3))
        self.enc2 = nn.Sequential(nn.MaxPool2d(2), conv_bn(c, 2 * c, 3), conv_bn(2 * c, 2 * c, 3))
        self.mid = nn.Sequential(nn.MaxPool2d(2), conv_bn(2 * c, 4 * c, 3))
        self.dec2 = nn.Sequential(conv_bn(6 * c, 2 * c, 3))
        self.dec1 = nn.Sequential(conv_bn(3 * c, c, 3))
        self.out = nn.Conv2d(c, classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(e1)
        m = self.mid(e2)
        d2 = self.dec2(torch.cat([F.interpolate(m, scale_factor=2.0, mode="nearest"), e2], dim=1))
        d1 = self.dec1(torch.cat([F.interpolate(d2, scale_factor=2.0, mode="nearest"), e1], dim=1))
        return self.out(d1)


def unet_like():
    """UNetLike on a 64x64 input."""
    return UNetLike(), (torch.randn(1, 3, 64, 64),)


ZOO: dict[str, Factory] = {
    "resnet8": resnet8,
    "mobilenet_v1_025": mobilenet_v1_025,
    "ds_cnn": ds_cnn,
    "mobilenet_v2": mobilenet_v2,
    "resnet18": resnet18,
    "vit_small": vit_small,
    "edgetam_like": edgetam_like,
    "convnext_stack": convnext_stack,
    "decoder_stack": decoder_stack,
    "mobilevit_like": mobilevit_like,
    "swin_like": swin_like,
    "unet_like": unet_like,
}


CNNS = ["resnet8", "mobilenet_v1_025", "ds_cnn", "mobilenet_v2", "resnet18"]
TRANSFORMERS = ["vit_small", "edgetam_like", "convnext_stack", "decoder_stack", "mobilevit_like", "swin_like"]
# The Ethos-U55 issue's zoo, and the models its transpose-cycle target is summed over.
ARM_TRANSFORMERS = ["vit_small", "edgetam_like", "convnext_stack"]
ARM_ZOO = CNNS + ARM_TRANSFORMERS


# Names that moved elsewhere, kept here one release (with a DeprecationWarning).
__getattr__ = moved_attributes(
    __name__,
    {
        "MULTI_METHOD_ZOO": "layout_solver.zoo.multi_method",
        "build_methods": "layout_solver.zoo.multi_method",
        "CachedDecoder": "layout_solver.zoo.multi_method",
        "CachedAttention": "layout_solver.zoo.multi_method",
        "decoder_kv": "layout_solver.zoo.multi_method",
        "convnext_two_res": "layout_solver.zoo.multi_method",
        "MultiMethodModel": "layout_solver.zoo.multi_method",
    },
)
