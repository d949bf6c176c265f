"""Adversarial debiasing through gradient reversal (Ganin & Lempitsky 2015): an adversary predicts the
sensitive attribute and the model receives the reversed, lambda-scaled gradient of the adversary's loss.

Variant `dp`: the adversary sees the representation (Edwards & Storkey 2016; LAFTR-DP). Variant `eo`:
it also sees the labels, as in LAFTR's equalized-odds adversary (Madras et al., ICML 2018) and Zhang,
Lemoine & Mitchell (AIES 2018). As in LAFTR, the adversary's loss averages over groups (dp) or over
group x label cells (eo) so a small group counts as much as a large one. With `input=auto` the adversary
sees the representation when it has trainable parameters (e.g. LoRA) and otherwise the logits (a linear
probe on frozen features, where only the head can change: Zhang et al.'s adversary on the prediction).
A softmax head (multi-class task) is served the same way: the adversary reads its representation or its K
logits, and for `eo` also the class one-hot; cells are group x class.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from fairmedbench.engine.hparams import TRAINING_SPACE, LogUniform, SearchRange
from fairmedbench.errors import InputError
from fairmedbench.mitigation._common import check_choice, check_positive, merge_hparams
from fairmedbench.mitigation.base import Batch, Mitigation, register_mitigation

if TYPE_CHECKING:
    import torch
    from torch import nn

_REVERSAL: Any = None


def grad_reverse(x: torch.Tensor, lam: float) -> torch.Tensor:
    """Identity forward; backward multiplies the incoming gradient by -lam."""
    global _REVERSAL
    if _REVERSAL is None:
        import torch

        class _GradReverse(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, inp: torch.Tensor, scale: float) -> torch.Tensor:  # noqa: D102
                ctx.scale = scale
                return inp.view_as(inp)

            @staticmethod
            def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: D102
                return -ctx.scale * grad, None

        _REVERSAL = _GradReverse
    return _REVERSAL.apply(x, lam)


def adversary_choice(name: str, hparams: Mapping[str, Any], head: nn.Module, n_groups: int) -> tuple[nn.Linear, str]:
    """The head's output layer and what an adversary of it reads ('representation' or 'logits'; `input=auto`
    resolved); refuses fewer than 2 groups and a head without a `.linear` output layer."""
    from torch import nn

    if n_groups < 2:
        raise InputError(f"mitigation {name!r} needs at least 2 groups of the attribute, got {n_groups}")
    linear = getattr(head, "linear", None)
    if not isinstance(linear, nn.Linear):
        raise InputError(f"mitigation {name!r} needs a head with a `.linear` output layer")
    choice = str(hparams["input"])
    if choice == "auto":
        choice = "representation" if _has_trainable_representation(head) else "logits"
    return linear, choice


def adversary_features(name: str, batch: Batch, which: str, reverse_weight: float | None) -> torch.Tensor:
    """What an adversary reads of a batch (its representation or its logits), through gradient reversal with
    `reverse_weight` (None: not reversed)."""
    z = batch.representation if which == "representation" else batch.logits
    if z is None:
        raise InputError(f"mitigation {name!r}: input=representation needs a head that exposes its representation; "
                         "use input=logits")
    return z if reverse_weight is None else grad_reverse(z, reverse_weight)


def _has_trainable_representation(head: nn.Module) -> bool:
    return any(p.requires_grad for n, p in head.named_parameters() if not n.startswith("linear."))


@register_mitigation
@dataclass
class Adversarial(Mitigation):
    """Task loss + cell-balanced adversary cross-entropy on gradient-reversed inputs."""

    name: ClassVar[str] = "adversarial"
    needs_attribute_at_training: bool = True
    needs: ClassVar[Mapping[str, object]] = {"head": "classifier"}
    other_tasks: ClassVar[str] = (
        "its adversary reads a classification head's per-sample logits or representation vector, "
        "which a mask decoder does not have; use groupdro, resampling or fairness_loss")
    adversary: nn.Module | None = field(default=None, repr=False)
    adversary_input: str = ""
    DEFAULTS: ClassVar[dict[str, Any]] = {"lambda": 1.0, "variant": "dp", "input": "auto", "hidden": 32}
    REFERENCE: ClassVar[str] = ("Madras et al. ICML 2018 (LAFTR; fairness coefficient 1.0 as in MEDFAIR's "
                                "LAFTR default); gradient reversal of Ganin & Lempitsky 2015")
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = {**TRAINING_SPACE, "lambda": LogUniform(0.1, 10.0)}

    def __post_init__(self) -> None:
        self.hparams = merge_hparams(self.name, self.DEFAULTS, self.hparams)
        check_positive(self.name, "lambda", self.hparams["lambda"], allow_zero=True)
        check_choice(self.name, "variant", self.hparams["variant"], ("dp", "eo"))
        check_choice(self.name, "input", self.hparams["input"], ("auto", "representation", "logits"))
        if self.hparams["hidden"] < 0:
            raise InputError(f"mitigation {self.name!r}: hidden={self.hparams['hidden']} must be >= 0 "
                             "(0 = a linear adversary)")

    def wrap_head(self, head: nn.Module, n_groups: int) -> nn.Module:
        """Build the adversary for this head's sizes; the head itself is unchanged."""
        from torch import nn

        linear, choice = adversary_choice(self.name, self.hparams, head, n_groups)
        self.adversary_input = choice
        width = linear.in_features if choice == "representation" else linear.out_features
        if self.hparams["variant"] == "eo":
            width += linear.out_features
        hidden = self.hparams["hidden"]
        self.adversary = (nn.Linear(width, n_groups) if hidden == 0 else
                          nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, n_groups)))
        return head

    def extra_parameters(self) -> list[nn.Parameter]:
        """The adversary's parameters (trained to predict the attribute)."""
        return [] if self.adversary is None else list(self.adversary.parameters())

    def adversary_loss(self, batch: Batch, reverse: bool = True) -> torch.Tensor:
        """Cell-balanced cross-entropy of the adversary; with `reverse` the model gets -lambda x its gradient."""
        import torch
        import torch.nn.functional as F

        if self.adversary is None:
            raise InputError(f"mitigation {self.name!r}: wrap_head must be called before training")
        if batch.groups is None:
            raise InputError(f"mitigation {self.name!r} needs the sensitive attribute at training")
        z = adversary_features(self.name, batch, self.adversary_input,
                               float(self.hparams["lambda"]) if reverse else None)
        if self.hparams["variant"] == "eo":  # a softmax head's class index enters one-hot
            y = F.one_hot(batch.y.long(), self.n_classes) if self.n_classes else batch.y
            z = torch.cat([z, y.to(z.dtype)], dim=1)
        ce = F.cross_entropy(self.adversary(z), batch.groups, reduction="none")
        cells = batch.groups
        if self.hparams["variant"] == "eo":
            _, labels = torch.unique(batch.y, dim=0, return_inverse=True)
            cells = cells * (int(labels.max()) + 1) + labels
        _, cell, counts = torch.unique(cells, return_inverse=True, return_counts=True)
        return (ce / counts[cell].to(ce.dtype)).sum() / len(counts)

    def loss(self, per_sample: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Task loss plus the adversary's loss through gradient reversal."""
        return per_sample.mean() + self.adversary_loss(batch)

    def describe(self) -> dict[str, Any]:
        """Base description plus the reference and what the adversary sees."""
        return {**super().describe(), "reference": self.REFERENCE,
                "notes": "adversary = MLP(hidden) -> attribute logits, cross-entropy averaged per group (dp) or "
                         "per group x label cell (eo); input=auto uses the representation when it is trainable, "
                         "else the logits (linear probe)"}
