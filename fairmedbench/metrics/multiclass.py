"""Multi-class / ordinal metrics: Cohen's kappa.

Pure numpy. Definitions follow METRICS.md ("kappa" row). The uncertainty measures and the uncertainty-based
subgroup disparity δ of Lu et al. (2021) are in fairmedbench.analysis.uncertainty.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from fairmedbench.errors import InputError

def _labels_1d(x: Any, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise InputError(f"{name}: expected one class label per sample (1-D), got shape {arr.shape}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise InputError(f"{name}: contains NaN or infinite labels; drop or fix those samples")
    if arr.dtype.kind == "O" and any(v is None or (isinstance(v, float) and math.isnan(v)) for v in arr.tolist()):
        raise InputError(f"{name}: contains missing (None/NaN) labels; drop or fix those samples")
    return arr


def _label_set(y_true: np.ndarray, y_pred: np.ndarray, labels: Sequence[Any] | None) -> np.ndarray:
    """The ordered label set (sorted union, or `labels` as given); every label must be in it."""
    if labels is None:
        try:
            return np.unique(np.concatenate([y_true, y_pred]))
        except TypeError:
            raise InputError("y_true/y_pred: labels mix types that cannot be sorted; pass `labels`") from None
    lab = np.asarray(labels)
    if lab.ndim != 1 or lab.size == 0:
        raise InputError("labels: expected a non-empty 1-D list of class labels")
    if len(set(lab.tolist())) != lab.size:
        raise InputError("labels: contains duplicates")
    known = set(lab.tolist())
    for name, arr in (("y_true", y_true), ("y_pred", y_pred)):
        extra = sorted({str(v) for v in arr.tolist() if v not in known})
        if extra:
            raise InputError(f"{name}: values {extra[:5]} are not in `labels`; add them to `labels`")
    return lab


def _kappa_from_indices(ti: np.ndarray, pi: np.ndarray, k: int, weights: str | None) -> float:
    """Kappa from label indices in [0, k); NaN when the expected disagreement is 0."""
    n = ti.size
    if n == 0:
        return math.nan
    obs = np.bincount(ti * k + pi, minlength=k * k).reshape(k, k).astype(float)
    exp = np.outer(obs.sum(axis=1), obs.sum(axis=0)) / n
    idx = np.arange(k)
    if weights is None:
        w = 1.0 - np.eye(k)
    elif weights == "linear":
        w = np.abs(idx[:, None] - idx[None, :]).astype(float)
    else:
        w = ((idx[:, None] - idx[None, :]) ** 2).astype(float)
    denom = float(np.sum(w * exp))
    if denom == 0.0:
        return math.nan
    return 1.0 - float(np.sum(w * obs)) / denom


def cohen_kappa(
    y_true: Any, y_pred: Any, weights: str | None = None, labels: Sequence[Any] | None = None
) -> float:
    """Cohen's kappa; weights None, "linear" or "quadratic" by distance between label positions in
    `labels` (default: sorted union of the labels seen). NaN when undefined (no expected disagreement)."""
    if weights not in (None, "linear", "quadratic"):
        raise InputError(f"weights: must be None, 'linear' or 'quadratic', got {weights!r}")
    t = _labels_1d(y_true, "y_true")
    p = _labels_1d(y_pred, "y_pred")
    if t.size != p.size:
        raise InputError(f"y_true has {t.size} samples but y_pred has {p.size}; they must match")
    if t.size == 0:
        raise InputError("y_true: empty")
    lab = _label_set(t, p, labels)
    pos = {v: i for i, v in enumerate(lab.tolist())}
    ti = np.fromiter((pos[v] for v in t.tolist()), dtype=np.int64, count=t.size)
    pi = np.fromiter((pos[v] for v in p.tolist()), dtype=np.int64, count=p.size)
    return _kappa_from_indices(ti, pi, lab.size, weights)
