"""Loaders for vision-only encoders built with timm / torchvision (MedMAE, MoCo-CXR, C2L, ImageNet)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from fairmedbench.registry.models.card import ModelCard, smoke_sized
from fairmedbench.registry.models.runtime import FoundationModel, seeded
from fairmedbench.registry.models.weights import ResolvedWeights, load_into, read_state_dict


class VisionEncoder(FoundationModel):
    """A backbone whose forward already returns the pooled embedding (classifier head removed)."""

    def embed(self, module: torch.nn.Module, pixels: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, embedding_dim)."""
        out: torch.Tensor = module(pixels)
        return out


def _drop(prefixes: tuple[str, ...], strip: tuple[str, ...] = ()) -> Callable[[str], str | None]:
    def key_map(key: str) -> str | None:
        for p in strip:
            if key.startswith(p):
                key = key[len(p):]
        return None if key.startswith(prefixes) else key

    return key_map


def _timm_vit(card: ModelCard, resolved: ResolvedWeights, image_size: int | None,
              drop: tuple[str, ...]) -> FoundationModel:
    import timm
    card = smoke_sized(card, image_size, resolved.is_random)
    with seeded(resolved.seed):
        model = timm.create_model(card.loader_options.get("arch", "vit_base_patch16_224"), pretrained=False,
                                  num_classes=0, global_pool="token", img_size=card.preprocessing.size)
    if not resolved.is_random:
        assert resolved.path is not None
        load_into(model, read_state_dict(resolved.path), what=card.name, key_map=_drop(drop))
    return VisionEncoder(card, resolved, model)


def load_medmae(card: ModelCard, resolved: ResolvedWeights, *,
                image_size: int | None = None, **_: Any) -> FoundationModel:
    """MedMAE: timm ViT-B/16; the MAE decoder and mask token in the checkpoint are dropped."""
    return _timm_vit(card, resolved, image_size, ("decoder_", "mask_token", "head.", "fc_norm."))


def load_timm_vit(card: ModelCard, resolved: ResolvedWeights, *,
                  image_size: int | None = None, **_: Any) -> FoundationModel:
    """ImageNet ViT baseline: timm ViT with the classifier head dropped."""
    return _timm_vit(card, resolved, image_size, ("head.",))


def _resnet(card: ModelCard, resolved: ResolvedWeights, image_size: int | None,
            key_map: Callable[[str], str | None]) -> FoundationModel:
    import torchvision
    card = smoke_sized(card, image_size, resolved.is_random)
    with seeded(resolved.seed):
        model = getattr(torchvision.models, card.loader_options["arch"])(weights=None)
    model.fc = nn.Identity()
    if not resolved.is_random:
        assert resolved.path is not None
        load_into(model, read_state_dict(resolved.path), what=card.name, key_map=key_map)
    return VisionEncoder(card, resolved, model)


def load_torchvision_resnet(card: ModelCard, resolved: ResolvedWeights, *,
                            image_size: int | None = None, **_: Any) -> FoundationModel:
    """torchvision ResNet with its ImageNet classifier dropped (pooled features)."""
    return _resnet(card, resolved, image_size, _drop(("fc.",)))


def _moco_key(key: str) -> str | None:
    """MoCo / C2L checkpoint key -> backbone key: keep the query encoder, drop key encoder, queue and head.

    MoCo-CXR saves `module.encoder_q.*` (DDP); C2L's InsResNet18 saves `encoder.module.*` (DataParallel inside).
    """
    for prefix in ("module.", "model.", "encoder.module."):
        if key.startswith(prefix):
            key = key[len(prefix):]
    if key.startswith(("encoder_k.", "queue")):
        return None
    if key.startswith("encoder_q."):
        key = key[len("encoder_q."):]
    return None if key.startswith("fc.") else key


def load_moco_resnet(card: ModelCard, resolved: ResolvedWeights, *,
                     image_size: int | None = None, **_: Any) -> FoundationModel:
    """MoCo-CXR / C2L: the MoCo query encoder; the projection head (fc.0/fc.2 MLP) is dropped."""
    return _resnet(card, resolved, image_size, _moco_key)
