"""Input checks for the metric engine: clear messages that name the offending input."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fairmedbench.errors import InputError


def as_labels(y: ArrayLike, name: str = "y_true") -> np.ndarray:
    """0/1 labels as int8, (n,) or (n, K); anything else is an InputError."""
    arr = np.asarray(y)
    if arr.ndim not in (1, 2) or arr.shape[0] == 0:
        raise InputError(f"{name}: expected a non-empty 1-D or 2-D array of 0/1 labels, got shape {arr.shape}")
    if arr.dtype == bool:
        return arr.astype(np.int8)
    try:
        num = arr.astype(np.float64)
    except (TypeError, ValueError):
        bad = _first(arr, lambda v: str(v) not in ("0", "1"))
        raise InputError(f"{name}: labels must be 0 or 1, found {bad!r}") from None
    if np.isnan(num).any():
        raise InputError(f"{name}: {int(np.isnan(num).sum())} missing (NaN) labels; drop or fill those rows")
    if not np.isin(num, (0.0, 1.0)).all():
        bad = num[~np.isin(num, (0.0, 1.0))][0]
        raise InputError(f"{name}: labels must be 0 or 1, found {bad:g}; binarise multi-class labels first")
    return num.astype(np.int8)


def as_scores(s: ArrayLike, name: str = "y_score", logits: bool = False) -> np.ndarray:
    """Probabilities in [0, 1] as float64; logits are mapped through the sigmoid only when declared."""
    try:
        arr = np.asarray(s, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{name}: scores must be numbers") from None
    if arr.ndim not in (1, 2) or arr.shape[0] == 0:
        raise InputError(f"{name}: expected a non-empty 1-D or 2-D array of scores, got shape {arr.shape}")
    finite = np.isfinite(arr)
    if not finite.all():
        kind = "NaN" if np.isnan(arr).any() else "infinite"
        raise InputError(f"{name}: {int((~finite).sum())} {kind} score(s); every sample needs a finite score")
    if logits:
        return 1.0 / (1.0 + np.exp(-arr))
    if arr.min() < 0.0 or arr.max() > 1.0:
        raise InputError(
            f"{name}: scores must be probabilities in [0, 1] (found min {arr.min():g}, max {arr.max():g}); "
            "if these are logits, say so (--logits / logits=True)"
        )
    return arr


def check_lengths(arrays: Mapping[str, np.ndarray | None]) -> int:
    """All named arrays must have the same first dimension; returns it."""
    lengths = {k: len(v) for k, v in arrays.items() if v is not None}
    if len(set(lengths.values())) > 1:
        desc = ", ".join(f"{k}={n}" for k, n in lengths.items())
        raise InputError(f"length mismatch: {desc}; every input needs one entry per sample")
    return next(iter(lengths.values()))


def _first(arr: np.ndarray, pred: Any) -> Any:
    for v in arr.ravel():
        if pred(v):
            return v
    return None
