"""Mitigation plugins, one module per method behind one small interface (see base.Mitigation).

Importing this package registers every method in MITIGATIONS; none imports torch until it is used.
"""

from typing import Any

from fairmedbench.errors import InputError
from fairmedbench.mitigation import (  # noqa: F401 (they register)
    adversarial,
    cfair,
    cvar_dro,
    dfr,
    domainind,
    end,
    fair_dice,
    fairclip,
    fairness_loss,
    febs,
    fis,
    group_thresholds,
    groupdro,
    ind,
    jtt,
    laftr,
    lnl,
    odr,
    resampling,
    reweighting,
    sam,
    swad,
)
from fairmedbench.mitigation.base import MITIGATIONS, Batch, Mitigation, register_mitigation

__all__ = ["MITIGATIONS", "Batch", "Mitigation", "make_mitigation", "register_mitigation"]


def make_mitigation(name: str, **hparams: Any) -> Mitigation:
    """A fresh plugin by registered name, paper defaults overridden by `hparams` (unknown keys: InputError)."""
    cls = MITIGATIONS.get(name)
    if hparams and not getattr(cls, "DEFAULTS", None):
        raise InputError(f"mitigation {name!r} takes no hyperparameters, got {', '.join(sorted(hparams))}")
    return cls(hparams=dict(hparams))
