"""Helpers shared by mitigation plugins: hyperparameter merging and group / class / cell codes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fairmedbench.engine.hparams import merge
from fairmedbench.errors import InputError

BALANCE_UNITS = ("group", "class", "group_class")


def merge_hparams(method: str, defaults: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """Paper defaults overridden by `given` (typed in engine.hparams); an unknown key is an InputError."""
    return merge(f"mitigation {method!r}", defaults, given)


def check_choice(method: str, key: str, value: str, choices: tuple[str, ...]) -> None:
    """InputError unless `value` is one of `choices`."""
    if value not in choices:
        raise InputError(f"mitigation {method!r}: {key}={value!r}; choose one of {', '.join(choices)}")


def check_positive(method: str, key: str, value: float, allow_zero: bool = False) -> None:
    """InputError unless `value` > 0 (or >= 0 with allow_zero)."""
    if not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise InputError(f"mitigation {method!r}: {key}={value!r} must be {'>= 0' if allow_zero else '> 0'}")


def label_column(method: str, y: np.ndarray, column: int, n_classes: int = 0) -> np.ndarray:
    """The class code used for class balancing: y[:, column] > 0.5 of 0/1 labels (y (n,) or (n, K)), or, with
    `n_classes` K >= 2 (a softmax head), the class index y itself (n,), checked to lie in 0..K-1."""
    if n_classes:  # label_column 0 (Mitigation.unsupported)
        yi = np.asarray(y)
        bad = yi.size and (yi.min() < 0 or yi.max() >= n_classes or (yi != yi.astype(np.int64)).any())
        if yi.ndim != 1 or bad:
            raise InputError(f"mitigation {method!r}: multi-class labels must be class indices 0..{n_classes - 1} "
                             f"(1-D), got shape {yi.shape}")
        return yi.astype(np.int64)
    y2 = y[:, None] if y.ndim == 1 else y
    if not 0 <= column < y2.shape[1]:
        raise InputError(f"mitigation {method!r}: label_column={column} but labels have {y2.shape[1]} column(s)")
    return (y2[:, column] > 0.5).astype(np.int64)


def check_group_codes(method: str, groups: np.ndarray, n_groups: int | None = None) -> np.ndarray:
    """Integer group codes >= 0 (and < n_groups when given), else an InputError."""
    g = np.asarray(groups)
    if g.ndim != 1 or (g.size and not np.issubdtype(g.dtype, np.integer)):
        raise InputError(f"mitigation {method!r}: group codes must be a 1-D integer array, got {g.dtype} {g.shape}")
    if g.size and (g.min() < 0 or (n_groups is not None and g.max() >= n_groups)):
        raise InputError(f"mitigation {method!r}: group codes must lie in 0..{(n_groups or 0) - 1}, "
                         f"got {int(g.min())}..{int(g.max())} (rows with a missing attribute must be dropped)")
    return g.astype(np.int64)


def balance_units(method: str, by: str, y: np.ndarray, groups: np.ndarray | None, column: int,
                  n_classes: int = 0) -> np.ndarray:
    """Per-sample unit codes to balance over: the group, the class, or the group x class cell (2 classes for
    0/1 labels, `n_classes` for a softmax head's class indices)."""
    if by == "class":
        return label_column(method, y, column, n_classes)
    if groups is None:
        raise InputError(f"mitigation {method!r} with by={by!r} needs the sensitive attribute at training; "
                         "give --attribute, or use by=class")
    g = check_group_codes(method, groups)
    return g if by == "group" else max(n_classes, 2) * g + label_column(method, y, column, n_classes)


def group_table(method: str, groups: np.ndarray | None) -> np.ndarray:
    """Training-set group sizes (index = group code), refusing a run without the attribute."""
    if groups is None:
        raise InputError(f"mitigation {method!r} needs the sensitive attribute at training; give --attribute")
    return np.bincount(check_group_codes(method, groups))


def true_label_probability(logits: Any, y: Any, n_classes: int) -> Any:
    """Per sample, the probability the head gives the true label: softmax[y] for a softmax head (y class
    indices), else the mean over label columns of sigmoid(z) where y = 1 and 1 - sigmoid(z) where y = 0."""
    import torch

    if n_classes:
        return torch.softmax(logits, dim=1).gather(1, y.long().view(-1, 1))[:, 0]
    p = torch.sigmoid(logits)
    return torch.where(y > 0.5, p, 1 - p).mean(dim=1)
