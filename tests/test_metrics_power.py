"""Minimum detectable effects and equivalence (TOST) checked by simulation against a known truth: binormal scores
in two groups, with one image per patient or four correlated images per patient (the patient is resampled and
permuted whole). The method is stated in the README's paragraph on what a test could have found."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from fairmedbench.metrics import evaluate_classification
from fairmedbench.metrics.result import equivalent_within, minimum_detectable_effect

PHI = NormalDist()


def _sample(rng: np.random.Generator, n_patients: int, auc_a: float, auc_b: float, per_patient: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Labels, scores, groups and patient ids; each patient's images share its label, group and a N(0, 0.7²)
    patient effect, so the binormal AUC is Φ(μ / sqrt(2 (1 + 0.49 [several images]))) per group."""
    su2 = 0.49 if per_patient > 1 else 0.0
    y_p = rng.integers(0, 2, 2 * n_patients)
    g_p = np.repeat(["a", "b"], n_patients)
    mu = np.where(g_p == "a", auc_a, auc_b)
    mu = math.sqrt(2 * (1 + su2)) * np.array([PHI.inv_cdf(float(v)) for v in mu])
    u = rng.normal(0, math.sqrt(su2), 2 * n_patients) if su2 else np.zeros(2 * n_patients)
    rep = np.repeat(np.arange(2 * n_patients), per_patient)
    s = mu[rep] * y_p[rep] + u[rep] + rng.normal(0, 1, rep.size)
    return y_p[rep], 1 / (1 + np.exp(-s)), g_p[rep], rep


def _test(rng: np.random.Generator, n: int, auc_b: float, per_patient: int, n_boot: int = 200,
          n_perm: int = 199) -> dict[str, float]:
    y, s, g, pid = _sample(rng, n, 0.8, auc_b, per_patient)
    res = evaluate_classification(y, s, {"g": g}, n_boot=n_boot, n_perm=n_perm, seed=int(rng.integers(1 << 30)),
                                  patient_ids=pid if per_patient > 1 else None)
    return res.report().tests["auc_diff"]


def test_mde_hand_computed() -> None:
    # null |d| = 0..0.19 in steps of 0.01 (20 values): the 95% quantile (linear) is 0.1805; draws ±0.1 -> sd
    null = np.arange(20) / 100
    draws = np.array([-0.1, 0.1, -0.1, 0.1])
    sd = float(np.std(draws, ddof=1))
    assert minimum_detectable_effect(null, draws, "two-sided") == pytest.approx(0.1805 + PHI.inv_cdf(0.8) * sd)
    assert math.isnan(minimum_detectable_effect(null, draws[:1], "two-sided"))
    assert equivalent_within({"tost_interval": [-0.03, 0.04]}, 0.05) is True
    assert equivalent_within({"tost_interval": [-0.03, 0.06]}, 0.05) is False
    assert equivalent_within({}, 0.05) is None


def _mde_rates(per_patient: int, n: int, reps: int, seed: int, pilot: int = 10) -> tuple[float, float, float]:
    """(reported MDE, detection rate with the true effect equal to it, rejection rate with no effect)."""
    rng = np.random.default_rng(seed)
    mde = float(np.median([_test(rng, n, 0.8, per_patient)["mde"] for _ in range(pilot)]))
    hit = np.mean([_test(rng, n, 0.8 - mde, per_patient)["p_value"] < 0.05 for _ in range(reps)])
    null = np.mean([_test(rng, n, 0.8, per_patient)["p_value"] < 0.05 for _ in range(reps)])
    return mde, float(hit), float(null)


@pytest.mark.slow
@pytest.mark.parametrize("per_patient", [1, 4])
def test_mde_gives_80_percent_power_by_simulation(per_patient: int) -> None:
    mde, hit, null = _mde_rates(per_patient, 150, 200, seed=per_patient)
    assert 0.70 <= hit <= 0.90, (mde, hit)
    assert null <= 0.06, null


def test_mde_power_quick() -> None:
    # the slow test's cheaper sibling: 25 replicates, bounds widened by the binomial spread (sd ~ 0.08)
    mde, hit, null = _mde_rates(4, 60, 25, seed=7, pilot=5)
    assert 0.0 < mde < 0.5
    assert 0.5 <= hit <= 0.98, (mde, hit)
    assert null <= 0.2, null


def _equivalent_rate(auc_b: float, reps: int, n: int, margin: float, seed: int) -> float:
    rng = np.random.default_rng(seed)
    return float(np.mean([equivalent_within(_test(rng, n, auc_b, 1, n_boot=300, n_perm=20), margin)
                          for _ in range(reps)]))


@pytest.mark.slow
def test_tost_size_and_power_by_simulation() -> None:
    # at the margin (true difference = 0.05) "equivalent" is a false claim: at most 5% of 200; with no
    # difference and 2,000 patients a group, at least 80%
    assert _equivalent_rate(0.75, 200, 2000, 0.05, seed=1) <= 0.05
    assert _equivalent_rate(0.80, 200, 2000, 0.05, seed=2) >= 0.80


def test_tost_quick() -> None:
    assert _equivalent_rate(0.75, 20, 1000, 0.05, seed=3) <= 0.15
    assert _equivalent_rate(0.80, 20, 1500, 0.05, seed=4) >= 0.6


def test_margin_verdicts_equivalent_inconclusive_and_bad_margins() -> None:
    from fairmedbench.errors import InputError
    from fairmedbench.metrics.result import apply_margins, parse_margins
    from fairmedbench.report.verdicts import disparity, pair_answer

    assert parse_margins("0.05") == {"*": 0.05} and parse_margins(None) == {}
    assert parse_margins("auc=0.02, ece=0.01") == {"auc": 0.02, "ece": 0.01}
    for bad in ("-1", "x", "auc=", "=0.1", "auc=0"):
        with pytest.raises(InputError, match="--margin"):
            parse_margins(bad)
    rng = np.random.default_rng(0)
    y, s, g, _ = _sample(rng, 1500, 0.8, 0.8, 1)
    res = evaluate_classification(y, s, {"g": g}, n_boot=200, n_perm=99, seed=1)
    test = res.report().tests["auc_diff"]
    lo, hi = test["tost_interval"]
    assert lo < 0 < hi and test["mde"] > 0
    wide, narrow = 1.01 * max(-lo, hi), 0.99 * max(-lo, hi)
    apply_margins(res.reports, {"auc": wide})
    v = disparity(res.to_dict()["reports"][0], "auc_diff")
    assert v.key == "equivalent" and f"equivalent within ±{wide:g}" in v.sentence
    assert f"equivalent within ±{wide:g}" in pair_answer(res.to_dict()["reports"][0]).sentence
    apply_margins(res.reports, {"*": narrow})
    v = disparity(res.to_dict()["reports"][0], "auc_diff")
    assert v.key == "no-evidence"
    assert f"no evidence either way: this test could only detect differences ≥ {test['mde']:.3f}" in v.sentence
    assert f"not shown equivalent within ±{narrow:g}" in v.sentence
    assert f"not shown equivalent: AUC difference b − a within ±{narrow:g}" in pair_answer(
        res.to_dict()["reports"][0]).sentence
