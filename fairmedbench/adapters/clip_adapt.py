"""`clip-adapt`: trainable class prototypes initialised from the zero-shot text embeddings (FairMedFM's
CLIP-Adapt), logits = scale * cosine(image feature, prototype), on cached image features."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from fairmedbench.adapters.base import Prepared, RunContext, Usage, register_usage
from fairmedbench.adapters.clip_zeroshot import PROMPT_HPARAMS, prepare_clip

if TYPE_CHECKING:
    from fairmedbench.engine.features import ImageSplit
    from fairmedbench.registry.models.runtime import FoundationModel


@register_usage
class ClipAdapt(Usage):
    """The zero-shot head with its prototypes trained by the runner (the logit scale stays fixed)."""

    name = "clip-adapt"
    default_rank = 2
    task = "classification"
    requires = ("encode_image", "encode_text")
    about = "CLIP-Adapt: class prototypes initialised from prompt embeddings, trained on cached image features"
    hparams = PROMPT_HPARAMS
    learns = True
    seeded_init = False  # starts from the text prototypes: only the minibatch order depends on the seed
    volumes = True
    caches_features = True
    # Prototypes are unit-norm vectors of ~512 coordinates of ~0.04: the probe's lr of 3e-3 would rotate them
    # away from the text initialisation within a few steps.
    train_defaults = MappingProxyType({"lr": 1e-3})

    def prepare(self, model: FoundationModel, views: Mapping[str, ImageSplit], ctx: RunContext) -> Prepared:
        """Cached, normalised image features and a prototype head to train."""
        return prepare_clip(self, model, views, ctx, trainable=True)
