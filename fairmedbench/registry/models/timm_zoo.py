"""Loaders for the timm-built foundation encoders of 2024-26: RETFound (MAE and DINOv2), UNI2-h, Virchow2,
Prov-GigaPath and AIMv2. The architecture is timm's class with the release's published kwargs (the hub's
config.json for timm-format releases); the checkpoint's keys are mapped by the rules the authors' own loading code
applies, then loaded strictly (every key consumed, none invented)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from fairmedbench.errors import InputError
from fairmedbench.registry.models.card import ModelCard, smoke_sized
from fairmedbench.registry.models.runtime import FoundationModel, seeded
from fairmedbench.registry.models.weights import ResolvedWeights, load_into, read_state_dict

if TYPE_CHECKING:
    from timm.models.vision_transformer import VisionTransformer

KeyMap = Callable[[str], str | None]
_CHUNKED = re.compile(r"^blocks\.\d+\.(\d+)\.")  # DINOv2 training's block_chunks: blocks.<chunk>.<index>.


def _timm_release(key: str) -> str | None:
    """A file written from timm's own model (hub pytorch_model.bin / model.safetensors): names as they are."""
    return key


def _mae(key: str) -> str | None:
    """RETFound-MAE's {'model': MaskedAutoencoderViT} (rmaphoh/RETFound_MAE models_mae.py): the encoder is timm's
    VisionTransformer; the decoder and mask token are dropped, as its main_finetune.py loads with strict=False."""
    return None if key.startswith(("decoder_", "mask_token")) else key


def _dinov2_teacher(key: str) -> str | None:
    """A DINOv2 training teacher ({'teacher': {backbone.*, dino_head.*, ibot_head.*}}, facebookresearch/dinov2
    train/ssl_meta_arch.py): `backbone.` stripped as RETFound's main_finetune.py does, the heads and mask token
    dropped, chunked block names (block_chunks=4) unchunked as timm's checkpoint_filter_fn does."""
    if key.startswith("backbone."):
        key = key[len("backbone."):]
    if key.startswith(("dino_head.", "ibot_head.", "mask_token")):
        return None
    return _CHUNKED.sub(r"blocks.\1.", key)


KEY_MAPS: dict[str, KeyMap] = {"timm": _timm_release, "mae": _mae, "dinov2-teacher": _dinov2_teacher}
# RETFound's main_finetune.py (rmaphoh/RETFound_MAE, read at 897d71c) resamples both its checkpoints' position
# embeddings to the fine-tuning grid (util/pos_embed.py interpolate_pos_embed): a DINOv2 teacher may carry the
# 518 px grid (37 x 37) of the LVD-142M weights it started from.
RESAMPLES_POS_EMBED = frozenset({"mae", "dinov2-teacher"})


def fit_pos_embed(model: torch.nn.Module, state: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's absolute position embedding resampled (bicubic over the patch grid, prefix tokens kept, as
    RETFound's interpolate_pos_embed) to the model's grid when the two differ; other keys unchanged."""
    from timm.layers import resample_abs_pos_embed

    own = model.state_dict().get("pos_embed")
    theirs = state.get("pos_embed")
    if own is None or theirs is None or tuple(theirs.shape) == tuple(own.shape) or theirs.shape[-1] != own.shape[-1]:
        return state  # absent, equal, or a width mismatch that load_into names
    prefix = int(getattr(model, "num_prefix_tokens", 1))
    side = int(round((own.shape[1] - prefix) ** 0.5))
    if side * side + prefix != own.shape[1]:
        return state
    return {**state, "pos_embed": resample_abs_pos_embed(theirs, [side, side], num_prefix_tokens=prefix)}


def timm_kwargs(card: ModelCard) -> dict[str, Any]:
    """The card's timm kwargs with layer names resolved to timm classes (cards hold plain data)."""
    import timm.layers

    kwargs = dict(card.loader_options.get("kwargs", {}))
    if "mlp_layer" in kwargs:
        kwargs["mlp_layer"] = getattr(timm.layers, kwargs["mlp_layer"])
    return kwargs


def build_timm(card: ModelCard) -> torch.nn.Module:
    """timm's architecture for the card at its input size, with no classifier head and no pretrained download."""
    import timm

    return timm.create_model(card.loader_options["arch"], pretrained=False, num_classes=0,
                             **{**timm_kwargs(card), "img_size": card.preprocessing.size})


class TimmEncoder(FoundationModel):
    """A timm ViT; the embedding pools its final (normed) tokens as the model's authors do: the class token
    ('token'), the mean of the patch tokens ('avg'), or both concatenated ('token+avg', Virchow2)."""

    def embed(self, module: torch.nn.Module, pixels: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, embedding_dim)."""
        vit: VisionTransformer = module  # type: ignore[assignment]  # timm's class, built by build_timm
        tokens = vit.forward_features(pixels)
        patches = tokens[:, vit.num_prefix_tokens:]
        pool = self.card.loader_options.get("pool", "token")
        if pool == "token":
            return tokens[:, 0]
        if pool == "avg":
            return patches.mean(dim=1)
        return torch.cat([tokens[:, 0], patches.mean(dim=1)], dim=-1)


def load_timm_encoder(card: ModelCard, resolved: ResolvedWeights, *,
                      image_size: int | None = None, **_: Any) -> FoundationModel:
    """Build the card's timm ViT and load its checkpoint (a file, or the hub folder's weights file)."""
    card = smoke_sized(card, image_size, resolved.is_random)
    with seeded(resolved.seed):
        model = build_timm(card)
    if not resolved.is_random:
        assert resolved.path is not None
        path = resolved.path
        if path.is_dir():  # a hub snapshot folder: the timm release's weights file
            found = [path / n for n in ("model.safetensors", "pytorch_model.bin") if (path / n).is_file()]
            if not found:
                raise InputError(f"{path} holds neither model.safetensors nor pytorch_model.bin for {card.name!r}; "
                                 "pass the checkpoint file with --weights PATH")
            path = found[0]
        layout = card.loader_options.get("checkpoint", "timm")
        key_map = KEY_MAPS[layout]
        state = read_state_dict(path)
        if layout in RESAMPLES_POS_EMBED:
            state = fit_pos_embed(model, {new: v for k, v in state.items() if (new := key_map(k)) is not None})
            key_map = _timm_release
        load_into(model, state, what=card.name, key_map=key_map)
    return TimmEncoder(card, resolved, model)
