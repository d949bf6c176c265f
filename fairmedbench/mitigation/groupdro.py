"""Group DRO with online group weights (Sagawa et al., ICLR 2020, Algorithm 1): after each batch
q_g <- q_g * exp(eta * loss_g), renormalised; the objective is sum_g q_g * loss_g."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from fairmedbench.engine.hparams import TRAINING_SPACE, LogUniform, SearchRange
from fairmedbench.errors import InputError
from fairmedbench.mitigation._common import check_choice, check_positive, merge_hparams
from fairmedbench.mitigation.base import Batch, Mitigation, register_mitigation

if TYPE_CHECKING:
    import torch
    from torch import nn


@register_mitigation
@dataclass
class GroupDRO(Mitigation):
    """Exponentiated-gradient ascent on group weights, descent on the q-weighted group losses."""

    name: ClassVar[str] = "groupdro"
    needs_attribute_at_training: bool = True
    q: torch.Tensor | None = field(default=None, repr=False)
    DEFAULTS: ClassVar[dict[str, Any]] = {"eta": 0.01, "by": "group", "label_column": 0}
    REFERENCE: ClassVar[str] = "Sagawa, Koh, Hashimoto, Liang. ICLR 2020, Algorithm 1 (robust_step_size 0.01)"
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "eta": LogUniform(1e-3, 1.0)}

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        check_positive(self.name, "eta", self.hparams["eta"], allow_zero=True)
        check_choice(self.name, "by", self.hparams["by"], ("group", "group_class"))

    def label_need(self) -> str | None:
        """by=group_class weighs group x class cells, so it needs a class label per sample."""
        if self.hparams["by"] != "group":
            return "by=group_class weighs group x label cells and a segmentation sample has no label; use by=group"
        return None

    def wrap_head(self, head: nn.Module, n_groups: int) -> nn.Module:
        """Start q uniform over the groups (or group x class cells); the head is unchanged."""
        import torch

        if n_groups < 1:
            raise InputError(f"mitigation {self.name!r} needs at least one group, got n_groups={n_groups}")
        n_units = n_groups * (max(self.n_classes, 2) if self.hparams["by"] == "group_class" else 1)
        self.q = torch.full((n_units,), 1.0 / n_units)
        return head

    def units(self, batch: Batch) -> torch.Tensor:
        """The batch's unit codes: group, or 2 * group + label (labels[:, label_column]); for a softmax head
        K * group + class index."""
        g = batch.groups
        if g is None:
            raise InputError(f"mitigation {self.name!r} needs the sensitive attribute at training")
        if self.hparams["by"] == "group":
            return g
        col = self.hparams["label_column"]
        if self.n_classes:  # label_column 0 (Mitigation.unsupported)
            return self.n_classes * g + batch.y.long()
        if not 0 <= col < batch.y.shape[1]:
            raise InputError(f"mitigation {self.name!r}: label_column={col} but labels have "
                             f"{batch.y.shape[1]} column(s)")
        return 2 * g + (batch.y[:, col] > 0.5).long()

    def loss(self, per_sample: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Group mean losses, an exponentiated-gradient step on q (absent groups get loss 0), then q . loss."""
        import torch

        u = self.units(batch)
        if self.q is None:
            raise InputError(f"mitigation {self.name!r}: wrap_head must be called before training")
        n = self.q.numel()
        if len(u) and (int(u.min()) < 0 or int(u.max()) >= n):
            raise InputError(f"mitigation {self.name!r}: group codes outside 0..{n - 1} in a training batch")
        sums = torch.zeros(n, dtype=per_sample.dtype, device=per_sample.device).index_add(0, u, per_sample)
        counts = torch.bincount(u, minlength=n).to(per_sample.dtype)
        group_loss = sums / counts.clamp(min=1)
        q = self.q.to(per_sample.device) * torch.exp(self.hparams["eta"] * group_loss.detach())
        self.q = q / q.sum()
        return (self.q * group_loss).sum()

    def weights(self) -> np.ndarray:
        """Current group weights q as numpy."""
        if self.q is None:
            raise InputError(f"mitigation {self.name!r}: no group weights before wrap_head")
        return self.q.cpu().numpy().copy()

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and the group definition."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "groups = attribute groups (by=group) or attribute x label cells as in the paper "
                         "(by=group_class; a softmax head's K classes give K cells per group); no generalisation "
                         "adjustment (paper's C = 0 default)"}
