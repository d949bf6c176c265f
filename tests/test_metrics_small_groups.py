"""Tiny groups and degenerate bootstrap distributions get a point estimate and a reason, never a zero-width CI."""

from __future__ import annotations

import math

import numpy as np

from fairmedbench.metrics import GAP, OVERALL, evaluate_classification
from fairmedbench.metrics import bootstrap as bs
from fairmedbench.metrics.seg_fairness import evaluate_segmentation


def _cls_data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    y = np.r_[rng.integers(0, 2, 60), 1, 0]
    s = np.r_[np.clip(0.5 + 0.2 * (2 * y[:60] - 1) + rng.normal(0, 0.2, 60), 0, 1), 0.7, 0.4]
    g = np.array(["big"] * 60 + ["tiny"] * 2)
    return y, s, g


def test_one_positive_one_negative_group_has_no_zero_width_auc_interval():
    # "tiny" holds one positive (0.7) and one negative (0.4); the bootstrap is stratified by label within the
    # group, so every resample redraws the same two samples: AUC 1.0 in every resample. A percentile interval
    # would be [1.0, 1.0]; the value stays, the interval is None and the reason says why.
    y, s, g = _cls_data()
    r = evaluate_classification(y, s, {"g": g}, n_boot=200, min_group_size=2).report()
    v, lo, hi = r.values["auc"]["tiny"]
    assert v == 1.0 and math.isnan(lo) and math.isnan(hi)
    assert "degenerate" in r.ci_notes["auc"]["tiny"]
    assert r.to_dict()["metrics"]["auc"]["tiny"] == {"value": 1.0, "ci_low": None, "ci_high": None}
    assert "prevalence" not in r.ci_notes and math.isnan(r.values["prevalence"]["big"][1])  # fixed by design
    big = r.values["auc"]["big"]
    assert big[1] < big[0] < big[2]  # a real group keeps a real interval
    assert "big" not in r.ci_notes.get("auc", {})


def test_group_below_min_group_size_gets_point_estimate_and_flag():
    y, s, g = _cls_data()
    r = evaluate_classification(y, s, {"g": g}, n_boot=200).report()  # default min_group_size 30
    assert r.small_groups == ["tiny"]
    for m in ("auc", "tpr", "ece", "acc"):
        v, lo, hi = r.values[m]["tiny"]
        assert math.isfinite(v) and math.isnan(lo) and math.isnan(hi), m
        assert "n=2 is below min_group_size=30" in r.ci_notes[m]["tiny"]
    assert math.isfinite(r.values["auc"][OVERALL][1]) and math.isfinite(r.values["auc_gap"][GAP][1])


def test_segmentation_single_sample_group():
    d = np.r_[np.linspace(0.5, 0.9, 40), 0.3]
    g = np.array(["a"] * 40 + ["b"])
    r = evaluate_segmentation(d, {"g": g}, n_boot=100, min_group_size=1).report()
    v, lo, hi = r.values["dsc"]["b"]
    assert v == 0.3 and math.isnan(lo) and "degenerate" in r.ci_notes["dsc"]["b"]
    r30 = evaluate_segmentation(d, {"g": g}, n_boot=100).report()
    assert r30.small_groups == ["b"] and "below min_group_size=30" in r30.ci_notes["dsc"]["b"]
    assert r30.values["dsc"]["a"][1] < r30.values["dsc"]["a"][2]


def test_interval_helper():
    lo, hi, why = bs.interval(np.array([0.2, 0.3, np.nan, 0.4]), 0.5)
    assert why is None and (lo, hi) == (0.25, 0.35)  # numpy linear percentiles 25 / 75 of [0.2, 0.3, 0.4]
    assert bs.interval(np.full(10, 0.7))[2].startswith("every bootstrap resample gives 0.7")
    assert bs.interval(np.full(3, np.nan))[2] == "undefined in every bootstrap resample"
