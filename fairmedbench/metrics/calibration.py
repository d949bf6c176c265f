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

The PAV itself is scipy's compiled kernel behind scipy.optimize.isotonic_regression, loaded from its extension
file so that `evaluate` does not pay scipy.optimize's package import (about 0.4 CPU-s, most of its start-up; the
public function where that file is missing); tied scores are pooled first, as
sklearn.isotonic.IsotonicRegression does. Batched over the rows of a resample (no library batches PAV, which is
sequential), by two exact reductions written here:
- Segments: consecutive scores that carry only positives (or only negatives) have the same pooled mean (1, or 0)
  whatever the weights, and an L2 isotonic fit gives neighbours with equal values equal fits (averaging two unequal
  fits would keep the order and lower the error), so each such run enters the PAV as one point; a score carrying
  both classes is a point of its own. Then two neighbours whose left mean is >= the right one's have one fitted
  value too (adjacent violators pool, in any order, to the same fit; a neighbour of weight 0 pools without effect),
  whatever the weights: a run of positives (mean 1) always pools with the point after it, a run of negatives
  (mean 0) with the point before it. So points are cut only where a run of negatives or a mixed score is followed
  by a run of positives or a mixed score, about half as many points as runs. They depend on the scores only, so
  they are found once, and a row's point weights are differences of the cumulative class weights the other
  metrics already compute.
- One call for all rows: row b's pooled means (in [0, 1]) are shifted by 2b and the rows concatenated. PAV pools
  two neighbouring blocks only when the left one's mean exceeds the right one's, and every block of row b has a
  mean below 2b + 1 < 2(b + 1), so no block pools across rows: the concatenated fit is each row's own. The Brier
  sums are taken from the blocks' weights (a block of weight W with positive weight Y fits Y / W and contributes
  Y - Y² / W), not from the shifted fit, so the shift costs no precision.
- Points of weight 0 (a resample that draws none of a run's samples, a permuted group's non-members) are left out
  of the call: they change no fit and add 0 to the error, and a permutation row leaves most points empty.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

NAMES = ("calibration_loss", "refinement", "balanced_calibration_loss", "balanced_refinement")


class Segments:
    """The PAV points of one set of sorted positive scores `sp` and negative scores `sn`: maximal runs of scores
    carrying one class only and each score carrying both, then pooled where a fit cannot separate them (a run of
    positives with the next point, a run of negatives with the previous one; module docstring); point k holds
    sp[p_bounds[k]:p_bounds[k + 1]] and sn[n_bounds[k]:n_bounds[k + 1]]."""

    def __init__(self, sp: np.ndarray, sn: np.ndarray) -> None:
        # the distinct scores u of both classes and, per score, where it starts and ends in sp (ap, bp) and in sn
        # (an, bn), from one merge of the two sorted arrays: a stable sort of two sorted runs is a linear merge
        # (timsort), where union1d and four searchsorted calls cost five n log n passes
        merged = np.concatenate([sp, sn])
        order = np.argsort(merged, kind="stable")
        v = merged[order]
        starts = np.flatnonzero(np.r_[True, v[1:] != v[:-1]]) if len(v) else np.zeros(0, np.intp)
        ends = np.r_[starts[1:], len(v)]
        positives = np.r_[0, np.cumsum(order < len(sp))]  # positives among the first i merged scores
        u = v[starts]
        ap, bp = positives[starts], positives[ends]
        an, bn = starts - ap, ends - bp
        kind = (bp > ap).astype(np.int8) + 2 * (bn > an).astype(np.int8)  # 1 positives, 2 negatives, 3 both
        new = np.r_[True, (kind[1:] != kind[:-1]) | (kind[1:] == 3)] if len(u) else np.zeros(0, bool)
        first = np.flatnonzero(new)
        run = kind[first]
        # a cut only where a run of negatives or a mixed score (not positives only) meets a run of positives or a
        # mixed score (not negatives only)
        first = first[np.r_[True, (run[:-1] != 1) & (run[1:] != 2)]] if len(first) else first
        last = np.r_[first[1:] - 1, len(u) - 1] if len(first) else first
        # every sample lies in exactly one point, in order: each class's ranges are contiguous, so one list of
        # boundaries per class gives a row's point weights as differences of its cumulative weights
        self.p_bounds = np.r_[ap[first], bp[last][-1:]] if len(u) else np.zeros(1, np.int64)
        self.n_bounds = np.r_[an[first], bn[last][-1:]] if len(u) else np.zeros(1, np.int64)


Pava = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray, int]]


@functools.cache
def pava_kernel() -> Pava:
    """scipy's PAV kernel `pava(x, w, r) -> (fit, block weights, block starts r, number of blocks)`, which may
    overwrite its arguments; from scipy/optimize/_pava_pybind*.so without importing scipy.optimize, else from it."""
    import importlib.machinery
    import importlib.util
    from pathlib import Path

    import scipy

    name = "scipy.optimize._pava_pybind"
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = Path(scipy.__file__).parent / "optimize" / f"_pava_pybind{suffix}"
        spec = importlib.util.spec_from_file_location(name, path) if path.is_file() else None
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module.pava  # type: ignore[no-any-return]
    from scipy.optimize._pava_pybind import pava  # this scipy lays its files out otherwise: the package import

    return pava  # type: ignore[no-any-return]


def _pav_brier(w: np.ndarray, yw: np.ndarray, row: np.ndarray, b: int) -> np.ndarray:
    """Per row, the weighted squared error Σ_u (W_u f_u² - 2 f_u Y_u + Y_u) of the PAV fit f to the pooled means
    Y_u / W_u of the points of positive weight (w: their weights W_u, yw: their positive weights Y_u, row: the row
    each belongs to, rows in order; labels are 0/1, so y² = y), all `b` rows in one call (see the module
    docstring)."""
    if not len(w):
        return np.zeros(b)
    shifted = yw / w + 2.0 * row
    r = np.empty(len(w) + 1, dtype=np.intp)  # the kernel writes every block start it returns
    _, _, r, n_blocks = pava_kernel()(shifted, w.copy(), r)  # the copy: the kernel overwrites its weights
    starts = r[:n_blocks]
    Wb, Yb = np.add.reduceat(w, starts), np.add.reduceat(yw, starts)
    return np.bincount(row[starts], weights=Yb - Yb * Yb / Wb, minlength=b)


def decompose(seg: Segments, cp: np.ndarray, cn: np.ndarray, sq_p: np.ndarray, sq_n: np.ndarray
              ) -> dict[str, np.ndarray]:
    """Calibration loss and refinement per row from the cumulative class weights cp, cn (B, n + 1; leading zero
    column) along the sorted scores and the rows' weighted squared errors sq_p = Σ w (1 - s)², sq_n = Σ w s²."""
    P, N = cp[:, -1], cn[:, -1]
    # differences of cumulative sums of weights >= 0 are >= 0 (rounding is monotone), exact for resample counts
    Wp = np.diff(np.take(cp, seg.p_bounds, axis=1), axis=1)
    Wn = np.diff(np.take(cn, seg.n_bounds, axis=1), axis=1)
    B, m = Wp.shape
    W = Wp + Wn
    keep = W > 0  # the points that carry weight; the rest change no fit (module docstring)
    at = np.flatnonzero(keep)
    row = at // max(m, 1)
    w, wp, wn = W.ravel()[at], Wp.ravel()[at], Wn.ravel()[at]
    with np.errstate(divide="ignore", invalid="ignore"):
        total = P + N
        brier = (sq_p + sq_n) / total
        refinement = _pav_brier(w, wp, row, B) / total
        a = np.where(P > 0, 0.5 / P, 0.0)  # class-balanced weights: each class sums to 1/2
        c = np.where(N > 0, 0.5 / N, 0.0)
        both = (P > 0) & (N > 0)
        bal_brier = np.where(both, a * sq_p + c * sq_n, np.nan)
        ap = a[row] * wp
        bal_refinement = np.where(both, _pav_brier(ap + c[row] * wn, ap, row, B), np.nan)
    # the identity is a monotone map, so the losses are >= 0; clip float rounding (~1e-17) below 0
    return {"calibration_loss": np.where(total > 0, np.maximum(brier - refinement, 0.0), np.nan),
            "refinement": np.where(total > 0, refinement, np.nan),
            "balanced_calibration_loss": np.maximum(bal_brier - bal_refinement, 0.0),
            "balanced_refinement": bal_refinement}


def brier_decomposition(y: np.ndarray, s: np.ndarray, weights: np.ndarray) -> dict[str, np.ndarray]:
    """Calibration loss and refinement of the Brier and the balanced Brier for each row of `weights` (B, n) over
    the samples (y, s); each value is (B,). NaN where a row has no weight (balanced: where a class has none)."""
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y != 1)
    op, on = pos[np.argsort(s[pos], kind="mergesort")], neg[np.argsort(s[neg], kind="mergesort")]
    sp, sn, wp, wn = s[op], s[on], w[:, op], w[:, on]
    cp, cn = np.zeros((w.shape[0], len(sp) + 1)), np.zeros((w.shape[0], len(sn) + 1))
    np.cumsum(wp, axis=1, out=cp[:, 1:])
    np.cumsum(wn, axis=1, out=cn[:, 1:])
    return decompose(Segments(sp, sn), cp, cn, wp @ (1.0 - sp) ** 2, wn @ sn**2)
