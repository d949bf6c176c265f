"""Fair identity scaling (FIS; Luo et al., "FairVision", CVPR 2024), as the official code's Fair_Loss_Scaler
computes it (Harvard-Ophthalmology-AI-Lab/FairVision `src/modules.py`; defaults of `train_*_fis.py`: coef c 0.5,
temperature T 1, Sinkhorn blur 0.1, right asymptote 1):

  individual weights  w_i = softmax_i(l_i / T) x r   over the batch;
  group distance      d_a = Sinkhorn(losses of group a, losses of all groups)  (geomloss, p = 2, no gradient);
  group weights       v_i = softmax_i(d_a(i) / T) x r   over the batch;
  objective           mean_i ((1 - c) w_i + c v_i) l_i.

Deviation, stated: the official code draws each group's losses from a separate per-group minibatch; here they
are the batch's own group members (the loss hook sees one batch). The individual weights keep their gradient, as
in the official code."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from fairmedbench.engine.hparams import TRAINING_SPACE, LogUniform, SearchRange
from fairmedbench.errors import InputError
from fairmedbench.mitigation._common import check_positive, merge_hparams
from fairmedbench.mitigation.base import Batch, Mitigation, register_mitigation

if TYPE_CHECKING:
    import torch


def sinkhorn(x: torch.Tensor, y: torch.Tensor, blur: float) -> torch.Tensor:
    """geomloss's debiased Sinkhorn divergence between 1-D samples x (n,) and y (m,) (p = 2: cost |x - y|^2 / 2,
    eps = blur^2); 0 when every point coincides (geomloss cannot size its blur schedule for a zero diameter)."""
    import torch
    from geomloss import SamplesLoss

    both = torch.cat([x.detach(), y.detach()])
    if float(both.max() - both.min()) == 0.0:
        return (x.sum() + y.sum()) * 0.0
    return SamplesLoss(loss="sinkhorn", p=2, blur=blur)(x[:, None], y[:, None])


@register_mitigation
@dataclass
class FairIdentityScaling(Mitigation):
    """Per-sample loss weights mixing an individual softmax over losses and a group softmax over Sinkhorn
    distances between each group's loss distribution and the batch's."""

    name: ClassVar[str] = "fis"
    needs_attribute_at_training: bool = True
    DEFAULTS: ClassVar[dict[str, Any]] = {"coef": 0.5, "temperature": 1.0, "blur": 0.1, "asymptote": 1.0}
    REFERENCE: ClassVar[str] = ("Luo et al. CVPR 2024 (FairVision, fair identity scaling); official defaults "
                                "coef 0.5, temperature 1, Sinkhorn blur 0.1, right asymptote 1; coef in [0, 1]")
    # search space: coef across its range [0, 1]
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "coef": (0.0, 0.25, 0.5, 0.75, 1.0),
                                                         "temperature": LogUniform(0.1, 10.0)}

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        if not 0 <= self.hparams["coef"] <= 1:
            raise InputError(f"mitigation {self.name!r}: coef={self.hparams['coef']} must lie in [0, 1]")
        for key in ("temperature", "blur", "asymptote"):
            check_positive(self.name, key, self.hparams[key])

    def group_distances(self, per_sample: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
        """Per sample, the Sinkhorn divergence between its group's losses and the batch's (no gradient)."""
        import torch

        flat = per_sample.detach().reshape(-1).to(torch.float64)
        d = torch.zeros(len(flat), dtype=flat.dtype, device=flat.device)
        for a in torch.unique(groups).tolist():
            sel = groups == a
            d[sel] = sinkhorn(flat[sel], flat, float(self.hparams["blur"]))
        return d.to(per_sample.dtype)

    def loss(self, per_sample: torch.Tensor, batch: Batch) -> torch.Tensor:
        """mean(((1 - c) softmax(l / T) r + c softmax(d / T) r) * l)."""
        import torch

        if batch.groups is None:
            raise InputError(f"mitigation {self.name!r} needs the sensitive attribute at training")
        t, c, r = self.hparams["temperature"], self.hparams["coef"], self.hparams["asymptote"]
        individual = torch.softmax(per_sample / t, dim=0) * r
        group = torch.softmax(self.group_distances(per_sample, batch.groups) / t, dim=0) * r
        return (((1 - c) * individual + c * group) * per_sample).mean()

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and the deviation."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "needs group labels at training; group loss distributions are the batch's own members "
                         "(the official code draws a separate minibatch per group)"}
