"""`lp`: a linear head on frozen, cached encoder features (standardised with train statistics)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from fairmedbench.adapters.base import MC_HPARAMS, Prepared, RunContext, Usage, features_progress, register_usage

if TYPE_CHECKING:
    from fairmedbench.engine.features import ImageSplit
    from fairmedbench.registry.models.runtime import FoundationModel


def head_dropout(rate: float):  # -> torch.nn.Module
    """The head's `mc_dropout` on its representation: nn.Dropout(rate), or identity at 0 (numbers unchanged)."""
    from torch import nn

    return nn.Dropout(rate) if rate > 0 else nn.Identity()


def make_linear_head(x_train: np.ndarray, n_outputs: int, dropout: float = 0.0):  # -> torch.nn.Module
    """A linear layer preceded by fixed standardisation with the training features' mean and std (and dropout
    at rate `dropout` on the standardised features)."""
    import torch
    from torch import nn

    class LinearHead(nn.Module):
        """Standardise, then one linear layer; returns logits (n, n_outputs)."""

        mean: torch.Tensor  # buffers
        std: torch.Tensor

        def __init__(self) -> None:
            super().__init__()
            mean = x_train.mean(axis=0)
            std = x_train.std(axis=0)
            self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32))
            self.register_buffer("std", torch.as_tensor(np.where(std > 1e-8, std, 1.0), dtype=torch.float32))
            self.linear = nn.Linear(x_train.shape[1], n_outputs)
            self.mc_dropout = head_dropout(dropout)

        def representation(self, x: torch.Tensor) -> torch.Tensor:
            return self.mc_dropout((x - self.mean) / self.std)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(self.representation(x))

    return LinearHead()


@register_usage
class LinearProbe(Usage):
    """Frozen encoder features, computed once per (model, weights, preprocessing, split) and cached."""

    name = "lp"
    default_rank = 0
    task = "classification"
    also_tasks = ("multiclass",)  # the same head with one output per class, trained by the multiclass runner
    requires = ("encode_image",)
    about = "linear probe on cached frozen image features"
    learns = True
    volumes = True
    hparams = MC_HPARAMS
    caches_features = True

    def prepare(self, model: FoundationModel, views: Mapping[str, ImageSplit], ctx: RunContext) -> Prepared:
        """Extract (or read from the cache) the features of every split."""
        from fairmedbench.engine.features import extract_features

        inputs, notes = {}, {}
        for name, view in views.items():
            feats = extract_features(model, view, split_name=name, cache_dir=ctx.cache_dir,
                                     batch_size=ctx.batch_size, num_workers=ctx.num_workers, device=ctx.device,
                                     precision=ctx.precision, channels_last=ctx.channels_last,
                                     progress=features_progress(ctx, model, name))
            inputs[name] = np.array(feats.array, dtype=np.float32)
            notes[name] = {"from_cache": feats.from_cache, "seconds": round(feats.seconds, 3), "key": feats.key,
                           "stages": {k: round(v, 3) for k, v in feats.stages.items()}}
        rate = float((ctx.hparams or {}).get("dropout", 0.0))

        def make_head(x_train: np.ndarray, k: int):  # -> torch.nn.Module
            return make_linear_head(x_train, k, rate)

        return Prepared(inputs, make_head, {"features": notes})
