"""Sharpness-aware minimisation (SAM; Foret, Kleiner, Mobahi, Neyshabur, ICLR 2021) and its adaptive variant
(ASAM; Kwon, Kim, Park, Choi, ICML 2021), the two-step update of MEDFAIR's `SAM` (Zong et al., ICLR 2023):

  g = grad L(w);  e = rho T_w^2 g / ||T_w g||  (SAM: T_w = 1; ASAM: T_w = |w| + eta, elementwise);
  w <- w + e;  g' = grad L(w + e);  w <- w - e;  the optimiser steps with g'.

The optimiser is the run's own (AdamW), as SAM wraps a base optimiser. It uses the `step` hook, so it serves the
classifier loops (classification, multiclass); a segmentation decoder's loop steps once per batch."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from fairmedbench.engine.hparams import TRAINING_SPACE, SearchRange
from fairmedbench.mitigation._common import check_positive, merge_hparams
from fairmedbench.mitigation.base import Mitigation, register_mitigation

if TYPE_CHECKING:
    import torch


@register_mitigation
@dataclass
class SAM(Mitigation):
    """Ascend to w + e, the worst point of a rho-ball to first order, and step with the gradient there."""

    name: ClassVar[str] = "sam"
    needs: ClassVar[Mapping[str, object]] = {"head": "classifier"}
    other_tasks: ClassVar[str] = ("it replaces the optimiser step of the classifier training loops; the "
                                  "segmentation loop has no such hook")
    DEFAULTS: ClassVar[dict[str, Any]] = {"rho": 0.05, "adaptive": False, "eta": 0.0}
    REFERENCE: ClassVar[str] = ("Foret et al. ICLR 2021 (SAM; rho 0.05, swept {0.01, 0.02, 0.05, 0.1, 0.2, 0.5}); "
                                "MEDFAIR's SAM baseline (Zong et al. 2023)")
    # search space: the paper's rho grid
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "rho": (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)}

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        check_positive(self.name, "rho", self.hparams["rho"])
        check_positive(self.name, "eta", self.hparams["eta"], allow_zero=True)

    def step(self, opt: torch.optim.Optimizer, closure: Callable[[], torch.Tensor]) -> None:
        """The two-gradient SAM / ASAM update."""
        import torch

        closure()
        params = [p for group in opt.param_groups for p in group["params"] if p.grad is not None]
        adaptive, eta = bool(self.hparams["adaptive"]), float(self.hparams["eta"])
        with torch.no_grad():
            scale = [(p.abs() + eta) if adaptive else torch.ones_like(p) for p in params]
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(s * p.grad)
                                                         for s, p in zip(scale, params, strict=True)]))
            shifts = [self.hparams["rho"] * s * s * p.grad / (norm + 1e-12) for s, p in zip(scale, params, strict=True)]
            for p, e in zip(params, shifts, strict=True):
                p.add_(e)
        closure()
        with torch.no_grad():
            for p, e in zip(params, shifts, strict=True):
                p.sub_(e)
        opt.step()

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and the update."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "two forward/backward passes per batch; needs no sensitive attribute; the base optimiser "
                         "is the run's AdamW"}


@register_mitigation
@dataclass
class ASAM(SAM):
    """SAM with the perturbation scaled elementwise by |w| + eta (scale-invariant sharpness)."""

    name: ClassVar[str] = "asam"
    DEFAULTS: ClassVar[dict[str, Any]] = {"rho": 0.5, "adaptive": True, "eta": 0.01}
    REFERENCE: ClassVar[str] = ("Kwon et al. ICML 2021 (ASAM; rho 0.5 on CIFAR-10, 1.0 on CIFAR-100, eta 0.01); "
                                "the adaptive option of SAM")
    # search space: ASAM's CIFAR values 0.5 and 1, MEDFAIR's 2, and smaller radii
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "rho": (0.1, 0.2, 0.5, 1.0, 2.0)}
