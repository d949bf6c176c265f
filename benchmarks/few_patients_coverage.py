"""Why a group needs 10 patients (analysis.data_checks.MIN_PATIENTS): the coverage of a group's AUC interval
(patient-level percentile bootstrap) by the number of patients in the group, against a known truth.

Each patient has 10 images; a patient effect u ~ N(0, 1) is shared by its images; label ~ Bernoulli(0.5) per
image; score = sigmoid(label + u + e), e ~ N(0, 1). The AUC over images of different patients is then
Phi(1 / 2) = 0.691 exactly. Two groups of k patients each; how often does group F's 95% interval contain 0.691?
Usage: python benchmarks/few_patients_coverage.py [--reps 200] [--patients 2,3,5,10,40]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def coverage(k: int, reps: int, images: int = 10, n_boot: int = 200) -> float:
    """Share of `reps` simulated data sets whose group-F AUC interval holds the true AUC."""
    from scipy.stats import norm

    from fairmedbench.metrics import evaluate_classification

    truth, hits = norm.cdf(0.5), 0
    for r in range(reps):
        rng = np.random.default_rng(r)
        pid = np.repeat(np.arange(2 * k), images)
        y = rng.integers(0, 2, len(pid))
        s = 1 / (1 + np.exp(-(y + rng.normal(0, 1, 2 * k)[pid] + rng.normal(0, 1, len(pid)))))
        res = evaluate_classification(y, s, {"g": np.where(pid < k, "F", "M").astype(object)}, n_boot=n_boot,
                                      n_perm=0, patient_ids=pid.astype(str), min_group_size=1,
                                      threshold="fixed:0.5")
        _, lo, hi = res.reports[0].values["auc"]["F"]
        hits += int(lo <= truth <= hi)
    return hits / reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--patients", default="2,3,5,10,40")
    args = ap.parse_args()
    for k in (int(v) for v in args.patients.split(",")):
        print(f"{k:3d} patients per group: coverage {coverage(k, args.reps):.3f} (nominal 0.95, {args.reps} data sets)")


if __name__ == "__main__":
    main()
