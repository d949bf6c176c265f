"""Group-specific thresholds, a post-processing baseline (in the spirit of Hardt, Price & Srebro,
NeurIPS 2016, without their randomisation): each group gets its own operating threshold chosen on
validation by a policy (Youden's J by default). A monotone per-group map sends the group's threshold to
0.5, so a global threshold of 0.5 realises every group's own operating point and within-group rankings
(hence within-group AUC) are unchanged. It NEEDS THE SENSITIVE ATTRIBUTE AT INFERENCE.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from fairmedbench.engine.hparams import TRAINING_SPACE, SearchRange
from fairmedbench.errors import InputError
from fairmedbench.metrics.thresholds import choose_threshold, parse_policy
from fairmedbench.mitigation._common import check_group_codes, merge_hparams
from fairmedbench.mitigation.base import Mitigation, register_mitigation


def to_half(scores: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Strictly increasing map of [0, 1] onto [0, 1] with t -> 0.5, so `s >= t` iff `map(s) >= 0.5`.

    Below t: 0.5 * s / t (t = inf: 0.5 * s / (1 + 1e-9), everything stays below 0.5); at or above t:
    0.5 + 0.5 * (s - t) / (1 - t).
    """
    s = np.asarray(scores, dtype=np.float64)
    t = np.broadcast_to(np.asarray(t, dtype=np.float64), s.shape)
    below = 0.5 * s / np.where(np.isfinite(t), np.maximum(t, 1e-300), 1.0 + 1e-9)
    above = 0.5 + 0.5 * (s - t) / np.maximum(1.0 - t, 1e-12)
    with np.errstate(invalid="ignore"):
        out = np.where(s >= t, np.clip(above, 0.5, 1.0), np.minimum(below, np.nextafter(0.5, 0.0)))
    return np.clip(out, 0.0, 1.0)


@register_mitigation
@dataclass
class GroupThresholds(Mitigation):
    """Per-group, per-label thresholds from validation; groups unseen or one-class in validation use the
    global validation threshold."""

    name: ClassVar[str] = "group_thresholds"
    needs_attribute_at_training: bool = True
    needs_attribute_at_inference: bool = True
    threshold_policy: str | None = "fixed:0.5"
    needs: ClassVar[Mapping[str, object]] = {"thresholded": True}
    other_tasks: ClassVar[str] = (
        "it chooses a per-group threshold on a binary score; a segmentation mask is thresholded per pixel at "
        "logit 0 and has no score to threshold per sample, and a multi-class decision is the argmax over the "
        "classes' probabilities, with no threshold to move")
    thresholds: np.ndarray | None = field(default=None, repr=False)
    global_thresholds: Any = field(default=None, repr=False)
    fallback: list[tuple[int, int]] = field(default_factory=list, repr=False)
    DEFAULTS: ClassVar[dict[str, Any]] = {"policy": "val_youden"}
    REFERENCE: ClassVar[str] = ("group-specific thresholds (Hardt et al. 2016, deterministic variant); "
                                "Youden's J as in the runner's default policy")
    # search space: the head's training only: the policy is a choice of operating point, not tuned
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = TRAINING_SPACE

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        name, _ = parse_policy(self.hparams["policy"])
        if not name.startswith("val_"):
            raise InputError(f"mitigation {self.name!r}: policy={self.hparams['policy']!r} must be chosen on "
                             "validation (val_youden, val_best_f1, val_fpr:F or val_tpr:X)")

    def fit_postprocess(self, scores: np.ndarray, y: np.ndarray, groups: np.ndarray | None) -> None:
        """Choose each group's threshold per label on validation scores."""
        if groups is None:
            raise InputError(f"mitigation {self.name!r} needs the sensitive attribute of the validation split")
        s = np.asarray(scores, dtype=np.float64)
        s = s[:, None] if s.ndim == 1 else s
        yy = np.asarray(y)
        yy = yy[:, None] if yy.ndim == 1 else yy
        g = check_group_codes(self.name, groups)
        if not (len(g) == len(s) == len(yy)):
            raise InputError(f"mitigation {self.name!r}: validation scores ({len(s)}), labels ({len(yy)}) and "
                             f"groups ({len(g)}) differ in length")
        policy = self.hparams["policy"]
        k = s.shape[1]
        glob = np.array([choose_threshold(policy, yy[:, j], s[:, j]).value for j in range(k)])
        n_groups = int(g.max()) + 1 if len(g) else 0
        thr = np.tile(glob, (n_groups, 1))
        self.fallback = []
        for gi in range(n_groups):
            rows = g == gi
            for j in range(k):
                pos = int((yy[rows, j] > 0.5).sum())
                if 0 < pos < int(rows.sum()):
                    thr[gi, j] = choose_threshold(policy, yy[rows, j], s[rows, j]).value
                else:
                    self.fallback.append((gi, j))
        self.thresholds, self.global_thresholds = thr, glob

    def group_thresholds(self, groups: np.ndarray) -> np.ndarray:
        """(n, K) thresholds for these group codes (the global one for groups unseen in validation)."""
        if self.thresholds is None:
            raise InputError(f"mitigation {self.name!r}: fit_postprocess must run on validation first")
        g = check_group_codes(self.name, groups)
        out = np.tile(self.global_thresholds, (len(g), 1))
        known = g < len(self.thresholds)
        out[known] = self.thresholds[g[known]]
        return out

    def adjust_scores(self, scores: np.ndarray, groups: np.ndarray | None) -> np.ndarray:
        """Map each sample's scores so its group's threshold lands on 0.5."""
        if groups is None:
            raise InputError(f"mitigation {self.name!r} needs the sensitive attribute at inference: give the "
                             "test split's groups (this method is not attribute-free at deployment)")
        s = np.asarray(scores, dtype=np.float64)
        one_d = s.ndim == 1
        s2 = s[:, None] if one_d else s
        if len(groups) != len(s2):
            raise InputError(f"mitigation {self.name!r}: {len(s2)} scores but {len(groups)} group codes")
        out = to_half(s2, self.group_thresholds(groups))
        return out[:, 0] if one_d else out

    def describe(self) -> dict[str, Any]:
        """Base description plus the attribute-at-inference warning and the fixed global threshold."""
        return {**super().describe(), "reference": self.REFERENCE, "threshold_policy": self.threshold_policy,
                "notes": "NEEDS THE SENSITIVE ATTRIBUTE AT INFERENCE: per-group thresholds chosen on validation "
                         "are applied by mapping each group's threshold to 0.5; the global threshold is fixed:0.5"}
