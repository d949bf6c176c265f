"""Fairness-law fits and the imbalance summaries: hand-computed values, cross-checked with scipy."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from fairmedbench.analysis.fairness_laws import balanced_share, fairness_laws, line_fit
from fairmedbench.analysis.imbalance import imbalance
from fairmedbench.errors import InputError

SHARES = [0.0, 0.25, 0.5, 0.75, 1.0]
F_MEANS = [0.60, 0.66, 0.70, 0.74, 0.80]  # the swept group rises


def _rows() -> pd.DataFrame:
    rows = []
    for x, f in zip(SHARES, F_MEANS):
        for seed, d in ((0, -0.01), (1, 0.01)):
            rows.append({"x": x, "seed": seed, "group": "female", "metric": "auc", "value": f + d})
            # the other group: 0.82 +- 0.02 at every share (flat)
            rows.append({"x": x, "seed": seed, "group": "male", "metric": "auc", "value": 0.82 + 2 * d})
    return pd.DataFrame(rows)


def test_line_fit_hand_computed() -> None:
    fit = line_fit(SHARES, F_MEANS, "female", "auc")
    # Sxx = 0.625, Sxy = 0.12, Syy = 0.0232 (means 0.5 and 0.7)
    assert fit.slope == pytest.approx(0.192) and fit.intercept == pytest.approx(0.604)
    assert fit.r == pytest.approx(0.12 / math.sqrt(0.625 * 0.0232))
    # residuals -0.004, 0.008, 0, -0.008, 0.004: SSE = 1.6e-4, s^2 = SSE/3, se(slope) = sqrt(s^2 / Sxx)
    half = sps.t.ppf(0.975, 3) * math.sqrt(1.6e-4 / 3 / 0.625)
    assert (fit.slope_ci_low, fit.slope_ci_high) == pytest.approx((0.192 - half, 0.192 + half))
    # Fisher z: tanh(atanh(r) -+ 1.96 / sqrt(n - 3))
    z, se = math.atanh(fit.r), 1 / math.sqrt(2)
    q = sps.norm.ppf(0.975)
    assert (fit.r_ci_low, fit.r_ci_high) == pytest.approx((math.tanh(z - q * se), math.tanh(z + q * se)))
    # the line through (0, 0.60) and (1, 0.80) predicts 0.65, 0.70, 0.75 against 0.66, 0.70, 0.74
    assert fit.interp_mae == pytest.approx(0.02 / 3) and fit.n_interior == 3
    assert not fit.slope_ci_includes_0


def test_line_fit_undefined_cases_say_why() -> None:
    two = line_fit([0.0, 1.0], [0.5, 0.6], "g", "auc")
    assert math.isnan(two.slope) and "at least 3" in two.note
    flat = line_fit([0, 0.5, 1], [0.7, 0.7, 0.7], "g", "auc")
    assert flat.slope == 0 and math.isnan(flat.r) and "undefined" in flat.note and flat.slope_ci_includes_0
    three = line_fit([0, 0.5, 1], [0.6, 0.72, 0.8], "g", "auc")
    assert math.isfinite(three.slope_ci_low) and math.isnan(three.r_ci_low) and "at least 4" in three.note
    # unsorted input gives the same fit as sorted
    fit = line_fit([1, 0, 0.5, 0.25, 0.75], [0.8, 0.6, 0.7, 0.66, 0.74], "g", "auc")
    assert fit.interp_mae == pytest.approx(0.02 / 3)


def test_fairness_laws_summaries_fits_and_balanced_welch() -> None:
    res = fairness_laws(_rows(), "female", metrics=("auc",))
    p = next(p for p in res.points if p.group == "female" and p.x == 0.25)
    assert p.n_seeds == 2 and p.mean == pytest.approx(0.66) and p.std == pytest.approx(0.02 / math.sqrt(2))
    half = sps.t.ppf(0.975, 1) * p.std / math.sqrt(2)
    assert (p.ci_low, p.ci_high) == pytest.approx((0.66 - half, min(1.0, 0.66 + half)))
    female = next(f for f in res.fits if f.group == "female")
    male = next(f for f in res.fits if f.group == "male")
    assert female.slope == pytest.approx(0.192) and female.r > 0.99
    assert male.slope == pytest.approx(0.0, abs=1e-12) and male.slope_ci_includes_0
    [w] = res.balanced
    assert (w.x, w.group_a, w.group_b) == (0.5, "female", "male")
    # female 0.69, 0.71 ; male 0.80, 0.84: t = -0.12 / sqrt(2e-4/2 + 8e-4/2), Welch df = 2.5e-7 / 1.7e-7
    assert w.t == pytest.approx(-0.12 / math.sqrt(5e-4)) and w.df == pytest.approx(2.5e-7 / 1.7e-7)
    ref = sps.ttest_ind([0.69, 0.71], [0.80, 0.84], equal_var=False)
    assert w.p_value == pytest.approx(ref.pvalue)
    frames = res.frames()
    assert len(frames["points"]) == 10 and set(frames["fits"]["group"]) == {"female", "male"}
    assert not res.notes


def test_balanced_share_is_the_closest_and_noted() -> None:
    assert balanced_share([0.1, 0.4, 0.6, 0.9]) == 0.4 and balanced_share([0.2, 0.55]) == 0.55
    df = _rows()
    df = df[df["x"] != 0.5]
    res = fairness_laws(df, "female", metrics=("auc",))
    assert res.balanced[0].x == 0.25 and "closest share, 0.25" in res.notes[0]


def test_undefined_seeds_are_left_out_and_counted() -> None:
    df = _rows()
    df.loc[(df["x"] == 0.0) & (df["group"] == "female") & (df["seed"] == 1), "value"] = np.nan
    res = fairness_laws(df, "female", metrics=("auc",))
    p = next(p for p in res.points if p.group == "female" and p.x == 0.0)
    assert (p.n_seeds, p.n_undefined, p.mean) == (1, 1, pytest.approx(0.59)) and math.isnan(p.ci_low)


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d.drop(columns=["seed"]), "missing column"),
    (lambda d: d.assign(x=d["x"] + 2), "must lie in \\[0, 1\\]"),
    (lambda d: pd.concat([d, d.iloc[:1]]), "duplicate"),
    (lambda d: d.iloc[:0], "empty"),
    (lambda d: d.assign(metric="ap"), "no rows for the metrics"),
])
def test_fairness_laws_bad_input(mutate, needle) -> None:
    with pytest.raises(InputError, match=needle):
        fairness_laws(mutate(_rows()), "female", metrics=("auc",))


def test_imbalance_summaries_and_flat_auroc() -> None:
    rows = []
    for prev in (0.1, 0.3, 0.5):
        for seed in (0, 1, 2):
            for g in ("all", "female"):
                rows += [{"x": prev, "seed": seed, "group": g, "metric": "auc", "value": 0.8 + 0.001 * seed},
                         {"x": prev, "seed": seed, "group": g, "metric": "ap", "value": prev + 0.3 + 0.01 * seed}]
    res = imbalance(pd.DataFrame(rows), "test", metrics=("auc", "ap"))
    auc = next(f for f in res.fits if f.metric == "auc" and f.group == "female")
    ap = next(f for f in res.fits if f.metric == "ap" and f.group == "all")
    assert auc.slope == pytest.approx(0.0, abs=1e-12) and auc.slope_ci_includes_0
    assert ap.slope == pytest.approx(1.0) and ap.intercept == pytest.approx(0.31)
    pts = res.frames()["points"]
    assert len(pts) == 12 and "prevalence" in pts.columns
    with pytest.raises(InputError, match="must lie in \\(0, 1\\)"):
        imbalance(pd.DataFrame(rows).replace({"x": {0.1: 0.0}}))
    with pytest.raises(InputError, match="prevalence_on"):
        imbalance(pd.DataFrame(rows), "val")
