"""Deep feature reweighting (DFR; Kirichenko, Izmailov, Wilson, ICLR 2023): train ERM, then refit only the last
layer, as an L1-penalised logistic regression on standardised representations, on group-balanced subsets of data
the ERM model did not train on, averaging the weights over the subsets.

The held-out data here is a fraction `held_out` of the training split, drawn once per run before the first epoch
and withheld from ERM (the paper's half of a validation split; this harness keeps its validation split for the
checkpoint, the thresholds and the search, and DFR never reads the test split). A balanced subset draws, without
replacement, as many samples from every unit (group x class cell by default, as the paper's groups; or group) as
the smallest unit has. Defaults: C 1 (the paper's grid {1, 0.7, 0.3, 0.1, 0.07, 0.03, 0.01}), 10 subsets,
held_out 0.5. Sigmoid heads refit one logistic regression per label column, a softmax head one multinomial."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from fairmedbench.engine.hparams import TRAINING_SPACE, SearchRange
from fairmedbench.errors import InputError
from fairmedbench.mitigation._common import balance_units, check_choice, check_positive, merge_hparams
from fairmedbench.mitigation.base import Mitigation, register_mitigation

if TYPE_CHECKING:
    import torch
    from torch import nn


def balanced_subset(units: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Positions of a subset with as many samples of every present unit as the smallest unit has (sorted)."""
    present, counts = np.unique(units, return_counts=True)
    m = int(counts.min())
    return np.sort(np.concatenate([rng.choice(np.flatnonzero(units == u), m, replace=False) for u in present]))


def l1_logistic(c: float, solver: str) -> Any:
    """An L1-penalised sklearn LogisticRegression (`l1_ratio=1` from scikit-learn 1.8, `penalty="l1"` before)."""
    import sklearn
    from sklearn.linear_model import LogisticRegression

    major, minor = (int(v) for v in sklearn.__version__.split(".")[:2])
    l1 = {"l1_ratio": 1.0} if (major, minor) >= (1, 8) else {"penalty": "l1"}
    return LogisticRegression(C=c, solver=solver, max_iter=5000, random_state=0, **l1)  # seeded: both solvers shuffle


def refit_last_layer(rep: np.ndarray, y: np.ndarray, subsets: list[np.ndarray], c: float,
                     n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """DFR's weights (K, d) and bias (K,) on the raw representation: per subset an L1 logistic regression on the
    representation standardised with the held-out set's mean and std, mapped back and averaged over subsets.
    y: 0/1 labels (n, K) for sigmoid columns, or class indices (n,) for a softmax head over n_classes."""
    mean, std = rep.mean(axis=0), rep.std(axis=0)
    std = np.where(std > 1e-8, std, 1.0)
    z = (rep - mean) / std
    k = n_classes or y.shape[1]
    coef, bias = np.zeros((k, rep.shape[1])), np.zeros(k)
    for sub in subsets:
        cols = y[sub][:, None] if n_classes else y[sub]
        if any(len(np.unique(cols[:, j])) < max(n_classes, 2) for j in range(cols.shape[1])):
            raise InputError(f"mitigation 'dfr': a balanced subset of {len(sub)} held-out samples lacks a class to "
                             "refit on; use by=group_class (every group x class cell in each subset) or more data")
        if n_classes:
            fit = l1_logistic(c, "saga").fit(z[sub], y[sub])
            w, b = fit.coef_, fit.intercept_
            if n_classes == 2:  # one logit a for class 1: softmax logits (-a/2, a/2) give the same probabilities
                w, b = np.concatenate([-w / 2, w / 2]), np.concatenate([-b / 2, b / 2])
        else:
            fits = [l1_logistic(c, "liblinear").fit(z[sub], y[sub, j]) for j in range(k)]
            w = np.concatenate([f.coef_ for f in fits])
            b = np.concatenate([f.intercept_ for f in fits])
        coef += w / std
        bias += b - (w * mean / std).sum(axis=1)
    return coef / len(subsets), bias / len(subsets)


@register_mitigation
@dataclass
class DFR(Mitigation):
    """ERM on part of the training split, then the last layer refitted on group-balanced held-out subsets."""

    name: ClassVar[str] = "dfr"
    needs: ClassVar[Mapping[str, object]] = {"head": "classifier"}
    other_tasks: ClassVar[str] = "it refits a classifier head's last layer (a logistic regression per output)"
    needs_attribute_at_training: bool = True
    DEFAULTS: ClassVar[dict[str, Any]] = {"C": 1.0, "held_out": 0.5, "n_subsets": 10, "by": "group_class",
                                          "label_column": 0}
    REFERENCE: ClassVar[str] = ("Kirichenko et al. ICLR 2023 (DFR; L1 logistic regression on standardised "
                                "embeddings, C in {1, 0.7, 0.3, 0.1, 0.07, 0.03, 0.01}, weights averaged over "
                                "group-balanced subsets)")
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "C": (1.0, 0.7, 0.3, 0.1, 0.07, 0.03, 0.01)}
    held: np.ndarray | None = field(default=None, repr=False)  # training-split positions withheld from ERM
    trained_on: np.ndarray | None = field(default=None, repr=False)  # the others: ERM's training samples
    subset_seed: int = 0

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        check_positive(self.name, "C", self.hparams["C"])
        if not 0 < self.hparams["held_out"] < 1 or int(self.hparams["n_subsets"]) < 1:
            raise InputError(f"mitigation {self.name!r}: held_out={self.hparams['held_out']} must lie in (0, 1) and "
                             f"n_subsets={self.hparams['n_subsets']} be an integer >= 1")
        check_choice(self.name, "by", self.hparams["by"], ("group", "group_class"))

    def wrap_head(self, head: nn.Module, n_groups: int) -> nn.Module:
        """The head unchanged; refused unless it has a `.linear` last layer to refit."""
        from torch import nn

        if not isinstance(getattr(head, "linear", None), nn.Linear):
            raise InputError(f"mitigation {self.name!r} needs a head with a `.linear` last layer to refit")
        return head

    def units(self, y: np.ndarray, groups: np.ndarray | None) -> np.ndarray:
        """Each sample's balancing unit: its group, or its group x class cell."""
        return balance_units(self.name, self.hparams["by"], y, groups, int(self.hparams["label_column"]),
                             self.n_classes)

    def epoch_indices(self, y: np.ndarray, groups: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        """First call: withhold `held_out` of the training split (checked to hold every unit and class); every
        epoch: a permutation of the rest."""
        if self.held is None:
            n = len(y)
            perm = rng.permutation(n)
            k = int(round(self.hparams["held_out"] * n))
            self.held, self.trained_on = np.sort(perm[:k]), np.sort(perm[k:])
            self.subset_seed = int(rng.integers(2**31))
            self.check_held_out(y, groups)
        assert self.trained_on is not None
        return rng.permutation(self.trained_on)

    def check_held_out(self, y: np.ndarray, groups: np.ndarray | None) -> None:
        """InputError (before training) unless the held-out part has every group and both values of every label
        column (a softmax head: every class)."""
        assert self.held is not None
        all_units = np.unique(self.units(y, groups))
        held_units = np.unique(self.units(y[self.held], None if groups is None else groups[self.held]))
        yh = y[self.held]
        if self.n_classes:
            classes_ok = len(np.unique(yh)) == self.n_classes
        else:
            y2 = yh[:, None] if yh.ndim == 1 else yh
            classes_ok = all(len(np.unique(y2[:, j] > 0.5)) == 2 for j in range(y2.shape[1]))
        if len(held_units) < len(all_units) or not classes_ok:
            raise InputError(f"mitigation {self.name!r}: its held-out {self.hparams['held_out']:g} of the training "
                             f"split ({len(self.held)} samples) lacks a group, cell or class the last layer needs; "
                             "use a larger dataset or a larger held_out")

    def after_fit(self, model: nn.Module, train: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]) -> None:
        """Refit `model.linear` on balanced subsets of the held-out training samples' representations."""
        import torch

        if self.held is None:
            raise InputError(f"mitigation {self.name!r}: no held-out split before the last layer is refitted")
        x, y, g = train
        held = torch.as_tensor(self.held)
        model.eval()
        with torch.no_grad():
            rep = model.representation(x[held]).double().numpy()  # type: ignore[operator]  # a head's method
        yh = y[held].numpy()
        gh = None if g is None else g[held].numpy()
        units = self.units(yh, gh)
        rng = np.random.default_rng(self.subset_seed)
        subsets = [balanced_subset(units, rng) for _ in range(int(self.hparams["n_subsets"]))]
        labels = yh.astype(np.int64) if self.n_classes else (yh[:, None] if yh.ndim == 1 else yh) > 0.5
        w, b = refit_last_layer(rep, labels.astype(np.int64), subsets, float(self.hparams["C"]), self.n_classes)
        linear = model.linear
        assert isinstance(linear, torch.nn.Linear)
        with torch.no_grad():
            linear.weight.copy_(torch.as_tensor(w, dtype=linear.weight.dtype))
            linear.bias.copy_(torch.as_tensor(b, dtype=linear.bias.dtype))

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and the held-out split."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "needs the sensitive attribute at training and a head with a linear last layer; the "
                         "held-out data is a fraction held_out of the training split withheld from ERM (never "
                         "validation or test); best_epoch and best_val_loss are the ERM checkpoint's"}
