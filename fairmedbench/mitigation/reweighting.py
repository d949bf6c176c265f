"""Re-weighting: each training sample's loss is weighted by the inverse frequency of its group (or group x
class cell) in the training split, w = n / (#units x n_unit), so every unit carries the same total weight
(the RWG baseline of Idrissi et al., CLeaR 2022; `ReWeight` in Yang et al., Nature Medicine 2024; the
`reweighting` baseline of MEDFAIR, Zong et al., ICLR 2023, which weighs attribute x label cells)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from fairmedbench.engine.hparams import TRAINING_SPACE, SearchRange
from fairmedbench.errors import InputError
from fairmedbench.mitigation._common import balance_units, check_choice, merge_hparams
from fairmedbench.mitigation.base import Batch, Mitigation, register_mitigation

if TYPE_CHECKING:
    import torch


@register_mitigation
@dataclass
class Reweighting(Mitigation):
    """Objective mean_i w_u(i) l_i with w_u = n / (#units x n_u), the unit sizes counted on the training split."""

    name: ClassVar[str] = "reweighting"
    needs_attribute_at_training: bool = True
    weights: np.ndarray | None = field(default=None, repr=False)
    DEFAULTS: ClassVar[dict[str, Any]] = {"by": "group", "label_column": 0}
    REFERENCE: ClassVar[str] = ("Idrissi et al. CLeaR 2022 (RWG); Yang et al. Nat Med 2024 (ReWeight); MEDFAIR "
                                "reweighting (Zong et al. ICLR 2023: by=group_class). No hyperparameter to tune")
    # search space: no hyperparameter of its own beyond the unit
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "by": ("group", "group_class")}

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        check_choice(self.name, "by", self.hparams["by"], ("group", "group_class"))

    def label_need(self) -> str | None:
        """by=group_class weighs group x label cells, which needs a class label per sample."""
        if self.hparams["by"] != "group":
            return "by=group_class weighs group x label cells and a segmentation sample has no label; use by=group"
        return None

    def epoch_indices(self, y: np.ndarray, groups: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        """Count the training split's units (once), then the default seeded permutation."""
        if self.weights is None:
            units = balance_units(self.name, self.hparams["by"], np.asarray(y), groups, self.hparams["label_column"],
                                  self.n_classes)
            counts = np.bincount(units).astype(np.float64)
            present = counts > 0
            self.weights = np.where(present, len(units) / (present.sum() * np.maximum(counts, 1)), 0.0)
        return rng.permutation(len(y))

    def units(self, batch: Batch) -> torch.Tensor:
        """The batch's unit codes, as balance_units computes them for the training split."""
        g = batch.groups
        if g is None:
            raise InputError(f"mitigation {self.name!r} needs the sensitive attribute at training")
        if self.hparams["by"] == "group":
            return g
        if self.n_classes:
            return self.n_classes * g + batch.y.long()
        return 2 * g + (batch.y[:, self.hparams["label_column"]] > 0.5).long()

    def loss(self, per_sample: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Mean of the unit-weighted per-sample losses."""
        import torch

        if self.weights is None:
            raise InputError(f"mitigation {self.name!r}: epoch_indices must count the training units first")
        u = self.units(batch)
        if len(u) and int(u.max()) >= len(self.weights):
            raise InputError(f"mitigation {self.name!r}: a training batch has a unit the training split lacks")
        w = torch.as_tensor(self.weights, dtype=per_sample.dtype, device=per_sample.device)[u]
        return (w * per_sample).mean()

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and the weights' definition."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "w = n / (#units x n_unit) from the training split (units: groups, or group x label "
                         "cells with by=group_class); objective = batch mean of w x loss"}
