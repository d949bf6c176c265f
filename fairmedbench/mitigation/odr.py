"""Orthogonal disentangled representations (ODR; Sarhan, Navab, Eslami, Albarqouni, ECCV 2020): an encoder gives
two Gaussian codes, z_T for the target and z_S for the sensitive attribute, and the loss is the paper's sum

  L = L_T(y | z_T) + L_S(a | z_S) + lambda_E L_E + lambda_OD (KL(q(z_T|x) || N(m_T, I)) + KL(q(z_S|x) || N(m_S, I)))

with L_E = KL(softmax(d_S(z_T)) || uniform) = log G - H(d_S(z_T)), the entropy term that makes z_T carry no
attribute (the attribute classifier d_S held fixed in it, so only the encoder moves), and orthogonal 0/1 prior
means (m_T on the even coordinates, m_S on the odd). Codes are drawn by reparameterisation in training; the
prediction reads the mean of z_T. The encoder is an MLP (hidden, z_dim) on the head's representation, so it
trains on frozen features too. Defaults: MEDFAIR's lambda_E = lambda_OD = 0.1 (Zong et al. 2023); the paper's
decay of both weights over epochs is left out (gamma 1)."""

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
    from torch import nn


def gaussian_kl(mu: torch.Tensor, logvar: torch.Tensor, prior_mean: torch.Tensor) -> torch.Tensor:
    """Batch mean of KL(N(mu, diag exp(logvar)) || N(prior_mean, I)) = 1/2 sum(var + (mu - m)^2 - 1 - logvar)."""
    return 0.5 * (logvar.exp() + (mu - prior_mean) ** 2 - 1 - logvar).sum(dim=1).mean()


def entropy_to_uniform(logits: torch.Tensor) -> torch.Tensor:
    """Batch mean of KL(softmax(logits) || uniform) = log G - entropy (0 when every prediction is uniform)."""
    import math

    import torch

    logp = torch.log_softmax(logits, dim=1)
    return (logp.exp() * logp).sum(dim=1).mean() + math.log(logits.shape[1])


def prior_means(z_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Orthogonal 0/1 prior means: m_T = 1 on even coordinates, m_S = 1 on odd ones."""
    import torch

    m_t = (torch.arange(z_dim) % 2 == 0).to(torch.float32)
    return m_t, 1 - m_t


@register_mitigation
@dataclass
class ODR(Mitigation):
    """Target and attribute codes with orthogonal priors, an attribute classifier on z_S, an entropy term on z_T."""

    name: ClassVar[str] = "odr"
    needs: ClassVar[Mapping[str, object]] = {"head": "classifier"}
    other_tasks: ClassVar[str] = "its target classifier reads the code z_T, which needs a classifier head"
    needs_attribute_at_training: bool = True
    DEFAULTS: ClassVar[dict[str, Any]] = {"lambda_e": 0.1, "lambda_od": 0.1, "z_dim": 32, "hidden": 64}
    REFERENCE: ClassVar[str] = ("Sarhan et al. ECCV 2020 (ODR: L_T + L_S + lambda_E L_E + lambda_OD (KL_T + KL_S)); "
                                "MEDFAIR's lambda_e 0.1, lambda_od 0.1 (Zong et al. ICLR 2023)")
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "lambda_e": LogUniform(0.01, 1.0),
                                                         "lambda_od": LogUniform(0.01, 1.0)}
    module: nn.Module | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        for key in ("lambda_e", "lambda_od"):
            check_positive(self.name, key, self.hparams[key], allow_zero=True)
        if int(self.hparams["z_dim"]) < 2 or int(self.hparams["hidden"]) < 1:
            raise InputError(f"mitigation {self.name!r}: z_dim={self.hparams['z_dim']} must be >= 2 (two orthogonal "
                             f"prior means) and hidden={self.hparams['hidden']} >= 1")

    def wrap_head(self, head: nn.Module, n_groups: int) -> nn.Module:
        """The ODR model on the head's representation: encoder -> (mu, logvar) of z_T and z_S, a target classifier
        `linear` on z_T (outputs as the head's) and an attribute classifier `sensitive` on z_S."""
        import torch
        from torch import nn

        linear = getattr(head, "linear", None)
        if not isinstance(linear, nn.Linear):
            raise InputError(f"mitigation {self.name!r} needs a head with a `.linear` output layer")
        if n_groups < 2:
            raise InputError(f"mitigation {self.name!r} needs at least two groups, got {n_groups}")
        z, hidden, n_in, n_out = (int(self.hparams["z_dim"]), int(self.hparams["hidden"]), linear.in_features,
                                  linear.out_features)

        class ODRHead(nn.Module):
            """Representation = [mu_T, logvar_T, mu_S, logvar_S, z_T, z_S] (codes drawn in training, means in eval)."""

            def __init__(self) -> None:
                super().__init__()
                self.base = head
                self.encoder = nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(),
                                             nn.Linear(hidden, 4 * z))
                self.linear = nn.Linear(z, n_out)
                self.sensitive = nn.Linear(z, n_groups)

            def representation(self, x: torch.Tensor) -> torch.Tensor:
                mu_t, lv_t, mu_s, lv_s = self.encoder(self.base.representation(x)).chunk(4, dim=1)  # type: ignore[operator]
                if self.training:
                    z_t = mu_t + torch.randn_like(mu_t) * (0.5 * lv_t).exp()
                    z_s = mu_s + torch.randn_like(mu_s) * (0.5 * lv_s).exp()
                else:
                    z_t, z_s = mu_t, mu_s
                return torch.cat([mu_t, lv_t, mu_s, lv_s, z_t, z_s], dim=1)

            def classify(self, rep: torch.Tensor, groups: torch.Tensor | None) -> torch.Tensor:
                return self.linear(rep[:, 4 * z:5 * z])

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.classify(self.representation(x), None)

        self.module = ODRHead()
        return self.module

    def loss(self, per_sample: torch.Tensor, batch: Batch) -> torch.Tensor:
        """The paper's sum of the target loss, the attribute loss on z_S, the entropy term and the two KLs."""
        import torch.nn.functional as F
        from torch import nn

        if self.module is None or batch.representation is None:
            raise InputError(f"mitigation {self.name!r}: wrap_head must be called before training")
        if batch.groups is None:
            raise InputError(f"mitigation {self.name!r} needs the sensitive attribute at training")
        sens = self.module.sensitive
        assert isinstance(sens, nn.Linear)
        mu_t, lv_t, mu_s, lv_s, z_t, z_s = batch.representation.chunk(6, dim=1)
        m_t, m_s = (m.to(mu_t) for m in prior_means(mu_t.shape[1]))
        l_s = F.cross_entropy(sens(z_s), batch.groups)
        l_e = entropy_to_uniform(F.linear(z_t, sens.weight.detach(), sens.bias.detach()))
        kl = gaussian_kl(mu_t, lv_t, m_t) + gaussian_kl(mu_s, lv_s, m_s)
        return per_sample.mean() + l_s + self.hparams["lambda_e"] * l_e + self.hparams["lambda_od"] * kl

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and the model."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "needs the sensitive attribute at training; encoder MLP(hidden) -> two Gaussian codes of "
                         "z_dim on the head's representation; prediction from the mean of z_T; no weight decay "
                         "schedule"}
