"""Balanced resampling: each epoch draws n samples with replacement so that every group, class or
group x class cell is drawn equally often in expectation (Idrissi et al., CLeaR 2022, "Simple data
balancing achieves competitive worst-group-accuracy"; the `resampling` baseline of MEDFAIR, Zong et al.,
ICLR 2023)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fairmedbench.engine.hparams import TRAINING_SPACE, SearchRange
from fairmedbench.mitigation._common import BALANCE_UNITS, balance_units, check_choice, merge_hparams
from fairmedbench.mitigation.base import Mitigation, register_mitigation


@register_mitigation
@dataclass
class Resampling(Mitigation):
    """Sample with replacement, weight 1 / (number of units x size of the sample's unit)."""

    name: ClassVar[str] = "resampling"
    DEFAULTS: ClassVar[dict[str, Any]] = {"by": "group", "label_column": 0}
    REFERENCE: ClassVar[str] = ("Idrissi et al. 2022 (SUBG/RWG data balancing); MEDFAIR resampling baseline "
                                "(Zong et al. 2023)")
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "by": ("group", "group_class")}

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        check_choice(self.name, "by", self.hparams["by"], BALANCE_UNITS)
        self.needs_attribute_at_training = self.hparams["by"] != "class"

    def label_need(self) -> str | None:
        """by=class and by=group_class balance over a class label per sample."""
        if self.hparams["by"] != "group":
            return (f"by={self.hparams['by']} balances over a class label and a segmentation sample has none; "
                    "use by=group")
        return None

    def epoch_indices(self, y: np.ndarray, groups: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        """n draws with replacement, each unit (group / class / cell) with total probability 1 / #units."""
        units = balance_units(self.name, self.hparams["by"], np.asarray(y), groups, self.hparams["label_column"],
                              self.n_classes)
        _, inverse, counts = np.unique(units, return_inverse=True, return_counts=True)
        p = 1.0 / (len(counts) * counts[inverse])
        return rng.choice(len(units), size=len(units), replace=True, p=p / p.sum())

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and the sampling rule."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "epoch = n draws with replacement; by=class/group_class use labels[:, label_column] "
                         "(a softmax head's class index: K classes, K x groups cells)"}
