"""`clip-zs`: zero-shot classification with the dataset card's prompts, scored on cached image features.

Per label column, each class's text embedding is the prompt ensemble: the mean of the L2-normalised text
embeddings of every (template, class description) pair, renormalised. The positive-class score is the
softmax over the two classes' scaled cosine similarities, i.e. sigmoid(scale * (cos_pos - cos_neg)).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.adapters.base import Prepared, RunContext, Usage, features_progress, register_usage
from fairmedbench.errors import InputError

if TYPE_CHECKING:
    from fairmedbench.engine.features import ImageSplit
    from fairmedbench.registry.models.runtime import FoundationModel

# Where a model has no logit scale of its own (BLIP and BLIP-2 retrieval models in transformers): CLIP's
# maximum, 1 / 0.01, as FairMedFM's CLIP wrappers use.
DEFAULT_LOGIT_SCALE = 100.0
# None: the card's templates and class prompts, the model's own logit scale
PROMPT_HPARAMS = MappingProxyType({"prompt_templates": None, "class_prompts": None, "logit_scale": None})


def label_prompts(card: Any, hparams: dict[str, Any] | None) -> dict[str, list[list[str]]]:
    """Texts per label column: {column: [negative texts, positive texts]}, from the card (or hparams).

    The main label uses `card.classes` with `class_prompts[class]` as descriptions (the class name when
    absent); an extra label column `c` (with hparam tasks=all) needs `class_prompts['c:negative']` and
    `class_prompts['c:positive']`. hparams `prompt_templates` / `class_prompts` replace the card's.
    """
    hp = hparams or {}
    if card is None:
        raise InputError("clip-zs needs the dataset card (RunContext.dataset_card) for its prompts")
    templates = list(hp.get("prompt_templates") or card.prompt_templates)
    described = dict(hp.get("class_prompts") or card.class_prompts)
    if not templates or card.label_column is None or len(card.classes) != 2:
        raise InputError(
            f"dataset {card.name!r} has no CLIP prompts for zero-shot use (prompt_templates: "
            f"{list(card.prompt_templates)}, classes: {list(card.classes)}); add prompt_templates with a '{{}}' "
            "slot and two class names (plus class_prompts) to its card, or pass hparams prompt_templates and "
            "class_prompts")
    bad = [t for t in templates if "{}" not in t]
    if bad:
        raise InputError(f"prompt templates {bad} of {card.name!r} have no '{{}}' slot for the class text")

    def texts(descriptions: Any) -> list[str]:
        return [t.format(d) for t in templates for d in descriptions]

    out = {card.label_column: [texts(described.get(c) or (c,)) for c in card.classes]}
    if hp.get("tasks", "main") == "all":
        missing = [c for c in card.extra_label_columns
                   if f"{c}:negative" not in described or f"{c}:positive" not in described]
        if missing:
            raise InputError(
                f"zero-shot scores only labels with prompts: dataset {card.name!r} defines none for "
                f"{', '.join(missing)} (class_prompts '<column>:negative' and '<column>:positive'); run with "
                f"tasks=main to score only {card.label_column!r}")
        for c in card.extra_label_columns:
            out[c] = [texts(described[f"{c}:negative"]), texts(described[f"{c}:positive"])]
    return out


def class_embeddings(model: FoundationModel, prompts: dict[str, list[list[str]]], ctx: RunContext) -> np.ndarray:
    """Prompt-ensembled class embeddings (K labels, 2 classes, D), unit norm, from `model.encode_text`."""
    import torch
    import torch.nn.functional as F

    from fairmedbench.engine.device import autocast

    out = []
    for per_class in prompts.values():
        rows = []
        for texts in per_class:
            with autocast(ctx.device, ctx.precision):
                emb = torch.cat([model.encode_text(texts[i:i + 64]) for i in range(0, len(texts), 64)])
            emb = F.normalize(emb.float().cpu(), dim=-1).mean(dim=0)
            rows.append(F.normalize(emb, dim=0).numpy())
        out.append(np.stack(rows))
    return np.stack(out).astype(np.float32)


def logit_scale(model: FoundationModel, hparams: dict[str, Any] | None) -> tuple[float, str]:
    """The scale of cosine similarities: hparam `logit_scale`, else exp of the model's own learned (log)
    logit scale (CLIP, SigLIP, MedCLIP, PubMedCLIP, PLIP), else 100. Returns (scale, where it came from)."""
    hp = hparams or {}
    if hp.get("logit_scale") is not None:
        scale = float(hp["logit_scale"])
        if not math.isfinite(scale) or scale <= 0:
            raise InputError(f"hparam logit_scale={hp['logit_scale']!r}: expected a positive number")
        return scale, "hparam logit_scale"
    own = getattr(getattr(model, "module", None), "logit_scale", None)
    if own is None:
        return DEFAULT_LOGIT_SCALE, f"default {DEFAULT_LOGIT_SCALE:g} (the model has no logit scale)"
    return float(np.exp(float(own.detach().float().reshape(-1)[0]))), "model (exp of logit_scale)"


def make_prototype_head(prototypes: np.ndarray, scale: float, trainable: bool):  # -> torch.nn.Module
    """Head on normalised image features: logit_k = scale * (cos(x, p_k,pos) - cos(x, p_k,neg)).

    With fixed prototypes it has no trainable parameter (the runner then skips training)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class PrototypeLogits(nn.Module):
        """Scaled cosine similarities to two class prototypes per label -> one logit per label."""

        scale: torch.Tensor  # a buffer

        def __init__(self) -> None:
            super().__init__()
            # A frozen parameter rather than a buffer: the runner's optimiser needs a non-empty parameter list.
            init = torch.as_tensor(prototypes, dtype=torch.float32).clone()
            self.prototypes = nn.Parameter(init, requires_grad=trainable)
            self.register_buffer("scale", torch.tensor(float(scale)))

        def forward(self, rep: torch.Tensor) -> torch.Tensor:
            sims = torch.einsum("nd,kcd->nkc", rep, F.normalize(self.prototypes, dim=-1))
            return self.scale * (sims[..., 1] - sims[..., 0])

    class PrototypeHead(nn.Module):
        """L2-normalise the image feature, then PrototypeLogits; returns logits (n, K)."""

        def __init__(self) -> None:
            super().__init__()
            self.linear = PrototypeLogits()

        def representation(self, x: torch.Tensor) -> torch.Tensor:
            return F.normalize(x, dim=-1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(self.representation(x))

    return PrototypeHead()


def prepare_clip(usage: Usage, model: FoundationModel, views: Mapping[str, ImageSplit], ctx: RunContext,
                 trainable: bool) -> Prepared:
    """Normalised cached image features per split and a prototype head initialised from the prompts."""
    from fairmedbench.engine.features import extract_features

    prompts = label_prompts(ctx.dataset_card, ctx.hparams)
    protos = class_embeddings(model, prompts, ctx)
    scale, source = logit_scale(model, ctx.hparams)
    inputs, feats_notes = {}, {}
    for name, view in views.items():
        feats = extract_features(model, view, split_name=name, cache_dir=ctx.cache_dir, batch_size=ctx.batch_size,
                                 num_workers=ctx.num_workers, device=ctx.device, precision=ctx.precision,
                                 channels_last=ctx.channels_last,
                                 progress=features_progress(ctx, model, name))
        x = np.array(feats.array, dtype=np.float32)
        if x.shape[1] != protos.shape[2]:
            raise InputError(f"model {model.card.name!r}: image features have {x.shape[1]} dimensions but text "
                             f"embeddings {protos.shape[2]}; zero-shot needs a joint image-text space")
        inputs[name] = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        feats_notes[name] = {"from_cache": feats.from_cache, "seconds": round(feats.seconds, 3), "key": feats.key}

    def make_head(x_train: np.ndarray, k: int):  # -> torch.nn.Module
        if k != len(prompts):
            raise InputError(f"usage {usage.name!r} has prompts for {len(prompts)} label column(s) "
                             f"({', '.join(prompts)}) but the run has {k}")
        return make_prototype_head(protos, scale, trainable)

    notes = {"features": feats_notes, "logit_scale": scale, "logit_scale_source": source,
             "prompts": {col: {"negative": t[0], "positive": t[1]} for col, t in prompts.items()}}
    return Prepared(inputs, make_head, notes)


@register_usage
class ClipZeroShot(Usage):
    """Fixed text prototypes: no training; the runner still picks the threshold on validation."""

    name = "clip-zs"
    default_rank = 1
    task = "classification"
    requires = ("encode_image", "encode_text")
    about = "CLIP zero-shot: prompt-ensembled class text embeddings vs cached image features"
    hparams = PROMPT_HPARAMS
    volumes = True
    caches_features = True

    def prepare(self, model: FoundationModel, views: Mapping[str, ImageSplit], ctx: RunContext) -> Prepared:
        """Cached, normalised image features and the fixed zero-shot head."""
        return prepare_clip(self, model, views, ctx, trainable=False)
