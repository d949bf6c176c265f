"""`anomaly`: unsupervised anomaly detection on frozen, cached encoder features, for Meissen et al.'s fairness laws.

The scorer is fitted on the NORMAL training samples only (label 0; the positives of the train split are never
used): `scorer=knn` is the mean Euclidean distance to the `k` nearest normal training features (sklearn
NearestNeighbors), `scorer=mahalanobis` the Mahalanobis distance to the normal training features' mean under their
Ledoit-Wolf shrunk covariance (sklearn LedoitWolf; the plain empirical covariance is singular when there are fewer
normal samples than feature dimensions). Features are standardised with the normal training features' mean and std
first (kNN distances would otherwise be dominated by a few large coordinates).

The anomaly score d >= 0 is mapped to [0, 1] for the metric engine by p = sigmoid((log d - mu) / sigma), mu and
sigma the mean and std of log d over the VALIDATION normal samples (no test label is used). The map is strictly
increasing, so every rank metric (AUROC per group, sAUROC) equals that of the raw distance; an empirical CDF would
tie every test score beyond the validation range and change the AUROC. Scores are computed in float64.

Meissen et al. (eBioMedicine 2024, github.com/FeliMe/unsupervised_fairness) derive the laws with two deep UAD
models: the structural Feature Autoencoder (FAE: reconstructs frozen pretrained CNN feature maps; score = feature
reconstruction error) and Reverse Distillation (RD: a student decoder reproduces a frozen teacher's features;
score = feature discrepancy); their code also has DeepSVDD. None of those is kNN or Mahalanobis: both scorers here
are training-free feature-modelling baselines of the same family as FAE and RD (they score how far an image's frozen
pretrained features lie from the normal training distribution), Mahalanobis being the closed-form Gaussian
counterpart of DeepSVDD's distance to a centre and kNN the image-level form of memory-bank methods (SPADE,
PatchCore). Neither reconstructs images, so the paper's reconstruction-based scores are not reproduced.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.adapters.base import Prepared, RunContext, Usage, features_progress, register_usage
from fairmedbench.errors import InputError

if TYPE_CHECKING:
    from fairmedbench.engine.features import ImageSplit
    from fairmedbench.registry.models.runtime import FoundationModel

SCORERS = ("knn", "mahalanobis")


def make_anomaly_head(scorer: str, k: int):  # -> torch.nn.Module
    """A head with no trainable weight: `fit_normal` fits the scorer and the score map, forward gives logits."""
    import torch
    from torch import nn

    class AnomalyHead(nn.Module):
        """Standardise with the normal training features, score, map log-scores to logits (float64)."""

        def __init__(self) -> None:
            super().__init__()
            # frozen parameters rather than buffers: the runner's optimiser needs a non-empty parameter list
            self.mu = nn.Parameter(torch.zeros((), dtype=torch.float64), requires_grad=False)
            self.sigma = nn.Parameter(torch.ones((), dtype=torch.float64), requires_grad=False)
            self.model: Any = None  # the fitted scikit-learn estimator
            self.notes: dict[str, Any] = {}

        def fit_normal(self, x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray) -> None:
            """Fit on the training rows with every label 0; the score map on the validation rows likewise."""
            from sklearn.covariance import LedoitWolf
            from sklearn.neighbors import NearestNeighbors

            normal = x_train[(y_train == 0).all(axis=1)].astype(np.float64)
            need = k + 1 if scorer == "knn" else 2
            if len(normal) < need:
                raise InputError(f"usage 'anomaly' ({scorer}) fits on normal (label 0) training samples: "
                                 f"{len(normal)} found, {need} needed" + (f" for k={k}" if scorer == "knn" else ""))
            self.center = normal.mean(axis=0)
            std = normal.std(axis=0)
            self.scale = np.where(std > 1e-8, std, 1.0)
            z = (normal - self.center) / self.scale
            self.model = (NearestNeighbors(n_neighbors=k).fit(z) if scorer == "knn"
                          else LedoitWolf(assume_centered=False).fit(z))
            val_normal = x_val[(y_val == 0).all(axis=1)]
            if len(val_normal) < 2:
                raise InputError("usage 'anomaly' maps scores to [0, 1] with the validation normal samples: "
                                 f"{len(val_normal)} found, at least 2 needed")
            logs = np.log(self.distance(val_normal))
            sd = float(logs.std())
            self.mu.fill_(float(logs.mean()))
            self.sigma.fill_(sd if sd > 1e-12 else 1.0)
            self.notes = {"scorer": scorer, "n_normal_train": int(len(normal)), "n_normal_val": int(len(val_normal)),
                          "log_score_mean_val": float(logs.mean()), "log_score_std_val": float(self.sigma)}
            if scorer == "knn":
                self.notes["k"] = k
            else:
                self.notes["shrinkage"] = float(self.model.shrinkage_)

        def distance(self, x: np.ndarray) -> np.ndarray:
            """The anomaly score (n,), floored at 1e-300 so that its log is finite."""
            z = (np.asarray(x, dtype=np.float64) - self.center) / self.scale
            if scorer == "knn":
                d = self.model.kneighbors(z)[0].mean(axis=1)
            else:
                d = np.sqrt(np.maximum(self.model.mahalanobis(z), 0.0))
            return np.maximum(d, 1e-300)

        def representation(self, x: torch.Tensor) -> torch.Tensor:
            return x

        def linear(self, x: torch.Tensor) -> torch.Tensor:
            if self.model is None:
                raise RuntimeError("the anomaly head is used before fit_normal")
            logs = torch.as_tensor(np.log(self.distance(x.detach().cpu().numpy())), dtype=torch.float64)
            return ((logs - self.mu) / self.sigma)[:, None]

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(self.representation(x))

    return AnomalyHead()


@register_usage
class AnomalyDetection(Usage):
    """Frozen cached features; a kNN or Mahalanobis scorer fitted on normal training samples, no gradient step."""

    name = "anomaly"
    task = "classification"
    requires = ("encode_image",)
    about = ("unsupervised anomaly detection on cached frozen features: kNN or Mahalanobis distance to the normal "
             "(label 0) training samples (Meissen et al.'s fairness laws); only erm")
    hparams: Mapping[str, Any] = MappingProxyType({"scorer": "knn", "k": 5})
    caches_features = True
    seeded_init = False  # closed-form: several seeds differ only when they draw a sampled training set

    def check_hparams(self, given: Mapping[str, Any]) -> None:
        """scorer in SCORERS; k >= 1, and only with knn."""
        from fairmedbench.engine.hparams import coerce

        scorer = str(given.get("scorer", "knn"))
        if scorer not in SCORERS:
            raise InputError(f"usage 'anomaly': scorer={scorer!r}; choose one of {', '.join(SCORERS)}")
        if "k" in given:
            k = coerce("usage 'anomaly'", "k", given["k"], 5)
            if k < 1:
                raise InputError(f"usage 'anomaly': k={k} must be >= 1")
            if scorer != "knn":
                raise InputError("usage 'anomaly': k applies to scorer=knn only")

    def prepare(self, model: FoundationModel, views: Mapping[str, ImageSplit], ctx: RunContext) -> Prepared:
        """Cached features of every split and the scorer head (fitted by the runner on normal training rows)."""
        from fairmedbench.engine.features import extract_features

        hp = {**self.hparams, **(ctx.hparams or {})}
        scorer, k = str(hp["scorer"]), int(hp["k"])
        inputs, notes = {}, {}
        for name, view in views.items():
            feats = extract_features(model, view, split_name=name, cache_dir=ctx.cache_dir,
                                     batch_size=ctx.batch_size, num_workers=ctx.num_workers, device=ctx.device,
                                     precision=ctx.precision, channels_last=ctx.channels_last,
                                     progress=features_progress(ctx, model, name))
            inputs[name] = np.array(feats.array, dtype=np.float32)
            notes[name] = {"from_cache": feats.from_cache, "seconds": round(feats.seconds, 3), "key": feats.key}

        def make_head(x_train: np.ndarray, n_outputs: int):  # -> torch.nn.Module
            if n_outputs != 1:
                raise InputError(f"usage 'anomaly' scores one label (normal = 0); this run has {n_outputs} label "
                                 "columns: leave out tasks=all")
            return make_anomaly_head(scorer, k)

        return Prepared(inputs, make_head,
                        {"features": notes, "scorer": scorer, **({"k": k} if scorer == "knn" else {})})
