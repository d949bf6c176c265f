"""FairCLIP's Sinkhorn loss (Luo et al., "FairCLIP", CVPR 2024; official `finetune_FairCLIP.py`, defaults of
`scripts/finetune_FairCLIP.sh`: lambda 1e-6, Sinkhorn blur 1e-4): the task loss plus
lambda x sum over groups of the Sinkhorn distance (geomloss, p = 2) between the distribution of the batch's
image-to-own-text similarities and each group's.

With the normalisation the official code lacks (Harvard-Ophthalmology-AI-Lab/FairCLIP issue #8: the group's
similarities are divided by their sum, the batch's are not, so the two distributions differ in scale by about
the batch size and the loss measures that, not a group gap) both are divided by their sums here.

A frozen-feature head has no text tower to fine-tune: the similarity of a sample with its own caption is read as
the probability the head gives the sample's true label (a CLIP zero-shot or clip-adapt head's softmax over its
class prompts; a linear probe's sigmoid), so this serves every classifier head. Each group's distribution is
taken from the batch's members of that group, without gradient, as the official code computes it under no_grad
from a separate per-group minibatch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from fairmedbench.engine.hparams import TRAINING_SPACE, LogUniform, SearchRange
from fairmedbench.errors import InputError
from fairmedbench.mitigation._common import check_positive, merge_hparams, true_label_probability
from fairmedbench.mitigation.base import Batch, Mitigation, register_mitigation
from fairmedbench.mitigation.fis import sinkhorn

if TYPE_CHECKING:
    import torch


def fairclip_penalty(sim: torch.Tensor, groups: torch.Tensor, blur: float, normalise: bool = True) -> torch.Tensor:
    """sum_a Sinkhorn(batch similarities / their sum, group a's similarities / their sum (no gradient));
    `normalise=False` leaves the batch's unnormalised, as the official code does."""
    import torch

    batch = sim / sim.sum() if normalise else sim
    total = sim.sum() * 0.0
    for a in torch.unique(groups).tolist():
        g = sim[groups == a].detach()
        total = total + sinkhorn(batch, g / g.sum(), blur)
    return total


@register_mitigation
@dataclass
class FairCLIPLoss(Mitigation):
    """Task loss + lambda x sum_a Sinkhorn(normalised batch similarities, normalised group-a similarities)."""

    name: ClassVar[str] = "fairclip"
    needs_attribute_at_training: bool = True
    needs: ClassVar[Mapping[str, object]] = {"head": "classifier"}
    other_tasks: ClassVar[str] = ("its distributions are of per-sample similarities to the sample's own label, "
                                  "which a mask decoder does not give")
    DEFAULTS: ClassVar[dict[str, Any]] = {"lambda": 1e-6, "blur": 1e-4}
    REFERENCE: ClassVar[str] = ("Luo et al. CVPR 2024 (FairCLIP); official lambda 1e-6 (swept 1e-7 .. 1e-4), "
                                "blur 1e-4; both distributions normalised (FairCLIP issue #8)")
    # search space: the official sweep of lambda
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "lambda": LogUniform(1e-7, 1e-4)}

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        check_positive(self.name, "lambda", self.hparams["lambda"], allow_zero=True)
        check_positive(self.name, "blur", self.hparams["blur"])

    def loss(self, per_sample: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Mean task loss + lambda x the normalised Sinkhorn penalty."""
        if batch.groups is None:
            raise InputError(f"mitigation {self.name!r} needs the sensitive attribute at training")
        sim = true_label_probability(batch.logits, batch.y, self.n_classes)
        penalty = fairclip_penalty(sim, batch.groups, float(self.hparams["blur"]))
        return per_sample.mean() + self.hparams["lambda"] * penalty

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and what the similarity is here."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "needs group labels at training and a classifier head; similarity = the head's "
                         "probability of the true label (CLIP fine-tunes both towers on captions; here the head "
                         "only); batch and group similarity distributions both divided by their sums"}
