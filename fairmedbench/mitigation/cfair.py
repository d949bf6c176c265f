"""CFair (Zhao, Coston, Adel, Gordon, "Conditional learning of fair representations", ICLR 2020), as its
official CFairNet trains: a class-balanced task loss (each class weighted n / (K n_y), which minimises the balanced
error rate) plus mu x the loss of one adversary per class y, each predicting the sensitive group from the samples
of class y only, with group weights n_y / (G n_{a,y}) within the class (balanced error of the adversary), through
gradient reversal: the model maximises it. Conditioning on the class gives equalised odds; the balanced losses
give accuracy parity. Sizes are counted on the training split. The adversaries' input follows `adversarial`'s
rule (input=auto: the representation when it is trainable, else the logits)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from fairmedbench.engine.hparams import TRAINING_SPACE, SearchRange
from fairmedbench.errors import InputError
from fairmedbench.mitigation._common import check_choice, check_positive, label_column, merge_hparams
from fairmedbench.mitigation.adversarial import adversary_choice, adversary_features
from fairmedbench.mitigation.base import Batch, Mitigation, register_mitigation

if TYPE_CHECKING:
    import torch
    from torch import nn


@register_mitigation
@dataclass
class CFair(Mitigation):
    """Class-balanced task loss + mu x reversed, group-balanced cross-entropy of per-class adversaries."""

    name: ClassVar[str] = "cfair"
    needs_attribute_at_training: bool = True
    needs: ClassVar[Mapping[str, object]] = {"head": "classifier"}
    other_tasks: ClassVar[str] = "its adversaries are conditioned on the class label, which a mask decoder lacks"
    adversaries: nn.ModuleList | None = field(default=None, repr=False)
    class_weights: np.ndarray | None = field(default=None, repr=False)
    group_weights: np.ndarray | None = field(default=None, repr=False)  # (K, G)
    adversary_input: str = ""
    n_attr: int = 0
    DEFAULTS: ClassVar[dict[str, Any]] = {"mu": 1.0, "input": "auto", "hidden": 32, "label_column": 0}
    REFERENCE: ClassVar[str] = ("Zhao et al. ICLR 2020 (CFair); mu 1.0 from the paper's grid "
                                "{0.1, 1, 10, 100, 1000}; MEDFAIR's CFair baseline (Zong et al. 2023)")
    # search space: the paper's grid for mu
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "mu": (0.1, 1.0, 10.0, 100.0, 1000.0)}

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        check_positive(self.name, "mu", self.hparams["mu"], allow_zero=True)
        check_choice(self.name, "input", self.hparams["input"], ("auto", "representation", "logits"))
        if self.hparams["hidden"] < 0:
            raise InputError(f"mitigation {self.name!r}: hidden={self.hparams['hidden']} must be >= 0")

    def n_cls(self) -> int:
        """Classes the adversaries condition on: K for a softmax head, else 2 (label column's 0/1)."""
        return max(self.n_classes, 2)

    def wrap_head(self, head: nn.Module, n_groups: int) -> nn.Module:
        """One adversary per class, sized for this head."""
        from torch import nn

        linear, choice = adversary_choice(self.name, self.hparams, head, n_groups)
        self.adversary_input, self.n_attr = choice, n_groups
        width = linear.in_features if choice == "representation" else linear.out_features
        hidden = self.hparams["hidden"]
        self.adversaries = nn.ModuleList([
            nn.Linear(width, n_groups) if hidden == 0 else
            nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, n_groups))
            for _ in range(self.n_cls())])
        return head

    def extra_parameters(self) -> list[nn.Parameter]:
        """The adversaries' parameters."""
        return [] if self.adversaries is None else list(self.adversaries.parameters())

    def epoch_indices(self, y: np.ndarray, groups: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        """Count class and class x group sizes on the training split (once); then a seeded permutation."""
        if self.class_weights is None:
            if groups is None:
                raise InputError(f"mitigation {self.name!r} needs the sensitive attribute at training")
            cls = label_column(self.name, np.asarray(y), self.hparams["label_column"], self.n_classes)
            g = np.asarray(groups, dtype=np.int64)
            k, n_g = self.n_cls(), self.n_attr
            if not n_g or g.min() < 0 or g.max() >= n_g:
                raise InputError(f"mitigation {self.name!r}: wrap_head first, with group codes in 0..{n_g - 1}")
            counts = np.zeros((k, n_g))
            np.add.at(counts, (cls, g), 1)
            per_class = counts.sum(1)
            self.class_weights = np.where(per_class > 0, len(cls) / (k * np.maximum(per_class, 1)), 0.0)
            self.group_weights = np.where(counts > 0, per_class[:, None] / (n_g * np.maximum(counts, 1)), 0.0)
        return rng.permutation(len(y))

    def classes(self, batch: Batch) -> torch.Tensor:
        """The batch's class codes (class index, or label column > 0.5)."""
        if self.n_classes:
            return batch.y.long()
        return (batch.y[:, self.hparams["label_column"]] > 0.5).long()

    def adversary_loss(self, batch: Batch) -> torch.Tensor:
        """Mean over classes present of the group-weighted cross-entropy of that class's adversary."""
        import torch
        import torch.nn.functional as F

        if self.adversaries is None or self.group_weights is None or batch.groups is None:
            raise InputError(f"mitigation {self.name!r}: needs the attribute, wrap_head and the training counts")
        z = adversary_features(self.name, batch, self.adversary_input, float(self.hparams["mu"]))
        c = self.classes(batch)
        gw = torch.as_tensor(self.group_weights, dtype=z.dtype, device=z.device)
        losses = []
        for k in torch.unique(c).tolist():
            sel = c == k
            losses.append(F.cross_entropy(self.adversaries[k](z[sel]), batch.groups[sel], weight=gw[k]))
        return torch.stack(losses).mean()

    def loss(self, per_sample: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Class-balanced task loss + the reversed adversaries' loss (mu scales the reversed gradient)."""
        import torch

        if self.class_weights is None:
            raise InputError(f"mitigation {self.name!r}: epoch_indices must count the training split first")
        w = torch.as_tensor(self.class_weights, dtype=per_sample.dtype, device=per_sample.device)[self.classes(batch)]
        return (w * per_sample).mean() + self.adversary_loss(batch)

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and the weights."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "needs group labels at training and a classifier head; task loss weighted n / (K n_y), "
                         "adversary of class y weighted n_y / (G n_ay), both from the training split; mu scales "
                         "the reversed gradient (the adversaries themselves descend their loss)"}
