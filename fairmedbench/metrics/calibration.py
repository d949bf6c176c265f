"""Calibration loss and refinement (Mosquera et al.): the Brier score split into what an ideal monotone
recalibration removes and what it cannot.

For weighted samples (y_i in {0, 1}, score s_i, weight w_i; a bootstrap row's weights are resample counts):

- refinement = the Brier score of the PAV (isotonic) recalibrated scores f(s_i) fitted on the same weighted set,
  i.e. the smallest Brier score any non-decreasing map of s reaches there;
- calibration_loss = Brier(s) - refinement (>= 0, since the identity is one such map).

Balanced versions use the balanced Brier, 0.5 * (mean over positives of (1 - p)^2 + mean over negatives of p^2).
Its recalibration is the PAV fitted with class-balanced weights (w_i / 2P for positives, w_i / 2N for
negatives, P and N the class weight totals): that PAV minimises exactly the balanced Brier over non-decreasing
maps, so `balanced_refinement` is the best balanced Brier a monotone recalibration reaches and
`balanced_calibration_loss` = balanced Brier - balanced_refinement is >= 0 too. (Recalibrating with the
prevalence-weighted PAV and then averaging per-class Briers would not minimise the balanced Brier and could give
a negative "loss".) Both are NaN when a class is absent, like the balanced Brier.

The PAV itself is scipy.optimize.isotonic_regression (one call per row: pooling is sequential, so rows cannot
share one call); tied scores are pooled first, as sklearn.isotonic.IsotonicRegression does.
"""

from __future__ import annotations

import numpy as np

NAMES = ("calibration_loss", "refinement", "balanced_calibration_loss", "balanced_refinement")


def _pav_brier(W: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Per row, the weighted squared error Σ_u (W_u f_u² - 2 f_u Y_u + Y_u) of the PAV fit f to the pooled means
    Y_u / W_u (W_u: the weight at unique score u, Y_u: its positive weight; labels are 0/1, so y² = y)."""
    from scipy.optimize import isotonic_regression  # imported here: scipy.optimize is most of a cold start

    out = np.empty(W.shape[0])
    for b in range(W.shape[0]):
        keep = W[b] > 0  # scipy needs strictly positive weights; zero-weight scores do not enter the Brier
        w, yw = W[b, keep], Y[b, keep]
        f = isotonic_regression(yw / w, weights=w).x if len(w) else w
        out[b] = float((w * f * f - 2.0 * f * yw + yw).sum())
    return out


def brier_decomposition(y: np.ndarray, s: np.ndarray, weights: np.ndarray) -> dict[str, np.ndarray]:
    """Calibration loss and refinement of the Brier and the balanced Brier for each row of `weights` (B, n) over
    the samples (y, s); each value is (B,). NaN where a row has no weight (balanced: where a class has none)."""
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    nan = np.full(w.shape[0], np.nan)
    if len(s) == 0:
        return {k: nan.copy() for k in NAMES}
    order = np.argsort(s, kind="mergesort")
    ss, ys, ws = s[order], y[order], w[:, order]
    starts = np.flatnonzero(np.r_[True, ss[1:] != ss[:-1]])  # tied scores pooled into one PAV point
    wp, wn = ws * ys, ws * (1.0 - ys)
    Wp, Wn = np.add.reduceat(wp, starts, axis=1), np.add.reduceat(wn, starts, axis=1)
    P, N = Wp.sum(axis=1), Wn.sum(axis=1)
    sq_p, sq_n = wp @ (1.0 - ss) ** 2, wn @ ss**2
    with np.errstate(divide="ignore", invalid="ignore"):
        total = P + N
        brier = (sq_p + sq_n) / total
        refinement = _pav_brier(Wp + Wn, Wp) / total
        a = np.where(P > 0, 0.5 / P, 0.0)[:, None]  # class-balanced weights: each class sums to 1/2
        c = np.where(N > 0, 0.5 / N, 0.0)[:, None]
        both = (P > 0) & (N > 0)
        bal_brier = np.where(both, a[:, 0] * sq_p + c[:, 0] * sq_n, np.nan)
        bal_refinement = np.where(both, _pav_brier(a * Wp + c * Wn, a * Wp), np.nan)
    # the identity is a monotone map, so the losses are >= 0; clip float rounding (~1e-17) below 0
    return {"calibration_loss": np.where(total > 0, np.maximum(brier - refinement, 0.0), np.nan),
            "refinement": np.where(total > 0, refinement, np.nan),
            "balanced_calibration_loss": np.maximum(bal_brier - bal_refinement, 0.0),
            "balanced_refinement": bal_refinement}
