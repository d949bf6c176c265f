"""fairmedbench.analysis.uncertainty: the four measures, rejection curves and δ of Lu et al. (2021), by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import entropy as scipy_entropy
from sklearn.metrics import cohen_kappa_score, roc_auc_score

from fairmedbench.analysis.uncertainty import (
    binary_as_classes,
    patient_average,
    rejection_curves,
    retention_grid,
    uncertainty_block,
    uncertainty_measures,
)
from fairmedbench.errors import InputError


def test_measures_by_hand() -> None:
    # case 0: p1 = (.6,.3,.1), p2 = (.2,.5,.3): mean (.4,.4,.2); case 1 padded to 3 classes below
    mc = np.array([[[0.6, 0.3, 0.1]], [[0.2, 0.5, 0.3]]])
    m = uncertainty_measures(mc)
    assert m["naive"] == pytest.approx([0.6])
    # Var_t per class: (.6,.2) .04, (.3,.5) .01, (.1,.3) .01 -> mean over C = .02
    assert m["variance"] == pytest.approx([0.02])
    # -(1/3)(2 * .4 ln .4 + .2 ln .2)
    assert m["entropy"] == pytest.approx([(0.8 * math.log(1 / 0.4) + 0.2 * math.log(5)) / 3])
    # top two of the mean: classes 0 and 1 (tie -> lower index); samples .6,.2 in bins 6,2 and .3,.5 in 3,5
    assert m["bhattacharyya"] == pytest.approx([0.0])


def test_bhattacharyya_overlap_and_binary() -> None:
    # binary sigmoid samples .45, .55: class 0 -> .55 (bin 5), .45 (bin 4); class 1 -> .45, .55: same histogram
    mc = binary_as_classes(np.array([[0.45], [0.55]]))
    m = uncertainty_measures(mc, n_bins=10)
    assert m["bhattacharyya"] == pytest.approx([1.0 / 10])  # Σ sqrt(h1 h2) = 1, times 1/N
    assert m["naive"] == pytest.approx([0.5])
    assert m["variance"] == pytest.approx([0.0025])
    assert m["entropy"] == pytest.approx([math.log(2) / 2])


def test_entropy_matches_scipy_up_to_the_1_over_C_factor() -> None:
    rng = np.random.default_rng(0)
    mc = rng.dirichlet(np.ones(4), size=(5, 7))  # (T=5, n=7, C=4)
    m = uncertainty_measures(mc)
    assert m["entropy"] == pytest.approx(scipy_entropy(mc.mean(axis=0), axis=1) / 4)
    assert m["variance"] == pytest.approx(np.var(mc, axis=0, ddof=0).mean(axis=1))


# 12 cases, 3 classes, groups A/B/C; prediction correct (c) or wrong (w):
# A: unc .1 c, .2 c, .3 w, .4 w   B: .15 c, .25 w, .35 c, .45 w   C: .05 c, .5 w, .6 w, .7 w
UNC = np.array([0.1, 0.2, 0.3, 0.4, 0.15, 0.25, 0.35, 0.45, 0.05, 0.5, 0.6, 0.7])
GRP = np.array(list("AAAABBBBCCCC"), dtype=object)
Y = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2])
CORRECT = np.array([1, 1, 0, 0, 1, 0, 1, 0, 1, 0, 0, 0], dtype=bool)


def _probs(pred: np.ndarray) -> np.ndarray:
    p = np.full((pred.size, 3), 0.1)
    p[np.arange(pred.size), pred] = 0.8
    return p


PRED = np.where(CORRECT, Y, (Y + 1) % 3)


def test_rejection_curve_and_delta_by_hand() -> None:
    # r=1: accuracy A .5, B .5, C .25 -> pairs 0, .25, .25: sum .5, mean 1/6
    # r=.5: the 6 least uncertain (.05 C, .1 A, .15 B, .2 A, .25 B, .3 A): A 2/3, B 1/2, C 1
    #       -> pairs 1/6, 1/3, 1/2: sum 1, mean 1/3
    r = rejection_curves(Y, _probs(PRED), UNC, GRP, pm="accuracy", retention=(1.0, 0.5), min_group_n=2)
    assert r.thresholds == pytest.approx([0.7, 0.3]) and r.n_kept == [12, 6]
    assert r.groups["A"]["pm"] == pytest.approx([0.5, 2 / 3]) and r.groups["A"]["n"] == [4, 3]
    assert r.groups["B"]["pm"] == pytest.approx([0.5, 0.5])
    assert r.groups["C"]["pm"] == pytest.approx([0.25, 1.0]) and r.groups["C"]["n"] == [4, 1]
    assert r.disparity == pytest.approx([0.5, 1.0])
    assert r.delta == pytest.approx(0.75)  # Lu et al. Eq. 5: sum over pairs, mean over levels
    mean = rejection_curves(Y, _probs(PRED), UNC, GRP, pm="accuracy", retention=(1.0, 0.5), pair_aggregation="mean")
    assert mean.delta == pytest.approx(0.25) and mean.pair_aggregation == "mean"
    assert any("'C' has fewer than 2 kept cases at retention 0.5" in n for n in r.notes)  # a note, no crash


def test_kappa_curve_matches_sklearn_and_is_the_default_for_three_classes() -> None:
    r = rejection_curves(Y, _probs(PRED), UNC, GRP, retention=(1.0, 0.75))
    assert r.pm == "kappa"
    for k, ret in enumerate((1.0, 0.75)):
        keep = UNC <= np.sort(UNC)[math.ceil(ret * 12) - 1]
        for g in "AB":
            sel = keep & (GRP == g)
            want = cohen_kappa_score(Y[sel], PRED[sel], weights="linear", labels=[0, 1, 2])
            assert r.groups[g]["pm"][k] == pytest.approx(want)


def test_binary_auc_curve_matches_sklearn_and_reports_undefined_groups() -> None:
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 40)
    s = np.clip(y * 0.3 + rng.uniform(0, 0.7, 40), 0, 1)
    g = np.array(["x"] * 20 + ["y"] * 20, dtype=object)
    unc = rng.uniform(size=40)
    r = rejection_curves(y, binary_as_classes(s), unc, g, retention=(1.0, 0.5))
    assert r.pm == "auc"
    keep = unc <= np.sort(unc)[19]
    for k, sel in enumerate((np.ones(40, bool), keep)):
        want = [roc_auc_score(y[sel & (g == a)], s[sel & (g == a)]) for a in "xy"]
        assert [r.groups[a]["pm"][k] for a in "xy"] == pytest.approx(want)
    assert r.delta == pytest.approx(np.mean(r.disparity))
    one_class = rejection_curves(np.array([0, 0, 1, 1]), binary_as_classes([.1, .2, .3, .9]), [1, 2, 3, 4],
                                 ["a", "a", "b", "b"], retention=(1.0,))
    assert one_class.delta is None and one_class.groups["a"]["pm"] == [None]
    assert "one class" in one_class.undefined[0]


def test_retention_grid_and_patient_average() -> None:
    assert retention_grid() == pytest.approx([1.0, .95, .9, .85, .8, .75, .7, .65, .6, .55, .5])
    assert retention_grid(0.25) == pytest.approx([1.0, 0.75, 0.5])
    mc = np.array([[[0.2, 0.8], [0.4, 0.6], [0.9, 0.1]], [[0.0, 1.0], [0.2, 0.8], [0.5, 0.5]]])
    avg, first = patient_average(mc, ["p2", "p2", "p1"])
    assert first.tolist() == [0, 2]
    assert avg == pytest.approx(np.array([[[0.3, 0.7], [0.9, 0.1]], [[0.1, 0.9], [0.5, 0.5]]]))


def test_block_patient_level_and_fallback() -> None:
    rng = np.random.default_rng(2)
    mc = binary_as_classes(rng.uniform(size=(4, 8)))
    y = np.array([0, 0, 1, 1, 0, 0, 1, 1])
    sex = np.array(list("FFFFMMMM"), dtype=object)
    b = uncertainty_block(y, mc, {"sex": sex}, patient_ids=[0, 0, 1, 1, 2, 2, 3, 3], retention=(1.0,))
    assert b["n_cases"] == 4 and b["level"].startswith("patient level")
    mixed = uncertainty_block(y, mc, {"sex": sex}, patient_ids=[0, 1, 1, 2, 3, 3, 4, 5], retention=(1.0,))
    assert mixed["n_cases"] == 8 and "different label values" in mixed["level"]
    assert set(b["delta"]["sex"]) == {"naive", "variance", "entropy", "bhattacharyya"}


def test_bad_input() -> None:
    with pytest.raises(InputError, match="T >= 2"):
        uncertainty_measures(np.full((1, 3, 2), 0.5))
    with pytest.raises(InputError, match="NaN or infinite"):
        rejection_curves(Y, _probs(PRED), np.where(UNC > 0.6, np.nan, UNC), GRP)
    with pytest.raises(InputError, match="1 group"):
        rejection_curves(Y, _probs(PRED), UNC, np.array(["A"] * 12, dtype=object))
    with pytest.raises(InputError, match="binary"):
        rejection_curves(Y, _probs(PRED), UNC, GRP, pm="auc")
    with pytest.raises(InputError, match="sum to 1"):
        uncertainty_measures(np.full((2, 1, 3), 0.5))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["kappa", "accuracy"]), st.permutations(["x", "y", "z"]))
def test_delta_is_nonnegative_and_invariant_to_group_names_and_monotone_rescaling(seed, pm, names) -> None:
    rng = np.random.default_rng(seed)
    n = 60
    y = rng.integers(0, 3, n)
    pred = np.where(rng.random(n) < 0.7, y, rng.integers(0, 3, n))
    unc = rng.random(n)
    g = rng.integers(0, 3, n)
    r = rejection_curves(y, _probs(pred), unc, g.astype(object), pm=pm)
    assert r.delta is None or r.delta >= 0
    r2 = rejection_curves(y, _probs(pred), unc / 3.0, np.array(names, dtype=object)[g], pm=pm)
    assert (r.delta is None and r2.delta is None) or r2.delta == pytest.approx(r.delta, abs=1e-12)
