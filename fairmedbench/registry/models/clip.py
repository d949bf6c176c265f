"""Loaders for open_clip models (OpenAI CLIP ViT-B/32 and B/16, BiomedCLIP)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import open_clip
import torch

from fairmedbench.registry.models.card import ModelCard, smoke_sized
from fairmedbench.registry.models.runtime import FoundationModel, seeded
from fairmedbench.registry.models.weights import ResolvedWeights, load_into, read_state_dict

BIOMEDCLIP_TEXT = "microsoft/BiomedNLP-BiomedBERT-base-uncased-abstract"


class OpenClipModel(FoundationModel):
    """open_clip model with its own tokenizer."""

    module: open_clip.CLIP

    def __init__(self, card: ModelCard, weights: ResolvedWeights, module: open_clip.CLIP,
                 tokenizer_factory: Callable[[], Callable[[Sequence[str]], torch.Tensor]]) -> None:
        super().__init__(card, weights, module)
        self._tokenizer_factory = tokenizer_factory
        self._tokenizer: Callable[[Sequence[str]], torch.Tensor] | None = None

    def embed(self, module: torch.nn.Module, pixels: torch.Tensor) -> torch.Tensor:
        """Projected image embedding (not normalised)."""
        out: torch.Tensor = module.encode_image(pixels)  # type: ignore[operator]  # an open_clip.CLIP
        return out

    @torch.inference_mode()
    def encode_text(self, texts: Sequence[str]) -> torch.Tensor:
        """Projected text embedding (not normalised), tokenised by the model's own tokenizer."""
        if self._tokenizer is None:
            self._tokenizer = self._tokenizer_factory()  # MissingResourceError when its vocab is absent
        return self.module.encode_text(self._tokenizer(list(texts)).to(self.device))


def load_open_clip(card: ModelCard, resolved: ResolvedWeights, *,
                   image_size: int | None = None, **_: Any) -> FoundationModel:
    """OpenAI CLIP through open_clip (QuickGELU configs, as the OpenAI weights need)."""
    arch = card.loader_options["arch"]
    card = smoke_sized(card, image_size, resolved.is_random)
    with seeded(resolved.seed):
        model = open_clip.create_model(arch, pretrained=None, force_image_size=card.preprocessing.size)
    if not resolved.is_random:
        assert resolved.path is not None
        load_into(model, read_state_dict(resolved.path), what=card.name)
    return OpenClipModel(card, resolved, model, lambda: open_clip.get_tokenizer(arch))


def _hf_tokenizer(card: ModelCard, repo: str, context_length: int) -> Callable[[Sequence[str]], torch.Tensor]:
    from fairmedbench.registry.models.hf import cached_hf_tokenizer

    tok = cached_hf_tokenizer(card, repo)

    def tokenize(texts: Sequence[str]) -> torch.Tensor:
        return tok(list(texts), padding="max_length", truncation=True, max_length=context_length,
                   return_tensors="pt").input_ids

    return tokenize


def _biomedclip_random(size: int) -> torch.nn.Module:
    """BiomedCLIP's architecture from its published open_clip config, with no hub access."""
    from open_clip.hf_model import HFTextEncoder
    from transformers import BertConfig

    model = open_clip.CustomTextCLIP(
        embed_dim=512,
        vision_cfg={"timm_model_name": "vit_base_patch16_224", "timm_model_pretrained": False,
                    "timm_pool": "", "timm_proj": "linear", "image_size": size},
        text_cfg={"context_length": 256, "vocab_size": 30522, "width": 64, "heads": 1, "layers": 1},
    )
    bert = BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072, max_position_embeddings=512)
    model.text = HFTextEncoder(BIOMEDCLIP_TEXT, output_dim=512, config=bert,
                               pooler_type="cls_last_hidden_state_pooler", proj_type="mlp")
    if size != 224:
        model.visual.set_input_size(size)
    return model


def load_biomedclip(card: ModelCard, resolved: ResolvedWeights, *,
                    image_size: int | None = None, **_: Any) -> FoundationModel:
    """BiomedCLIP: open_clip hf-hub model (timm ViT-B/16 + PubMedBERT); random weights built from config."""
    card = smoke_sized(card, image_size, resolved.is_random)
    if resolved.source == "hub":
        model = open_clip.create_model(f"local-dir:{resolved.path}")
    else:
        with seeded(resolved.seed):
            model = _biomedclip_random(card.preprocessing.size)
        if not resolved.is_random:
            assert resolved.path is not None
            path = resolved.path
            if path.is_dir():  # the hub folder: open_clip_config.json + open_clip_pytorch_model.bin
                path = path / "open_clip_pytorch_model.bin"
            # The released file was written by transformers 4.2x, whose BERT saved the position_ids buffer
            # (an arange, no longer persistent); open_clip's own load_checkpoint drops it the same way.
            load_into(model, read_state_dict(path), what=card.name,
                      ignore_missing=("text.transformer.pooler.",),
                      ignore_unexpected=("text.transformer.embeddings.position_ids",))
    return OpenClipModel(card, resolved, model,
                         lambda: _hf_tokenizer(card, BIOMEDCLIP_TEXT, card.text_context_length))
