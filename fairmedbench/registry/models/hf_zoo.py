"""Loaders for the transformers-format releases of 2025-26: DINOv3 ViTs and MedGemma's SigLIP image encoder.

Configs are the hub's published config.json values (cited per entry); random weights are built from them, real
ones come from the hub cache or a folder/file given with --weights, loaded strictly.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from fairmedbench.errors import InputError
from fairmedbench.registry.models.card import ModelCard, smoke_sized
from fairmedbench.registry.models.hf import HFModel, HFModule, _build
from fairmedbench.registry.models.runtime import FoundationModel, seeded
from fairmedbench.registry.models.weights import ResolvedWeights, load_into, read_state_dict

# facebook/dinov3-vit{s,b,l}16-pretrain-lvd1689m config.json (DINOv3ViTConfig; the other fields are the class's
# defaults: patch 16, 224 px, rope_theta 100, layerscale 1.0, no key bias, plain MLP).
DINOV3_CONFIGS: dict[str, dict[str, Any]] = {
    "vits16": {"hidden_size": 384, "intermediate_size": 1536, "num_hidden_layers": 12, "num_attention_heads": 6,
               "num_register_tokens": 4},
    "vitb16": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
               "num_register_tokens": 4},
    "vitl16": {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
               "num_register_tokens": 4},
}


def load_dinov3(card: ModelCard, resolved: ResolvedWeights, *,
                image_size: int | None = None, **_: Any) -> FoundationModel:
    """DINOv3 ViT (transformers DINOv3ViTModel, RoPE, 4 registers): the final normed [CLS] token."""
    from transformers import DINOv3ViTConfig, DINOv3ViTModel

    config = DINOV3_CONFIGS[card.loader_options["config"]]
    card, resolved, module = _build(card, resolved, image_size, DINOv3ViTModel,
                                    lambda: DINOv3ViTModel(DINOv3ViTConfig(**config)))
    return HFModel(card, resolved, module, lambda m, x: m(pixel_values=x).pooler_output)


# google/medgemma-4b-it config.json, vision_config: SigLIP So400m/14 at 896 px without the attention-pooling head.
MEDGEMMA_VISION: dict[str, Any] = {
    "hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16,
    "image_size": 896, "patch_size": 14, "vision_use_head": False, "layer_norm_eps": 1e-6}
# Gemma3ForConditionalGeneration's checkpoint names the tower `vision_tower.vision_model.*` (files written by
# transformers 4.50-4.5x); files saved by transformers >= 4.52 put it under `model.`.
TOWER_PREFIXES = ("vision_tower.", "model.vision_tower.")


def _tower_key(inner: str) -> Callable[[str], str | None]:
    """Checkpoint key -> SiglipVisionModel key (`inner` is the module's own `vision_model.` prefix: transformers 4
    has it, 5 does not)."""

    def key_map(key: str) -> str | None:
        for prefix in TOWER_PREFIXES:
            if key.startswith(prefix):
                key = key[len(prefix):]
                return inner + (key[len("vision_model."):] if key.startswith("vision_model.") else key)
        return None  # the language model and the multimodal projector are not the image encoder

    return key_map


def _tower_state(path: Path) -> dict[str, torch.Tensor]:
    """The vision tower's tensors only, from a hub folder's safetensors shards (the 4B language model is never
    read) or from one checkpoint file."""
    if path.is_file():
        return read_state_dict(path)
    from safetensors import safe_open

    shards = sorted(path.glob("*.safetensors"))
    if not shards:
        raise InputError(f"{path} holds no .safetensors shards of MedGemma; pass the hub folder of "
                         "google/medgemma-4b-it or a checkpoint file with --weights PATH")
    state: dict[str, torch.Tensor] = {}
    for shard in shards:
        with safe_open(str(shard), framework="pt") as fh:
            for key in fh.keys():
                if key.startswith(TOWER_PREFIXES):
                    state[key] = fh.get_tensor(key)
    if not state:
        raise InputError(f"the safetensors shards in {path} hold no vision tower (keys "
                         f"{' or '.join(p + 'vision_model.*' for p in TOWER_PREFIXES)}): not a MedGemma checkpoint")
    return state


def load_medgemma_vision(card: ModelCard, resolved: ResolvedWeights, *,
                         image_size: int | None = None, **_: Any) -> FoundationModel:
    """MedGemma's image encoder (transformers SiglipVisionModel, 896 px): mean of its 1152-d output tokens, before
    Gemma 3's multimodal projector."""
    from transformers import SiglipVisionConfig, SiglipVisionModel

    card = smoke_sized(card, image_size, resolved.is_random)
    with seeded(resolved.seed):
        module = SiglipVisionModel(SiglipVisionConfig(**MEDGEMMA_VISION))
    if not resolved.is_random:
        assert resolved.path is not None
        inner = "vision_model." if any(k.startswith("vision_model.") for k in module.state_dict()) else ""
        load_into(module, _tower_state(resolved.path), what=card.name, key_map=_tower_key(inner))

    def image(m: HFModule, x: torch.Tensor) -> torch.Tensor:
        return m(pixel_values=x, interpolate_pos_encoding=True).last_hidden_state.mean(dim=1)

    return HFModel(card, resolved, module, image)
