"""evaluate_multiclass: hand-computed values, sklearn cross-checks, gaps, signed differences, CIs, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import balanced_accuracy_score, cohen_kappa_score, recall_score, roc_auc_score

from fairmedbench.errors import InputError
from fairmedbench.metrics.multiclass import evaluate_multiclass
from fairmedbench.metrics.result import GAP, OVERALL
from fairmedbench.metrics.specs import headline_metric, metric_spec

# three classes, six samples per group. Group a: every argmax right; group b: two of six wrong.
Y = np.array([0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2])
P = np.array([
    [.8, .1, .1], [.6, .3, .1], [.2, .7, .1], [.1, .5, .4], [.1, .2, .7], [.2, .2, .6],   # a
    [.7, .2, .1], [.3, .6, .1], [.2, .5, .3], [.1, .7, .2], [.1, .3, .6], [.3, .3, .4],   # b
])
G = np.array(["a"] * 6 + ["b"] * 6)


def test_hand_computed_group_values():
    rep = evaluate_multiclass(Y, P, {"g": G}, classes=["low", "mid", "high"], n_boot=0).report()
    # group b: argmax = [0, 1, 1, 1, 2, 2] for truth [0, 0, 1, 1, 2, 2]: one error (true 0 -> 1)
    # accuracy 5/6; recalls: low 1/2, mid 2/2, high 2/2 -> balanced accuracy (1/2 + 1 + 1)/3 = 5/6
    assert rep.value("accuracy", "b") == pytest.approx(5 / 6)
    assert rep.value("balanced_accuracy", "b") == pytest.approx(5 / 6)
    assert rep.value("tpr:low", "b") == pytest.approx(0.5) and rep.value("tpr:mid", "b") == 1.0
    # unweighted kappa b: po = 5/6; rows (2,2,2), cols (1,3,2): pe = (2*1 + 2*3 + 2*2)/36 = 1/3
    # kappa = (5/6 - 1/3)/(1 - 1/3) = 3/4
    assert rep.value("kappa", "b") == pytest.approx(0.75)
    # linear: the one error is at distance 1 -> sum w*O = 1/6; sum w*E = Σ |i-j| r_i c_j / 36
    # r = (2,2,2), c = (1,3,2): row0: 2*(0*1+1*3+2*2)=14, row1: 2*(1*1+0+1*2)=6, row2: 2*(2*1+1*3+0)=10 -> 30/36
    # kappa_linear = 1 - (1/6)/(30/36) = 1 - 6/30 = 0.8
    assert rep.value("kappa_linear", "b") == pytest.approx(0.8)
    # quadratic: error weight 1 -> 1/6; row0: 2*(0+3+4*2)=22, row1: 2*(1+0+2)=6, row2: 2*(4+3+0)=14 -> 42/36
    # kappa_quadratic = 1 - (1/6)/(42/36) = 1 - 6/42 = 6/7
    assert rep.value("kappa_quadratic", "b") == pytest.approx(6 / 7)
    # macro OvR AUC for b. class 0: positives scores (.7, .3), negatives (.2, .1, .1, .3): .7 beats 4, .3 beats 3
    # and ties 1 -> (4 + 3.5)/8 = 15/16. class 1: pos (.5, .7) vs neg (.2, .6, .3, .3): .5 beats 3, .7 beats 4
    # -> 7/8. class 2: pos (.6, .4) vs neg (.1, .1, .3, .2): 8/8. macro = (15/16 + 14/16 + 16/16)/3 = 45/48
    assert rep.value("macro_auc", "b") == pytest.approx(45 / 48)
    assert rep.value("macro_auc", "a") == 1.0 and rep.value("kappa", "a") == 1.0
    # gaps and signed differences to the best group (a)
    assert rep.value("macro_auc_gap", GAP) == pytest.approx(1 - 45 / 48)
    assert rep.value("kappa_gap", GAP) == pytest.approx(0.25)
    assert rep.value("macro_auc_vs_best", "b") == pytest.approx(45 / 48 - 1)
    assert rep.value("macro_auc_vs_best", "a") == 0.0
    assert rep.value("worst_group_macro_auc", GAP) == pytest.approx(45 / 48)
    assert rep.worst_group == {"macro_auc": "b", "balanced_accuracy": "b"}
    # two groups: second - first, as the binary engine's differences
    assert rep.value("macro_auc_diff", GAP) == pytest.approx(45 / 48 - 1)
    assert rep.value("balanced_accuracy_diff", GAP) == pytest.approx(5 / 6 - 1)
    assert rep.counts["b"] == {"n": 6, "n:low": 2, "n:mid": 2, "n:high": 2}


def _data(n: int = 900, k: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    g = np.where(rng.random(n) < 0.5, "F", "M")
    logit = rng.normal(size=(n, k))
    logit[np.arange(n), y] += np.where(g == "F", 0.7, 2.0)  # weaker signal for F: a known disparity
    p = np.exp(logit)
    return y, p / p.sum(axis=1, keepdims=True), g


def test_matches_sklearn_per_group_and_overall():
    y, p, g = _data()
    rep = evaluate_multiclass(y, p, {"sex": g}, n_boot=0).report()
    for grp in ("F", "M", OVERALL):
        m = np.ones(len(y), bool) if grp == OVERALL else g == grp
        pred = p[m].argmax(axis=1)
        assert rep.value("macro_auc", grp) == pytest.approx(
            roc_auc_score(y[m], p[m], multi_class="ovr", average="macro"), abs=1e-12)
        assert rep.value("balanced_accuracy", grp) == pytest.approx(balanced_accuracy_score(y[m], pred), abs=1e-12)
        for name, w in (("kappa", None), ("kappa_linear", "linear"), ("kappa_quadratic", "quadratic")):
            assert rep.value(name, grp) == pytest.approx(cohen_kappa_score(y[m], pred, weights=w), abs=1e-12)
        tprs = recall_score(y[m], pred, average=None)
        assert [rep.value(f"tpr:{c}", grp) for c in range(4)] == pytest.approx(list(tprs), abs=1e-12)
    assert rep.value("macro_auc", "F") < rep.value("macro_auc", "M")


def test_bootstrap_intervals_gaps_and_reproducibility():
    y, p, g = _data()
    a = evaluate_multiclass(y, p, {"sex": g}, n_boot=300, seed=3).report()
    b = evaluate_multiclass(y, p, {"sex": g}, n_boot=300, seed=3).report()
    assert a.values == b.values
    v, lo, hi = a.values["macro_auc_gap"][GAP]
    assert 0 < lo < v < hi  # the injected disparity is distinguishable from none
    v, lo, hi = a.values["kappa_quadratic_vs_best"]["F"]
    assert lo < v < hi < 0
    v, lo, hi = a.values["macro_auc_diff"][GAP]  # M - F
    assert 0 < lo < v < hi
    # the best group is the reference: no interval, with the reason
    assert a.ci_notes["macro_auc_vs_best"]["M"].startswith("the reference")
    for grp in ("F", "M"):
        v, lo, hi = a.values["balanced_accuracy"][grp]
        assert lo < v < hi


def test_small_group_absent_class_and_undefined_kappa():
    y = np.array([0, 1, 2, 0, 1, 2, 0, 0])
    p = np.eye(3)[[0, 1, 2, 0, 1, 2, 0, 0]] * 0.8 + 0.2 / 3
    g = np.array(["x"] * 6 + ["y"] * 2)  # y: two samples, both class 0, both predicted 0
    res = evaluate_multiclass(y, p, {"g": g}, n_boot=50, min_group_size=5)
    rep = res.report()
    assert rep.small_groups == ["y"] and "x" not in rep.skipped
    assert "1, 2 absent" in rep.skipped["y"]
    assert math.isnan(rep.value("kappa", "y"))  # no expected disagreement: undefined, not 1
    assert math.isnan(rep.value("tpr:1", "y")) and rep.value("tpr:0", "y") == 1.0
    assert math.isnan(rep.value("macro_auc", "y"))  # one class present: no one-vs-rest AUC
    assert "fewer than two" in rep.gap_notes["macro_auc_gap"]
    assert "below min_group_size" in rep.ci_notes["tpr:0"]["y"]


def test_logits_are_softmaxed_and_bad_input_is_refused():
    y, p, g = _data(200)
    logits = np.log(p) + 3.0
    a = evaluate_multiclass(y, p, {"s": g}, n_boot=0).report()
    b = evaluate_multiclass(y, logits, {"s": g}, n_boot=0, logits=True).report()
    assert b.value("macro_auc", "F") == pytest.approx(a.value("macro_auc", "F"))
    with pytest.raises(InputError, match="sum to 1"):
        evaluate_multiclass(y, p * 0.5, {"s": g}, n_boot=0)
    with pytest.raises(InputError, match="logits"):
        evaluate_multiclass(y, logits, {"s": g}, n_boot=0)
    with pytest.raises(InputError, match="class indices 0..3"):
        evaluate_multiclass(y + 1, p, {"s": g}, n_boot=0)
    with pytest.raises(InputError, match="3 classes are named"):
        evaluate_multiclass(y, p, {"s": g}, classes=["a", "b", "c"], n_boot=0)
    with pytest.raises(InputError, match="NaN"):
        evaluate_multiclass(y, np.where(np.arange(4) == 0, np.nan, p), {"s": g}, n_boot=0)


def test_specs_are_registered_with_direction_and_bounds():
    assert headline_metric("multiclass") == "macro_auc"
    assert metric_spec("kappa_quadratic").bounds == (-1.0, 1.0) and metric_spec("kappa_quadratic").higher_is_better
    assert metric_spec("tpr:nv").definition.endswith("(here class 'nv')")
    assert metric_spec("tpr:nv_gap").kind == "gap" and metric_spec("tpr:nv_gap").higher_is_better is False
    assert metric_spec("macro_auc_vs_best").higher_is_better is None
    assert metric_spec("macro_auc_gap").board == "gap"
    # every metric the engine emits has a spec
    y, p, g = _data(200)
    for m in evaluate_multiclass(y, p, {"s": g}, n_boot=0).report().values:
        assert metric_spec(m).task == "multiclass"
