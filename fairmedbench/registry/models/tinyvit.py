"""TinyViT image encoder in its SAM variants (MobileSAM, TinySAM, LiteMedSAM), written from the
TinyViT paper (Wu et al., ECCV 2022) and MobileSAM's description, with parameter names that match the
published checkpoints so they load by name. No maintained package provides this SAM variant."""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from segment_anything.modeling.common import LayerNorm2d
from torch import nn


class ConvBN(nn.Sequential):
    """Conv (no bias) followed by BatchNorm; children named `c` and `bn` as in the checkpoints."""

    c: nn.Conv2d
    bn: nn.BatchNorm2d

    def __init__(self, cin: int, cout: int, k: int = 1, stride: int = 1, pad: int = 0, groups: int = 1):
        super().__init__()
        self.add_module("c", nn.Conv2d(cin, cout, k, stride, pad, groups=groups, bias=False))
        self.add_module("bn", nn.BatchNorm2d(cout))


def _pair(size: str | tuple[int, ...]) -> tuple[int, int]:
    """A Conv2d's stored 2D size (kernel, stride, numeric padding) as the pair its constructor takes."""
    assert not isinstance(size, str), "ConvBN pads by numbers"
    h, w = size
    return h, w


def fuse_conv_bn(module: nn.Module) -> nn.Module:
    """Fold every eval-mode ConvBN into one biased Conv2d (same outputs, fewer passes); in place."""
    for name, child in list(module.named_children()):
        if isinstance(child, ConvBN):
            conv, bn = child.c, child.bn
            assert bn.running_mean is not None and bn.running_var is not None, "ConvBN's BatchNorm tracks its stats"
            scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
            fused = nn.Conv2d(conv.in_channels, conv.out_channels, _pair(conv.kernel_size), _pair(conv.stride),
                              _pair(conv.padding), groups=conv.groups, bias=True).to(conv.weight.device)
            assert fused.bias is not None
            with torch.no_grad():
                fused.weight.copy_(conv.weight * scale[:, None, None, None])
                fused.bias.copy_(bn.bias - bn.running_mean * scale)
            setattr(module, name, fused)
        else:
            fuse_conv_bn(child)
    return module


class PatchEmbed(nn.Module):
    """Two conv-BN layers with GELU: stride 4 overall (MobileSAM) or 1x1 stride 1 (LiteMedSAM)."""

    def __init__(self, cin: int, dim: int, full_resolution: bool):
        super().__init__()
        k, s, p = (1, 1, 0) if full_resolution else (3, 2, 1)
        self.seq = nn.Sequential(ConvBN(cin, dim // 2, k, s, p), nn.GELU(), ConvBN(dim // 2, dim, k, s, p))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.seq(x)


class MBConv(nn.Module):
    """Inverted residual block: 1x1 expand, 3x3 depthwise, 1x1 project, residual, GELU."""

    def __init__(self, dim: int, expand: float):
        super().__init__()
        hidden = int(dim * expand)
        self.conv1 = ConvBN(dim, hidden)
        self.conv2 = ConvBN(hidden, hidden, 3, 1, 1, groups=hidden)
        self.conv3 = ConvBN(hidden, dim)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.conv1(x))
        y = self.act(self.conv2(y))
        return self.act(self.conv3(y) + x)


class PatchMerging(nn.Module):
    """1x1 conv, 3x3 depthwise (stride 2, or 1 into the last SAM stage), 1x1 conv; returns tokens."""

    def __init__(self, resolution: int, dim: int, out_dim: int, stride: int):
        super().__init__()
        self.resolution = resolution
        self.conv1 = ConvBN(dim, out_dim)
        self.conv2 = ConvBN(out_dim, out_dim, 3, stride, 1, groups=out_dim)
        self.conv3 = ConvBN(out_dim, out_dim)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim == 3:
            b, _, c = x.shape
            x = x.transpose(1, 2).reshape(b, c, self.resolution, self.resolution)
        x = self.act(self.conv1(x))
        x = self.act(self.conv2(x))
        return self.conv3(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    """Multi-head self-attention in a window, with a learned bias per relative offset (LeViT-style)."""

    bias_idx: torch.Tensor

    def __init__(self, dim: int, heads: int, window: int):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        points = list(itertools.product(range(window), range(window)))
        offsets: dict[tuple[int, int], int] = {}
        idx = []
        for p in points:
            for q in points:
                off = (abs(p[0] - q[0]), abs(p[1] - q[1]))
                idx.append(offsets.setdefault(off, len(offsets)))
        self.attention_biases = nn.Parameter(torch.zeros(heads, len(offsets)))
        n = len(points)
        self.register_buffer("bias_idx", torch.tensor(idx, dtype=torch.long).view(n, n), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, n, self.heads, 3, c // self.heads).permute(3, 0, 2, 1, 4)
        bias = self.attention_biases[:, self.bias_idx].to(q.dtype)
        # Explicit softmax(q k^T / sqrt(d) + bias) v: on CPU, SDPA with a float mask takes a slower path.
        attn = torch.baddbmm(bias.repeat(b, 1, 1), q.reshape(b * self.heads, n, -1),
                             k.reshape(b * self.heads, n, -1).transpose(1, 2), alpha=q.shape[-1] ** -0.5)
        out = torch.bmm(attn.softmax(dim=-1), v.reshape(b * self.heads, n, -1)).view(b, self.heads, n, -1)
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


class Mlp(nn.Module):
    """LayerNorm then a two-layer GELU MLP."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(self.norm(x))))


class TinyViTBlock(nn.Module):
    """Window attention (zero-padded windows), depthwise local conv, MLP; residuals around both."""

    def __init__(self, dim: int, resolution: int, heads: int, window: int, mlp_ratio: float):
        super().__init__()
        self.resolution, self.window = resolution, window
        self.attn = Attention(dim, heads, window)
        self.local_conv = ConvBN(dim, dim, 3, 1, 1, groups=dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        r, w = self.resolution, self.window
        if r == w:
            x = x + self.attn(x)
        else:
            pad = (w - r % w) % w
            y = F.pad(x.view(b, r, r, c), (0, 0, 0, pad, 0, pad))
            p, nw = r + pad, (r + pad) // w
            y = y.view(b, nw, w, nw, w, c).transpose(2, 3).reshape(b * nw * nw, w * w, c)
            y = self.attn(y)
            y = y.view(b, nw, nw, w, w, c).transpose(2, 3).reshape(b, p, p, c)[:, :r, :r]
            x = x + y.reshape(b, n, c)
        x = self.local_conv(x.transpose(1, 2).reshape(b, c, r, r)).view(b, c, n).transpose(1, 2)
        return x + self.mlp(x)


class Stage(nn.Module):
    """A list of blocks followed by an optional PatchMerging downsample."""

    def __init__(self, blocks: list[nn.Module], downsample: nn.Module | None):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            x = blk(x)
        return self.downsample(x) if self.downsample is not None else x


class TinyViTSAM(nn.Module):
    """TinyViT backbone (MBConv stage + 3 attention stages) with SAM's 256-channel neck."""

    def __init__(self, img_size: int = 1024, embed_dims: tuple[int, ...] = (64, 128, 160, 320),
                 depths: tuple[int, ...] = (2, 2, 6, 2), num_heads: tuple[int, ...] = (2, 4, 5, 10),
                 window_sizes: tuple[int, ...] = (7, 7, 14, 7), mlp_ratio: float = 4.0,
                 full_resolution_stem: bool = False, out_chans: int = 256):
        super().__init__()
        self.patch_embed = PatchEmbed(3, embed_dims[0], full_resolution_stem)
        res0 = img_size if full_resolution_stem else img_size // 4
        resolutions = [res0, res0 // 2, res0 // 4, res0 // 4]
        self.out_resolution = resolutions[-1]
        layers: list[nn.Module] = []
        for i, (dim, depth) in enumerate(zip(embed_dims, depths)):
            down = None
            if i < len(embed_dims) - 1:
                stride = 1 if i + 1 == len(embed_dims) - 1 else 2
                down = PatchMerging(resolutions[i], dim, embed_dims[i + 1], stride)
            if i == 0:
                blocks: list[nn.Module] = [MBConv(dim, 4.0) for _ in range(depth)]
            else:
                blocks = [TinyViTBlock(dim, resolutions[i], num_heads[i], window_sizes[i], mlp_ratio)
                          for _ in range(depth)]
            layers.append(Stage(blocks, down))
        self.layers = nn.ModuleList(layers)
        self.neck = nn.Sequential(
            nn.Conv2d(embed_dims[-1], out_chans, 1, bias=False),
            LayerNorm2d(out_chans),
            nn.Conv2d(out_chans, out_chans, 3, padding=1, bias=False),
            LayerNorm2d(out_chans),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x)
        for layer in self.layers:
            x = layer(x)
        b, _, c = x.shape
        r = self.out_resolution
        return self.neck(x.transpose(1, 2).reshape(b, c, r, r))
