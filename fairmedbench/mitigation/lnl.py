"""Learning Not to Learn (LNL; Kim, Kim, Kim, Kim, Kim, CVPR 2019), as MEDFAIR's LNL trains it (Zong et al., ICLR
2023): a bias predictor h reads the representation f(x); the model minimises the task loss plus lambda x the
negative entropy sum_a p_a log p_a of h's prediction (making the representation uninformative of the group to h),
and, through gradient reversal, maximises h's cross-entropy on the group while h minimises it (mutual information
minimisation). The two steps of each batch in the official code are one objective here: the entropy term's
gradient reaches the representation only (h's weights enter it detached), the adversarial term's reaches h
directly and the representation reversed. It needs a representation that trains (refused on frozen features)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from fairmedbench.engine.hparams import TRAINING_SPACE, LogUniform, SearchRange
from fairmedbench.errors import InputError
from fairmedbench.mitigation._common import check_positive, merge_hparams
from fairmedbench.mitigation._representation import FROZEN_WHY, require_trainable_representation
from fairmedbench.mitigation.adversarial import grad_reverse
from fairmedbench.mitigation.base import Batch, Mitigation, register_mitigation

if TYPE_CHECKING:
    import torch
    from torch import nn


@register_mitigation
@dataclass
class LNL(Mitigation):
    """Task loss + lambda x negative entropy of the bias predictor + its reversed cross-entropy."""

    name: ClassVar[str] = "lnl"
    needs_attribute_at_training: bool = True
    needs: ClassVar[Mapping[str, object]] = {"head": "classifier"}
    other_tasks: ClassVar[str] = "its bias predictor reads a classifier's representation vector"
    needs_trainable_representation: ClassVar[str] = FROZEN_WHY
    predictor: nn.Module | None = field(default=None, repr=False)
    DEFAULTS: ClassVar[dict[str, Any]] = {"lambda": 0.1, "mu": 1.0, "hidden": 32}
    REFERENCE: ClassVar[str] = ("Kim et al. CVPR 2019 (LNL); MEDFAIR's LNL (entropy weight `_lambda`, a required "
                                "option there; 0.1 here, sweep 0.01 to 1); gradient reversal scale mu 1")
    # search space: the entropy weight swept 0.01 to 1
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "lambda": LogUniform(0.01, 1.0)}

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        check_positive(self.name, "lambda", self.hparams["lambda"], allow_zero=True)
        check_positive(self.name, "mu", self.hparams["mu"], allow_zero=True)
        if self.hparams["hidden"] < 0:
            raise InputError(f"mitigation {self.name!r}: hidden={self.hparams['hidden']} must be >= 0")

    def wrap_head(self, head: nn.Module, n_groups: int) -> nn.Module:
        """Refuse a frozen representation; build the bias predictor."""
        from torch import nn

        require_trainable_representation(self.name, head)
        if n_groups < 2:
            raise InputError(f"mitigation {self.name!r} needs at least 2 groups of the attribute, got {n_groups}")
        linear = getattr(head, "linear", None)
        if not isinstance(linear, nn.Linear):
            raise InputError(f"mitigation {self.name!r} needs a head with a `.linear` output layer")
        width = linear.in_features
        hidden = self.hparams["hidden"]
        self.predictor = (nn.Linear(width, n_groups) if hidden == 0 else
                          nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, n_groups)))
        return head

    def extra_parameters(self) -> list[nn.Parameter]:
        """The bias predictor's parameters."""
        return [] if self.predictor is None else list(self.predictor.parameters())

    def regulariser(self, batch: Batch) -> torch.Tensor:
        """lambda x mean sum_a p log p (predictor detached) + the reversed bias cross-entropy."""
        import torch.nn.functional as F
        from torch.func import functional_call

        if self.predictor is None or batch.groups is None or batch.representation is None:
            raise InputError(f"mitigation {self.name!r} needs wrap_head, the attribute and a representation")
        z = batch.representation
        frozen = {k: v.detach() for k, v in self.predictor.named_parameters()}
        logp = F.log_softmax(functional_call(self.predictor, frozen, (z,)), dim=1)
        negative_entropy = (logp.exp() * logp).sum(dim=1).mean()
        adv = F.cross_entropy(self.predictor(grad_reverse(z, float(self.hparams["mu"]))), batch.groups)
        return self.hparams["lambda"] * negative_entropy + adv

    def loss(self, per_sample: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Mean task loss + the LNL regulariser."""
        return per_sample.mean() + self.regulariser(batch)

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and what it needs."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "needs group labels at training and a representation that trains (lora), refused on a "
                         "linear probe of frozen features"}
