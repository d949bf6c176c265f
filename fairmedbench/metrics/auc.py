"""The one ROC AUC implementation of the engine: Mann-Whitney with ties counted 1/2, under rows of weights.

Written by hand because the bootstrap needs the AUC of thousands of weight rows at once from one sort
(sklearn's roc_auc_score takes one weight vector per call); it equals roc_auc_score(y, s, sample_weight=w).
"""

from __future__ import annotations

import numpy as np

from fairmedbench.errors import InputError


def auc_from_sorted(wp: np.ndarray, cn: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                    cn_lo: np.ndarray | None = None) -> np.ndarray:
    """AUC per row from the positives' weights `wp` (B, p) and the negatives' cumulative weights `cn` (B, m+1,
    leading 0), where lo/hi (p,) are each positive's left/right search position among the sorted negatives
    (`cn_lo`: cn[:, lo] when the caller has it); NaN for a row without positive or without negative weight."""
    P, N = wp.sum(axis=1), cn[:, -1]
    below = cn[:, lo] if cn_lo is None else cn_lo
    with np.errstate(divide="ignore", invalid="ignore"):
        if np.array_equal(lo, hi):  # no positive ties a negative: 0.5 (x + x) = x exactly, so one gather is enough
            auc = (wp * below).sum(axis=1) / (P * N)
        else:
            auc = 0.5 * (wp * (below + cn[:, hi])).sum(axis=1) / (P * N)
    return np.where((P > 0) & (N > 0), auc, np.nan)


def weighted_auc(y: np.ndarray, s: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """AUC (ties count 1/2) of scores `s` (n,) for binary `y` (n,) under each row of `weights` (B, n);
    NaN for a row without positive or without negative weight."""
    y = np.asarray(y).astype(bool)
    s = np.asarray(s, dtype=np.float64)
    w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    if y.shape != s.shape or w.shape[1] != y.size:
        raise InputError(f"weighted_auc: labels {y.shape}, scores {s.shape} and weights {w.shape} do not match")
    sp, sn = np.sort(s[y], kind="stable"), np.sort(s[~y], kind="stable")
    op, on = np.argsort(s[y], kind="stable"), np.argsort(s[~y], kind="stable")
    wp, wn = w[:, y][:, op], w[:, ~y][:, on]
    cn = np.zeros((w.shape[0], sn.size + 1))
    np.cumsum(wn, axis=1, out=cn[:, 1:])
    return auc_from_sorted(wp, cn, np.searchsorted(sn, sp, side="left"), np.searchsorted(sn, sp, side="right"))


def auc(y: np.ndarray, s: np.ndarray) -> float:
    """AUC (ties count 1/2) of scores `s` (n,) for binary `y` (n,), every sample weighing 1; NaN with one class."""
    return float(weighted_auc(y, s, np.ones((1, np.asarray(y).size)))[0])
