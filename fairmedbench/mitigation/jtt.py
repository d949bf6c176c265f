"""Just train twice (JTT; Liu, Haghgoo, Chen, Raghunathan, Koh, Sagawa, Liang, Finn, ICML 2021): train ERM for
T epochs, take its error set (training samples it misclassifies), then retrain from the initial weights on the
training split with the error set upsampled lambda_up times (each epoch lists every sample once and each
error-set sample lambda_up - 1 more times, as the official code's upsampled dataset). It needs no group labels
at training; the paper tunes T and lambda_up on validation worst-group accuracy (which needs them there).

A misclassified sample: sigmoid heads, the thresholded label column `label_column` (logit > 0 vs label);
softmax heads, argmax != class. The restart uses the classifier loops' `end_epoch` hook."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from fairmedbench.engine.hparams import TRAINING_SPACE, SearchRange
from fairmedbench.errors import InputError
from fairmedbench.mitigation._common import merge_hparams
from fairmedbench.mitigation.base import Mitigation, register_mitigation

if TYPE_CHECKING:
    import torch
    from torch import nn


@register_mitigation
@dataclass
class JTT(Mitigation):
    """ERM for T epochs -> error set -> retrain with the error set upsampled lambda_up times."""

    name: ClassVar[str] = "jtt"
    needs: ClassVar[Mapping[str, object]] = {"head": "classifier"}
    other_tasks: ClassVar[str] = "its error set is of misclassified samples, which needs a classifier head"
    restarts: ClassVar[bool] = True
    error_set: np.ndarray | None = field(default=None, repr=False)
    DEFAULTS: ClassVar[dict[str, Any]] = {"T": 1, "lambda_up": 50, "label_column": 0}
    REFERENCE: ClassVar[str] = ("Liu et al. ICML 2021 (JTT); CelebA's T 1, lambda_up 50; the paper's grid "
                                "lambda_up in {4, 5, 6, 20, 50, 100}, T in {1, 2, 40, 50, 60}")
    # search space: the paper's lambda_up grid; T from its small-T settings
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "T": (1, 2),
                                                         "lambda_up": (4, 5, 6, 20, 50, 100)}

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        if int(self.hparams["T"]) < 1 or int(self.hparams["lambda_up"]) < 1:
            raise InputError(f"mitigation {self.name!r}: T={self.hparams['T']} and lambda_up="
                             f"{self.hparams['lambda_up']} must be integers >= 1")

    def epoch_indices(self, y: np.ndarray, groups: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        """ERM order before the restart; after it, every sample once plus lambda_up - 1 copies of each error."""
        idx = np.arange(len(y))
        if self.error_set is not None:
            extra = np.repeat(self.error_set, int(self.hparams["lambda_up"]) - 1)
            idx = np.concatenate([idx, extra])
        return rng.permutation(idx)

    def misclassified(self, logits: torch.Tensor, y: torch.Tensor) -> np.ndarray:
        """Indices of the samples the identification model gets wrong."""
        if self.n_classes:
            wrong = logits.argmax(dim=1) != y.long()
        else:
            col = self.hparams["label_column"]
            if not 0 <= col < y.shape[1]:
                raise InputError(f"mitigation {self.name!r}: label_column={col} but labels have {y.shape[1]} "
                                 "column(s)")
            wrong = (logits[:, col] > 0) != (y[:, col] > 0.5)
        return np.flatnonzero(wrong.cpu().numpy())

    def end_epoch(self, epoch: int, model: nn.Module,
                  train: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]) -> bool:
        """After T epochs of ERM: record the error set and ask for the restart."""
        if self.error_set is not None or epoch + 1 < int(self.hparams["T"]):
            return False
        import torch

        with torch.no_grad():
            self.error_set = self.misclassified(model(train[0]), train[1])
        return True

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and the procedure."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "needs no sensitive attribute at training; identification model = the same head after "
                         "T ERM epochs; retrained from the same initial weights"}
