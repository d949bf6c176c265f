"""Cross-checks of the metric engine against independent libraries (test-only dependencies).

sklearn (AUC, AP, Brier), fairlearn MetricFrame (rates and differences, same group set), netcal and
torchmetrics (ECE, scores away from bin edges), fairmedfm (its compatibility profile), scipy (skewness),
and the vectorised bootstrap against a naive per-resample sklearn computation on the same resample counts.
All to 1e-9 (the engine works in float64 with cumulative sums; differences are rounding only).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.stats import skew
from sklearn.metrics import average_precision_score, brier_score_loss, roc_auc_score

from fairmedbench.errors import InputError
from fairmedbench.metrics import GAP, OVERALL, evaluate_classification
from fairmedbench.metrics import bootstrap as bs
from fairmedbench.metrics.classification import _evaluate_weights, _Names, _plan, equal_width_binner
from fairmedbench.metrics.groups import make_attribute
from fairmedbench.metrics.seg_fairness import evaluate_segmentation
from fairmedbench.metrics.thresholds import Threshold

TOL = 1e-9


def data(n=360, seed=0, decimals=2, groups=("a", "b", "c")):
    """Scores rounded to `decimals` (many ties, also across labels) with a group-dependent signal."""
    rng = np.random.default_rng(seed)
    g = rng.choice(list(groups), n)
    y = rng.integers(0, 2, n)
    shift = np.select([g == groups[0], g == groups[1]], [1.2, 0.7], 0.3)
    s = 1 / (1 + np.exp(-(rng.normal(0, 1, n) + shift * (2 * y - 1))))
    if decimals is not None:
        s = np.round(s, decimals)
    return y, s, g


@pytest.fixture(scope="module")
def cls():
    y, s, g = data()
    r = evaluate_classification(y, s, {"g": g}, n_boot=0, min_group_size=1).report()
    return y, s, g, r


# ---------------------------------------------------------------- sklearn


def test_sklearn_auc_ap_brier_per_group(cls):
    y, s, g, r = cls
    for grp in (OVERALL, "a", "b", "c"):
        m = np.ones(len(y), bool) if grp == OVERALL else g == grp
        yy, ss = y[m], s[m]
        assert abs(r.value("auc", grp) - roc_auc_score(yy, ss)) < TOL
        assert abs(r.value("ap", grp) - average_precision_score(yy, ss)) < TOL
        assert abs(r.value("brier", grp) - brier_score_loss(yy, ss)) < TOL
        assert abs(r.value("brier_pos", grp) - brier_score_loss(yy[yy == 1], ss[yy == 1], labels=[0, 1])) < TOL
        assert abs(r.value("brier_neg", grp) - brier_score_loss(yy[yy == 0], ss[yy == 0], labels=[0, 1])) < TOL


def test_sklearn_sauroc(cls):
    y, s, g, r = cls
    for grp in ("a", "b", "c"):
        m = (y == 1) | (g == grp)  # all positives and this group's negatives
        assert abs(r.value("sauroc", grp) - roc_auc_score(y[m], s[m])) < TOL


# ---------------------------------------------------------------- fairlearn


def test_fairlearn_rates_and_differences_same_groups(cls):
    from fairlearn.metrics import (
        MetricFrame,
        demographic_parity_difference,
        equalized_odds_difference,
        false_positive_rate,
        selection_rate,
        true_positive_rate,
    )

    y, s, g, r = cls
    pred = (s >= 0.5).astype(int)
    mf = MetricFrame(metrics={"tpr": true_positive_rate, "fpr": false_positive_rate, "selection_rate": selection_rate},
                     y_true=y, y_pred=pred, sensitive_features=g)
    assert sorted(mf.by_group.index) == sorted(r.groups)
    for grp in r.groups:
        for m in ("tpr", "fpr", "selection_rate"):
            assert abs(mf.by_group.loc[grp, m] - r.value(m, grp)) < TOL
    diff = mf.difference()
    assert abs(diff["tpr"] - r.value("tpr_gap", GAP)) < TOL
    assert abs(diff["fpr"] - r.value("fpr_gap", GAP)) < TOL
    assert abs(diff["selection_rate"] - r.value("dp_diff", GAP)) < TOL
    assert abs(equalized_odds_difference(y, pred, sensitive_features=g) - r.value("eqodds_diff", GAP)) < TOL
    assert abs(demographic_parity_difference(y, pred, sensitive_features=g) - r.value("dp_diff", GAP)) < TOL


def test_fairlearn_hides_undefined_groups_we_report_them():
    from fairlearn.metrics import MetricFrame, true_positive_rate

    y, s, g = data(n=200, seed=4, groups=("a", "b", "c"))
    y = y.copy()
    y[g == "c"] = 0  # group c has no positives: TPR and AUC undefined there
    r = evaluate_classification(y, s, {"g": g}, n_boot=0, min_group_size=1).report()
    assert "c" in r.skipped
    assert math.isnan(r.value("tpr", "c")) and math.isnan(r.value("auc", "c"))

    def auc_or_nan(yt, ys):
        return roc_auc_score(yt, ys) if len(np.unique(yt)) == 2 else float("nan")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mf_auc = MetricFrame(metrics=auc_or_nan, y_true=y, y_pred=s, sensitive_features=g)
        mf_tpr = MetricFrame(metrics=true_positive_rate, y_true=y, y_pred=(s >= 0.5).astype(int),
                             sensitive_features=g)
    # fairlearn: AUC of c is NaN and difference() silently drops it (no record that c was left out) ...
    assert math.isnan(mf_auc.by_group["c"])
    assert abs(mf_auc.difference() - r.value("auc_gap", GAP)) < TOL
    # ... and TPR of c becomes 0 (confusion matrix normalised with 0/0 -> 0), which enters its difference
    assert mf_tpr.by_group["c"] == 0.0
    assert mf_tpr.difference() == pytest.approx(max(r.value("tpr", "a"), r.value("tpr", "b")))
    assert mf_tpr.difference() > r.value("tpr_gap", GAP) + 0.3
    # we: the same three groups, c reported as skipped with a reason, gap over a and b only
    assert sorted(mf_tpr.by_group.index) == sorted(r.groups)
    assert r.value("tpr_gap", GAP) == pytest.approx(abs(r.value("tpr", "a") - r.value("tpr", "b")))


# ---------------------------------------------------------------- ECE


def away_from_edges(s, bins=15, eps=1e-6):
    k = np.round(s * bins)
    near = np.abs(s * bins - k) < eps
    return np.where(near, np.clip(s + 1e-4, 0, 1 - 1e-4), s)


def test_ece_netcal_and_torchmetrics():
    import torch
    from netcal.metrics import ECE
    from torchmetrics.functional.classification import binary_calibration_error

    y, s, g = data(n=500, seed=7, decimals=None)
    s = away_from_edges(s)
    r = evaluate_classification(y, s, {"g": g}, n_boot=0, min_group_size=1).report()
    for grp in (OVERALL, "a", "b", "c"):
        m = np.ones(len(y), bool) if grp == OVERALL else g == grp
        nc = ECE(bins=15).measure(s[m], y[m])
        tm = float(binary_calibration_error(torch.tensor(s[m]), torch.tensor(y[m]), n_bins=15, norm="l1"))
        assert abs(r.value("ece", grp) - nc) < TOL
        assert abs(r.value("ece", grp) - tm) < TOL


# ---------------------------------------------------------------- fairmedfm profile


def _fmfm_eval(y, s, g):
    import fairmedfm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = fairmedfm.evaluate(y, s, {"g": g})
    return rep.summary.loc["g"], rep.by_group.loc["g"]


@pytest.mark.parametrize("missing", [False, True])
def test_fairmedfm_classification_summary(missing):
    y, s, g = data(n=400, seed=2)
    g = g.astype(object)
    if missing:
        # extra positives with low scores and no attribute: they would move a best-F1 threshold taken on all
        # rows; FairMedFM (and our profile) take it on the rows evaluated for the attribute
        y = np.r_[y, np.ones(60, int)]
        s = np.r_[s, np.full(60, 0.12)]
        g = np.r_[g, [None] * 60]
    summary, by_group = _fmfm_eval(y, s, g)
    res = evaluate_classification(y, s, {"g": g}, profile="fairmedfm", n_boot=0, min_group_size=1)
    r = res.report()
    assert r.thresholds["operating"]["comparator"] == ">"
    assert res.meta["profile"] == "fairmedfm"
    pairs = {"eod": ("eod", GAP), "auc-gap": ("auc_gap", GAP), "acc-gap": ("acc_gap", GAP),
             "ece-gap": ("ece_gap", GAP), "worst-auc": ("worst_group_auc", GAP), "eo": ("tpr_gap", GAP),
             "overall-ece": ("ece", OVERALL), "overall-acc": ("acc", OVERALL), "overall-auc": ("auc", OVERALL)}
    for theirs, (ours, grp) in pairs.items():
        assert abs(summary[theirs] - r.value(ours, grp)) < TOL, theirs
    for grp in r.groups:
        assert abs(by_group.loc[grp, "ece"] - r.value("ece", grp)) < TOL
        assert abs(by_group.loc[grp, "tpr@best_f1"] - r.value("tpr", grp)) < TOL
        assert abs(by_group.loc[grp, "tnr@best_f1"] - r.value("tnr", grp)) < TOL


@pytest.mark.parametrize("only", [0, 1])
def test_fairmedfm_one_class_group(only):
    # FairMedFM leaves a group with one label out of EVERY gap (accuracy, ECE and TPR/TNR included), and so does
    # its profile here; the group keeps its own per-group values and its skip reason.
    y, s, g = data(n=300, seed=1)
    y = y.copy()
    y[g == "c"] = only
    summary, _ = _fmfm_eval(y, s, g)
    r = evaluate_classification(y, s, {"g": g}, profile="fairmedfm", n_boot=0, min_group_size=1).report()
    assert "c" in r.skipped
    pairs = {"eod": "eod", "auc-gap": "auc_gap", "eo": "tpr_gap", "worst-auc": "worst_group_auc",
             "acc-gap": "acc_gap", "ece-gap": "ece_gap"}
    for theirs, ours in pairs.items():
        assert abs(summary[theirs] - r.value(ours, GAP)) < TOL, theirs
    # every other gap of the engine is over the two-class groups a and b as well
    for m in r.values:
        if m.endswith("_gap"):
            base = m[:-len("_gap")]
            two = [r.value(base, "a"), r.value(base, "b")]
            want = max(two) - min(two) if all(np.isfinite(two)) else np.nan
            assert r.value(m, GAP) == pytest.approx(want, abs=TOL, nan_ok=True), m


def test_fairmedfm_issue_minimal_case():
    # issue 11: a, b with both labels, c = two negatives scored 0.9 / 0.95. FairMedFM's best-F1 threshold on all
    # rows is 0.6 (F1 4/5 at score >= 0.6), applied as score > 0.6: a predicts [0,0,1,1] (acc 1, TPR 1, TNR 1),
    # b [0,0,1,0] (acc 0.75, TPR 0.5, TNR 1), c [1,1] (acc 0, TNR 0). Over a and b only: acc gap 0.25, TPR gap
    # 0.5, TNR gap 0, eod = 1 - (0.5 + 0)/2 = 0.75; with c in, the acc gap would be 1.0 and the TNR gap 1.0.
    y = np.array([0, 0, 1, 1, 0, 0, 1, 1, 0, 0])
    s = np.array([0.1, 0.2, 0.8, 0.9, 0.1, 0.3, 0.7, 0.6, 0.9, 0.95])
    g = np.array(["a"] * 4 + ["b"] * 4 + ["c"] * 2)
    summary, _ = _fmfm_eval(y, s, g)
    r = evaluate_classification(y, s, {"g": g}, profile="fairmedfm", n_boot=0, min_group_size=1).report()
    assert r.thresholds["operating"]["value"] == pytest.approx(0.6)
    assert (r.value("acc", "a"), r.value("acc", "b"), r.value("acc", "c")) == (1.0, 0.75, 0.0)
    assert r.value("acc_gap", GAP) == pytest.approx(0.25) == pytest.approx(summary["acc-gap"])
    assert r.value("tpr_gap", GAP) == pytest.approx(0.5) == pytest.approx(summary["eo"])
    assert r.value("tnr_gap", GAP) == pytest.approx(0.0) and r.value("fpr_gap", GAP) == pytest.approx(0.0)
    assert r.value("eod", GAP) == pytest.approx(0.75) == pytest.approx(summary["eod"])
    d = evaluate_classification(y, s, {"g": g}, threshold="fixed:0.61", n_boot=0, min_group_size=1).report()
    assert d.value("acc_gap", GAP) == pytest.approx(1.0)  # the default profile keeps c in the accuracy gap
    assert d.value("tnr_gap", GAP) == pytest.approx(1.0)


def test_fairmedfm_two_groups_one_class_has_no_diff():
    # with two groups of which one has one label there is nothing to compare under fairmedfm
    y = np.array([0, 1, 0, 1, 0, 0])
    s = np.array([0.2, 0.7, 0.4, 0.6, 0.9, 0.1])
    g = np.array(["a", "a", "a", "a", "b", "b"])
    r = evaluate_classification(y, s, {"g": g}, profile="fairmedfm", n_boot=0, min_group_size=1).report()
    assert np.isnan(r.value("acc_gap", GAP)) and np.isnan(r.value("ece_diff", GAP))
    assert "fewer than two groups" in r.gap_notes["acc_gap"]


def test_fairmedfm_profile_refuses_a_threshold():
    y, s, g = data(n=100, seed=3)
    with pytest.raises(InputError, match="chooses its own threshold"):
        evaluate_classification(y, s, {"g": g}, profile="fairmedfm", threshold="fixed:0.5", n_boot=0)


def test_fairmedfm_threshold_rule_and_comparator():
    from fairmedfm.metrics import find_threshold

    y, s, g = data(n=300, seed=9)
    r = evaluate_classification(y, s, {"g": g}, profile="fairmedfm", n_boot=0).report()
    t = find_threshold(s, y)
    assert r.thresholds["operating"]["value"] == pytest.approx(t, abs=0)
    # '>' : positives scored exactly t count as negative predictions (and this data has some)
    assert abs(r.value("tpr") - np.mean(s[y == 1] > t)) < TOL
    assert np.mean(s[y == 1] > t) < np.mean(s[y == 1] >= t)


def test_fairmedfm_segmentation():
    import fairmedfm

    rng = np.random.default_rng(5)
    g = rng.choice(["x", "y", "z"], 150)
    d = np.clip(rng.beta(8, 2, 150) - 0.1 * (g == "z"), 0, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = fairmedfm.evaluate_segmentation({"g": g}, dice=d).summary.loc["g"]
    r = evaluate_segmentation(d, {"g": g}, profile="fairmedfm", n_boot=0).report()
    assert abs(theirs["es_dice"] - r.value("es_dsc", GAP)) < TOL
    assert abs(theirs["skewness_dice"] - r.value("dsc_skew_ratio", GAP)) < TOL
    assert abs(theirs["delta_dice"] - r.value("dsc_gap", GAP)) < TOL
    assert abs(theirs["min_dice"] - r.value("worst_group_dsc", GAP)) < TOL
    assert abs(theirs["mean_dice"] - r.value("dsc")) < TOL


def test_scipy_skew_per_group():
    rng = np.random.default_rng(6)
    g = rng.choice(["x", "y"], 80)
    d = rng.beta(5, 2, 80)
    r = evaluate_segmentation(d, {"g": g}, n_boot=0).report()
    assert abs(r.value("dsc_sample_skew") - skew(d)) < TOL
    for grp in ("x", "y"):
        assert abs(r.value("dsc_sample_skew", grp) - skew(d[g == grp])) < TOL


# ---------------------------------------------------------------- bootstrap vs naive per-resample sklearn


def ece_ref(y, s, bins=15):
    """Plain per-bin loop with the exact rule bin = min(floor(p*B), B-1)."""
    b = np.minimum(np.floor(s * bins), bins - 1)
    return sum(np.mean(b == k) * abs(s[b == k].mean() - y[b == k].mean()) for k in range(bins) if np.any(b == k))


def _sorted_members(y, s, codes, n_groups):
    """Original indices of each group's positives / negatives in the order the engine stores them."""
    order = np.argsort(s, kind="mergesort")
    pos, neg = order[y[order] == 1], order[y[order] == 0]
    return [pos[codes[pos] == k] for k in range(n_groups)], [neg[codes[neg] == k] for k in range(n_groups)]


def test_vectorised_resample_equals_naive_sklearn():
    y, s, g = data(n=150, seed=11)
    attr = make_attribute("g", g)
    thr = Threshold(0.5, "fixed:0.5")
    plan = _plan(y, s, attr.codes, list(attr.groups), thr, equal_width_binner(15))
    pos_idx, neg_idx = _sorted_members(y, s, attr.codes, len(attr.groups))
    rng = np.random.default_rng(0)
    b = 4
    wps = [bs.resample_counts(rng, len(i), b) for i in pos_idx]
    wns = [bs.resample_counts(rng, len(i), b) for i in neg_idx]
    wp_all, wn_all = np.zeros((b, len(plan.pop.sp))), np.zeros((b, len(plan.pop.sn)))
    for sl, wp, sn, wn in zip(plan.slot_p, wps, plan.slot_n, wns):
        wp_all[:, sl], wn_all[:, sn] = wp, wn
    res = _evaluate_weights(plan, b, lambda i: (wps[i], wns[i]), (wp_all, wn_all), _Names(0.95, 0.2))
    for r_ in range(b):
        reps = {k: np.r_[np.repeat(pos_idx[k], wps[k][r_].astype(int)), np.repeat(neg_idx[k], wns[k][r_].astype(int))]
                for k in range(len(attr.groups))}
        all_rep = np.concatenate(list(reps.values()))
        for k, grp in enumerate(attr.groups):
            i = reps[k]
            yy, ss = y[i], s[i]
            assert abs(res["auc"][grp][r_] - roc_auc_score(yy, ss)) < TOL
            assert abs(res["ap"][grp][r_] - average_precision_score(yy, ss)) < TOL
            assert abs(res["ece"][grp][r_] - ece_ref(yy, ss)) < TOL
            assert abs(res["tpr"][grp][r_] - np.mean(ss[yy == 1] >= 0.5)) < TOL
            m = (y[all_rep] == 1) | (attr.codes[all_rep] == k)
            assert abs(res["sauroc"][grp][r_] - roc_auc_score(y[all_rep][m], s[all_rep][m])) < TOL
        assert abs(res["auc"][OVERALL][r_] - roc_auc_score(y[all_rep], s[all_rep])) < TOL
        # global operating points re-chosen inside the resample, rates reported per group
        ya, sa = y[all_rep], s[all_rep]
        cand = np.r_[np.unique(sa), np.inf]
        t_tpr = max(c for c in cand if np.mean(sa[ya == 1] >= c) >= 0.95)
        t_fpr = min(c for c in cand if np.mean(sa[ya == 0] >= c) <= 0.2)
        for k, grp in enumerate(attr.groups):
            i = reps[k]
            yy, ss = y[i], s[i]
            assert abs(res["fpr_at_tpr95"][grp][r_] - np.mean(ss[yy == 0] >= t_tpr)) < TOL
            assert abs(res["tpr_at_fpr20"][grp][r_] - np.mean(ss[yy == 1] >= t_fpr)) < TOL
            assert abs(res["fpr_at_fpr20"][grp][r_] - np.mean(ss[yy == 0] >= t_fpr)) < TOL


def test_bootstrap_ci_equals_naive_percentiles():
    # replay the engine's generator: one chunk, positives of each group then negatives of each group
    y, s, g = data(n=120, seed=12)
    n_boot, seed = 200, 3
    res = evaluate_classification(y, s, {"g": g}, n_boot=n_boot, seed=seed, min_group_size=1)
    rep = res.report()
    attr = make_attribute("g", g)
    pos_idx, neg_idx = _sorted_members(y, s, attr.codes, len(attr.groups))
    rng = bs.stable_seed(seed, "task", "g")
    wps = [bs.resample_counts(rng, len(i), n_boot) for i in pos_idx]
    wns = [bs.resample_counts(rng, len(i), n_boot) for i in neg_idx]
    k = attr.groups.index("a")
    naive = np.array([
        roc_auc_score(y[i], s[i]) for i in (
            np.r_[np.repeat(pos_idx[k], wps[k][r].astype(int)), np.repeat(neg_idx[k], wns[k][r].astype(int))]
            for r in range(n_boot))])
    lo, hi = np.percentile(naive, [2.5, 97.5])
    v, clo, chi = rep.values["auc"]["a"]
    assert abs(clo - lo) < TOL and abs(chi - hi) < TOL
    assert clo <= v <= chi
