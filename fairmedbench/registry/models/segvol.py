"""SegVol (BAAI-DCAI/SegVol): a volumetric ViT (MONAI), a 3D prompt encoder taking points, a box and a text
embedding, a mask decoder that adds text-image similarity, and a CLIP text tower.

From maintained packages: MONAI's `ViT` (the official image encoder), segment-anything's `TwoWayTransformer`,
`PromptEncoder` modules and `MLP` (the official decoder uses the same transformer on flattened tokens), and
transformers' `CLIPTextModel` (the official TextEncoder). Written here, following
segment_anything_volumetric/modeling/{prompt_encoder,mask_decoder}.py, because no package has them: the 3D
random-Fourier position encoding, the box-corner and text tokens, and the decoder's 3D upscaling with its text
alignment. The CLIP tokenizer is open_clip's bundled BPE (the same vocabulary as the official
openai/clip-vit-base-patch32 tokenizer; the text tower is causal, so padding after the end token does not change
the pooled embedding).

Inference is the official zoom-out pass (inference_demo.py / demo_data_process.py): foreground normalisation,
min-max to [0, 1], crop to the non-zero box, resize (nearest-exact) to 32x256x256, prompts in that grid, logits
upsampled (trilinear), resized back (nearest), sigmoid > 0.5. The optional zoom-in sliding-window refinement of
the demo is not run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from segment_anything.modeling import PromptEncoder, TwoWayTransformer
from segment_anything.modeling.mask_decoder import MLP
from torch import nn

from fairmedbench.errors import InputError
from fairmedbench.registry.models.card import ModelCard
from fairmedbench.registry.models.runtime import seeded
from fairmedbench.registry.models.volumetric import VolumetricSegmenter
from fairmedbench.registry.models.weights import ResolvedWeights, load_into, read_state_dict

if TYPE_CHECKING:
    from transformers import CLIPTextConfig

    from fairmedbench.registry.models.runtime import VolumePrompt

PATCH = (4, 16, 16)
DIM = 768
TEXT_TEMPLATE = "A computerized tomography of a {}."
# transformers 4.18 (the release's pin) saved CLIP's position ids as a buffer; current versions derive them
LEGACY_TEXT_KEYS = ("text_encoder.clip_text_model.text_model.embeddings.position_ids",)


class _PositionEmbedding3D(nn.Module):
    """Random Fourier features of (x, y, z) as SegVol's PositionEmbeddingRandom (a 3-row Gaussian matrix)."""

    positional_encoding_gaussian_matrix: torch.Tensor  # a buffer (3, num_pos_feats)

    def __init__(self, num_pos_feats: int) -> None:
        super().__init__()
        self.register_buffer("positional_encoding_gaussian_matrix", torch.randn((3, num_pos_feats)))

    def _pe_encoding(self, coords: torch.Tensor) -> torch.Tensor:
        coords = 2 * np.pi * ((2 * coords - 1) @ self.positional_encoding_gaussian_matrix)
        return torch.cat([torch.sin(coords), torch.cos(coords)], dim=-1)

    def forward(self, size: Sequence[int]) -> torch.Tensor:
        h, w, d = (int(s) for s in size)
        grid = torch.ones((h, w, d), device=self.positional_encoding_gaussian_matrix.device)
        y = (grid.cumsum(dim=0) - 0.5) / h
        x = (grid.cumsum(dim=1) - 0.5) / w
        z = (grid.cumsum(dim=2) - 0.5) / d
        return self._pe_encoding(torch.stack([x, y, z], dim=-1)).permute(3, 0, 1, 2)

    def forward_with_coords(self, coords_input: torch.Tensor, image_size: Sequence[int]) -> torch.Tensor:
        coords = coords_input.clone().float()
        coords[:, :, 0] = coords[:, :, 0] / image_size[1]  # as the official code: axis 0 over size[1], 1 over [0]
        coords[:, :, 1] = coords[:, :, 1] / image_size[0]
        coords[:, :, 2] = coords[:, :, 2] / image_size[2]
        return self._pe_encoding(coords)


class SegVolPromptEncoder(PromptEncoder):
    """segment-anything's PromptEncoder modules (point/box-corner embeddings, unused 2D mask branch) with SegVol's
    3D position encoding; sparse tokens = points, box corners, then the text embedding."""

    def __init__(self, embed_dim: int, image_embedding_size: Sequence[int], input_image_size: Sequence[int]) -> None:
        super().__init__(embed_dim=embed_dim, image_embedding_size=tuple(image_embedding_size)[:2],
                         input_image_size=tuple(input_image_size)[:2], mask_in_chans=16)
        self.image_embedding_size = tuple(int(s) for s in image_embedding_size)
        self.input_image_size = tuple(int(s) for s in input_image_size)
        self.pe_layer = _PositionEmbedding3D(embed_dim // 2)

    def get_dense_pe(self) -> torch.Tensor:
        return self.pe_layer(self.image_embedding_size).unsqueeze(0)

    def forward(self, points: tuple[torch.Tensor, torch.Tensor] | None, boxes: torch.Tensor | None,
                text_embedding: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Sparse (1, n, C) and dense (1, C, h, w, d) prompt embeddings (no mask input, as at inference)."""
        dev = self.point_embeddings[0].weight.device
        sparse = torch.empty((1, 0, self.embed_dim), device=dev)
        if points is not None:
            coords, labels = points
            coords = coords + 0.5
            if boxes is None:
                coords = torch.cat([coords, torch.zeros((1, 1, 3), device=dev)], dim=1)
                labels = torch.cat([labels, -torch.ones((1, 1), device=dev)], dim=1)
            emb = self.pe_layer.forward_with_coords(coords, self.input_image_size)
            emb[labels == -1] = 0.0
            emb[labels == -1] += self.not_a_point_embed.weight
            emb[labels == 0] += self.point_embeddings[0].weight
            emb[labels == 1] += self.point_embeddings[1].weight
            sparse = torch.cat([sparse, emb], dim=1)
        if boxes is not None:
            corners = self.pe_layer.forward_with_coords((boxes + 0.5).reshape(-1, 2, 3), self.input_image_size)
            corners[:, 0, :] += self.point_embeddings[2].weight
            corners[:, 1, :] += self.point_embeddings[3].weight
            sparse = torch.cat([sparse, corners], dim=1)
        if text_embedding is not None:
            sparse = torch.cat([sparse, text_embedding[:, None]], dim=1)
        dense = self.no_mask_embed.weight.reshape(1, -1, 1, 1, 1).expand(1, -1, *self.image_embedding_size)
        return sparse, dense


class SegVolMaskDecoder(nn.Module):
    """SegVol's MaskDecoder (ViT branch): SAM's token decoder on 3D maps, 4x 3D upscaling, text similarity added."""

    def __init__(self, feat_shape: Sequence[int], dim: int = DIM) -> None:
        super().__init__()
        self.transformer = TwoWayTransformer(depth=2, embedding_dim=dim, mlp_dim=2048, num_heads=8)
        self.num_mask_tokens = 4
        self.iou_token = nn.Embedding(1, dim)
        self.mask_tokens = nn.Embedding(self.num_mask_tokens, dim)
        up = tuple(2 * int(s) for s in feat_shape)
        self.output_upscaling = nn.Sequential(
            nn.ConvTranspose3d(dim, dim // 4, kernel_size=2, stride=2), nn.LayerNorm((dim // 4, *up)), nn.GELU(),
            nn.ConvTranspose3d(dim // 4, dim // 8, kernel_size=2, stride=2), nn.GELU())
        self.output_hypernetworks_mlps = nn.ModuleList(MLP(dim, dim, dim // 8, 3) for _ in range(self.num_mask_tokens))
        self.iou_prediction_head = MLP(dim, 256, self.num_mask_tokens, 3)
        self.txt_align_upscaled_embedding = nn.Linear(768, 96)

    def forward(self, image_embeddings: torch.Tensor, text_embedding: torch.Tensor | None, image_pe: torch.Tensor,
                sparse: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        """Single-mask low-resolution logits (1, 1, 4h, 4w, 4d)."""
        tokens = torch.cat([self.iou_token.weight, self.mask_tokens.weight], dim=0)
        tokens = tokens[None].expand(sparse.shape[0], -1, -1)
        tokens = torch.cat([tokens, sparse], dim=1)
        src = image_embeddings + dense
        b, c, h, w, d = src.shape
        # SAM's transformer flattens the map's spatial axes: (h, w*d) flattens to the same token order as (h, w, d)
        hs, src = self.transformer(src.reshape(b, c, h, w * d), image_pe.reshape(1, c, h, w * d), tokens)
        up = self.output_upscaling(src.transpose(1, 2).reshape(b, c, h, w, d))
        hyper = torch.stack([mlp(hs[:, 1 + i]) for i, mlp in enumerate(self.output_hypernetworks_mlps)], dim=1)
        b, c, h, w, d = up.shape
        masks = (hyper @ up.reshape(b, c, h * w * d)).reshape(b, -1, h, w, d)
        if text_embedding is not None:
            sim = (self.txt_align_upscaled_embedding(text_embedding)[:, None] @ up.reshape(b, c, h * w * d))
            masks = masks + sim.reshape(b, 1, h, w, d)
        return masks[:, :1]


class SegVolTextEncoder(nn.Module):
    """CLIP text tower + a linear map to the decoder width (the official TextEncoder's modules)."""

    def __init__(self, config: CLIPTextConfig) -> None:
        super().__init__()
        from transformers import CLIPTextModel

        self.clip_text_model = CLIPTextModel(config)
        self.dim_align = nn.Linear(config.hidden_size, DIM)

    def forward(self, names: Sequence[str]) -> torch.Tensor:
        import open_clip

        tokenize = open_clip.get_tokenizer("ViT-B-32")
        ids = tokenize([TEXT_TEMPLATE.format(n) for n in names]).to(self.dim_align.weight.device)
        out = self.clip_text_model(input_ids=ids, attention_mask=(ids != 0).long())
        return self.dim_align(out.pooler_output)


class SegVolParts(nn.Module):
    """Container named as the release (image_encoder., prompt_encoder., mask_decoder., text_encoder.)."""

    def __init__(self, spatial_size: Sequence[int], text_config: CLIPTextConfig) -> None:
        super().__init__()
        from monai.networks.nets import ViT

        feat = tuple(s // p for s, p in zip(spatial_size, PATCH))
        self.image_encoder = ViT(in_channels=1, img_size=tuple(spatial_size), patch_size=PATCH, hidden_size=DIM,
                                 mlp_dim=3072, num_layers=12, num_heads=12, proj_type="perceptron",
                                 classification=False, dropout_rate=0.0)
        for block in self.image_encoder.blocks:  # newer MONAI adds a cross-attention norm; off here, as in 0.9.0
            block.norm_cross_attn = nn.Identity()
        self.prompt_encoder = SegVolPromptEncoder(DIM, feat, spatial_size)
        self.mask_decoder = SegVolMaskDecoder(feat)
        self.text_encoder = SegVolTextEncoder(text_config)
        self.feat_shape = feat


def foreground_normalise(x: np.ndarray) -> np.ndarray:
    """SegVol's ForegroundNormalization: voxels above the mean set the 0.05/99.95 percentile clip, mean and std."""
    fg = x[x > x.mean()]
    if fg.size == 0:
        return np.zeros_like(x, dtype=np.float32)
    lo, hi = np.percentile(fg, 0.05), np.percentile(fg, 99.95)
    return ((np.clip(x, lo, hi) - fg.mean()) / max(float(fg.std()), 1e-8)).astype(np.float32)


class SegVolSegmenter(VolumetricSegmenter):
    """SegVol's zoom-out inference with point or box prompts and the target's name as text."""

    module: SegVolParts

    @torch.inference_mode()
    def segment_volume(self, volume: np.ndarray, prompt: VolumePrompt, spacing: Sequence[float] | None = None,
                       text: str | None = None) -> np.ndarray:
        """uint8 (D, H, W) + 3D prompt (+ target name) -> boolean (D, H, W) mask."""
        self.check_prompt(volume, prompt)
        size = tuple(self.card.loader_options["spatial_size"])
        x = foreground_normalise(np.asarray(volume, dtype=np.float32))
        x = x - x.min()
        x = x / max(float(x.max()), 1e-8)
        nz = np.nonzero(x > 0)
        if not nz[0].size:
            return np.zeros(np.shape(volume), dtype=bool)
        lo = np.array([a.min() for a in nz])
        hi = np.array([a.max() for a in nz]) + 1
        crop = torch.as_tensor(x[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]])
        scale = np.asarray(size, dtype=np.float64) / (hi - lo)
        image = F.interpolate(crop[None, None], size=size, mode="nearest-exact")
        dev = self.device

        def grid(zyx: np.ndarray) -> np.ndarray:  # volume voxel (d, h, w) -> resized-crop voxel
            return np.clip(np.floor((zyx - lo) * scale), 0, np.asarray(size) - 1)

        points = boxes = None
        if prompt.points is not None:
            zyx = grid(np.asarray(prompt.points, dtype=np.float64)[:, ::-1])
            points = (torch.as_tensor(zyx, dtype=torch.float32, device=dev)[None],
                      torch.as_tensor(np.asarray(prompt.labels), dtype=torch.float32, device=dev)[None])
        if prompt.box is not None:
            b = np.asarray(prompt.box, dtype=np.float64)
            corners = np.concatenate([grid(b[:3][::-1]), grid(b[3:][::-1])])
            boxes = torch.as_tensor(corners, dtype=torch.float32, device=dev)[None]
        parts = self.module
        emb = parts.image_encoder(image.to(dev))[0]
        emb = emb.transpose(1, 2).reshape(1, -1, *parts.feat_shape)
        text_emb = parts.text_encoder([text]) if text else None
        sparse, dense = parts.prompt_encoder(points, boxes, text_emb)
        low = parts.mask_decoder(emb, text_emb, parts.prompt_encoder.get_dense_pe(), sparse, dense)
        logits = F.interpolate(low.float(), size=size, mode="trilinear", align_corners=False)
        logits = F.interpolate(logits, size=tuple(int(v) for v in hi - lo), mode="nearest")[0, 0].cpu()
        out = np.zeros(np.shape(volume), dtype=bool)
        out[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]] = (logits > 0).numpy()  # sigmoid > 0.5
        return out


def _strip(key: str) -> str:
    return key[len("module."):] if key.startswith("module.") else key


def load_segvol(card: ModelCard, resolved: ResolvedWeights, *, spatial_size: Sequence[int] | None = None,
                **_: Any) -> SegVolSegmenter:
    """Build SegVol and load its release by name. Random weights may use a smaller `spatial_size` (a multiple of
    the 4x16x16 patch) and a small text tower (CLIPTextConfig of width 64, 2 layers): smoke tests only."""
    from transformers import CLIPTextConfig

    size = tuple(card.loader_options["spatial_size"] if spatial_size is None else spatial_size)
    small = size != tuple(card.loader_options["spatial_size"])
    if small:
        if not resolved.is_random:
            raise InputError("spatial_size may only be changed for random-weight smoke tests")
        if any(s % p or s < p for s, p in zip(size, PATCH)):
            raise InputError(f"spatial_size={size}: each axis a multiple of the patch {PATCH}")
        card = dataclasses.replace(card, loader_options={**card.loader_options, "spatial_size": size})
    text_config = (CLIPTextConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2)
                   if small else CLIPTextConfig())
    with seeded(resolved.seed):
        parts = SegVolParts(card.loader_options["spatial_size"], text_config)
    if not resolved.is_random:
        assert resolved.path is not None
        state = {_strip(k): v for k, v in read_state_dict(resolved.path).items()}
        load_into(parts, state, what=card.name, ignore_unexpected=LEGACY_TEXT_KEYS)
    return SegVolSegmenter(card, resolved, parts.eval())
