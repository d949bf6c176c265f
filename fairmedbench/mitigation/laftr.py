"""LAFTR (Madras, Creager, Pitassi, Zemel, ICML 2018): an adversary h predicts the binary sensitive attribute a
from the representation (and, for equalised odds, the label); its loss is LAFTR's group-normalised L1 error

  L_adv = sum over cells c of mean_{i in c} |h(z_i) - a_i|,  cells = groups (dp) or group x label (eo),

which the adversary minimises and the model maximises through gradient reversal scaled by gamma, beside the task
loss (min_{f,g} max_h L_C - gamma L_adv). The normalisation makes a small group count as much as a large one,
and the eo form bounds the equalised-odds gap. The adversary's input follows `adversarial`'s rule (input=auto:
the representation when it is trainable, else the logits of a linear probe on frozen features)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from fairmedbench.engine.hparams import TRAINING_SPACE, LogUniform, SearchRange
from fairmedbench.errors import InputError
from fairmedbench.mitigation.adversarial import Adversarial, adversary_features
from fairmedbench.mitigation.base import Batch, register_mitigation

if TYPE_CHECKING:
    import torch
    from torch import nn


def group_normalised_l1(prob: torch.Tensor, groups: torch.Tensor, cells: torch.Tensor) -> torch.Tensor:
    """sum over cells of the cell's mean |prob - a| (a = the 0/1 group code)."""
    import torch

    err = (prob - groups.to(prob.dtype)).abs()
    _, cell, counts = torch.unique(cells, return_inverse=True, return_counts=True)
    return (err / counts[cell].to(err.dtype)).sum()


@register_mitigation
@dataclass
class LAFTR(Adversarial):
    """Task loss + gamma-reversed group-normalised L1 loss of a sigmoid adversary on a binary attribute."""

    name: ClassVar[str] = "laftr"
    DEFAULTS: ClassVar[dict[str, Any]] = {"lambda": 1.0, "variant": "eo", "input": "auto", "hidden": 32}
    REFERENCE: ClassVar[str] = ("Madras et al. ICML 2018 (LAFTR, equalised-odds adversary, group-normalised L1 "
                                "loss); gamma (here lambda) 1.0 as MEDFAIR's fairness coefficient; the paper "
                                "sweeps gamma to trace the fairness-accuracy trade-off")
    # search space: the trade-off sweep of gamma, both fairness targets
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "lambda": LogUniform(0.1, 10.0),
                                                         "variant": ("dp", "eo")}

    def wrap_head(self, head: nn.Module, n_groups: int) -> nn.Module:
        """Refuse a non-binary attribute, then build a one-output (sigmoid) adversary."""
        from torch import nn

        if n_groups != 2:
            raise InputError(f"mitigation {self.name!r} is defined for a binary sensitive attribute, this one has "
                             f"{n_groups} groups; use adversarial (a softmax adversary over groups)")
        super().wrap_head(head, n_groups)
        adv = self.adversary
        if isinstance(adv, nn.Linear):
            self.adversary = nn.Linear(adv.in_features, 1)
        elif isinstance(adv, nn.Sequential) and isinstance(adv[-1], nn.Linear):
            adv[-1] = nn.Linear(adv[-1].in_features, 1)
        return head

    def adversary_loss(self, batch: Batch, reverse: bool = True) -> torch.Tensor:
        """LAFTR's group-normalised L1 loss of the adversary; with `reverse` the model gets -gamma x its gradient."""
        import torch
        import torch.nn.functional as F

        if self.adversary is None:
            raise InputError(f"mitigation {self.name!r}: wrap_head must be called before training")
        if batch.groups is None:
            raise InputError(f"mitigation {self.name!r} needs the sensitive attribute at training")
        z = adversary_features(self.name, batch, self.adversary_input,
                               float(self.hparams["lambda"]) if reverse else None)
        cells = batch.groups
        if self.hparams["variant"] == "eo":
            y = F.one_hot(batch.y.long(), self.n_classes) if self.n_classes else batch.y
            z = torch.cat([z, y.to(z.dtype)], dim=1)
            _, labels = torch.unique(batch.y, dim=0, return_inverse=True)
            cells = cells * (int(labels.max()) + 1) + labels
        prob = torch.sigmoid(self.adversary(z))[:, 0]
        return group_normalised_l1(prob, batch.groups, cells)

    def describe(self) -> dict[str, Any]:
        """Base description plus LAFTR's loss."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "needs a binary attribute at training and a classifier head; adversary = MLP(hidden) -> "
                         "sigmoid, loss = sum over groups (dp) or group x label cells (eo) of the mean |h - a|; "
                         "input=auto as adversarial"}
