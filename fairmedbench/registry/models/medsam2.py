"""MedSAM2 loader: SAM 2.1 Hiera-T at 512 px built with the `sam2` package's modules (Meta's SAM 2 code).

Images are segmented one at a time as SAM 2's image predictor does (no memory across slices): the
no-memory embedding is added to the lowest-resolution map and the mask decoder also reads the two
high-resolution feature maps. Imported only when the model is loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from fairmedbench.errors import InputError
from fairmedbench.registry.models.card import ModelCard, smoke_sized
from fairmedbench.registry.models.runtime import FoundationModel, PromptableSegmenter, seeded
from fairmedbench.registry.models.weights import ResolvedWeights, load_into, read_state_dict

if TYPE_CHECKING:
    from numpy.typing import ArrayLike
    from sam2.modeling.sam2_base import SAM2Base

    from fairmedbench.registry.models.runtime import Box


def _rope(kv_in_dim: int | None, feat: int) -> dict[str, Any]:
    att = {"_target_": "sam2.modeling.sam.transformer.RoPEAttention", "rope_theta": 10000.0,
           "feat_sizes": [feat, feat], "embedding_dim": 256, "num_heads": 1, "downsample_rate": 1, "dropout": 0.1}
    if kv_in_dim:
        att.update(rope_k_repeat=True, kv_in_dim=kv_in_dim)
    return att


def medsam2_config(image_size: int = 512) -> dict[str, Any]:
    """bowang-lab/MedSAM2 sam2/configs/sam2.1_hiera_t512.yaml (its `model:` section) as a dict."""
    sine = "sam2.modeling.position_encoding.PositionEmbeddingSine"
    return {
        "_target_": "sam2.modeling.sam2_base.SAM2Base",
        "image_encoder": {
            "_target_": "sam2.modeling.backbones.image_encoder.ImageEncoder", "scalp": 1,
            "trunk": {"_target_": "sam2.modeling.backbones.hieradet.Hiera", "embed_dim": 96, "num_heads": 1,
                      "stages": [1, 2, 7, 2], "global_att_blocks": [5, 7, 9],
                      "window_pos_embed_bkg_spatial_size": [7, 7]},
            "neck": {"_target_": "sam2.modeling.backbones.image_encoder.FpnNeck",
                     "position_encoding": {"_target_": sine, "num_pos_feats": 256, "normalize": True,
                                           "scale": None, "temperature": 10000},
                     "d_model": 256, "backbone_channel_list": [768, 384, 192, 96],
                     "fpn_top_down_levels": [2, 3], "fpn_interp_model": "nearest"},
        },
        "memory_attention": {
            "_target_": "sam2.modeling.memory_attention.MemoryAttention", "d_model": 256,
            "pos_enc_at_input": True, "num_layers": 4,
            "layer": {"_target_": "sam2.modeling.memory_attention.MemoryAttentionLayer", "activation": "relu",
                      "dim_feedforward": 2048, "dropout": 0.1, "pos_enc_at_attn": False, "d_model": 256,
                      "pos_enc_at_cross_attn_keys": True, "pos_enc_at_cross_attn_queries": False,
                      "self_attention": _rope(None, 32), "cross_attention": _rope(64, 32)},
        },
        "memory_encoder": {
            "_target_": "sam2.modeling.memory_encoder.MemoryEncoder", "out_dim": 64,
            "position_encoding": {"_target_": sine, "num_pos_feats": 64, "normalize": True, "scale": None,
                                  "temperature": 10000},
            "mask_downsampler": {"_target_": "sam2.modeling.memory_encoder.MaskDownSampler", "kernel_size": 3,
                                 "stride": 2, "padding": 1},
            "fuser": {"_target_": "sam2.modeling.memory_encoder.Fuser", "num_layers": 2,
                      "layer": {"_target_": "sam2.modeling.memory_encoder.CXBlock", "dim": 256, "kernel_size": 7,
                                "padding": 3, "layer_scale_init_value": 1e-6, "use_dwconv": True}},
        },
        "num_maskmem": 7, "image_size": image_size, "sigmoid_scale_for_mem_enc": 20.0,
        "sigmoid_bias_for_mem_enc": -10.0, "use_mask_input_as_output_without_sam": True,
        "directly_add_no_mem_embed": True, "no_obj_embed_spatial": True, "use_high_res_features_in_sam": True,
        "multimask_output_in_sam": True, "iou_prediction_use_sigmoid": True, "use_obj_ptrs_in_encoder": True,
        "add_tpos_enc_to_obj_ptrs": True, "proj_tpos_enc_in_obj_ptrs": True,
        "use_signed_tpos_enc_to_obj_ptrs": True, "only_obj_ptrs_in_the_past_for_eval": True,
        "pred_obj_scores": True, "pred_obj_scores_mlp": True, "fixed_no_obj_ptr": True,
        "multimask_output_for_tracking": True, "use_multimask_token_for_obj_ptr": True,
        "multimask_min_pt_num": 0, "multimask_max_pt_num": 1, "use_mlp_for_obj_ptr_proj": True,
        "compile_image_encoder": False,
    }


class MedSAM2Segmenter(PromptableSegmenter):
    """SAM 2 image path: Hiera + FPN features, prompt encoder, mask decoder with high-resolution skips."""

    module: SAM2Base  # SAM 2's model, not SamParts: its own image path and decoder

    def _features(self, pixels: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        sam = self.module
        out = sam.forward_image(pixels)
        _, feats, _, sizes = sam._prepare_backbone_features(out)
        feats[-1] = feats[-1] + sam.no_mem_embed  # directly_add_no_mem_embed, as SAM2ImagePredictor
        maps = [f.permute(1, 2, 0).reshape(pixels.shape[0], -1, *s) for f, s in zip(feats, sizes)]
        return maps[-1], maps[:-1]

    def image_map(self, pixels: torch.Tensor) -> torch.Tensor:
        """The lowest-resolution (stride 16) 256-channel map, with the no-memory embedding added."""
        return self._features(pixels)[0]

    @torch.inference_mode()
    def encode_image(self, pixels: torch.Tensor) -> torch.Tensor:
        """Global average of the stride-16 map (computed from `self.module`, so a LoRA copy is honoured)."""
        return self._features(pixels)[0].float().mean(dim=(2, 3))

    def decode(self, emb: torch.Tensor, boxes: torch.Tensor | None,
               coords: tuple[torch.Tensor, torch.Tensor] | None = None, multimask: bool = False,
               decoder: nn.Module | None = None) -> torch.Tensor:
        """Not offered from a map alone: SAM 2's decoder also needs the high-resolution features."""
        raise InputError(f"model {self.card.name!r}: decoding from a cached encoder map is not supported "
                         "(SAM 2's mask decoder also reads high-resolution features); use --usage sam-prompt")

    @torch.inference_mode()
    def segment(self, image: np.ndarray, box: Box | None = None, points: ArrayLike | None = None,
                point_labels: ArrayLike | None = None, multimask: bool | None = None) -> np.ndarray:
        """Mask for a box and/or points in the image's pixels (SAM2ImagePredictor's single-image path)."""
        image = np.asarray(image)
        h, w = image.shape[:2]
        boxes, coords = self.prompt_tensors(h, w, box, points, point_labels)
        if multimask is None:
            multimask = box is None
        if boxes is not None:  # SAM 2 encodes a box as two corner points with labels 2 and 3
            corners = (boxes.reshape(1, 2, 2), torch.tensor([[2, 3]], dtype=torch.int64, device=self.device))
            coords = corners if coords is None else (torch.cat([corners[0], coords[0]], 1),
                                                     torch.cat([corners[1], coords[1]], 1))
        pixels = torch.from_numpy(self.preprocess(image))[None].to(self.device)
        emb, high_res = self._features(pixels)
        sam = self.module
        sparse, dense = sam.sam_prompt_encoder(points=coords, boxes=None, masks=None)
        low_res, iou, _, _ = sam.sam_mask_decoder(
            image_embeddings=emb, image_pe=sam.sam_prompt_encoder.get_dense_pe(), sparse_prompt_embeddings=sparse,
            dense_prompt_embeddings=dense, multimask_output=multimask, repeat_image=False,
            high_res_features=high_res)
        best = int(iou[0].argmax()) if multimask else 0
        return (self.to_image(low_res[:, best:best + 1], h, w)[0] > 0).cpu().numpy()


def load_medsam2(card: ModelCard, resolved: ResolvedWeights, *,
                 image_size: int | None = None, **_: Any) -> FoundationModel:
    """MedSAM2 (SAM 2.1 Hiera-T, 512 px); checkpoint {'model': SAM2Base state dict} as MedSAM2 releases it."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    card = smoke_sized(card, image_size, resolved.is_random)
    with seeded(resolved.seed):
        model = instantiate(OmegaConf.create(medsam2_config(card.preprocessing.size)), _recursive_=True)
    if not resolved.is_random:
        assert resolved.path is not None
        load_into(model, read_state_dict(resolved.path), what=card.name)
    return MedSAM2Segmenter(card, resolved, model)
