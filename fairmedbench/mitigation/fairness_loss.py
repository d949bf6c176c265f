"""A differentiable between-group gap penalty added to the task loss.

target=loss: the spread of group mean losses (variance: V-REx, Krueger et al., ICML 2021, risks per
group instead of per environment; max - min: the worst-minus-best gap). target=tpr: the spread of soft
true-positive rates, the mean predicted probability among each group's positives (a differentiable
equal-opportunity proxy, as in FNNC, Padala & Gujar, IJCAI 2020); target=eo adds the soft false-positive
rate among negatives (equalized odds). Rates are per label and averaged over labels.

A softmax head (multi-class task) takes target=loss, the spread of group mean cross-entropies (V-REx's risks);
target=tpr/eo are refused there: their soft rates are sigmoid probabilities of 0/1 labels, and a multi-class
analogue (per-class one-vs-rest rates) is not what the cited papers define.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from fairmedbench.engine.hparams import TRAINING_SPACE, LogUniform, SearchRange
from fairmedbench.errors import InputError
from fairmedbench.mitigation._common import check_choice, check_positive, merge_hparams
from fairmedbench.mitigation.base import Batch, Mitigation, register_mitigation

if TYPE_CHECKING:
    import torch

    from fairmedbench.tasks.base import Task


def _spread(values: torch.Tensor, present: torch.Tensor, how: str) -> torch.Tensor:
    """Per column of (G, K) `values`: variance or max - min over groups where `present`; 0 if fewer than 2."""
    import torch

    m = present.to(values.dtype)
    n = m.sum(0)
    if how == "var":
        mean = (values * m).sum(0) / n.clamp(min=1)
        gap = ((values - mean) ** 2 * m).sum(0) / n.clamp(min=1)
    else:
        gap = (values.masked_fill(~present, -torch.inf).max(0).values
               - values.masked_fill(~present, torch.inf).min(0).values)
    return torch.where(n >= 2, gap, torch.zeros_like(gap))


@register_mitigation
@dataclass
class FairnessLoss(Mitigation):
    """mean loss + weight x spread over groups of mean losses or soft rates, computed per batch."""

    name: ClassVar[str] = "fairness_loss"
    needs_attribute_at_training: bool = True
    DEFAULTS: ClassVar[dict[str, Any]] = {"weight": 1.0, "target": "loss", "penalty": "var"}
    REFERENCE: ClassVar[str] = ("V-REx variance of group risks (Krueger et al. 2021); soft-rate constraints "
                                "(Padala & Gujar 2020). No paper fixes the weight: default 1.0, sweep it")
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "weight": LogUniform(0.1, 10.0)}

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        check_positive(self.name, "weight", self.hparams["weight"], allow_zero=True)
        check_choice(self.name, "target", self.hparams["target"], ("loss", "tpr", "eo"))
        check_choice(self.name, "penalty", self.hparams["penalty"], ("var", "maxmin"))

    def label_need(self) -> str | None:
        """target=tpr or eo compares soft rates, which need a score and a class label per sample."""
        if self.hparams["target"] != "loss":
            return (f"target={self.hparams['target']} compares soft true/false-positive rates, which need a score "
                    "and a class label per sample; use target=loss (the spread of group segmentation losses)")
        return None

    def unsupported(self, task: Task) -> str | None:
        """Also refuses target=tpr/eo for a softmax head (multi-class): their rates are binary."""
        if task.class_index_labels and self.hparams["target"] != "loss":
            return (f"target={self.hparams['target']} compares soft true/false-positive rates of a sigmoid score "
                    "against 0/1 labels, which a softmax head over classes does not have; use target=loss (the "
                    "spread of group mean cross-entropies)")
        return super().unsupported(task)

    def penalty(self, per_sample: torch.Tensor, batch: Batch) -> torch.Tensor:
        """The differentiable gap between the batch's groups."""
        import torch

        g = batch.groups
        if g is None:
            raise InputError(f"mitigation {self.name!r} needs the sensitive attribute at training")
        if len(g) and int(g.min()) < 0:
            raise InputError(f"mitigation {self.name!r}: negative group codes in a training batch")
        how = self.hparams["penalty"]
        n = int(g.max()) + 1 if len(g) else 1
        onehot = torch.nn.functional.one_hot(g, n).to(per_sample.dtype)  # (b, G)
        if self.hparams["target"] == "loss":
            counts = onehot.sum(0)[:, None]
            return _spread(onehot.T @ per_sample[:, None] / counts.clamp(min=1), counts > 0, how).sum()
        prob = torch.sigmoid(batch.logits)  # (b, K)
        sides = [batch.y > 0.5] + ([batch.y <= 0.5] if self.hparams["target"] == "eo" else [])
        total = per_sample.sum() * 0.0
        for side in sides:
            mask = side.to(prob.dtype)
            counts = onehot.T @ mask  # (G, K)
            total = total + _spread(onehot.T @ (mask * prob) / counts.clamp(min=1), counts > 0, how).mean()
        return total

    def loss(self, per_sample: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Mean task loss plus weight x the gap penalty."""
        return per_sample.mean() + self.hparams["weight"] * self.penalty(per_sample, batch)

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and the penalty definition."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "penalty over the groups present in each batch; rates are soft (mean sigmoid) per label"}
