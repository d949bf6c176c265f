"""The one AUC implementation (metrics/auc.py): equal to sklearn's roc_auc_score with sample weights."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from fairmedbench.metrics import OVERALL, evaluate_classification, paired
from fairmedbench.metrics.auc import auc, weighted_auc


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    s = np.round(np.clip(0.5 + 0.2 * (2 * y - 1) + rng.normal(0, 0.25, n), 0, 1), 2)  # rounded: many ties
    return y, s


def test_weighted_auc_equals_sklearn_with_sample_weight():
    y, s = _data(300, 0)
    w = np.random.default_rng(1).poisson(1.0, size=(20, 300)).astype(float)
    got = weighted_auc(y, s, w)
    for row, g in zip(w, got):
        assert g == pytest.approx(roc_auc_score(y, s, sample_weight=row), abs=1e-12)


def test_unweighted_auc_is_the_mann_whitney_u_and_nan_with_one_class():
    from scipy.stats import mannwhitneyu

    y, s = _data(250, 3)
    u = mannwhitneyu(s[y == 1], s[y == 0]).statistic
    assert auc(y, s) == u / ((y == 1).sum() * (y == 0).sum())  # exactly: both count ties 1/2 in one division
    assert auc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert np.isnan(auc(np.ones(5), np.linspace(0, 1, 5)))


def test_engine_and_paired_bootstrap_use_the_same_auc():
    y, s = _data(400, 2)
    g = np.where(np.arange(400) % 3 == 0, "a", "b")
    r = evaluate_classification(y, s, {"g": g}, n_boot=0).report()
    for grp in ("a", "b"):
        m = g == grp
        assert r.value("auc", grp) == pytest.approx(roc_auc_score(y[m], s[m]), abs=1e-12)
    assert r.value("auc", OVERALL) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert paired.weighted_auc is weighted_auc
    pg = paired.paired_group_auc(y, s[None, :], g, n_boot=5)
    assert pg.point[0] == pytest.approx([r.value("auc", "a"), r.value("auc", "b")], abs=1e-12)


def test_auc_without_ties_takes_one_gather_and_gives_the_same_bits() -> None:
    # no positive ties a negative: the count below each positive alone gives the AUC, bit for bit what the
    # half-ties formula gives (0.5 (x + x) = x exactly); a few ties: the tied columns' correction added to twice
    # that count, the same sum for whole-number weights; many ties: the half-ties formula itself
    from fairmedbench.metrics.auc import auc_from_sorted

    rng = np.random.default_rng(8)
    few = rng.random(400)
    few[:40] = few[40:80]  # 40 scores repeated: some positive ties a negative, far fewer than a third of them
    for scores in (rng.random(400), few, np.round(rng.random(400), 1)):
        y = rng.random(400) < 0.3
        sp, sn = np.sort(scores[y]), np.sort(scores[~y])
        wp, wn = rng.poisson(1.0, (5, len(sp))).astype(float), rng.poisson(1.0, (5, len(sn))).astype(float)
        cn = np.zeros((5, len(sn) + 1))
        np.cumsum(wn, axis=1, out=cn[:, 1:])
        lo, hi = np.searchsorted(sn, sp, "left"), np.searchsorted(sn, sp, "right")
        assert scores is not few or 0 < 3 * (lo != hi).sum() < len(sp)
        half_ties = 0.5 * (wp * (cn[:, lo] + cn[:, hi])).sum(axis=1) / (wp.sum(axis=1) * cn[:, -1])
        np.testing.assert_array_equal(auc_from_sorted(wp, cn, lo, hi), half_ties)
