"""The one ROC AUC implementation of the engine: Mann-Whitney with ties counted 1/2, under rows of weights.

Written by hand because the bootstrap needs the AUC of thousands of weight rows at once from one sort
(sklearn's roc_auc_score takes one weight vector per call); it equals roc_auc_score(y, s, sample_weight=w).
"""

from __future__ import annotations

import numpy as np

from fairmedbench.errors import InputError


def auc_from_sorted(wp: np.ndarray, cn: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                    cn_lo: np.ndarray | None = None, P: np.ndarray | None = None) -> np.ndarray:
    """AUC per row from the positives' weights `wp` (B, p) and the negatives' cumulative weights `cn` (B, m+1,
    leading 0), where lo/hi (p,) are each positive's left/right search position among the sorted negatives
    (`cn_lo`: cn[:, lo] and `P`: wp.sum(axis=1) when the caller has them); NaN for a row without positive or
    without negative weight."""
    P = wp.sum(axis=1) if P is None else P
    N = cn[:, -1]
    below = np.take(cn, lo, axis=1) if cn_lo is None else cn_lo
    tied = np.flatnonzero(lo != hi)  # positives that tie a negative (few in real scores): they count 1/2 each
    with np.errstate(divide="ignore", invalid="ignore"):
        if not len(tied):  # 0.5 (x + x) = x exactly, so the count below each positive is enough
            auc = (wp * below).sum(axis=1) / (P * N)
        elif 3 * len(tied) < len(lo):  # else one gather of every column costs less
            # Σ w (below + above) = 2 Σ w below + Σ_tied w (above - below): the same sum, exact for whole-number
            # weights (every partial sum an integer below 2^53), with a gather of the tied columns only
            wt = wp[:, tied]
            auc = 0.5 * (2.0 * (wp * below).sum(axis=1) + (wt * (cn[:, hi[tied]] - below[:, tied])).sum(axis=1)
                         ) / (P * N)
        else:
            auc = 0.5 * (wp * (below + np.take(cn, hi, axis=1))).sum(axis=1) / (P * N)
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
