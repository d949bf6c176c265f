"""Tests for fairmedbench.metrics.stats: hand-computed cases, scipy cross-checks, properties, real data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from fairmedbench.errors import InputError
from fairmedbench.metrics.stats import (
    adjust_pvalues,
    friedman_nemenyi,
    ks_between_groups,
    seed_summary,
    welch_test,
)

P4 = [0.01, 0.04, 0.03, 0.005]


# ---------------------------------------------------------------- adjust_pvalues


def test_bonferroni_hand():
    # m = 4: p * 4 -> [0.04, 0.16, 0.12, 0.02]
    np.testing.assert_allclose(adjust_pvalues(P4, "bonferroni"), [0.04, 0.16, 0.12, 0.02])


def test_holm_hand():
    # sorted: 0.005, 0.01, 0.03, 0.04; times (4, 3, 2, 1) -> 0.02, 0.03, 0.06, 0.04;
    # running max -> 0.02, 0.03, 0.06, 0.06; back to input order -> [0.03, 0.06, 0.06, 0.02]
    np.testing.assert_allclose(adjust_pvalues(P4, "holm"), [0.03, 0.06, 0.06, 0.02])


def test_bh_by_hand():
    # BH: sorted p times m/rank = (4, 2, 4/3, 1) -> 0.02, 0.02, 0.04, 0.04; running min from the top
    # keeps them; input order -> [0.02, 0.04, 0.04, 0.02]
    np.testing.assert_allclose(adjust_pvalues(P4, "bh"), [0.02, 0.04, 0.04, 0.02])
    # BY = BH * c(4), c(4) = 1 + 1/2 + 1/3 + 1/4 = 25/12
    np.testing.assert_allclose(adjust_pvalues(P4, "by"), np.array([0.02, 0.04, 0.04, 0.02]) * 25 / 12)
    # default method is BY
    np.testing.assert_allclose(adjust_pvalues(P4), adjust_pvalues(P4, "by"))


def test_step_up_monotonicity_hand():
    # BH on [0.01, 0.02]: 0.01*2 = 0.02, 0.02*1 = 0.02 -> both 0.02
    # on [0.03, 0.02]: sorted 0.02*2 = 0.04, 0.03*1 = 0.03 -> running min from top gives 0.03, 0.03
    np.testing.assert_allclose(adjust_pvalues([0.03, 0.02], "bh"), [0.03, 0.03])
    np.testing.assert_allclose(adjust_pvalues([0.6, 0.9], "bonferroni"), [1.0, 1.0])  # clipped


def test_none_and_empty():
    np.testing.assert_array_equal(adjust_pvalues(P4, "none"), P4)
    assert adjust_pvalues([], "by").size == 0


@pytest.mark.parametrize("method", ["bh", "by"])
def test_bh_by_match_scipy(method):
    # written in numpy (scipy.stats' import was most of evaluate's start-up), in scipy's order of operations:
    # bit-identical, ties and a single p-value included
    rng = np.random.default_rng(1)
    p = np.concatenate([rng.uniform(0, 0.01, 5), rng.uniform(0, 1, 40), [0.5, 0.5, 1.0, 0.0]])
    for q in (p, p[:1], p[:2]):
        np.testing.assert_array_equal(adjust_pvalues(q, method), sps.false_discovery_control(q, method=method))


@pytest.mark.parametrize("bad", [[0.1, np.nan], [0.1, 1.5], [[0.1, 0.2]]])
def test_adjust_rejects_bad_input(bad):
    with pytest.raises(InputError, match="p"):
        adjust_pvalues(bad)


def test_adjust_unknown_method():
    with pytest.raises(InputError, match="method"):
        adjust_pvalues(P4, "fdr")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=30))
def test_adjust_properties(p):
    p = np.array(p)
    adj = {m: adjust_pvalues(p, m) for m in ("by", "bh", "holm", "bonferroni")}
    for m, a in adj.items():
        assert (a >= p - 1e-15).all() and (a <= 1).all(), m
        # order preserving: a smaller raw p never gets a larger adjusted p
        o = np.argsort(p, kind="stable")
        assert (np.diff(a[o]) >= -1e-12).all(), m
    assert (adj["by"] >= adj["bh"] - 1e-15).all()
    assert (adj["holm"] <= adj["bonferroni"] + 1e-15).all()
    assert (adj["bh"] <= adj["holm"] + 1e-12).all()


# ---------------------------------------------------------------- KS between groups


def test_ks_hand_and_structure():
    # group a = [1,2,3], b = [4,5,6]: ECDFs never overlap, D = 1; exact two-sided p for 3 vs 3 is
    # 2 / C(6,3) = 2/20 = 0.1 (both complete separations). Group c has 1 sample -> skipped.
    values = [1, 2, 3, 4, 5, 6, 9]
    groups = ["a", "a", "a", "b", "b", "b", "c"]
    res = ks_between_groups(values, groups, correction="bonferroni")
    assert res.correction == "bonferroni" and res.n_tests == 1 and res.alpha == 0.05
    assert set(res.skipped) == {"c"} and "1 sample" in res.skipped["c"]
    (rec,) = res.records
    assert (rec.feature, rec.group_a, rec.group_b, rec.n_a, rec.n_b) == ("value", "a", "b", 3, 3)
    assert rec.statistic == pytest.approx(1.0)
    assert rec.p_value == pytest.approx(0.1)
    assert rec.p_adjusted == pytest.approx(0.1)  # one test: Bonferroni leaves it
    assert rec.reject is False


def test_ks_matches_scipy_and_corrects_jointly():
    rng = np.random.default_rng(2)
    x = np.column_stack([rng.normal(size=90), rng.normal(size=90)])
    g = np.repeat([0, 1, 2], 30)
    x[g == 2, 1] += 1.5
    res = ks_between_groups(x, g, feature_names=["f0", "f1"])
    assert res.n_tests == 6  # 2 features x 3 pairs
    raw = []
    for r in res.records:
        j = ["f0", "f1"].index(r.feature)
        ref = sps.ks_2samp(x[g == r.group_a, j], x[g == r.group_b, j])
        assert r.statistic == pytest.approx(ref.statistic) and r.p_value == pytest.approx(ref.pvalue)
        raw.append(r.p_value)
    np.testing.assert_allclose([r.p_adjusted for r in res.records], sps.false_discovery_control(raw, method="by"))
    assert all(r.reject == (r.p_adjusted <= 0.05) for r in res.records)
    assert {(r.group_a, r.group_b) for r in res.records if r.feature == "f1" and r.reject} == {(0, 2), (1, 2)}


def test_ks_single_group_has_no_tests():
    res = ks_between_groups([1.0, 2.0, 3.0], ["x", "x", "x"])
    assert res.records == () and res.n_tests == 0 and "fewer than two groups" in res.note


def test_ks_input_errors():
    with pytest.raises(InputError, match="values"):
        ks_between_groups([1.0, np.nan, 3.0, 4.0], [0, 0, 1, 1])
    with pytest.raises(InputError, match="groups"):
        ks_between_groups([1.0, 2.0, 3.0], [0, 1])
    with pytest.raises(InputError, match="groups"):
        ks_between_groups([1.0, 2.0, 3.0], ["a", None, "b"])
    with pytest.raises(InputError, match="feature_names"):
        ks_between_groups(np.zeros((4, 2)), [0, 0, 1, 1], feature_names=["only_one"])
    with pytest.raises(InputError, match="correction"):
        ks_between_groups([1.0, 2.0, 3.0, 4.0], [0, 0, 1, 1], correction="fdr")


def test_ks_real_cxr_foundation_pca_modes_by_race(real_data):
    pd = pytest.importorskip("pandas")
    path = real_data / "chexpert-cxr-foundation-embeddings" / "cxr-foundation.embeddings.csv"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    cols = [f"PCA Mode {i}" for i in range(1, 5)]
    df = pd.read_csv(path, usecols=cols + ["race"])
    res = ks_between_groups(df[cols].to_numpy(), df["race"].to_numpy(), feature_names=cols)
    assert res.correction == "by" and res.n_tests == 12 and res.skipped == {}
    assert {(r.group_a, r.group_b) for r in res.records} == {("Asian", "Black"), ("Asian", "White"), ("Black", "White")}
    assert all(r.n_a == 1000 and r.n_b == 1000 for r in res.records)
    raw = [r.p_value for r in res.records]
    np.testing.assert_allclose([r.p_adjusted for r in res.records], sps.false_discovery_control(raw, method="by"))
    assert all(r.p_adjusted >= r.p_value for r in res.records)
    significant = {r.feature for r in res.records if r.reject}
    # every mode separates at least one pair of races; modes 2 and 4 separate all three pairs
    assert significant == set(cols)
    for mode in ("PCA Mode 2", "PCA Mode 4"):
        assert all(r.reject for r in res.records if r.feature == mode)
    # the non-differing pairs: White vs Asian on mode 1, White vs Black on mode 3
    not_rejected = {(r.feature, r.group_a, r.group_b) for r in res.records if not r.reject}
    assert not_rejected == {("PCA Mode 1", "Asian", "White"), ("PCA Mode 3", "Black", "White")}


# ---------------------------------------------------------------- seeds and Welch


def test_seed_summary_hand():
    # [1, 2, 3]: mean 2, std (ddof=1) 1, t_{2, 0.975} = 4.302653 -> CI 2 -/+ 4.302653 / sqrt(3) = 2 -/+ 2.484138
    s = seed_summary([1, 2, 3])
    assert (s.n, s.mean, s.std) == (3, 2.0, 1.0)
    assert s.ci_low == pytest.approx(2 - 2.484138, abs=1e-6) and s.ci_high == pytest.approx(2 + 2.484138, abs=1e-6)
    assert not s.clipped


def test_seed_summary_two_seeds_is_t_not_normal():
    # issue 11: two seeds' differences 0.01, 0.03. Normal: 0.02 -/+ 1.96 * 0.014142 / sqrt(2) = [0.0004, 0.0396]
    # ("excludes 0"); t_{1, 0.975} = 12.706205: 0.02 -/+ 0.127062 = [-0.107062, 0.147062], which includes 0,
    # in line with Welch's p on such data.
    s = seed_summary([0.01, 0.03])
    assert s.ci_low == pytest.approx(-0.107062, abs=1e-6) and s.ci_high == pytest.approx(0.147062, abs=1e-6)
    assert s.ci_low < 0 < s.ci_high


def test_seed_summary_clipped_to_bounds():
    # AUC 0.98, 0.99, 1.00: mean 0.99, std 0.01, half = 4.302653 * 0.01 / sqrt(3) = 0.024841 -> [0.965159, 1.014841]
    # an AUC cannot exceed 1: the upper end is clipped and the summary says so
    s = seed_summary([0.98, 0.99, 1.0], bounds=(0.0, 1.0))
    assert s.ci_low == pytest.approx(0.965159, abs=1e-6) and s.ci_high == 1.0 and s.clipped
    assert seed_summary([0.98, 0.99, 1.0]).ci_high == pytest.approx(1.014841, abs=1e-6)


def test_seed_summary_single_seed_and_errors():
    s = seed_summary([0.8])
    assert s.n == 1 and s.mean == 0.8 and math.isnan(s.std) and math.isnan(s.ci_low) and math.isnan(s.ci_high)
    with pytest.raises(InputError, match="values"):
        seed_summary([0.8, np.nan])
    with pytest.raises(InputError, match="values"):
        seed_summary([])


def test_welch_hand_and_scipy():
    # a = [1,2,3]: mean 2, var 1 -> var/n = 1/3; b = [2,3,5,7]: mean 4.25, var 14.75/3 -> var/n = 1.229167
    # se^2 = 1.5625, t = -2.25 / 1.25 = -1.8; df = 1.5625^2 / ((1/3)^2/2 + 1.229167^2/3) = 4.36611
    r = welch_test([1, 2, 3], [2, 3, 5, 7])
    assert r.t == pytest.approx(-1.8) and r.df == pytest.approx(4.36611, abs=1e-5) and r.mean_diff == -2.25
    ref = sps.ttest_ind([1, 2, 3], [2, 3, 5, 7], equal_var=False)
    assert r.t == pytest.approx(ref.statistic, rel=1e-12) and r.p_value == pytest.approx(ref.pvalue, rel=1e-10)
    assert r.df == pytest.approx(ref.df, rel=1e-12)


def test_welch_random_vs_scipy():
    rng = np.random.default_rng(3)
    a, b = rng.normal(0.80, 0.01, 5), rng.normal(0.81, 0.03, 7)
    r = welch_test(a, b)
    ref = sps.ttest_ind(a, b, equal_var=False)
    assert r.t == pytest.approx(ref.statistic, rel=1e-12) and r.p_value == pytest.approx(ref.pvalue, rel=1e-10)


def test_welch_nearly_identical_values_carry_a_note():
    r = welch_test([0.7, 0.7 + 1e-15, 0.7], [0.7, 0.7, 0.7 + 2e-15])
    assert r.note is not None and "scipy warned" in r.note


def test_welch_zero_variance_and_errors():
    r = welch_test([0.5, 0.5], [0.7, 0.7])
    assert math.isnan(r.t) and math.isnan(r.p_value) and r.mean_diff == pytest.approx(-0.2)
    assert "zero variance" in r.note
    with pytest.raises(InputError, match="a"):
        welch_test([1.0], [1.0, 2.0])
    with pytest.raises(InputError, match="b"):
        welch_test([1.0, 2.0], [1.0, np.inf])


# ---------------------------------------------------------------- Friedman / Nemenyi


def test_friedman_nemenyi_hand():
    # 3 datasets, A > B > C on each: ranks 1,2,3 everywhere, average ranks 1, 2, 3.
    # chi2 = 12N/(k(k+1)) * sum R_j^2 - 3N(k+1) = 12*3/12 * 14 - 36 = 6; p = chi2_2.sf(6) = e^-3
    # CD = q(0.05, 3) * sqrt(3*4 / (6*3)) = 2.3437 * 0.8165 = 1.9137; A vs C differ by 2 > CD.
    scores = [[0.9, 0.8, 0.7], [0.85, 0.8, 0.6], [0.95, 0.7, 0.65]]
    r = friedman_nemenyi(scores, ["A", "B", "C"])
    assert r.avg_ranks == {"A": 1.0, "B": 2.0, "C": 3.0}
    assert r.chi2 == pytest.approx(6.0) and r.p_value == pytest.approx(math.exp(-3))
    assert r.cd == pytest.approx(r.q_alpha * math.sqrt(12 / 18)) and r.cd == pytest.approx(1.9137, abs=2e-4)
    assert [(a, b) for a, b, _ in r.significant_pairs] == [("A", "C")]
    assert r.note is None and (r.n_datasets, r.k_methods) == (3, 3)


def test_friedman_lower_is_better_and_ties():
    # lower is better: C is rank 1. Row 2 ties A and B for ranks 2 and 3 -> 2.5 each.
    r = friedman_nemenyi([[3.0, 2.0, 1.0], [5.0, 5.0, 1.0]], ["A", "B", "C"], higher_is_better=False)
    # A: (3 + 2.5)/2 = 2.75, B: (2 + 2.5)/2 = 2.25, C: 1
    assert r.avg_ranks == {"A": 2.75, "B": 2.25, "C": 1.0}
    ref = sps.friedmanchisquare([3.0, 5.0], [2.0, 5.0], [1.0, 1.0])
    assert r.chi2 == pytest.approx(ref.statistic) and r.p_value == pytest.approx(ref.pvalue)


def test_nemenyi_q_k4_demsar_table():
    r = friedman_nemenyi(np.random.default_rng(4).random((6, 4)), ["a", "b", "c", "d"])
    assert round(r.q_alpha, 3) == 2.569  # Demsar (2006) Table 5, alpha 0.05, k = 4
    assert r.cd == pytest.approx(2.569 * math.sqrt(4 * 5 / 36), abs=1e-3)


def test_friedman_too_few_methods_or_datasets():
    r = friedman_nemenyi([[0.9, 0.8], [0.7, 0.6]], ["A", "B"])
    assert math.isnan(r.chi2) and math.isnan(r.p_value) and "k >= 3" in r.note
    assert r.avg_ranks == {"A": 1.0, "B": 2.0}
    r1 = friedman_nemenyi([[0.9, 0.8, 0.7]], ["A", "B", "C"])
    assert math.isnan(r1.p_value) and "n >= 2" in r1.note


def test_friedman_input_errors():
    with pytest.raises(InputError, match="scores"):
        friedman_nemenyi([[0.9, np.nan, 0.7], [0.1, 0.2, 0.3]], ["A", "B", "C"])
    with pytest.raises(InputError, match="method_names"):
        friedman_nemenyi([[0.9, 0.8, 0.7]], ["A", "B"])
    with pytest.raises(InputError, match="method_names"):
        friedman_nemenyi([[0.9, 0.8, 0.7]], ["A", "A", "B"])
