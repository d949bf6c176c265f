"""CVaR DRO (Levy, Carmon, Duchi, Sidford, NeurIPS 2020): minimise the conditional value at risk at level alpha
of the per-sample losses in each batch, CVaR_a(l) = min_eta eta + E[(l - eta)_+] / a, which is the mean of the
worst a-fraction of the losses, the boundary sample counted fractionally. It needs no group labels: the worst
losses stand in for the unknown worst group (Yang et al., Nature Medicine 2024, `CVaRDRO`; SubpopBench's grid
alpha = 10^U(-2, 0))."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from fairmedbench.engine.hparams import TRAINING_SPACE, LogUniform, SearchRange
from fairmedbench.errors import InputError
from fairmedbench.mitigation._common import merge_hparams
from fairmedbench.mitigation.base import Batch, Mitigation, register_mitigation

if TYPE_CHECKING:
    import torch


def cvar(losses: torch.Tensor, alpha: float) -> torch.Tensor:
    """Mean of the top alpha * n losses: the floor(alpha n) largest in full, the next with weight
    alpha n - floor(alpha n), divided by alpha n (the exact CVaR of the empirical distribution)."""
    import torch

    n = losses.numel()
    k = alpha * n
    whole = min(int(math.floor(k + 1e-9)), n)
    top = torch.sort(losses.reshape(-1), descending=True).values
    weights = torch.zeros(n, dtype=losses.dtype, device=losses.device)
    weights[:whole] = 1.0
    if whole < n:
        weights[whole] = k - whole
    return (weights * top).sum() / k


@register_mitigation
@dataclass
class CVaRDRO(Mitigation):
    """The batch's CVaR at level alpha of the per-sample losses."""

    name: ClassVar[str] = "cvar_dro"
    DEFAULTS: ClassVar[dict[str, Any]] = {"alpha": 0.1}
    REFERENCE: ClassVar[str] = ("Levy et al. NeurIPS 2020 (CVaR uncertainty set); alpha 0.1, tuned in "
                                "[0.01, 1] (SubpopBench / Yang et al. 2024); alpha = 1 is ERM")
    # search space: alpha in [0.01, 1] as SubpopBench tunes it
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "alpha": LogUniform(0.01, 1.0)}

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        a = self.hparams["alpha"]
        if not (math.isfinite(a) and 0 < a <= 1):
            raise InputError(f"mitigation {self.name!r}: alpha={a!r} must lie in (0, 1] (1 = ERM)")

    def loss(self, per_sample: torch.Tensor, batch: Batch) -> torch.Tensor:
        """CVaR_alpha of the batch's per-sample losses."""
        return cvar(per_sample, float(self.hparams["alpha"]))

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and the objective."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "objective = mean of the worst alpha fraction of each batch's per-sample losses (the "
                         "boundary sample weighted fractionally); needs no sensitive attribute"}
