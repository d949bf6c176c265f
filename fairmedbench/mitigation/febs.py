"""FEBS, fair error-bound scaling (Tian et al., "FairSeg", ICLR 2024), as its official code computes it
(Harvard-Ophthalmology-AI-Lab/FairSeg `utils.py` FairDiceLoss, used by `trainer_novel.py`, gamma 1.0):

  per group a of the batch: L_a = soft Dice loss (squared denominators, smooth 1e-5) of sigmoid(logits) against
  the targets, pooled over the group's samples and pixels;
  W_a = tanh((min_a' L_a' / L_a) ** gamma), constants of the step (no gradient);
  Dice_FEBS = soft Dice loss of W_a(i) * p_i against t_i, pooled over the batch.

Scaling a group's predictions by W_a <= 1 turns its Dice error into an upper bound of that error: the group with
the largest loss gets the smallest W, hence the most raised error bound, and its pixels can no longer attain a
zero loss. The objective here is mean pixel BCE + Dice_FEBS, the harness' Dice + BCE with the Dice term replaced
(the official SAMed trainer weighs them 0.2 CE + 0.8 Dice_FEBS over softmax classes; our decoders give one
sigmoid mask). Groups absent from a batch take no part in the minimum (the official code takes it over all groups,
which gives 0 / 0 when one is absent). Note: on a toy batch the raised bound comes with a smaller share of the
gradient for the worst group's logits (its predictions are scaled down), see tests/mitigation/test_seg_mitigations.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from fairmedbench.engine.hparams import TRAINING_SPACE, LogUniform, SearchRange
from fairmedbench.errors import InputError
from fairmedbench.mitigation._common import check_positive, merge_hparams
from fairmedbench.mitigation.base import Batch, Mitigation, register_mitigation

if TYPE_CHECKING:
    import torch

SMOOTH = 1e-5  # the official FairDiceLoss's smoothing


def soft_dice_loss(prob: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """1 - (2 sum(p t) + s) / (sum(p^2) + sum(t^2) + s), pooled over every element given."""
    return 1.0 - (2.0 * (prob * target).sum() + SMOOTH) / ((prob * prob).sum() + (target * target).sum() + SMOOTH)


@register_mitigation
@dataclass
class FEBS(Mitigation):
    """Mean BCE + the Dice loss of predictions scaled per group by tanh((min group loss / group loss) ** gamma)."""

    name: ClassVar[str] = "febs"
    needs_attribute_at_training: bool = True
    needs: ClassVar[Mapping[str, object]] = {"head": "mask_decoder"}
    other_tasks: ClassVar[str] = ("it scales predicted pixel probabilities inside a Dice loss, which a classifier "
                                  "does not have")
    last_weights: torch.Tensor | None = field(default=None, repr=False)
    DEFAULTS: ClassVar[dict[str, Any]] = {"gamma": 1.0}
    REFERENCE: ClassVar[str] = ("Tian et al. ICLR 2024 (FairSeg), fair error-bound scaling; official FairDiceLoss, "
                                "gamma 1.0")
    # search space: gamma a decade either side of the official 1
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "gamma": LogUniform(0.1, 10.0)}

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        check_positive(self.name, "gamma", self.hparams["gamma"], allow_zero=True)

    def group_weights(self, prob: torch.Tensor, target: torch.Tensor, groups: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per group code 0..max: the pooled soft Dice loss L_a and the weight W_a (NaN for absent groups)."""
        import torch

        n = int(groups.max()) + 1
        losses = torch.full((n,), float("nan"), dtype=prob.dtype, device=prob.device)
        for a in torch.unique(groups).tolist():
            sel = groups == a
            losses[a] = soft_dice_loss(prob[sel], target[sel])
        present = ~torch.isnan(losses)
        ratio = losses[present].min() / losses.clamp(min=1e-12)
        return losses, torch.where(present, torch.tanh(ratio ** self.hparams["gamma"]), torch.nan)

    def loss(self, per_sample: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Mean pixel BCE with logits + the pooled Dice loss of group-scaled probabilities."""
        import torch
        import torch.nn.functional as F

        z, t, g = batch.logits, batch.y, batch.groups
        if g is None:
            raise InputError(f"mitigation {self.name!r} needs the sensitive attribute at training")
        if z is None or t is None or z.shape != t.shape or z.dim() < 2:
            raise InputError(f"mitigation {self.name!r} needs per-pixel logits and targets of one shape (b, H, W)")
        if len(g) and int(g.min()) < 0:
            raise InputError(f"mitigation {self.name!r}: negative group codes in a training batch")
        prob = torch.sigmoid(z)
        with torch.no_grad():
            _, weights = self.group_weights(prob.detach(), t, g)
        self.last_weights = weights
        scale = weights[g].reshape(-1, *([1] * (z.dim() - 1)))
        return F.binary_cross_entropy_with_logits(z, t) + soft_dice_loss(prob * scale, t)

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and the loss definition."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "objective = mean pixel BCE + soft Dice loss (pooled over the batch) of sigmoid "
                         "probabilities scaled per group by W_a = tanh((min_a' L_a' / L_a) ** gamma), L_a the "
                         "group's pooled soft Dice loss in the batch; weights are constants of the step"}
