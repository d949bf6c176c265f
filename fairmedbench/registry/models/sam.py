"""Loaders for SAM-style promptable segmenters (SAM, MedSAM, FT-SAM, SAM-Med2D, MobileSAM, TinySAM, LiteMedSAM,
LVM-Med).

Imported only when a model is loaded: segment_anything and torch are imported here at module level.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

import torch
from segment_anything.modeling import ImageEncoderViT, MaskDecoder, PromptEncoder, TwoWayTransformer
from segment_anything.modeling.image_encoder import Block, window_partition, window_unpartition
from torch import nn

from fairmedbench.errors import InputError
from fairmedbench.registry.models.card import ModelCard
from fairmedbench.registry.models.runtime import FoundationModel, PromptableSegmenter, seeded
from fairmedbench.registry.models.tinyvit import TinyViTSAM, fuse_conv_bn
from fairmedbench.registry.models.weights import ResolvedWeights, load_into, read_state_dict

VIT_SIZES = {  # segment_anything's build_sam settings: (embed_dim, depth, heads, global attention blocks)
    "vit_b": (768, 12, 12, (2, 5, 8, 11)),
    "vit_l": (1024, 24, 16, (5, 11, 17, 23)),
    "vit_h": (1280, 32, 16, (7, 15, 23, 31)),
}


class SamParts(nn.Module):
    """Container whose parameter names match SAM-family checkpoints (image_encoder., prompt_encoder., ...)."""

    def __init__(self, image_encoder: nn.Module, image_size: int, embed_size: int) -> None:
        super().__init__()
        self.image_encoder = image_encoder
        self.prompt_encoder = PromptEncoder(
            embed_dim=256, image_embedding_size=(embed_size, embed_size),
            input_image_size=(image_size, image_size), mask_in_chans=16,
        )
        self.mask_decoder = MaskDecoder(
            num_multimask_outputs=3,
            transformer=TwoWayTransformer(depth=2, embedding_dim=256, mlp_dim=2048, num_heads=8),
            transformer_dim=256, iou_head_depth=3, iou_head_hidden_dim=256,
        )


def vit_encoder(size: str, image_size: int, use_abs_pos: bool = True) -> ImageEncoderViT:
    """SAM's ViT image encoder at `image_size` (patch 16, window 14, 256-channel neck)."""
    dim, depth, heads, global_idx = VIT_SIZES[size]
    return ImageEncoderViT(
        depth=depth, embed_dim=dim, img_size=image_size, mlp_ratio=4,
        norm_layer=partial(torch.nn.LayerNorm, eps=1e-6), num_heads=heads, patch_size=16,
        qkv_bias=True, use_rel_pos=True, global_attn_indexes=global_idx, window_size=14, out_chans=256,
        use_abs_pos=use_abs_pos,
    )


class Adapter(nn.Module):
    """SAM-Med2D's adapter (`Adapter_Layer` in OpenGVLab/SAM-Med2D segment_anything/modeling/image_encoder.py):
    channel attention (squeeze-excite MLP) then a strided conv / transposed-conv spatial branch, residual,
    LayerNorm. Written here because no maintained package ships it; parameter names follow the checkpoint."""

    def __init__(self, dim: int, mlp_ratio: float = 0.25) -> None:
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.norm = nn.LayerNorm(dim)
        self.channel = nn.Sequential(nn.Linear(dim, hidden, bias=False), nn.ReLU(),
                                     nn.Linear(hidden, dim, bias=False), nn.Sigmoid())
        self.spatial = nn.Sequential(nn.Conv2d(dim, dim, 3, stride=2, padding=1, bias=False), nn.ReLU(),
                                     nn.ConvTranspose2d(dim, dim, 4, stride=2, padding=1, bias=False), nn.ReLU())
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, H, W, C) -> (B, H, W, C)."""
        x = x.permute(0, 3, 1, 2)
        gate = self.channel(x.mean(dim=(2, 3)))[:, :, None, None]
        x = x + self.spatial(gate * x)
        return self.norm(x.permute(0, 2, 3, 1))


class AdapterViT(ImageEncoderViT):
    """segment-anything's ImageEncoderViT with SAM-Med2D's adapter in every block (`blocks.N.Adapter.*`);
    each block computes x + attn, then x + mlp(norm2(x)) + Adapter(norm2(x)) as SAM-Med2D's Block does."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for blk in self.blocks:
            blk.Adapter = Adapter(blk.norm1.normalized_shape[0])

    @staticmethod
    def _block(blk: Block, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = blk.norm1(x)
        if blk.window_size > 0:
            h, w = x.shape[1], x.shape[2]
            x, pad_hw = window_partition(x, blk.window_size)
        x = blk.attn(x)
        if blk.window_size > 0:
            x = window_unpartition(x, blk.window_size, pad_hw, (h, w))
        x = shortcut + x
        normed = blk.norm2(x)
        return x + blk.mlp(normed) + blk.Adapter(normed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, 3, S, S) -> (B, 256, S/16, S/16)."""
        x = self.patch_embed(x)
        if self.pos_embed is not None:
            x = x + self.pos_embed
        for blk in self.blocks:
            x = self._block(blk, x)
        return self.neck(x.permute(0, 3, 1, 2))


def adapter_vit_encoder(size: str, image_size: int) -> AdapterViT:
    """SAM-Med2D's encoder: SAM's ViT with adapters, at `image_size` (256 for the released checkpoint)."""
    dim, depth, heads, global_idx = VIT_SIZES[size]
    return AdapterViT(
        depth=depth, embed_dim=dim, img_size=image_size, mlp_ratio=4,
        norm_layer=partial(torch.nn.LayerNorm, eps=1e-6), num_heads=heads, patch_size=16,
        qkv_bias=True, use_rel_pos=True, global_attn_indexes=global_idx, window_size=14, out_chans=256,
    )


def tinyvit_encoder(image_size: int, full_resolution_stem: bool) -> TinyViTSAM:
    """TinyViT-5M SAM encoder (MobileSAM/TinySAM at 1024 px, LiteMedSAM at 256 px)."""
    return TinyViTSAM(img_size=image_size, full_resolution_stem=full_resolution_stem)


def _sized(card: ModelCard, image_size: int | None) -> ModelCard:
    if image_size is None or image_size == card.preprocessing.size:
        return card
    return dataclasses.replace(card, preprocessing=dataclasses.replace(card.preprocessing, size=image_size))


def load_sam_family(card: ModelCard, resolved: ResolvedWeights, *,
                    image_size: int | None = None, fuse: bool = True, **_: Any) -> FoundationModel:
    """Build a SAM-family model from its card's `loader_options` and load its checkpoint by name.

    `fuse` folds TinyViT's BatchNorms into its convolutions after loading (frozen inference only).
    """
    if image_size is not None and not resolved.is_random:
        raise InputError("image_size may only be changed for random-weight smoke tests")
    card = _sized(card, image_size)
    opts = card.loader_options
    size = card.preprocessing.size
    if opts.get("encoder_only"):
        return _load_encoder_only(card, resolved)
    with seeded(resolved.seed):
        encoder: nn.Module
        if opts["encoder"] == "tinyvit":
            tiny = tinyvit_encoder(size, opts.get("full_resolution_stem", False))
            encoder, embed = tiny, tiny.out_resolution
        elif opts.get("adapters"):
            encoder = adapter_vit_encoder(opts["encoder"], size)
            embed = size // 16
        else:
            encoder = vit_encoder(opts["encoder"], size)
            embed = size // 16
        parts = SamParts(encoder, size, embed)
    if not resolved.is_random:
        assert resolved.path is not None
        # MobileSAM/TinySAM checkpoints keep TinyViT's unused ImageNet classifier (norm_head, head).
        load_into(parts, read_state_dict(resolved.path), what=card.name,
                  ignore_unexpected=("image_encoder.norm_head.", "image_encoder.head."))
    if fuse and isinstance(parts.image_encoder, TinyViTSAM):
        fuse_conv_bn(parts.image_encoder.eval())  # inference-only speed-up, after the weights are loaded
    return PromptableSegmenter(card, resolved, parts)


class _EncoderHolder(nn.Module):
    """Holds a bare image encoder under `image_encoder.` (the prefix LoRA and the SAM family use)."""

    def __init__(self, encoder: ImageEncoderViT) -> None:
        super().__init__()
        self.image_encoder = encoder


def _load_encoder_only(card: ModelCard, resolved: ResolvedWeights) -> FoundationModel:
    """LVM-Med ViT-B: SAM's ViT without absolute position embedding (as LVM-Med's `vit_encoder_b`)."""
    with seeded(resolved.seed):
        holder = _EncoderHolder(vit_encoder(card.loader_options["encoder"], card.preprocessing.size,
                                            use_abs_pos=False))
    if not resolved.is_random:
        assert resolved.path is not None
        load_into(holder.image_encoder, read_state_dict(resolved.path), what=f"{card.name} image encoder",
                  key_map=_encoder_key)
    return EncoderOnly(card, resolved, holder)


def _encoder_key(key: str) -> str | None:
    """Checkpoint key -> image-encoder key: accepts bare encoder checkpoints and full SAM-style ones."""
    for prefix in ("module.", "model."):
        if key.startswith(prefix):
            key = key[len(prefix):]
    if key.startswith(("prompt_encoder.", "mask_decoder.")):
        return None
    return key[len("image_encoder."):] if key.startswith("image_encoder.") else key


class EncoderOnly(FoundationModel):
    """A SAM-style ViT pretrained without a decoder (LVM-Med): embeddings only.

    The embedding is the global average of the last block's tokens (768-d), before the neck, as LVM-Med's
    classification code (`model/unet_vit_classification.py`) and FairMedFM's MedLVM wrapper compute it;
    the neck's weights are in the checkpoint and loaded, but unused.
    """

    module: _EncoderHolder

    def embed(self, module: nn.Module, pixels: torch.Tensor) -> torch.Tensor:
        """(B, 3, S, S) -> (B, 768)."""
        enc = module.image_encoder
        assert isinstance(enc, ImageEncoderViT), "an _EncoderHolder holds a SAM ViT"
        x = enc.patch_embed(pixels)
        for blk in enc.blocks:
            x = blk(x)
        return x.float().mean(dim=(1, 2))
