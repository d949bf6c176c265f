"""Bootstrap behaviour and Hypothesis properties of the classification engine."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score

from fairmedbench.metrics import GAP, OVERALL, evaluate_classification
from fairmedbench.metrics import bootstrap as bs

# ---------------------------------------------------------------- bootstrap


def _data(n=240, seed=0):
    rng = np.random.default_rng(seed)
    g = rng.choice(["a", "b"], n)
    y = rng.integers(0, 2, n)
    s = 1 / (1 + np.exp(-(rng.normal(0, 1, n) + (2 * y - 1) * np.where(g == "a", 1.2, 0.6))))
    return y, s, g


def test_point_inside_ci_and_seeded():
    y, s, g = _data()
    a = evaluate_classification(y, s, {"g": g}, n_boot=200, seed=5, min_group_size=1).report()
    for m, grp in (("auc", "a"), ("auc", OVERALL), ("auc_gap", GAP), ("ece", "b"), ("tpr", "a"),
                   ("eqodds_diff", GAP), ("auc_es", GAP), ("sauroc", "b"), ("fpr_at_tpr95", "a")):
        v, lo, hi = a.values[m][grp]
        assert lo <= v <= hi and lo < hi, (m, grp, v, lo, hi)
    b = evaluate_classification(y, s, {"g": g}, n_boot=200, seed=5, min_group_size=1).report()
    c = evaluate_classification(y, s, {"g": g}, n_boot=200, seed=6, min_group_size=1).report()
    assert a.values == b.values
    assert a.values["auc"]["a"][1:] != c.values["auc"]["a"][1:]
    # wider level -> wider interval
    w = evaluate_classification(y, s, {"g": g}, n_boot=200, seed=5, ci_level=0.99, min_group_size=1).report()
    assert w.values["auc"]["a"][1] <= a.values["auc"]["a"][1] and w.values["auc"]["a"][2] >= a.values["auc"]["a"][2]


def test_no_bootstrap_gives_nan_ci():
    y, s, g = _data(60)
    r = evaluate_classification(y, s, {"g": g}, n_boot=0).report()
    v, lo, hi = r.values["auc"]["a"]
    assert math.isfinite(v) and math.isnan(lo) and math.isnan(hi)


def test_stratified_counts_keep_each_stratum_size():
    # strata = (group, label) cells, including a group with a single positive
    sizes = [1, 7, 12, 0, 3]
    rng = bs.stable_seed(0, "task", "g")
    counts = bs.stratified_counts(rng, sizes, 500)
    for m, c in zip(sizes, counts):
        assert c.shape == (500, m)
        assert np.all(c.sum(axis=1) == m)  # every resample keeps the stratum's size
        assert np.all(c >= 0) and np.all(c == np.round(c))
    assert np.all(counts[0] == 1)  # the lone positive is in every resample
    # resampling actually varies the draws
    assert len({tuple(r) for r in counts[2]}) > 400


def test_small_group_keeps_its_positive_in_every_resample():
    # group b: 1 positive, 4 negatives -> its AUC is defined in every resample, but it is the rank of that one
    # positive, redrawn every time: the point value stays, the interval goes, with the reason and a warning
    y = np.r_[np.tile([0, 1], 20), [1, 0, 0, 0, 0]]
    s = np.r_[np.linspace(0.05, 0.95, 40), [0.6, 0.2, 0.7, 0.1, 0.3]]
    g = np.r_[["a"] * 40, ["b"] * 5]
    r = evaluate_classification(y, s, {"g": g}, n_boot=300, seed=0, min_group_size=1).report()
    v, lo, hi = r.values["auc"]["b"]
    # AUC of b is 0.75 (0.6 beats .2 .1 .3, not .7); a resample of b's negatives gives values in
    # {0, .25, .5, .75, 1}, always defined
    assert v == pytest.approx(0.75)
    assert math.isnan(lo) and math.isnan(hi)
    assert "only one positive row" in r.ci_notes["auc"]["b"]
    assert any(w.startswith("g=b: only one positive") for w in r.warnings)


def test_resample_counts_and_chunks():
    rng = np.random.default_rng(1)
    c = bs.resample_counts(rng, 5, 3)
    assert c.shape == (3, 5) and np.all(c.sum(axis=1) == 5)
    assert bs.resample_counts(rng, 0, 3).shape == (3, 0)
    spans = list(bs.chunks(2000, bs.CHUNK_CELLS // 300))
    assert spans[0][0] == 0 and spans[-1][1] == 2000
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert len(spans) == math.ceil(2000 / 300)


def test_percentile_ci_ignores_nan():
    x = np.r_[np.arange(1, 101, dtype=float), [np.nan] * 50]
    lo, hi = bs.percentile_ci(x, 0.9)
    assert lo == pytest.approx(np.percentile(np.arange(1, 101), 5))
    assert hi == pytest.approx(np.percentile(np.arange(1, 101), 95))


def test_bootstrap_in_several_chunks(monkeypatch):
    # resamples drawn in several chunks (large data) are reproducible and agree with one chunk up to noise
    y, s, g = _data(100, seed=3)
    one = evaluate_classification(y, s, {"g": g}, n_boot=120, seed=2, min_group_size=1).report()
    monkeypatch.setattr(bs, "CHUNK_CELLS", 100 * 40)  # 40 resamples per chunk -> 3 chunks
    assert len(list(bs.chunks(120, 100))) == 3
    many = evaluate_classification(y, s, {"g": g}, n_boot=120, seed=2, min_group_size=1).report()
    again = evaluate_classification(y, s, {"g": g}, n_boot=120, seed=2, min_group_size=1).report()
    assert many.values == again.values
    for k in (1, 2):
        assert abs(many.values["auc"]["a"][k] - one.values["auc"]["a"][k]) < 0.1


# ---------------------------------------------------------------- Hypothesis properties

SCORES = st.sampled_from([0.0, 0.1, 0.25, 0.3, 0.5, 0.5, 0.6, 0.75, 0.9, 1.0])


@st.composite
def datasets(draw, min_n=6, max_n=40):
    n = draw(st.integers(min_n, max_n))
    y = np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    s = np.array(draw(st.lists(SCORES, min_size=n, max_size=n)))
    g = np.array(draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=n, max_size=n)))
    return y, s, g


def run(y, s, g, **kw):
    return evaluate_classification(y, s, {"g": g}, n_boot=0, min_group_size=1, **kw).report()


def close(a, b, tol=1e-12):
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol


@settings(max_examples=50, deadline=None)
@given(datasets())
def test_gaps_nonnegative_and_es_below_auc(d):
    y, s, g = d
    r = run(y, s, g)
    for m, per in r.values.items():
        if GAP in per and (m.endswith("_gap") or m in ("eqodds_diff", "eqodds_mean", "eqopp_diff", "dp_diff")):
            v = per[GAP][0]
            assert math.isnan(v) or v >= 0, m
    es, auc = r.value("auc_es", GAP), r.value("auc")
    if not math.isnan(es):
        assert es <= auc + 1e-12
        assert r.value("n_groups_auc", GAP) >= 2


@settings(max_examples=50, deadline=None)
@given(datasets())
def test_auc_label_flip_and_score_negation(d):
    y, s, g = d
    base = run(y, s, g)
    flip = run(1 - y, s, g)
    neg = run(y, 1 - s, g)
    both = run(1 - y, 1 - s, g)
    for grp in [OVERALL, *base.groups]:
        a = base.value("auc", grp)
        assert close(flip.value("auc", grp), 1 - a)
        assert close(neg.value("auc", grp), 1 - a)
        assert close(both.value("auc", grp), a)
    # ranking gaps are unchanged by flipping the labels
    assert close(flip.value("auc_gap", GAP), base.value("auc_gap", GAP))


@settings(max_examples=50, deadline=None)
@given(datasets(), st.randoms(use_true_random=False))
def test_permutation_invariance(d, rnd):
    y, s, g = d
    perm = list(range(len(y)))
    rnd.shuffle(perm)
    a = run(y, s, g)
    b = run(y[perm], s[perm], g[perm])
    assert a.groups == b.groups and a.counts == b.counts and a.skipped == b.skipped
    assert a.thresholds == b.thresholds
    for m, per in a.values.items():
        for grp, (v, _, _) in per.items():
            assert close(b.values[m][grp][0], v, 1e-9), (m, grp)


@settings(max_examples=50, deadline=None)
@given(datasets())
def test_group_relabeling_invariance(d):
    y, s, g = d
    rename = {"a": "zeta", "b": "alpha", "c": "mid"}
    a = run(y, s, g)
    b = run(y, s, np.array([rename[x] for x in g]))
    for m, per in a.values.items():
        if GAP in per and m.endswith("_diff"):
            # signed two-group differences (second - first group) flip sign when renaming swaps the order
            assert close(abs(b.values[m][GAP][0]), abs(per[GAP][0])), m
        elif GAP in per:
            assert close(b.values[m][GAP][0], per[GAP][0]), m
        for grp in a.groups:
            if grp in per:
                assert close(b.values[m][rename[grp]][0], per[grp][0]), (m, grp)
    if "auc" in a.worst_group:
        assert b.worst_group["auc"] == rename[a.worst_group["auc"]] or close(
            a.value("auc", a.worst_group["auc"]), b.value("auc", b.worst_group["auc"]))


def _reference(y, s, g, t=0.5, tpr_x=0.95, fpr_f=0.2):
    """Direct, loop-based definitions of fairmedbench/metrics/specs.py for every group (slow, obvious)."""
    nan = float("nan")
    cand = np.r_[np.unique(s), np.inf]

    def rates(yy, ss, thr):
        p, n = (yy == 1).sum(), (yy == 0).sum()
        tp, fp = ((ss >= thr) & (yy == 1)).sum(), ((ss >= thr) & (yy == 0)).sum()
        return (tp / p if p else nan), (fp / n if n else nan)

    # global operating points on the whole population
    t_tpr = max(c for c in cand if rates(y, s, c)[0] >= tpr_x)
    t_fpr = min(c for c in cand if rates(y, s, c)[1] <= fpr_f)
    out = {}
    for grp in [OVERALL, *sorted(set(g))]:
        m = np.ones(len(y), bool) if grp == OVERALL else g == grp
        yy, ss = y[m], s[m]
        pos, neg = ss[yy == 1], ss[yy == 0]
        both = len(pos) and len(neg)
        auc = np.mean([(a > b) + 0.5 * (a == b) for a in pos for b in neg]) if both else nan
        tpr, fpr = rates(yy, ss, t)
        jmax = max(rates(yy, ss, c)[0] - rates(yy, ss, c)[1] for c in cand) if both else nan
        b = np.minimum(np.floor(ss * 15), 14)
        ece = sum(np.mean(b == k) * abs(ss[b == k].mean() - yy[b == k].mean()) for k in range(15) if np.any(b == k))
        tp_f, fp_f = rates(yy, ss, t_fpr)
        pred = ss >= t
        tp, fp, fn = np.sum(pred & (yy == 1)), np.sum(pred & (yy == 0)), np.sum(~pred & (yy == 1))
        v = {"auc": auc, "tpr": tpr, "fpr": fpr, "youden_j_max": jmax, "ece": ece,
             "selection_rate": np.mean(ss >= t), "acc": np.mean((ss >= t) == (yy == 1)),
             "fpr_at_tpr95": rates(yy, ss, t_tpr)[1], "tpr_at_fpr20": tp_f, "fpr_at_fpr20": fp_f,
             "ap": average_precision_score(yy, ss) if both else nan,
             "ppv": tp / (tp + fp) if tp + fp else nan,
             "f1": 2 * tp / (2 * tp + fp + fn) if len(pos) else nan,
             "brier": np.mean((ss - yy) ** 2), "tnr": 1 - fpr}
        if grp != OVERALL:
            allpos = s[y == 1]
            v["sauroc"] = (np.mean([(a > b_) + 0.5 * (a == b_) for a in allpos for b_ in neg])
                           if len(allpos) and len(neg) else nan)
        out[grp] = v
    return out


@settings(max_examples=50, deadline=None)
@given(datasets(min_n=4, max_n=25))
def test_engine_equals_loop_reference(d):
    y, s, g = d
    if y.min() == y.max():
        y = y.copy()
        y[0] = 1 - y[0]
    r = run(y, s, g)
    ref = _reference(y, s, g)
    for grp, vals in ref.items():
        for m, v in vals.items():
            assert close(r.value(m, grp), float(v), 1e-9), (m, grp, r.value(m, grp), v)
