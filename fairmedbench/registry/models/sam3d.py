"""SAM-Med3D and FastSAM3D: a 3D ViT image encoder, SAM's prompt encoder and mask decoder in 3D.

The modules come from the `medim` package (uni-medical, the SAM-Med3D authors' model zoo); its module tree
has exactly the parameter names and shapes of uni-medical/SAM-Med3D's segment_anything/modeling/*3D.py
(checked key by key in tests/models/test_sam3d.py). FastSAM3D's distilled encoder (arcadelab/FastSAM3D,
distillation.py build_model + modeling/image_encoder3D.py) is medim's encoder with two changes no package
provides, written here: its first two blocks have no attention, and every block normalises the residual
stream after attention (`x = norm2(x + attn(norm1(x))); x = x + mlp(x)`).

Inference follows SAM-Med3D's utils/infer_utils.py: resample to 1.5 mm voxels, crop/pad a 128^3 window
centred on the prompt (official: on the label's box, which only the ground truth knows; the prompt is the
label-free equivalent), z-normalise over voxels > 0, point prompts in the crop's voxels, an all-zero
low-resolution mask input, single-mask output, trilinear upsampling, sigmoid > 0.5, pasted back and resampled
to the volume's grid (nearest).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from medim.models.sam_med3d import Block3D, ImageEncoderViT3D, MaskDecoder3D, MLPBlock, PromptEncoder3D
from torch import nn

from fairmedbench.errors import InputError
from fairmedbench.registry.models.card import ModelCard
from fairmedbench.registry.models.runtime import seeded
from fairmedbench.registry.models.volumetric import VolumetricSegmenter, crop_box, resample_xyz, z_normalise_foreground
from fairmedbench.registry.models.weights import ResolvedWeights, load_into, read_state_dict

if TYPE_CHECKING:
    import os

    from fairmedbench.registry.models.runtime import VolumePrompt

PROMPT_DIM = 384  # SAM-Med3D's prompt embedding width (build_sam3D.py: prompt_embed_dim)


class _PostNormBlock(Block3D):
    """FastSAM3D's student block: global attention, then LayerNorm of the residual stream, then the MLP."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm2(x + self.attn(self.norm1(x)))
        return x + self.mlp(x)


class _MlpOnlyBlock(nn.Module):
    """FastSAM3D's attention-free first blocks (Block3D_woatt): `x = norm2(x); x = x + mlp(x)`."""

    def __init__(self, dim: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = MLPBlock(embedding_dim=dim, mlp_dim=int(dim * mlp_ratio), act=nn.GELU)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm2(x)
        return x + self.mlp(x)


def sam_med3d_encoder(image_size: int) -> ImageEncoderViT3D:
    """SAM-Med3D's ViT-B encoder (build_sam3D_vit_b_ori): 768 wide, 12 blocks, windows of 14, 384-channel neck."""
    return ImageEncoderViT3D(depth=12, embed_dim=768, img_size=image_size, mlp_ratio=4,
                             norm_layer=partial(nn.LayerNorm, eps=1e-6), num_heads=12, patch_size=16, qkv_bias=True,
                             use_rel_pos=True, global_attn_indexes=[2, 5, 8, 11], window_size=14,
                             out_chans=PROMPT_DIM)


def fastsam3d_encoder(image_size: int, attention_free: int = 2) -> ImageEncoderViT3D:
    """FastSAM3D's distilled encoder: 6 blocks (768 wide, 6 heads, global attention), the first two MLP-only."""
    enc = ImageEncoderViT3D(depth=6, embed_dim=768, img_size=image_size, mlp_ratio=4,
                            norm_layer=partial(nn.LayerNorm, eps=1e-6), num_heads=6, patch_size=16, qkv_bias=True,
                            use_rel_pos=True, global_attn_indexes=list(range(6)), window_size=0,
                            out_chans=PROMPT_DIM)
    tokens = (image_size // 16,) * 3
    blocks: list[nn.Module] = [_MlpOnlyBlock(768) for _ in range(attention_free)]
    blocks += [_PostNormBlock(dim=768, num_heads=6, mlp_ratio=4, qkv_bias=True,
                              norm_layer=partial(nn.LayerNorm, eps=1e-6), use_rel_pos=True, window_size=0,
                              input_size=tokens) for _ in range(6 - attention_free)]
    enc.blocks = nn.ModuleList(blocks)
    return enc


class Sam3DParts(nn.Module):
    """Container named as the official checkpoints (image_encoder., prompt_encoder., mask_decoder.)."""

    def __init__(self, image_encoder: nn.Module, image_size: int) -> None:
        super().__init__()
        embed = image_size // 16
        self.image_encoder = image_encoder
        self.prompt_encoder = PromptEncoder3D(embed_dim=PROMPT_DIM, image_embedding_size=(embed,) * 3,
                                              input_image_size=(image_size,) * 3, mask_in_chans=16)
        self.mask_decoder = MaskDecoder3D(num_multimask_outputs=3, transformer_dim=PROMPT_DIM, iou_head_depth=3,
                                          iou_head_hidden_dim=256)


class Sam3DSegmenter(VolumetricSegmenter):
    """SAM-Med3D-style inference on one prompt-centred crop (see the module docstring)."""

    module: Sam3DParts

    @torch.inference_mode()
    def segment_volume(self, volume: np.ndarray, prompt: VolumePrompt, spacing: Sequence[float] | None = None,
                       text: str | None = None) -> np.ndarray:
        """uint8 (D, H, W) volume + point prompt (x, y, z) -> boolean (D, H, W) mask (no text prompt)."""
        self.check_prompt(volume, prompt)
        size = self.card.preprocessing.size
        x0 = torch.as_tensor(np.ascontiguousarray(np.asarray(volume).transpose(2, 1, 0)), dtype=torch.float32)
        x, scale = resample_xyz(x0, spacing, self.card.loader_options.get("target_spacing"))
        pts = (np.asarray(prompt.points, dtype=np.float64) + 0.5) * scale - 0.5
        src, dst, origin = crop_box((pts.min(0) + pts.max(0)) / 2, (size,) * 3, x.shape)
        crop = torch.zeros((size,) * 3)
        crop[dst] = x[src]
        crop = z_normalise_foreground(crop)
        dev = self.device
        emb = self.module.image_encoder(crop[None, None].to(dev))
        coords = torch.as_tensor(pts - origin, dtype=torch.float32, device=dev)[None]
        labels = torch.as_tensor(np.asarray(prompt.labels), dtype=torch.int64, device=dev)[None]
        low_in = torch.zeros((1, 1) + (size // 4,) * 3, device=dev)
        sparse, dense = self.module.prompt_encoder(points=(coords, labels), boxes=None, masks=low_in)
        low, _ = self.module.mask_decoder(image_embeddings=emb, image_pe=self.module.prompt_encoder.get_dense_pe(),
                                          sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense,
                                          multimask_output=False)
        logits = F.interpolate(low.float(), size=(size,) * 3, mode="trilinear", align_corners=False)[0, 0].cpu()
        full = torch.zeros(x.shape, dtype=torch.bool)
        full[src] = logits[dst] > 0  # sigmoid > 0.5
        if full.shape != x0.shape:
            full = F.interpolate(full[None, None].float(), size=tuple(x0.shape), mode="nearest")[0, 0] > 0.5
        return full.numpy().transpose(2, 1, 0)


def _sized(card: ModelCard, image_size: int | None, resolved: ResolvedWeights) -> ModelCard:
    if image_size is None or image_size == card.preprocessing.size:
        return card
    if not resolved.is_random:
        raise InputError("image_size may only be changed for random-weight smoke tests")
    if image_size % 16 or image_size < 32:
        raise InputError(f"image_size={image_size}: a multiple of 16, at least 32 (the decoder upsamples 4x)")
    pre = dataclasses.replace(card.preprocessing, size=image_size, depth=image_size)
    return dataclasses.replace(card, preprocessing=pre)


def _strip(key: str) -> str:
    return key[len("module."):] if key.startswith("module.") else key


def read_sam3d_state(path: str | os.PathLike) -> dict[str, Any]:
    """A SAM-Med3D / FastSAM3D checkpoint's tensors: unwraps their 'model_state_dict' container and the
    `module.` prefix DataParallel training leaves."""
    from pathlib import Path

    state = read_state_dict(Path(path))
    inner = state.get("model_state_dict")
    return {_strip(k): v for k, v in (inner if isinstance(inner, dict) else state).items()}


def load_sam3d(card: ModelCard, resolved: ResolvedWeights, *, image_size: int | None = None,
               **_: Any) -> Sam3DSegmenter:
    """Build SAM-Med3D or FastSAM3D (`loader_options['encoder']`) and load a full checkpoint by name.

    FastSAM3D publishes only its distilled encoder; its prompt encoder and mask decoder are SAM-Med3D-turbo's.
    `merge_fastsam3d` writes the one file this loader reads.
    """
    card = _sized(card, image_size, resolved)
    size = card.preprocessing.size
    with seeded(resolved.seed):
        enc = fastsam3d_encoder(size) if card.loader_options["encoder"] == "fastsam3d" else sam_med3d_encoder(size)
        parts = Sam3DParts(enc, size)
    if not resolved.is_random:
        assert resolved.path is not None
        state = read_sam3d_state(resolved.path)
        if not any(k.startswith("mask_decoder.") for k in state) and card.loader_options["encoder"] == "fastsam3d":
            raise InputError(f"{resolved.path} holds an image encoder only (FastSAM3D's release): merge it with "
                             "SAM-Med3D-turbo's prompt encoder and mask decoder first, e.g. python -c 'from "
                             "fairmedbench.registry.models.sam3d import merge_fastsam3d; merge_fastsam3d(\"enc.pth\", "
                             "\"sam_med3d_turbo.pth\", \"fastsam3d_full.pth\")'")
        load_into(parts, state, what=card.name)
    return Sam3DSegmenter(card, resolved, parts)


def merge_fastsam3d(encoder_path: str, sam_med3d_path: str, out_path: str) -> None:
    """One FastSAM3D checkpoint: the distilled encoder (as image_encoder.*) + SAM-Med3D's prompt encoder and
    mask decoder, saved as a plain tensor state dict."""
    enc = {f"image_encoder.{k}": v for k, v in read_sam3d_state(encoder_path).items()}
    teacher = {k: v for k, v in read_sam3d_state(sam_med3d_path).items()
               if k.startswith(("prompt_encoder.", "mask_decoder."))}
    torch.save({**enc, **teacher}, out_path)
