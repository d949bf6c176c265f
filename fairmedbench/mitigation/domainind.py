"""Domain-independent training (Wang et al., CVPR 2020): one classifier per group on the shared
representation; each training sample is scored by its own group's head. Inference needs no attribute:
the paper's rule sums the per-domain outputs, argmax_y sum_d s(y, d, x) (their official code's
`sum_out`, also MEDFAIR's DomainInd). We average instead of sum (sum / n_groups): the ranking, hence
AUC and any validation-chosen threshold's operating point, is the same, and the sigmoid stays on the
probability scale. combine=mean_prob averages the per-group probabilities (the paper's `sum_prob`).
The paper's setting is multi-class (CIFAR-10S: each domain's head is a softmax over the classes), so a softmax
head (multi-class task) is served as written: each group's head gives K logits, trained with cross-entropy on its
own group's samples; sum_logits returns their mean (softmax of it: same argmax as the paper's sum), mean_prob
returns log(mean_d softmax(z_d)), whose softmax is exactly the mean of the per-group probabilities.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from fairmedbench.engine.hparams import TRAINING_SPACE, SearchRange
from fairmedbench.errors import InputError
from fairmedbench.mitigation._common import check_choice, merge_hparams
from fairmedbench.mitigation.base import Mitigation, register_mitigation

if TYPE_CHECKING:
    from torch import nn


@register_mitigation
@dataclass
class DomainInd(Mitigation):
    """Replace the head's output layer with one copy per group; combine all copies at inference."""

    name: ClassVar[str] = "domainind"
    needs_attribute_at_training: bool = True
    needs: ClassVar[Mapping[str, object]] = {"head": "classifier"}
    other_tasks: ClassVar[str] = (
        "it gives each group its own copy of a classification head's output layer, which a mask "
        "decoder does not have; use groupdro, resampling or fairness_loss")
    DEFAULTS: ClassVar[dict[str, Any]] = {"combine": "sum_logits"}
    REFERENCE: ClassVar[str] = "Wang et al. CVPR 2020, domain-independent training, sum-of-outputs inference"
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = TRAINING_SPACE

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        check_choice(self.name, "combine", self.hparams["combine"], ("sum_logits", "mean_prob"))

    def wrap_head(self, head: nn.Module, n_groups: int) -> nn.Module:
        """A module with one output layer per group; forward(x) combines them without the attribute."""
        import torch
        from torch import nn

        if n_groups < 1:
            raise InputError(f"mitigation {self.name!r} needs at least one group, got n_groups={n_groups}")
        linear = getattr(head, "linear", None)
        if not isinstance(linear, nn.Linear):
            raise InputError(f"mitigation {self.name!r} needs a head with a `.linear` output layer")
        output_layer: nn.Linear = linear
        combine, name, softmax = self.hparams["combine"], self.name, self.n_classes > 0

        class DomainIndependentHead(nn.Module):
            """Shared representation, one linear output per group."""

            def __init__(self) -> None:
                super().__init__()
                self.base = head
                self.group_heads = nn.ModuleList(copy.deepcopy(output_layer) for _ in range(n_groups))

            def representation(self, x: torch.Tensor) -> torch.Tensor:
                return self.base.representation(x)  # type: ignore[operator]  # a classification head's method

            def all_logits(self, rep: torch.Tensor) -> torch.Tensor:
                """Logits of every group's head, (b, n_groups, K)."""
                return torch.stack([h(rep) for h in self.group_heads], dim=1)

            def classify(self, rep: torch.Tensor, groups: torch.Tensor | None) -> torch.Tensor:
                """Training scores: each sample through its own group's head."""
                if groups is None:
                    raise InputError(f"mitigation {name!r} needs the sensitive attribute at training")
                if len(groups) and (int(groups.min()) < 0 or int(groups.max()) >= n_groups):
                    raise InputError(f"mitigation {name!r}: group codes outside 0..{n_groups - 1}")
                return self.all_logits(rep)[torch.arange(len(rep)), groups]

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                z = self.all_logits(self.representation(x))
                if combine == "sum_logits":
                    return z.mean(dim=1)
                if softmax:  # log of the mean probability: its softmax is that mean (rows sum to 1)
                    return torch.log(torch.softmax(z, dim=2).mean(dim=1).clamp(min=1e-12))
                return torch.logit(torch.sigmoid(z).mean(dim=1), eps=1e-7)

        return DomainIndependentHead()

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and the inference rule."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "inference combines all group heads without the attribute: sum_logits = mean of logits "
                         "(same ranking as the paper's sum), mean_prob = mean of probabilities (sigmoid per label, "
                         "or softmax over a multi-class head's classes)"}
