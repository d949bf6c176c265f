"""Class imbalance (Mosquera et al.): how AUROC, AUPRC, balanced Brier and ECE of each group move as the class
prevalence varies (in the training or the test set). The values are the metric engine's own (`auc`, `ap`,
`balanced_brier`, `ece`, and the calibration loss of the Brier and of the balanced Brier, metrics.calibration, of
each run's result); this module summarises them across seeds per prevalence and fits
a line per (group, metric) whose slope interval says whether the metric moves with prevalence (AUROC is expected
flat, AUPRC and calibration not)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from fairmedbench.analysis.fairness_laws import LineFit, PointSummary, Rows, as_rows, line_fit, summarise_points
from fairmedbench.errors import InputError

if TYPE_CHECKING:
    pass

METRICS = ("auc", "ap", "balanced_brier", "ece", "calibration_loss", "balanced_calibration_loss")


@dataclass
class Imbalance:
    """Per (prevalence, group, metric) summaries across seeds and a line per (group, metric)."""

    prevalence_on: str
    points: list[PointSummary]
    fits: list[LineFit]
    notes: list[str] = field(default_factory=list)

    def frames(self) -> dict[str, Any]:
        """The two tables as pandas DataFrames: points (x = prevalence), fits."""
        import pandas as pd

        return {"points": pd.DataFrame([asdict(p) for p in self.points]).rename(columns={"x": "prevalence"}),
                "fits": pd.DataFrame([{**asdict(f), "slope_ci_includes_0": f.slope_ci_includes_0}
                                      for f in self.fits])}


def imbalance(rows: Rows, prevalence_on: str = "train", metrics: Sequence[str] = METRICS,
              level: float = 0.95) -> Imbalance:
    """Rows (x = prevalence, seed, group, metric, value; group 'all' for the whole population) -> summaries and
    fits. Prevalence must lie in (0, 1): a set of one class has no AUROC."""
    if prevalence_on not in ("train", "test"):
        raise InputError(f"prevalence_on={prevalence_on!r}: choose 'train' or 'test'")
    df = as_rows(rows)
    if ((df["x"] <= 0) | (df["x"] >= 1)).any():
        raise InputError("imbalance: x is a prevalence and must lie in (0, 1)")
    df = df[df["metric"].isin(metrics)]
    if df.empty:
        raise InputError(f"imbalance: no rows for the metrics {', '.join(metrics)}")
    points = summarise_points(df, level)
    fits = []
    for (metric, group), sub in itertools.groupby(sorted(points, key=lambda p: (p.metric, p.group, p.x)),
                                                  key=lambda p: (p.metric, p.group)):
        seeded = [p for p in sub if p.n_seeds > 0]
        fits.append(line_fit([p.x for p in seeded], [p.mean for p in seeded], group, metric, level))
    return Imbalance(prevalence_on, points, fits)
