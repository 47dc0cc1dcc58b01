"""Small models exercising the layout rules (used by the Vulkan and Arm tests)."""

import torch
from torch import nn


class Mixed(nn.Module):
    """conv (channels-packed) -> permute -> LayerNorm (multi-output) -> linear (width-packed)
    -> cat of two branches -> a tensor too wide for any texture (buffer only)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 8)

    def forward(self, x, wide):
        y = self.conv(x).permute(0, 2, 3, 1)
        y = self.fc(self.norm(y))
        z = torch.cat([y, y * 2.0], dim=-1)
        return z.sum(dim=-1), wide * 2.0 + 1.0


def mixed():
    return Mixed(), (torch.randn(1, 3, 8, 8), torch.randn(1, 1, 2, 70000))


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(4, 4, 3, padding=1)
        self.b = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        return torch.relu(self.b(torch.relu(self.a(x))) + x).mean(dim=(2, 3))


def residual():
    return Residual(), (torch.randn(1, 4, 8, 8),)


def attention():
    """One pre-norm attention block (the ViT's rank-5 qkv head split), 16 tokens of width 32."""
    from layout_solver.zoo.models import Attention

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = Attention(32, 2)

        def forward(self, x):
            return x + self.attn(x)

    return Tiny(), (torch.randn(1, 16, 32),)


class CatPad(nn.Module):
    """Two conv branches concatenated on channels, zero-padded, then another conv (cat and PAD rules)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(3, 4, 1)
        self.c = nn.Conv2d(8, 4, 3)

    def forward(self, x):
        y = torch.cat([torch.relu(self.a(x)), torch.relu(self.b(x))], dim=1)
        y = torch.nn.functional.pad(y * 0.5, (1, 1, 1, 1))
        return self.c(y)


def cat_pad():
    return CatPad(), (torch.randn(1, 3, 8, 8),)


class WindowHeads(nn.Module):
    """Windowed attention's head split: 16 windows of 16 tokens, a projection, then (W, T, h, d) -> (W, h, T, d)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 32)

    def forward(self, x):
        heads = self.proj(x).view(16, 16, 2, 16).permute(0, 2, 1, 3)
        return torch.relu(heads @ heads.transpose(-1, -2))


def window_heads():
    return WindowHeads(), (torch.randn(16, 16, 32),)


class CachedAttention(nn.Module):
    """Attention of a few new tokens over a key/value cache (LLM decode): q (h, n, d) against (h, 48, d)."""

    def __init__(self, dim: int = 64, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x, k_cache, v_cache):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        k, v = torch.cat([k_cache[:, :, n:], k], 2), torch.cat([v_cache[:, :, n:], v], 2)
        attn = (q @ k.transpose(-2, -1) * 0.125).softmax(-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


def decode_attention():
    """One new token: both products have a single row, so each runs cheaper transposed on Ethos-U55."""
    return CachedAttention(), (torch.randn(1, 1, 64), torch.randn(1, 2, 48, 32), torch.randn(1, 2, 48, 32))


class PatchEmbed(nn.Module):
    """A ViT patch embedding: the NCHW delegate input's only reader is the conv (its transpose's only reader)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(3, 16, 4, stride=4)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


def patch_embed():
    return PatchEmbed(), (torch.randn(1, 3, 32, 32),)


class SharedInput(nn.Module):
    """The delegate input is read by a conv and by the residual add: a reshape of it is a memory copy."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.conv(x) + x


def shared_input():
    return SharedInput(), (torch.randn(1, 8, 16, 16),)


class PaddedStem(nn.Module):
    """An EfficientNet-style stem, the 3-channel image padded before a stride-2 conv, then a padded
    32-channel conv: Vela's PAD is cheaper with W innermost for 3 channels and channels innermost for 32."""

    def __init__(self):
        super().__init__()
        self.stem_pad = nn.ZeroPad2d((0, 1, 0, 1))
        self.stem = nn.Conv2d(3, 32, 3, stride=2)
        self.pad = nn.ZeroPad2d(1)
        self.conv = nn.Conv2d(32, 32, 3, groups=32)

    def forward(self, x):
        return self.conv(self.pad(torch.relu(self.stem(self.stem_pad(x)))))


def padded_stem():
    return PaddedStem(), (torch.randn(1, 3, 64, 64),)


class GroupNormBlock(nn.Module):
    """conv -> GroupNorm -> conv (PoolFormer, MobileViTV2 and diffusion UNets normalise this way): the
    GroupNorm's view [1, C, H, W] -> [1, G, C/G, H*W] reads a channels-last tensor, its reductions and
    per-channel affine run on the view."""

    def __init__(self, groups: int = 1):
        super().__init__()
        self.conv = nn.Conv2d(3, 32, 3, padding=1)
        self.norm = nn.GroupNorm(groups, 32)
        self.out = nn.Conv2d(32, 16, 1)

    def forward(self, x):
        return self.out(self.norm(self.conv(x)))


def group_norm():
    return GroupNormBlock(), (torch.randn(1, 3, 16, 16),)


def group_norm_8():
    """GroupNorm(8, 32) after a conv, BiT-style: the view [1, 32, H, W] -> [1, 8, 4, H*W] and the per-channel
    affine read from Flash; stored channels-last, the affine's constant broadcasts along H (64 cycles an
    element on Ethos-U55), where stock's order broadcasts it along the innermost axis."""
    return GroupNormBlock(groups=8), (torch.randn(1, 3, 16, 16),)


class Resample(nn.Module):
    """conv -> nearest upsample (RESIZE), and a row mean broadcast back by expand (TILE, as BroadcastArgsPass and
    expand write repeats)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        y = nn.functional.interpolate(self.conv(x), scale_factor=2, mode="nearest")
        return y + y.mean(dim=3, keepdim=True).expand(1, 8, 16, 16)


def resample():
    return Resample(), (torch.randn(1, 3, 8, 8),)


class ResponseNorm(nn.Module):
    """ConvNeXt V2's global response normalisation on a channels-last map between two linear layers (as in its
    blocks, here with no permute nearby to offer other orders): the squared map summed over H and W, one
    REDUCE_SUM per axis of the 32-bit operand the INT pipeline rescales to."""

    def __init__(self, channels: int = 64):
        super().__init__()
        self.mix = nn.Linear(channels, channels)
        self.out = nn.Linear(channels, channels)
        self.gamma = nn.Parameter(torch.rand(1, 1, 1, channels))

    def forward(self, x):
        x = self.mix(x)
        norm = torch.norm(x, p=2, dim=(1, 2), keepdim=True)
        return self.out(self.gamma * x * (norm / (norm.mean(dim=-1, keepdim=True) + 1e-6)) + x)


def response_norm():
    return ResponseNorm(), (torch.randn(1, 16, 16, 64),)


class DividedGate(nn.Module):
    """A gate written with a division between two convolutions (MobileNetV3's hard sigmoid as PyTorch code spells
    it): the convolutions want channels-packed textures, where the runtime's division is slow on lavapipe."""

    def __init__(self, channels: int = 16):
        super().__init__()
        self.head = nn.Conv2d(3, channels, 3, padding=1)
        self.tail = nn.Conv2d(channels, channels, 1)

    def forward(self, x):
        x = self.head(x)
        return self.tail(x * (torch.clamp(x + 3.0, 0.0, 6.0) / 6.0))


def divided_gate():
    return DividedGate(), (torch.randn(1, 3, 8, 8),)
