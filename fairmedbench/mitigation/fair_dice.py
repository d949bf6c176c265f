"""Group-weighted (fair) Dice for segmentation: the mean pixel BCE plus a weighted mean of the groups' soft Dice
losses in the batch, sum_a q_a L_a, with q = softmax(L / temperature) over the groups present (constants of the
step): a group with a larger Dice loss gets more weight, and temperature -> infinity gives the groups' plain mean
(every group counts equally, however many samples it has in the batch), temperature -> 0 the worst group's loss.
It is a soft-max relaxation of the worst-group Dice objective (Group DRO's closed form, Sagawa et al. 2020, on
Dice losses), beside FEBS (which scales predictions) and InD (one decoder per group). Dice terms use FEBS's
pooled soft Dice (squared denominators, smooth 1e-5)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from fairmedbench.engine.hparams import TRAINING_SPACE, LogUniform, SearchRange
from fairmedbench.errors import InputError
from fairmedbench.mitigation._common import check_positive, merge_hparams
from fairmedbench.mitigation.base import Batch, Mitigation, register_mitigation
from fairmedbench.mitigation.febs import soft_dice_loss

if TYPE_CHECKING:
    import torch


@register_mitigation
@dataclass
class FairDice(Mitigation):
    """Mean BCE + sum_a softmax(L / T)_a L_a over the batch's groups' pooled soft Dice losses L_a."""

    name: ClassVar[str] = "fair_dice"
    needs_attribute_at_training: bool = True
    needs: ClassVar[Mapping[str, object]] = {"head": "mask_decoder"}
    other_tasks: ClassVar[str] = "it weighs groups' Dice losses of predicted masks, which a classifier does not have"
    last_weights: torch.Tensor | None = field(default=None, repr=False)
    DEFAULTS: ClassVar[dict[str, Any]] = {"temperature": 1.0}
    REFERENCE: ClassVar[str] = ("group-weighted Dice: softmax(L_a / T) weights over the groups' soft Dice losses "
                                "(Group DRO's worst-group objective relaxed, Sagawa et al. ICLR 2020); T 1.0, "
                                "sweep 0.1 (near worst group) to 10 (near the groups' mean)")
    # search space: the temperature sweep 0.1 to 10
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "temperature": LogUniform(0.1, 10.0)}

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        check_positive(self.name, "temperature", self.hparams["temperature"])

    def loss(self, per_sample: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Mean pixel BCE with logits + the group-weighted pooled Dice losses."""
        import torch
        import torch.nn.functional as F

        z, t, g = batch.logits, batch.y, batch.groups
        if g is None:
            raise InputError(f"mitigation {self.name!r} needs the sensitive attribute at training")
        if z.shape != t.shape or z.dim() < 2:
            raise InputError(f"mitigation {self.name!r} needs per-pixel logits and targets of one shape (b, H, W)")
        prob = torch.sigmoid(z)
        dice = torch.stack([soft_dice_loss(prob[g == a], t[g == a]) for a in torch.unique(g).tolist()])
        q = torch.softmax(dice.detach() / self.hparams["temperature"], dim=0)
        self.last_weights = q
        return F.binary_cross_entropy_with_logits(z, t) + (q * dice).sum()

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and the loss."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "needs group labels at training and a mask decoder; weights over the groups present in "
                         "each batch, constants of the step"}
