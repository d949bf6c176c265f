"""`benchmark plan`: hand-computed sample sizes (two proportions, Hanley-McNeil, a mean DSC, TOST, the design
effect), one-line refusals, the simulated audits' known truths, and the plan's power checked by its own simulation
(a small run here; 200 replicates per metric in the slow tests)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fairmedbench.benchmark.plan import (
    PlanOptions,
    check_plan,
    hanley_mcneil_variance,
    make_design,
    normal_power,
    plan_sample_size,
    simulate_audit,
)
from fairmedbench.cli import main


def _plan(**kw: object) -> int:
    return plan_sample_size(make_design(PlanOptions(**kw))).patients  # type: ignore[arg-type]


def test_two_proportions_fleiss() -> None:
    # Fleiss, Levin & Paik (2003) eq. 4.14 without continuity correction, p1 = 0.8, p2 = 0.7, alpha 0.05, power 0.8:
    # n = (1.959964·sqrt(2·0.75·0.25) + 0.841621·sqrt(0.8·0.2 + 0.7·0.3))² / 0.1² = (1.200227 + 0.511936)² / 0.01
    #   = 293.15 positives a group -> at prevalence 0.5, 586.3 -> 587 patients
    assert _plan(metric="tpr", baseline=0.8, difference=-0.1, prevalence="0.5") == 587
    # FPR 0.2 -> 0.3 is the same pair of proportions, on the negatives: 293.15 / 0.7 = 418.8 -> 419
    assert _plan(metric="fpr", baseline=0.2, difference=0.1, prevalence="0.3") == 419
    # one image per patient: the ICC changes nothing (design effect 1 + 0·ICC)
    assert _plan(metric="tpr", baseline=0.8, difference=-0.1, prevalence="0.5", icc=0.5) == 587


def test_hanley_mcneil_variance_known_case() -> None:
    # A = 0.8, 50 positives and 50 negatives: Q1 = 0.8/1.2 = 0.666667, Q2 = 2·0.64/1.8 = 0.711111,
    # [0.16 + 49·0.026667 + 49·0.071111] / 2500 = 4.951111 / 2500 = 0.00198044 (SE 0.0445)
    assert hanley_mcneil_variance(0.8, 50, 50) == pytest.approx(4.951111 / 2500, rel=1e-5)
    # binormal, A = Φ(h) with h = 0: Q1 = Q2 = Φ2(0, 0; 0.5) = 1/4 + asin(0.5)/(2π) = 1/3; A = 0.5
    assert hanley_mcneil_variance(0.5, 10, 10, "binormal") == pytest.approx((0.25 + 18 * (1 / 3 - 0.25)) / 100)


def test_auc_plan_is_the_smallest_n_with_the_power() -> None:
    # AUC 0.8 vs 0.7, prevalence 0.5: per-unit HM variances (ignoring the -1s) V(A) = (Q1-A²)/0.5 + (Q2-A²)/0.5:
    # V(0.8) = 0.195556, V(0.7) = 0.269864, V(0.75) = 0.235714 (the pooled null); n ≈ (1.959964·sqrt(2·0.235714) +
    # 0.841621·sqrt(0.465420))² / 0.01 = (1.345724 + 0.574168)² / 0.01 = 368.6; the exact -1 terms move it by < 1%
    d = make_design(PlanOptions(metric="auc", baseline=0.8, difference=-0.1, prevalence="0.5"))
    n = plan_sample_size(d).patients
    assert abs(n - 368.6) <= 4
    assert normal_power(d, n) >= 0.8 > normal_power(d, n - 1)


def test_dsc_design_effect_and_tost_by_hand() -> None:
    # (z0.975 + z0.8)² · 2·0.1² / 0.02² = 7.848879 · 50 = 392.44 images -> 393 patients with one image each;
    # 4 images at ICC 0.3: 392.44 · 1.9 = 745.6 images -> 186.4 -> 187 patients
    assert _plan(metric="dsc", baseline=0.8, difference=0.02, dsc_sd=0.1) == 393
    assert _plan(metric="dsc", baseline=0.8, difference=0.02, dsc_sd=0.1, images_per_patient=4, icc=0.3) == 187
    # TOST, true difference 0: 2Φ(M/SE - z0.95) - 1 = 0.8 <=> M/SE = z0.95 + z0.9 = 2.926406;
    # n = 2.926406² · 2·0.01 / 0.02² = 428.19 -> 429; with 4 images at ICC 0.3: 428.19 · 1.9 / 4 = 203.4 -> 204
    assert _plan(metric="dsc", baseline=0.8, margin=0.02, dsc_sd=0.1) == 429
    assert _plan(metric="dsc", baseline=0.8, margin=0.02, dsc_sd=0.1, images_per_patient=4, icc=0.3) == 204
    # a true difference inside the margin needs more patients than none
    assert _plan(metric="dsc", baseline=0.8, margin=0.02, difference=0.005, dsc_sd=0.1) > 429


def test_named_prevalences_and_binormal_variance() -> None:
    # the rarer positives of M raise the count above both groups at 0.3; binormal Q's are below HM's Q2 here
    both = _plan(metric="auc", baseline=0.8, difference=-0.05, prevalence="0.3")
    named = _plan(metric="auc", baseline=0.8, difference=-0.05, prevalence="F=0.3,M=0.2")
    binormal = _plan(metric="auc", baseline=0.8, difference=-0.05, prevalence="0.3", auc_variance="binormal")
    assert named > both > binormal


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["plan", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_prints_the_plan_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "--metric", "tpr", "--baseline", "0.8", "--difference", "-0.1", "--prevalence",
                        "0.5", "--images-per-patient", "2", "--icc", "0.2")
    assert code == 0
    # 293.15 positive images · 1.2 = 351.8 -> 175.9 positive patients -> at prevalence 0.5, 351.8 -> 352
    assert "patients per group: 352 (704 images; 176 positive, 176 negative (prevalence 0.5)" in out
    assert "design effect 1 + (m-1)·ICC = 1.2" in out and "formula: smallest n" in out
    code, out, _ = _cli(capsys, "--metric", "dsc", "--baseline", "0.8", "--margin", "0.02", "--dsc-sd", "0.1",
                        "--json")
    doc = json.loads(out)
    assert code == 0 and doc["patients_per_group"] == 429 and doc["design"]["margin"] == 0.02
    assert doc["check"] is None and doc["groups"][0]["images"] == 429


@pytest.mark.parametrize("argv, words", [
    (["--baseline", "1.2", "--difference", "0.05", "--prevalence", "0.3"], "strictly between 0 and 1"),
    (["--baseline", "0.95", "--difference", "0.1", "--prevalence", "0.3"], "outside (0, 1)"),
    (["--baseline", "0.8", "--difference", "0.05", "--prevalence", "0.3", "--icc", "-0.1"], "--icc -0.1"),
    (["--baseline", "0.8", "--difference", "0.05", "--prevalence", "0.3", "--images-per-patient", "0"], "at least 1"),
    (["--baseline", "0.8", "--prevalence", "0.3"], "--difference is needed"),
    (["--baseline", "0.8", "--difference", "0", "--prevalence", "0.3"], "nonzero difference"),
    (["--baseline", "0.8", "--difference", "0.05", "--margin", "0.05", "--prevalence", "0.3"], "inside the margin"),
    (["--baseline", "0.8", "--difference", "0.05", "--margin", "-1", "--prevalence", "0.3"], "positive number"),
    (["--baseline", "0.8", "--difference", "0.05"], "--prevalence is needed"),
    (["--baseline", "0.8", "--difference", "0.05", "--prevalence", "1.5"], "one share in (0, 1)"),
    (["--baseline", "0.8", "--difference", "0.05", "--prevalence", "F=0.2"], "two named groups"),
    (["--baseline", "0.8", "--difference", "0.05", "--prevalence", "F=0.2,F=0.3"], "two named groups"),
    (["--baseline", "0.8", "--difference", "0.05", "--prevalence", "0.2,0.3"], "two named groups"),
    (["--baseline", "0.8", "--difference", "0.05", "--prevalence", "0.3", "--dsc-sd", "0.1"], "dsc only"),
    (["--metric", "dsc", "--baseline", "0.8", "--difference", "0.05"], "--dsc-sd is needed"),
    (["--metric", "dsc", "--baseline", "0.8", "--difference", "0.05", "--dsc-sd", "0.45"], "below 0.400"),
    (["--metric", "dsc", "--baseline", "0.8", "--difference", "0.05", "--dsc-sd", "0.1", "--prevalence", "0.3"],
     "does not apply to dsc"),
    (["--baseline", "0.8", "--difference", "0.05", "--prevalence", "0.3", "--power", "0.3"], "--power 0.3"),
    (["--baseline", "0.8", "--difference", "0.05", "--prevalence", "0.3", "--alpha", "0.7"], "--alpha 0.7"),
    (["--baseline", "0.8", "--difference", "0.05", "--prevalence", "0.3", "--check", "--replicates", "5"],
     "at least 10"),
    (["--baseline", "0.8", "--margin", "0.05", "--prevalence", "0.3", "--check", "--alpha", "0.1"], "90% one"),
    (["--baseline", "0.8", "--difference", "1e-6", "--prevalence", "0.3"], "more than 10,000,000"),
    (["--baseline", "0.8", "--difference", "0.02", "--prevalence", "0.3", "--check"], "images an audit"),
])
def test_refusals_are_one_line_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], words: str) -> None:
    code, out, err = _cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("benchmark: error: ") and words in err, err


def _icc(values: np.ndarray, patient: np.ndarray, m: int) -> float:
    """One-way ANOVA ICC of equal-sized clusters."""
    x = values.reshape(-1, m)
    msb = m * x.mean(axis=1).var(ddof=1)
    msw = x.var(axis=1, ddof=1).mean()
    return float((msb - msw) / (msb + (m - 1) * msw))


def test_simulated_audits_carry_the_asked_truth() -> None:
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    auc = make_design(PlanOptions(metric="auc", baseline=0.8, difference=-0.1, prevalence="F=0.3,M=0.5",
                                  images_per_patient=3, icc=0.4))
    a = simulate_audit(rng, auc, 4000)
    assert a.y is not None
    for g, want, prev in (("a", 0.8, 0.3), ("b", 0.7, 0.5)):
        k = a.group == g
        assert roc_auc_score(a.y[k], a.values[k]) == pytest.approx(want, abs=0.01)
        assert a.y[k].mean() == pytest.approx(prev, abs=1e-3)
    neg = (a.y == 0) & (a.group == "a")  # negatives' scores: the shared patient effect alone
    assert _icc(a.values[neg], a.patient[neg], 3) == pytest.approx(0.4, abs=0.05)
    tpr = make_design(PlanOptions(metric="tpr", baseline=0.8, difference=-0.2, prevalence="0.5", images_per_patient=4,
                                  icc=0.3))
    t = simulate_audit(rng, tpr, 6000)
    assert t.y is not None
    called = t.values > 0.5
    for g, want in (("a", 0.8), ("b", 0.6)):
        pos = (t.y == 1) & (t.group == g)
        assert called[pos].mean() == pytest.approx(want, abs=0.01)
        assert _icc(called[pos].astype(float), t.patient[pos], 4) == pytest.approx(0.3, abs=0.04)
    assert called[t.y == 0].mean() == 0  # negatives called right: FPR plays no part in a TPR audit
    dsc = make_design(PlanOptions(metric="dsc", baseline=0.8, difference=0.05, dsc_sd=0.1, images_per_patient=2,
                                  icc=0.5))
    s = simulate_audit(rng, dsc, 8000)
    assert s.y is None and 0 <= s.values.min() and s.values.max() <= 1
    for g, want in (("a", 0.8), ("b", 0.85)):
        k = s.group == g
        assert s.values[k].mean() == pytest.approx(want, abs=0.005)
        assert s.values[k].std() == pytest.approx(0.1, abs=0.005)
        assert _icc(s.values[k], s.patient[k], 2) == pytest.approx(0.5, abs=0.06)


def _check(replicates: int, **kw: object) -> float:
    plan = plan_sample_size(make_design(PlanOptions(**kw)))  # type: ignore[arg-type]
    return check_plan(plan, replicates, seed=1).power


@pytest.mark.parametrize("kw", [
    {"metric": "auc", "baseline": 0.8, "difference": -0.2, "prevalence": "0.5", "images_per_patient": 2, "icc": 0.3},
    {"metric": "fpr", "baseline": 0.2, "difference": 0.25, "prevalence": "0.5"},
    {"metric": "dsc", "baseline": 0.8, "margin": 0.06, "dsc_sd": 0.1},
])
def test_check_quick(kw: dict[str, object]) -> None:
    # the slow tests' cheaper sibling: 20 replicates of a small plan, bound widened by the binomial spread (sd 0.09)
    assert 0.5 <= _check(20, **kw) <= 1.0


def test_check_cli_reports_the_simulated_power(capsys: pytest.CaptureFixture[str]) -> None:
    # a check within ±10 points prints on stdout (exit 0), one that misses on stderr (exit 1)
    code, out, err = _cli(capsys, "--metric", "tpr", "--baseline", "0.8", "--difference", "-0.3", "--prevalence",
                          "0.5", "--check", "--replicates", "10")
    assert "check: simulated power " in (out if code == 0 else err) and code in (0, 1)


@pytest.mark.slow
@pytest.mark.parametrize("kw", [
    {"metric": "auc", "baseline": 0.8, "difference": -0.05, "prevalence": "0.3"},
    {"metric": "auc", "baseline": 0.8, "difference": -0.05, "prevalence": "0.3", "images_per_patient": 4, "icc": 0.3},
    {"metric": "auc", "baseline": 0.8, "difference": -0.05, "prevalence": "0.3", "auc_variance": "binormal"},
    {"metric": "tpr", "baseline": 0.8, "difference": -0.1, "prevalence": "0.3"},
    {"metric": "fpr", "baseline": 0.2, "difference": 0.1, "prevalence": "0.3", "images_per_patient": 3, "icc": 0.2},
    {"metric": "dsc", "baseline": 0.8, "difference": 0.02, "dsc_sd": 0.1, "images_per_patient": 4, "icc": 0.3},
    {"metric": "auc", "baseline": 0.8, "margin": 0.05, "prevalence": "0.5", "auc_variance": "binormal"},
])
def test_planned_n_reaches_the_power_by_simulation(kw: dict[str, object]) -> None:
    # the acceptance: 200 simulated audits at the planned size detect (or show equivalence) 80% ± 10 points
    assert abs(_check(200, **kw) - 0.8) <= 0.10


def test_planned_power_at_plan_size_is_not_below_asked() -> None:
    d = make_design(PlanOptions(metric="fpr", baseline=0.1, difference=0.05, prevalence="0.4", images_per_patient=5,
                                icc=0.1, power=0.9))
    n = plan_sample_size(d).patients
    assert normal_power(d, n) >= 0.9 > normal_power(d, n - 1) and math.isfinite(normal_power(d, 1))
