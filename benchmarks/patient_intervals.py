"""Patient-level against row-level intervals and tests on the real NIH ChestX-ray14 predictions.

`preds.csv` (22,433 test images of a CheXNet reproduction) is joined to the official metadata on `Image Index`;
Effusion by sex:
1. the `auc_diff` interval resampling patients ("Patient ID") against resampling rows (width ratio);
2. calibration under a known null: the sex label is shuffled between PATIENTS (so no disparity exists) `--shuffles`
   times; how often does the 95% interval of `auc_diff` exclude 0, and how often is the permutation p < 0.05,
   resampling patients vs rows (nominal: 5%).
Reads $FMB_REAL_DATA (default ../shared/real). Usage: python benchmarks/patient_intervals.py [--shuffles 200]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def load(real: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Effusion labels, scores, sex and patient id of every image in preds.csv."""
    import pandas as pd

    nih = real / "nih-cxr14"
    preds = pd.read_csv(nih / "preds.csv")
    meta = pd.read_csv(nih / "Data_Entry_2017_v2020.csv.gz")
    df = preds.merge(meta, on="Image Index", how="inner")
    y = df["Finding Labels"].str.contains("Effusion").to_numpy().astype(int)
    return y, df["prob_Effusion"].to_numpy(), df["Patient Gender"].to_numpy().astype(str), \
        df["Patient ID"].to_numpy()


def main() -> None:
    """Print the width ratio and the null rejection rates."""
    from fairmedbench.metrics import evaluate_classification
    from fairmedbench.metrics.result import GAP

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shuffles", type=int, default=200)
    ap.add_argument("--n-boot", type=int, default=500)
    ap.add_argument("--n-perm", type=int, default=200)
    args = ap.parse_args()
    real = Path(os.environ.get("FMB_REAL_DATA", ROOT.parent / "shared" / "real"))
    if not (real / "nih-cxr14" / "preds.csv").exists():
        sys.exit(f"no NIH predictions under {real}: set FMB_REAL_DATA")
    y, s, sex, pid = load(real)
    per_patient = np.unique(pid, return_counts=True)[1]
    print(f"{len(y)} images of {len(per_patient)} patients (up to {per_patient.max()} images per patient), "
          f"{int(y.sum())} with Effusion")

    def one(sex_col: np.ndarray, patients: np.ndarray | None, n_boot: int, n_perm: int) -> tuple:
        rep = evaluate_classification(y, s, {"sex": sex_col}, n_boot=n_boot, n_perm=n_perm, patient_ids=patients,
                                      seed=0).report()
        v, lo, hi = rep.values["auc_diff"][GAP]
        return v, lo, hi, rep.tests.get("auc_diff", {}).get("p_value", np.nan)

    t = time.perf_counter()
    real_p = one(sex, pid, 2000, 1000)
    real_r = one(sex, None, 2000, 1000)
    print(f"Effusion auc_diff (M - F) = {real_p[0]:+.4f}")
    print(f"  patients: [{real_p[1]:+.4f}, {real_p[2]:+.4f}] width {real_p[2] - real_p[1]:.4f}, "
          f"permutation p = {real_p[3]:.3f}")
    print(f"  rows:     [{real_r[1]:+.4f}, {real_r[2]:+.4f}] width {real_r[2] - real_r[1]:.4f}, "
          f"permutation p = {real_r[3]:.3f}")
    print(f"  width ratio patients / rows: {(real_p[2] - real_p[1]) / (real_r[2] - real_r[1]):.2f}x "
          f"({time.perf_counter() - t:.1f} s)")

    # a known null: each PATIENT's sex label is redrawn from the observed patient-level labels
    upid, first = np.unique(pid, return_index=True)
    inv = np.searchsorted(upid, pid)
    patient_sex = sex[first]
    rng = np.random.default_rng(2026)
    hits = {"patients": [0, 0], "rows": [0, 0]}
    t = time.perf_counter()
    for k in range(args.shuffles):
        shuffled = rng.permutation(patient_sex)[inv]
        for name, patients in (("patients", pid), ("rows", None)):
            _, lo, hi, p = one(shuffled, patients, args.n_boot, args.n_perm)
            hits[name][0] += int(lo > 0 or hi < 0)
            hits[name][1] += int(p < 0.05)
        if (k + 1) % 20 == 0:
            print(f"  {k + 1}/{args.shuffles} shuffles ({time.perf_counter() - t:.0f} s)", file=sys.stderr)
    for name, (ci, test) in hits.items():
        print(f"null (sex shuffled between patients, {args.shuffles} times), resampling {name}: CI excludes 0 in "
              f"{100 * ci / args.shuffles:.1f}%, permutation p < 0.05 in {100 * test / args.shuffles:.1f}% "
              "(nominal 5%)")


if __name__ == "__main__":
    main()
