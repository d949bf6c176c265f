"""InD, subgroup-independent mask decoders: domain-independent training (Wang et al., CVPR 2020) applied to a
segmenter's mask decoder, as FairMedFM (Jin et al., NeurIPS 2024 Datasets & Benchmarks) lists it among its
segmentation mitigations. FairMedFM's public repository (FairMedFM/FairMedFM at ac062df) ships no mitigation
code, so the rules are Wang et al.'s, exactly as `domainind` applies them to classification heads:

- training: one copy of the mask decoder per group, each initialised from the loaded decoder; every training
  sample goes through its own group's decoder only (the shared image encoder, frozen or LoRA, sees all samples);
- inference, without the attribute: every group's decoder predicts and their mask logits are combined.
  `combine=sum_logits` (default) is Wang et al.'s sum of per-domain outputs; the mask is sum > 0, which equals
  mean > 0, so the mean is returned (logits stay on one decoder's scale). `combine=mean_prob` averages the
  per-group probabilities (mask: mean sigmoid > 0.5). A decoder's other outputs (SAM: its IoU predictions)
  are averaged.
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
class InD(Mitigation):
    """One mask decoder per group at training; all of them combined, without the attribute, at inference."""

    name: ClassVar[str] = "ind"
    needs_attribute_at_training: bool = True
    needs: ClassVar[Mapping[str, object]] = {"head": "mask_decoder"}
    other_tasks: ClassVar[str] = "it copies a mask decoder once per group; for a classification head use domainind"
    DEFAULTS: ClassVar[dict[str, Any]] = {"combine": "sum_logits"}
    REFERENCE: ClassVar[str] = ("Wang et al. CVPR 2020, domain-independent training, sum-of-outputs inference; "
                                "FairMedFM (Jin et al. NeurIPS 2024) segmentation mitigation InD")
    # search space: no hyperparameter of its own: the head's training only
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = TRAINING_SPACE

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        check_choice(self.name, "combine", self.hparams["combine"], ("sum_logits", "mean_prob"))

    def wrap_head(self, head: nn.Module, n_groups: int) -> nn.Module:
        """A module with one copy of `head` per group (`group_heads`, used by the training loop per sample's group);
        calling it combines every copy without the attribute."""
        import torch
        from torch import nn

        if n_groups < 1:
            raise InputError(f"mitigation {self.name!r} needs at least one group, got n_groups={n_groups}")
        if not isinstance(head, nn.Module):
            raise InputError(f"mitigation {self.name!r} needs a torch module to copy per group")
        combine = self.hparams["combine"]

        def combined(masks: list[torch.Tensor]) -> torch.Tensor:
            z = torch.stack(masks)
            if combine == "sum_logits":
                return z.mean(dim=0)
            return torch.logit(torch.sigmoid(z).mean(dim=0), eps=1e-7)

        class GroupDecoders(nn.Module):
            """One decoder per group; forward = the combination of all of them (no attribute needed)."""

            def __init__(self) -> None:
                super().__init__()
                self.group_heads = nn.ModuleList(copy.deepcopy(head) for _ in range(n_groups))

            def forward(self, *args: Any, **kwargs: Any) -> Any:
                outs = [h(*args, **kwargs) for h in self.group_heads]
                if not isinstance(outs[0], tuple):
                    return combined(outs)
                return (combined([o[0] for o in outs]),
                        *(torch.stack([o[i] for o in outs]).mean(dim=0) for i in range(1, len(outs[0]))))

        return GroupDecoders()

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and the inference rule."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "training: each sample through its own group's decoder copy; inference without the "
                         "attribute: sum_logits = mean of the group decoders' mask logits (same mask as their "
                         "sum, logit > 0), mean_prob = mean of their probabilities; other outputs averaged"}
