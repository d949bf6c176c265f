"""Patient-level resampling and permutation tests of the metric engine (fairmedbench/metrics/bootstrap.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from fairmedbench.metrics import bootstrap as bs
from fairmedbench.metrics import evaluate_classification
from fairmedbench.metrics.multiclass import evaluate_multiclass
from fairmedbench.metrics.result import GAP
from fairmedbench.metrics.seg_fairness import evaluate_segmentation


def _clustered(n_patients: int = 120, per_patient: int = 8, seed: int = 0):
    """Patients with many near-identical images: a patient-level random effect dominates the score."""
    rng = np.random.default_rng(seed)
    pid = np.repeat(np.arange(n_patients), per_patient)
    sex = np.repeat(rng.choice(["F", "M"], n_patients), per_patient)
    y = np.repeat(rng.integers(0, 2, n_patients), per_patient)
    effect = np.repeat(rng.normal(0.0, 1.0, n_patients), per_patient)
    s = 1 / (1 + np.exp(-(y + effect + rng.normal(0, 0.2, pid.size) - 0.5)))
    return y, s, sex, pid


def _width(res, metric: str) -> float:
    v = res.report().values[metric][GAP]
    return v[2] - v[1]


def test_patients_with_many_images_widen_the_interval():
    # a hand-built file: 120 patients x 8 images whose scores barely differ within a patient. Resampling rows
    # treats 960 images as independent; resampling patients sees 120 independent units: a wider interval.
    y, s, sex, pid = _clustered()
    rows = evaluate_classification(y, s, {"sex": sex}, n_boot=400, n_perm=0)
    patients = evaluate_classification(y, s, {"sex": sex}, n_boot=400, n_perm=0, patient_ids=pid)
    assert _width(patients, "auc_diff") > 2.0 * _width(rows, "auc_diff")
    rep = patients.report()
    assert rep.resampling["unit"] == "patient"
    assert rep.resampling["n_clusters"]["__overall__"] == 120
    assert rep.resampling["n_clusters"]["F"] + rep.resampling["n_clusters"]["M"] == 120
    assert rows.report().resampling == {"unit": "row", "n_clusters": {"__overall__": 960, **{
        g: int((sex == g).sum()) for g in ("F", "M")}}}
    assert "patient" in patients.meta["resampling_unit"] and "row" in rows.meta["resampling_unit"]


def test_row_permutation_on_clustered_null_is_overconfident_patient_permutation_is_not():
    # no sex effect at all, but images of a patient are alike: moving single images between groups breaks that
    # structure and makes chance look like a disparity (measured: 8 of 20 nulls p < 0.05); moving whole
    # patients does not (0 of 20)
    rows, patients = [], []
    for seed in range(20):
        y, s, sex, pid = _clustered(60, 6, seed)
        kw = dict(n_boot=0, n_perm=99, seed=seed)
        rows.append(evaluate_classification(y, s, {"sex": sex}, **kw).report().tests["auc_diff"]["p_value"])
        patients.append(evaluate_classification(y, s, {"sex": sex}, patient_ids=pid, **kw).report()
                        .tests["auc_diff"]["p_value"])
    assert (np.array(rows) < 0.05).sum() >= 5
    assert (np.array(patients) < 0.05).sum() <= 3


def _same_strings(res_a, res_b) -> None:
    a, b = res_a.to_dict()["reports"], res_b.to_dict()["reports"]
    for ra, rb in zip(a, b):
        assert ra["metrics"] == rb["metrics"]
        assert ra["tests"] == rb["tests"]
        assert ra["resampling"]["n_clusters"] == rb["resampling"]["n_clusters"]


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(24, 90))
def test_one_row_per_patient_is_exactly_the_row_bootstrap(seed: int, n: int):
    # property: patient ids that are all distinct (in any order) give the row bootstrap's intervals and the row
    # permutation test's p-values, number for number, in all three engines
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    y[:2] = [0, 1]
    s = rng.random(n)
    g = rng.choice(["a", "b", "c"], n)
    pid = rng.permutation(n).astype(str)
    kw = dict(n_boot=60, n_perm=40, seed=seed, min_group_size=1)
    _same_strings(evaluate_classification(y, s, {"g": g}, **kw),
                  evaluate_classification(y, s, {"g": g}, patient_ids=pid, **kw))
    _same_strings(evaluate_segmentation(s, {"g": g}, **kw), evaluate_segmentation(s, {"g": g}, patient_ids=pid, **kw))
    yk = rng.integers(0, 3, n)
    p = rng.dirichlet([1, 1, 1], n)
    _same_strings(evaluate_multiclass(yk, p, {"g": g}, **kw), evaluate_multiclass(yk, p, {"g": g}, patient_ids=pid,
                                                                                   **kw))


def test_a_patient_in_two_groups_is_one_unit_per_group():
    # follow-ups put patients p1, p3 and p4 in both age bins: one unit in each (<50: p1 p3 p4; >=50: p1 p2 p3 p4)
    y = np.array([0, 1, 0, 1, 0, 1, 1, 0])
    s = np.array([.1, .9, .2, .8, .3, .7, .6, .4])
    age = np.array([30, 30, 70, 70, 30, 70, 30, 70])
    pid = np.array(["p1", "p1", "p1", "p2", "p3", "p3", "p4", "p4"])
    rep = evaluate_classification(y, s, {"age": age}, bins={"age": [0, 50, 100]}, patient_ids=pid, n_boot=50,
                                  n_perm=50, min_group_size=1).report()
    assert rep.resampling["n_clusters"] == {"__overall__": 7, "<50": 3, ">=50": 4}


def test_units_missing_patient_id_is_its_own_unit():
    units = bs.make_units(np.array([0, 0, 1, 1]), np.array(["a", None, "a", float("nan")], dtype=object))
    # 'a' in group 0 and 'a' in group 1 are two units; each missing id is a unit of its own
    assert units.kind == "patient" and units.n_units == 4


def test_permutation_p_by_hand_on_four_samples():
    # DSC 1.0, 0.9 in group a; 0.1, 0.2 in group b. Under H0 every split of the four values into two pairs is
    # equally likely: {1.0,0.9|0.1,0.2} and its mirror give the observed gap 0.8, the other 4 of 6 splits give
    # 0.0 or 0.2 ... so P(gap >= 0.8) = 2/6 = 1/3, and the diff's two-sided p is the same.
    d = np.array([1.0, 0.9, 0.1, 0.2])
    g = np.array(["a", "a", "b", "b"])
    rep = evaluate_segmentation(d, {"g": g}, n_boot=0, n_perm=20_000, min_group_size=1).report()
    assert rep.values["dsc_gap"][GAP][0] == pytest.approx(0.8)
    assert rep.tests["dsc_gap"]["p_value"] == pytest.approx(1 / 3, abs=0.015)
    assert rep.tests["dsc_diff"]["p_value"] == pytest.approx(1 / 3, abs=0.015)
    assert rep.tests["dsc_gap"]["alternative"] == "greater"
    assert rep.tests["dsc_diff"]["alternative"] == "two-sided"


def test_permutation_p_matches_scipy_permutation_test():
    # the difference of group mean DSC: our permutation p against scipy.stats.permutation_test (independent
    # samples, two-sided), both with many resamples
    rng = np.random.default_rng(5)
    a, b = rng.beta(8, 2, 40), rng.beta(7, 2, 50)
    d = np.r_[a, b]
    g = np.r_[["a"] * 40, ["b"] * 50]
    ours = evaluate_segmentation(d, {"g": g}, n_boot=0, n_perm=5000).report().tests["dsc_diff"]["p_value"]
    ref = sps.permutation_test((b, a), lambda x, y: np.mean(x) - np.mean(y), permutation_type="independent",
                               n_resamples=20_000, alternative="two-sided", random_state=1).pvalue
    assert ours == pytest.approx(ref, abs=0.03)


def _null_p(seed: int, n_perm: int) -> float:
    rng = np.random.default_rng(seed)
    n = 200
    y = rng.integers(0, 2, n)
    s = np.clip(0.35 * y + 0.65 * rng.random(n), 0, 1)
    g = rng.choice(["F", "M"], n)  # identical groups: the label is exchangeable
    return evaluate_classification(y, s, {"sex": g}, n_boot=0, n_perm=n_perm, seed=seed).report() \
        .tests["auc_gap"]["p_value"]


def test_null_p_values_are_not_too_small():
    # under identical groups p is (super-)uniform: few small p-values (a quick version of the slow KS test)
    p = np.array([_null_p(seed, 199) for seed in range(60)])
    assert (p < 0.05).mean() < 0.15
    assert p.min() > 0 and p.max() <= 1


@pytest.mark.slow
def test_null_p_values_are_uniform_ks():
    # 500 simulated nulls: the permutation p of auc_gap is uniform (discrete: p takes values k/(n_perm+1))
    p = np.array([_null_p(seed, 499) for seed in range(500)])
    assert sps.kstest(p, "uniform").pvalue > 0.01


def test_injected_gap_is_larger_than_chance_and_bias_corrected_is_below_raw():
    rng = np.random.default_rng(2)
    n = 600
    sex = rng.choice(["F", "M"], n)
    y = rng.integers(0, 2, n)
    sep = np.where(sex == "M", 1.5, 0.3)
    s = 1 / (1 + np.exp(-(sep * (2 * y - 1) + rng.normal(0, 1, n))))
    rep = evaluate_classification(y, s, {"sex": sex}, n_boot=300, n_perm=300).report()
    t = rep.tests["auc_gap"]
    assert t["p_value"] < 0.01 and t["n_perm"] == 300
    raw = rep.values["auc_gap"][GAP][0]
    assert 0 <= t["bias_corrected"] <= raw + 0.02
    d = rep.to_dict()["metrics"]["auc_gap"][GAP]
    assert d["p_value"] == t["p_value"] and d["p_adjusted"] >= d["p_value"]


def test_gap_under_identical_groups_is_positive_and_its_bias_correction_lowers_it():
    # max - min of noisy estimates is never below 0: the raw gap sits above 0 even with identical groups; the
    # bootstrap bias correction pulls it down on average (the test, not the CI, says "not larger than chance")
    raws, corrected = [], []
    for seed in range(15):
        rng = np.random.default_rng(100 + seed)
        d = rng.beta(5, 2, 90)
        g = rng.choice(["a", "b", "c"], 90)
        rep = evaluate_segmentation(d, {"g": g}, n_boot=200, n_perm=0).report()
        raws.append(rep.values["dsc_gap"][GAP][0])
        corrected.append(bs.bias_corrected(raws[-1], _gap_draws(d, g)))
        assert rep.values["dsc_gap"][GAP][1] >= 0  # the CI of a gap never reaches below 0
    assert np.mean(corrected) < np.mean(raws)


def _gap_draws(d: np.ndarray, g: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(0)
    draws = []
    for _ in range(200):
        means = [rng.choice(d[g == k], (g == k).sum()).mean() for k in np.unique(g)]
        draws.append(max(means) - min(means))
    return np.array(draws)


def test_adjusted_p_values_follow_benjamini_yekutieli_over_the_reported_family():
    from fairmedbench.metrics.result import in_family
    from fairmedbench.metrics.stats import adjust_pvalues

    rng = np.random.default_rng(4)
    n = 300
    y, s = rng.integers(0, 2, n), rng.random(n)
    res = evaluate_classification(y, s, {"a": rng.choice(["x", "y"], n), "b": rng.choice(["u", "v", "w"], n)},
                                  n_boot=0, n_perm=99)
    cells = [(r, m) for r in res.reports for m in r.tests if in_family(m)]
    assert {m for _, m in cells} == {"auc_gap", "ece_gap", "eqodds_diff", "fpr_at_tpr95_gap", "auc_diff"}
    expected = adjust_pvalues([r.tests[m]["p_value"] for r, m in cells], "by")
    assert [r.tests[m]["p_adjusted"] for r, m in cells] == pytest.approx(list(expected))
    outside = [t for r in res.reports for m, t in r.tests.items() if not in_family(m)]
    assert outside and all(math.isnan(t["p_adjusted"]) for t in outside)


def test_n_perm_zero_means_no_tests_and_bad_values_are_refused():
    from fairmedbench.errors import InputError

    y, s, sex, _ = _clustered(20, 2)
    res = evaluate_classification(y, s, {"sex": sex}, n_boot=10, n_perm=0)
    assert res.report().tests == {} and res.meta["tests"] is None
    with pytest.raises(InputError, match="n_perm"):
        evaluate_classification(y, s, {"sex": sex}, n_perm=-1)
    with pytest.raises(InputError, match="patient ids"):
        evaluate_classification(y, s, {"sex": sex}, patient_ids=np.arange(3))


def test_report_round_trips_through_its_dict_with_tests_and_units():
    from fairmedbench.metrics.result import AttributeReport

    y, s, sex, pid = _clustered(30, 3)
    rep = evaluate_classification(y, s, {"sex": sex}, n_boot=30, n_perm=30, patient_ids=pid).report()
    again = AttributeReport.from_dict(rep.to_dict())
    assert again.to_dict() == rep.to_dict()
    assert again.tests["auc_diff"]["p_value"] == rep.tests["auc_diff"]["p_value"]
    assert again.resampling == rep.resampling
