"""What representation-level methods (LNL, EnD) need of a head: a representation with trainable parameters."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fairmedbench.errors import InputError
from fairmedbench.mitigation.adversarial import _has_trainable_representation

if TYPE_CHECKING:
    from torch import nn

FROZEN_WHY = ("it regularises the learnt representation, and a linear probe on cached frozen features has none "
              "to change (only the linear layer trains); use --usage lora (an encoder that trains), or, on frozen "
              "features, adversarial / laftr / cfair (their adversaries read the logits)")


def require_trainable_representation(method: str, head: nn.Module) -> None:
    """InputError unless `head` has trainable parameters before its output layer."""
    if not _has_trainable_representation(head):
        raise InputError(f"mitigation {method!r} does not apply to this head: {FROZEN_WHY}")
