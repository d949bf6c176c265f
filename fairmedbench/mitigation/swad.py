"""SWAD (Cha, Chun, Lee, Cho, Park, Lee, Park, NeurIPS 2021, Algorithm 1): dense stochastic weight averaging,
the weights after every training step averaged over the loss valley its overfit-aware rule finds on validation.

With one validation loss e_k per epoch (the evaluation point; the epoch's steps its segment):
  start ts: the first epoch k with e_k = min(e_k .. e_{k+Ns-1}); then l = r x mean(e_k .. e_{k+Ns-1});
  end te:   at the first epoch i >= ts + Ne - 1 with min(e_{i-Ne+1} .. e_i) > l, te = i - Ne (at least ts),
            and training stops; without it, te = the last epoch;
  weights:  the mean of the weights after every step of epochs ts .. te.
Defaults are the official code's (khanrc/swad: n_converge Ns 3, n_tolerance Ne 6, tolerance_ratio 0.3, so r 1.3);
MEDFAIR runs tolerance_ratio 0.05. When training ends before a start is found, ts is the epoch of the lowest
validation loss (stated in the result; it lies among the last Ns - 1 epochs, since an earlier one would have been
the start). Only the epochs that can still be averaged keep their summed weights. It replaces the loop's early stop
and epoch selection."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from fairmedbench.engine.hparams import TRAINING_SPACE, SearchRange
from fairmedbench.errors import InputError
from fairmedbench.mitigation._common import check_positive, merge_hparams
from fairmedbench.mitigation.base import Mitigation, register_mitigation

if TYPE_CHECKING:
    import torch
    from torch import nn


def swad_valley(losses: list[float], n_converge: int, n_tolerance: int, ratio: float) -> tuple[int | None, int | None]:
    """SWAD's (ts, te) on the validation losses seen so far: ts None before the start is found, te None before
    the valley ends (the losses are per evaluation point, oldest first)."""
    ts = next((k for k in range(len(losses) - n_converge + 1)
               if losses[k] == min(losses[k:k + n_converge])), None)
    if ts is None:
        return None, None
    bound = (1.0 + ratio) * float(np.mean(losses[ts:ts + n_converge]))
    for i in range(ts + n_tolerance - 1, len(losses)):
        if min(losses[i - n_tolerance + 1:i + 1]) > bound:
            return ts, max(ts, i - n_tolerance)
    return ts, None


@register_mitigation
@dataclass
class SWAD(Mitigation):
    """Average the weights after every step over the validation loss valley (Ns, Ne, r rule)."""

    name: ClassVar[str] = "swad"
    needs: ClassVar[Mapping[str, object]] = {"head": "classifier"}
    other_tasks: ClassVar[str] = ("it averages the weights of the classifier training loops' steps and ends them by "
                                  "its validation rule; the segmentation loop has no such hooks")
    averages_weights: ClassVar[bool] = True
    DEFAULTS: ClassVar[dict[str, Any]] = {"n_converge": 3, "n_tolerance": 6, "tolerance_ratio": 0.3}
    REFERENCE: ClassVar[str] = ("Cha et al. NeurIPS 2021 (SWAD, Algorithm 1); official defaults Ns 3, Ne 6, r 1.3 "
                                "(tolerance_ratio 0.3); MEDFAIR (Zong et al. 2023) tolerance_ratio 0.05")
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "n_converge": (2, 3, 4),
                                                         "n_tolerance": (3, 6, 9),
                                                         "tolerance_ratio": (0.05, 0.1, 0.3, 0.5)}
    sums: list[list[torch.Tensor]] = field(default_factory=list, repr=False)  # per epoch: summed weights after steps
    steps: list[int] = field(default_factory=list, repr=False)  # per epoch: its number of steps
    losses: list[float] = field(default_factory=list, repr=False)
    params: list[torch.Tensor] = field(default_factory=list, repr=False)  # the optimiser's parameters, in its order
    valley: tuple[int, int] | None = None  # (ts, te) of the last fit

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        if int(self.hparams["n_converge"]) < 1 or int(self.hparams["n_tolerance"]) < 1:
            raise InputError(f"mitigation {self.name!r}: n_converge={self.hparams['n_converge']} and n_tolerance="
                             f"{self.hparams['n_tolerance']} must be integers >= 1")
        check_positive(self.name, "tolerance_ratio", self.hparams["tolerance_ratio"], allow_zero=True)

    def step(self, opt: torch.optim.Optimizer, closure: Callable[[], torch.Tensor]) -> None:
        """One ordinary update, then the new weights added to this epoch's running sum."""
        import torch

        closure()
        opt.step()
        params = [p for group in opt.param_groups for p in group["params"]]
        if len(self.sums) == len(self.losses):  # the first step of a new epoch
            self.sums.append([torch.zeros_like(p, dtype=torch.float64) for p in params])
            self.steps.append(0)
        with torch.no_grad():
            for s, p in zip(self.sums[-1], params, strict=True):
                s.add_(p.detach().to(torch.float64))
        self.steps[-1] += 1
        self.params = params

    def after_validation(self, epoch: int, val_loss: float) -> bool:
        """Record the epoch's validation loss; True once the valley has ended (te found)."""
        if len(self.losses) == len(self.sums):  # an epoch without steps: nothing to average for it
            self.sums.append([])
            self.steps.append(0)
        self.losses.append(float(val_loss) if np.isfinite(val_loss) else float("inf"))
        h = self.hparams
        ts, te = swad_valley(self.losses, int(h["n_converge"]), int(h["n_tolerance"]), float(h["tolerance_ratio"]))
        # epochs before the start (or, before it is found, those whose window has failed, so that not even the
        # lowest loss can be among them) are never averaged: their sums are freed
        for k in range(ts if ts is not None else len(self.losses) - int(h["n_converge"]) + 1):
            self.sums[k] = []
        return te is not None

    def after_fit(self, model: nn.Module, train: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]) -> None:
        """Load the mean of the weights after every step of epochs ts .. te into the trained parameters."""
        import torch

        h = self.hparams
        ts, te = swad_valley(self.losses, int(h["n_converge"]), int(h["n_tolerance"]), float(h["tolerance_ratio"]))
        if ts is None:  # training ended before a start was found: the valley starts at the lowest loss
            ts = int(np.argmin(self.losses))
        te = len(self.losses) - 1 if te is None else te
        epochs = [k for k in range(ts, te + 1) if self.steps[k]]
        if not epochs:
            raise InputError(f"mitigation {self.name!r}: no training step in epochs {ts}..{te} to average")
        total = sum(self.steps[k] for k in epochs)
        with torch.no_grad():
            for i, p in enumerate(self.params):
                p.copy_((torch.stack([self.sums[k][i] for k in epochs]).sum(dim=0) / total).to(p.dtype))
        self.valley = (ts, te)

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and the rule."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "needs no sensitive attribute; evaluation point = each epoch's validation loss, segment = "
                         "its steps; replaces early stopping and epoch selection (best_epoch = the last epoch "
                         "trained; the averaged epochs follow from the recorded val_losses by the rule); a start "
                         "not found before the last epoch is the epoch of the lowest validation loss"}
