"""EnD, entangling and disentangling deep representations (Tartaglione, Barbano, Grangetto, CVPR 2021), as
MEDFAIR's EnD computes its regulariser (Zong et al., ICLR 2023): on the L2-normalised representation, with G its
Gram matrix (cosine similarities) over pairs i > j of the batch,

  R_orth = sum over groups b of |sum of G_ij over pairs of group b| / #such pairs   (disentangle the group),
  R_par  = 1 - mean over pairs of one class and different groups of (1 + G_ij) / 2   (entangle across groups),

objective = task loss + alpha R_orth + beta R_par. Deviation, stated: MEDFAIR's code keeps, of the cross-group
pairs, only those whose earlier-listed group has the larger batch index (its masks are lower-triangular in the
batch order); every such pair counts here. It needs a representation that trains (refused on frozen features)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from fairmedbench.engine.hparams import TRAINING_SPACE, LogUniform, SearchRange
from fairmedbench.errors import InputError
from fairmedbench.mitigation._common import check_positive, merge_hparams
from fairmedbench.mitigation._representation import FROZEN_WHY, require_trainable_representation
from fairmedbench.mitigation.base import Batch, Mitigation, register_mitigation

if TYPE_CHECKING:
    import torch
    from torch import nn


def end_regulariser(rep: torch.Tensor, targets: torch.Tensor, groups: torch.Tensor, alpha: float,
                    beta: float) -> torch.Tensor:
    """alpha R_orth + beta R_par of the L2-normalised rows of `rep` (see the module docstring)."""
    import torch
    import torch.nn.functional as F

    d = F.normalize(rep, dim=1)
    n = len(d)
    gram = (d @ d.T).clamp(-1, 1)
    lower = torch.tril(torch.ones(n, n, dtype=torch.bool, device=d.device), diagonal=-1)
    ortho, m_tot = gram.sum() * 0.0, 0
    for b in torch.unique(groups).tolist():
        mask = lower & (groups[:, None] == b) & (groups[None, :] == b)
        m_tot += int(mask.sum())
        ortho = ortho + (gram * mask).sum().abs()
    ortho = ortho / max(m_tot, 1)
    par_mask = lower & (targets[:, None] == targets[None, :]) & (groups[:, None] != groups[None, :])
    m = int(par_mask.sum())
    par = 1.0 - ((1.0 + gram) / 2 * par_mask).sum() / m if m else gram.sum() * 0.0
    return alpha * ortho + beta * par


@register_mitigation
@dataclass
class EnD(Mitigation):
    """Task loss + alpha x same-group orthogonality + beta x same-class cross-group parallelism."""

    name: ClassVar[str] = "end"
    needs_attribute_at_training: bool = True
    needs: ClassVar[Mapping[str, object]] = {"head": "classifier"}
    other_tasks: ClassVar[str] = "it regularises a classifier's representation vectors by class and group"
    needs_trainable_representation: ClassVar[str] = FROZEN_WHY
    DEFAULTS: ClassVar[dict[str, Any]] = {"alpha": 1.0, "beta": 1.0, "label_column": 0}
    REFERENCE: ClassVar[str] = ("Tartaglione et al. CVPR 2021 (EnD); alpha = beta = 1, the defaults of MEDFAIR's "
                                "EnD regulariser (the paper tunes both per dataset)")
    # search space: both weights a decade either side of MEDFAIR's 1
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "alpha": LogUniform(0.1, 10.0),
                                                         "beta": LogUniform(0.1, 10.0)}

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        check_positive(self.name, "alpha", self.hparams["alpha"], allow_zero=True)
        check_positive(self.name, "beta", self.hparams["beta"], allow_zero=True)

    def wrap_head(self, head: nn.Module, n_groups: int) -> nn.Module:
        """Refuse a frozen representation; the head is unchanged."""
        require_trainable_representation(self.name, head)
        return head

    def loss(self, per_sample: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Mean task loss + the EnD regulariser on the batch's representation."""
        if batch.groups is None or batch.representation is None:
            raise InputError(f"mitigation {self.name!r} needs the attribute at training and a representation")
        y = batch.y.long() if self.n_classes else (batch.y[:, self.hparams["label_column"]] > 0.5).long()
        return per_sample.mean() + end_regulariser(batch.representation, y, batch.groups,
                                                   float(self.hparams["alpha"]), float(self.hparams["beta"]))

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and what it needs."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "needs group labels at training and a representation that trains (lora), refused on a "
                         "linear probe of frozen features"}
