"""Calibration loss and refinement (Mosquera et al.): hand-computed PAV on a tiny set, sklearn cross-check,
bootstrap rows, edge cases and the engine's per-group values."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression

from fairmedbench.metrics.calibration import brier_decomposition, pava_kernel

# y = 0 0 1 0 1 at s = .1 .4 .4 .6 .8 (the two samples at .4 are tied, so PAV pools them first).
#
# Brier, unit weights. Points (score: weight, mean y): .1:(1, 0)  .4:(2, .5)  .6:(1, 0)  .8:(1, 1).
#   PAV: 0, .5, 0 violates at .4 > .6 -> pool (2*.5 + 1*0)/3 = 1/3 -> fit 0, 1/3, 1/3, 1 (monotone, done).
#   Brier(s)  = (.01 + .16 + .36 + .36 + .04)/5 = .93/5 = .186
#   refinement = (0 + (1/3)^2 + (2/3)^2 + (1/3)^2 + 0)/5 = (6/9)/5 = 2/15
#   calibration loss = .186 - 2/15
#
# Balanced Brier: P = 2, N = 3 -> weights 1/4 per positive, 1/6 per negative.
#   Points: .1:(1/6, 0)  .4:(1/6 + 1/4 = 5/12, (1/4)/(5/12) = .6)  .6:(1/6, 0)  .8:(1/4, 1).
#   PAV: 0, .6, 0 violates -> pool (1/4)/(5/12 + 1/6) = 3/7 -> fit 0, 3/7, 3/7, 1.
#   balanced refinement = .5*mean_pos (1-f)^2 + .5*mean_neg f^2 = .5*((4/7)^2 + 0)/2 + .5*(0 + (3/7)^2*2)/3
#                       = .5*8/49 + .5*6/49 = 1/7
#   balanced Brier = .5*(.36 + .04)/2 + .5*(.01 + .16 + .36)/3 = .1 + .53/6
#   balanced calibration loss = .1 + .53/6 - 1/7
Y = np.array([0, 0, 1, 0, 1])
S = np.array([0.1, 0.4, 0.4, 0.6, 0.8])


def test_hand_computed_pav() -> None:
    out = brier_decomposition(Y, S, np.ones((1, 5)))
    assert out["refinement"][0] == pytest.approx(2 / 15, abs=1e-12)
    assert out["calibration_loss"][0] == pytest.approx(0.186 - 2 / 15, abs=1e-12)
    assert out["balanced_refinement"][0] == pytest.approx(1 / 7, abs=1e-12)
    assert out["balanced_calibration_loss"][0] == pytest.approx(0.1 + 0.53 / 6 - 1 / 7, abs=1e-12)


def test_input_order_does_not_matter() -> None:
    perm = np.array([3, 0, 4, 2, 1])
    a = brier_decomposition(Y, S, np.ones((1, 5)))
    b = brier_decomposition(Y[perm], S[perm], np.ones((1, 5)))
    for k in a:
        assert a[k][0] == pytest.approx(b[k][0], abs=1e-15)


def _sklearn(y: np.ndarray, s: np.ndarray, w: np.ndarray, balanced: bool) -> tuple[float, float]:
    """(calibration loss, refinement) with sklearn's IsotonicRegression on the positive-weight samples."""
    keep = w > 0
    y, s, w = y[keep], s[keep], w[keep].astype(float)
    if balanced:
        w = np.where(y == 1, 0.5 / w[y == 1].sum(), 0.5 / w[y == 0].sum()) * w
    f = IsotonicRegression(out_of_bounds="clip").fit(s, y, sample_weight=w).predict(s)
    ref = float((w * (f - y) ** 2).sum() / w.sum())
    return float((w * (s - y) ** 2).sum() / w.sum()) - ref, ref


def test_matches_sklearn_isotonic_on_bootstrap_rows() -> None:
    rng = np.random.default_rng(3)
    n = 300
    y = rng.integers(0, 2, n)
    s = np.round(1 / (1 + np.exp(-(1.2 * y - 0.6 + rng.normal(0, 1, n)))), 2)  # rounded: many ties
    w = rng.multinomial(n, np.full(n, 1 / n), size=6).astype(float)
    out = brier_decomposition(y, s, w)
    for b in range(len(w)):
        for balanced, prefix in ((False, ""), (True, "balanced_")):
            loss, ref = _sklearn(y, s, w[b], balanced)
            assert out[f"{prefix}refinement"][b] == pytest.approx(ref, abs=1e-12)
            assert out[f"{prefix}calibration_loss"][b] == pytest.approx(loss, abs=1e-12)


def test_perfectly_calibrated_monotone_scores_have_no_loss() -> None:
    # each distinct score equals the positive rate at it: PAV changes nothing
    y = np.array([0, 0, 1, 0, 1, 1, 1])
    s = np.array([0, 0.5, 0.5, 2 / 3, 2 / 3, 2 / 3, 1.0])
    s[0] = 0.0
    out = brier_decomposition(y, s, np.ones((1, 7)))
    assert out["calibration_loss"][0] == pytest.approx(0.0, abs=1e-15)


def test_one_class_and_empty() -> None:
    out = brier_decomposition(np.zeros(3), np.array([0.2, 0.1, 0.4]), np.ones((2, 3)))
    # PAV fits the all-zero labels exactly: all of the Brier is calibration loss
    assert out["refinement"][0] == 0.0
    assert out["calibration_loss"][0] == pytest.approx((0.04 + 0.01 + 0.16) / 3)
    assert np.isnan(out["balanced_refinement"]).all() and np.isnan(out["balanced_calibration_loss"]).all()
    empty = brier_decomposition(np.zeros(0), np.zeros(0), np.ones((2, 0)))
    assert all(np.isnan(v).all() and v.shape == (2,) for v in empty.values())


def test_engine_reports_them_per_group_with_gap_and_interval() -> None:
    from fairmedbench.metrics import evaluate_classification

    rng = np.random.default_rng(0)
    n = 400
    y = rng.integers(0, 2, n)
    g = np.where(rng.random(n) < 0.5, "a", "b")
    s = 1 / (1 + np.exp(-(1.5 * y - 0.75 + rng.normal(0, 1, n))))
    s = np.where(g == "b", s**3, s)  # group b miscalibrated (scores pushed down)
    res = evaluate_classification(y, s, {"g": g}, n_boot=50, seed=1).to_dict()
    [report] = res["reports"]
    rep = report["metrics"]
    for grp in ("a", "b"):
        m = g == grp
        want = brier_decomposition(y[m], s[m], np.ones((1, m.sum())))
        for k in ("calibration_loss", "refinement", "balanced_calibration_loss", "balanced_refinement"):
            assert rep[k][grp]["value"] == pytest.approx(want[k][0], abs=1e-12)
    assert rep["calibration_loss"]["b"]["value"] > rep["calibration_loss"]["a"]["value"]
    gap = rep["calibration_loss_gap"]["__gap__"]
    assert gap["value"] == pytest.approx(rep["calibration_loss"]["b"]["value"] - rep["calibration_loss"]["a"]["value"])
    assert gap["ci_low"] < gap["value"] < gap["ci_high"]


def test_segments_pool_one_class_runs_and_keep_mixed_scores_alone() -> None:
    from fairmedbench.metrics.calibration import Segments

    # merged order: n.1 p.2 p.3 [p.4 n.4] n.5 n.6 p.7 -> runs {n.1} {p.2 p.3} {p.4 n.4} {n.5 n.6} {p.7}; the run of
    # positives pools with the mixed score after it, the run of negatives with the mixed score before it (a fit
    # cannot separate a mean of 1 from what follows it, nor a mean of 0 from what precedes it) -> points
    # {n.1} {p.2 p.3 p.4 n.4 n.5 n.6} {p.7}; a mixed score after a run of negatives starts a point of its own
    sp, sn = np.array([0.2, 0.3, 0.4, 0.7]), np.array([0.1, 0.4, 0.5, 0.6])
    seg = Segments(sp, sn)
    assert seg.p_bounds.tolist() == [0, 0, 3, 4]
    assert seg.n_bounds.tolist() == [0, 1, 4, 4]
    # n.1 [p.2 n.2] [p.3 n.3] n.4 p.5 -> cut before each mixed score and before p.5: {n.1} {p.2 n.2} {p.3 n.3 n.4}
    # {p.5}
    seg = Segments(np.array([0.2, 0.3, 0.5]), np.array([0.1, 0.2, 0.3, 0.4]))
    assert seg.p_bounds.tolist() == [0, 0, 1, 2, 3]
    assert seg.n_bounds.tolist() == [0, 1, 2, 4, 4]


def _reference_segments(sp: np.ndarray, sn: np.ndarray) -> tuple[list[int], list[int]]:
    """Segments' bounds by their definition, one distinct score at a time: its class kind (1 positives, 2 negatives,
    3 both), runs of one kind, and a cut wherever a run that is not positives-only meets one that is not
    negatives-only."""
    u = sorted(set(sp.tolist()) | set(sn.tolist()))
    kinds = [(s in set(sp.tolist())) + 2 * (s in set(sn.tolist())) for s in u]
    starts = [i for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1] or k == 3]
    cuts = [i for j, i in enumerate(starts) if j == 0 or (kinds[starts[j - 1]] != 1 and kinds[i] != 2)]
    p = [int(np.searchsorted(sp, u[i], "left")) for i in cuts] + [len(sp)]
    n = [int(np.searchsorted(sn, u[i], "left")) for i in cuts] + [len(sn)]
    return (p, n) if u else ([0], [0])


@pytest.mark.parametrize("levels", [0, 1, 2, 4, 8])
def test_segments_bounds_match_their_definition_with_and_without_ties(levels: int) -> None:
    """The one-merge construction (a stable sort of the two sorted runs) against the definition, score by score,
    on 60 random cases per tie level (0: continuous scores) with empty classes among them."""
    from fairmedbench.metrics.calibration import Segments

    rng = np.random.default_rng(levels)
    for _ in range(60):
        k, m = (int(v) for v in rng.integers(0, 20, 2))
        sp, sn = ((np.sort(rng.integers(0, levels, n) / levels) if levels else np.sort(rng.random(n))) for n in (k, m))
        seg = Segments(sp, sn)
        assert (seg.p_bounds.tolist(), seg.n_bounds.tolist()) == _reference_segments(sp, sn), (sp, sn)


def test_batched_pav_matches_sklearn_row_by_row_with_zero_rows_ties_and_fractions() -> None:
    # every row fitted in one call (the rows shifted apart) must equal sklearn's fit of that row alone: rows with
    # many zero weights (the tiny-weight points), an all-zero row, fractional weights, scores tied across classes
    rng = np.random.default_rng(11)
    n = 120
    y = rng.integers(0, 2, n)
    s = np.round(rng.random(n), 1)
    w = rng.poisson(0.4, size=(8, n)).astype(float)
    w[3] = 0.0
    w[5] *= rng.random(n)
    out = brier_decomposition(y, s, w)
    assert np.isnan(out["refinement"][3]) and np.isnan(out["balanced_refinement"][3])
    for b in [0, 1, 2, 4, 5, 6, 7]:
        for balanced, prefix in ((False, ""), (True, "balanced_")):
            loss, ref = _sklearn(y, s, w[b], balanced)
            assert out[f"{prefix}refinement"][b] == pytest.approx(ref, abs=1e-12)
            assert out[f"{prefix}calibration_loss"][b] == pytest.approx(loss, abs=1e-12)


def _cal_gap_p(rng: np.random.Generator, miscalibrated: bool) -> float:
    from fairmedbench.metrics import evaluate_classification

    n = 300
    y = rng.integers(0, 2, n)
    g = np.where(rng.random(n) < 0.5, "a", "b")
    s = 1 / (1 + np.exp(-(1.5 * y - 0.75 + rng.normal(0, 1, n))))
    if miscalibrated:
        s = np.where(g == "b", s**3, s)
    rep = evaluate_classification(y, s, {"g": g}, n_boot=0, n_perm=199, seed=int(rng.integers(1 << 30))).report()
    return float(rep.tests["calibration_loss_gap"]["p_value"])


def test_calibration_loss_gap_permutation_test_size_and_power() -> None:
    # simulation against a known truth: the same score model in both groups (H0) gives p < 0.05 in about 5% of
    # 60 replicates (at most 9 of 60, a binomial(60, 0.05) upper tail of 0.2%); group b's scores cubed
    # (miscalibrated) are found in at least 80% of 20
    rng = np.random.default_rng(5)
    null = [_cal_gap_p(rng, False) for _ in range(60)]
    alt = [_cal_gap_p(rng, True) for _ in range(20)]
    assert sum(p < 0.05 for p in null) <= 9
    assert sum(p < 0.05 for p in alt) >= 16


def test_pava_kernel_loaded_from_its_file_gives_scipys_blocks() -> None:
    # the kernel is loaded from scipy's extension file (not through the scipy.optimize package): same blocks as the
    # public isotonic_regression on shifted rows with tiny weights and ties (tests/test_cli_startup.py checks that
    # evaluate then runs without the scipy.optimize package)
    from scipy.optimize import isotonic_regression

    rng = np.random.default_rng(5)
    x = np.r_[np.round(rng.random(300), 1), 2 + np.round(rng.random(200), 2)]
    w = np.where(rng.random(500) < 0.2, 1e-300, rng.poisson(2.0, 500) + rng.random(500))
    expected = isotonic_regression(x, weights=w)
    r = np.full(len(x) + 1, -1, dtype=np.intp)
    fit, _, r, n_blocks = pava_kernel()(x.copy(), w.copy(), r)
    np.testing.assert_array_equal(r[:n_blocks + 1], expected.blocks)
    np.testing.assert_array_equal(fit, expected.x)
