"""Metric engine speed against fairlearn's MetricFrame, measured in the same run, printed as ratios.

1. Stratified bootstrap, 100,000 samples x 4 groups: time per resample of ALL our classification metrics
   vs MetricFrame(n_boot=k) computing per-group AUC, TPR and FPR (target: >= 30x); the same per resample when
   whole patients are drawn (5 rows per patient), and per permutation of the permutation tests (rows, patients).
2. Point metrics, 1,000,000 samples x 8 groups: all our metrics vs MetricFrame's AUC/TPR/FPR
   (target: >= 10x), with our peak RSS measured in a fresh process (target: < 2 GB).
Times are this process's CPU time (time.process_time), so a machine shared with other jobs moves them little.
Usage: python benchmarks/metrics_speed.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def data(n: int, groups: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Labels, scores with some signal, and group codes."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    g = rng.integers(0, groups, n)
    s = 1 / (1 + np.exp(-(y * 1.5 - 0.75 + rng.normal(0, 1, n))))
    return y, s, g


def fairlearn_frame(y: np.ndarray, s: np.ndarray, g: np.ndarray, n_boot: int) -> float:
    """CPU seconds for a MetricFrame with per-group AUC, TPR and FPR (threshold 0.5)."""
    from fairlearn.metrics import MetricFrame, false_positive_rate, true_positive_rate
    from sklearn.metrics import roc_auc_score

    metrics = {"auc": roc_auc_score,
               "tpr": lambda yt, yp: true_positive_rate(yt, (yp >= 0.5).astype(int)),
               "fpr": lambda yt, yp: false_positive_rate(yt, (yp >= 0.5).astype(int))}
    kw = {"n_boot": n_boot, "ci_quantiles": [0.025, 0.975], "random_state": 0} if n_boot else {}
    t = time.process_time()
    MetricFrame(metrics=metrics, y_true=y, y_pred=s, sensitive_features=g, **kw)
    return time.process_time() - t


def ours(y: np.ndarray, s: np.ndarray, g: np.ndarray, n_boot: int, n_perm: int = 0,
         patients: np.ndarray | None = None) -> float:
    """CPU seconds for every classification metric of fairmedbench with `n_boot` resamples and `n_perm` permutations."""
    from fairmedbench.metrics import evaluate_classification

    t = time.process_time()
    evaluate_classification(y, s, {"g": g}, n_boot=n_boot, n_perm=n_perm, patient_ids=patients)
    return time.process_time() - t


def _child_point() -> None:
    y, s, g = data(1_000_000, 8)
    import resource

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    secs = ours(y, s, g, 0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": secs, "peak_rss_mb": peak / 1024, "rss_before_mb": base / 1024}))


def main() -> int:
    """Run both comparisons and print ratios against the targets."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer resamples")
    ap.add_argument("--child-point", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_point:
        _child_point()
        return 0
    k_fl, k_ours = (3, 100) if args.quick else (10, 500)
    y, s, g = data(100_000, 4)
    ours(y[:1000], s[:1000], g[:1000], 10)  # warm-up imports
    fl0, fl = fairlearn_frame(y, s, g, 0), fairlearn_frame(y, s, g, k_fl)
    o0, o = ours(y, s, g, 0), ours(y, s, g, k_ours)
    fl_per, o_per = max(fl - fl0, 1e-9) / k_fl, max(o - o0, 1e-9) / k_ours
    r1 = fl_per / o_per
    print(f"bootstrap, 100,000 x 4 groups: MetricFrame {fl_per * 1e3:.1f} ms/resample (AUC, TPR, FPR; k={k_fl}); "
          f"fairmedbench {o_per * 1e3:.2f} ms/resample (all metrics; k={k_ours}) -> {r1:.0f}x (target >= 30x) "
          f"{'PASS' if r1 >= 30 else 'FAIL'}")
    patients = np.arange(len(y)) // 5  # 20,000 patients of 5 rows (labels and groups vary within a patient)
    for what, kw in (("bootstrap drawing patients", dict(n_boot=k_ours, patients=patients)),
                     ("permutation test, rows", dict(n_boot=0, n_perm=k_ours)),
                     ("permutation test, patients", dict(n_boot=0, n_perm=k_ours, patients=patients))):
        per = max(ours(y, s, g, **kw) - o0, 1e-9) / k_ours
        print(f"{what}: fairmedbench {per * 1e3:.2f} ms per resample -> {fl_per / per:.0f}x MetricFrame's "
              "bootstrap resample")
    y, s, g = data(1_000_000, 8)
    fl_pt = fairlearn_frame(y, s, g, 0)
    child = subprocess.run([sys.executable, __file__, "--child-point"], capture_output=True, text=True, check=True)
    res = json.loads(child.stdout.strip().splitlines()[-1])
    r2 = fl_pt / res["seconds"]
    ok2 = r2 >= 10 and res["peak_rss_mb"] < 2048
    print(f"point, 1,000,000 x 8 groups: MetricFrame {fl_pt:.2f} s (AUC, TPR, FPR); "
          f"fairmedbench {res['seconds']:.2f} s (all metrics) -> {r2:.1f}x (target >= 10x); "
          f"fairmedbench peak RSS {res['peak_rss_mb']:.0f} MB "
          f"(process incl. data; target < 2048 MB) {'PASS' if ok2 else 'FAIL'}")
    return 0 if r1 >= 30 and ok2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
