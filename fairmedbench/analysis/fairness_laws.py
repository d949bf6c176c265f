"""Fairness laws (Meissen et al.): how each group's metric moves with the share of one group in a training set of
fixed size. Per share and group: the metric across seeds (mean, t interval); per group an ordinary least-squares
line of the share means against the share (slope with a t interval, intercept, Pearson r with its Fisher-z
interval); the interpolation MAE (the line through the two extreme shares' means, scored at the interior shares);
and Welch's t-test between groups at the balanced share. Definitions: fairmedbench/metrics/stats.py.

The x axis is always the share of `share_group` (the swept group), for every group: the swept group's line rises
where the other group's falls.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
from scipy import stats as sps

from fairmedbench.errors import InputError
from fairmedbench.metrics.specs import metric_spec
from fairmedbench.metrics.stats import seed_summary, welch_test

if TYPE_CHECKING:
    import pandas as pd

ROW_COLUMNS = ("x", "seed", "group", "metric", "value")


@dataclass(frozen=True)
class PointSummary:
    """One (x, group, metric): the metric across seeds (undefined seeds left out and counted)."""

    x: float
    group: str
    metric: str
    n_seeds: int
    n_undefined: int
    mean: float
    std: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class LineFit:
    """OLS line of the per-x means of one (group, metric) against x. NaN with `note` where undefined."""

    group: str
    metric: str
    n_points: int
    slope: float
    slope_ci_low: float
    slope_ci_high: float
    intercept: float
    r: float
    r_ci_low: float
    r_ci_high: float
    p_value: float
    interp_mae: float
    n_interior: int
    note: str | None = None

    @property
    def slope_ci_includes_0(self) -> bool:
        """Whether the slope's interval includes 0 (False when it is undefined)."""
        return bool(self.slope_ci_low <= 0 <= self.slope_ci_high)


@dataclass(frozen=True)
class GroupTest:
    """Welch's t-test of group_a - group_b across seeds at one x (the balanced share)."""

    metric: str
    x: float
    group_a: str
    group_b: str
    mean_a: float
    mean_b: float
    t: float
    df: float
    p_value: float
    note: str | None = None


@dataclass
class FairnessLaws:
    """The whole analysis of one sweep."""

    share_group: str
    points: list[PointSummary]
    fits: list[LineFit]
    balanced: list[GroupTest]
    notes: list[str] = field(default_factory=list)

    def frames(self) -> dict[str, Any]:
        """The three tables as pandas DataFrames: points, fits, balanced."""
        import pandas as pd

        return {"points": pd.DataFrame([asdict(p) for p in self.points]),
                "fits": pd.DataFrame([{**asdict(f), "slope_ci_includes_0": f.slope_ci_includes_0}
                                      for f in self.fits]),
                "balanced": pd.DataFrame([asdict(b) for b in self.balanced])}


#: sweep rows: a DataFrame, or one mapping per row (x, seed, group, metric, value)
Rows: TypeAlias = "pd.DataFrame | Iterable[Mapping[str, object]]"


def as_rows(rows: Rows) -> pd.DataFrame:
    """The input as a DataFrame with columns x, seed, group, metric, value; an InputError says what is missing."""
    import pandas as pd

    df = rows.copy() if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    missing = [c for c in ROW_COLUMNS if c not in df.columns]
    if missing:
        raise InputError(f"sweep rows: missing column(s) {', '.join(missing)}; each row needs "
                         f"{', '.join(ROW_COLUMNS)}")
    if df.empty:
        raise InputError("sweep rows: empty; give one row per (x, seed, group, metric)")
    try:
        df["x"] = df["x"].astype(float)
        df["value"] = df["value"].astype(float)
    except (TypeError, ValueError) as exc:
        raise InputError(f"sweep rows: x and value must be numbers ({exc})") from None
    if not np.isfinite(df["x"]).all():
        raise InputError("sweep rows: x has NaN or infinite values; every row needs the swept value")
    dup = df.duplicated(["x", "seed", "group", "metric"])
    if dup.any():
        first = df[dup].iloc[0]
        raise InputError(f"sweep rows: {int(dup.sum())} duplicate (x, seed, group, metric) rows, first "
                         f"x={first['x']}, seed={first['seed']}, group={first['group']!r}, metric={first['metric']!r}; "
                         "two runs answer the same sweep point")
    df["group"] = df["group"].astype(str)
    return df


def summarise_points(df: pd.DataFrame, level: float = 0.95) -> list[PointSummary]:
    """Mean, std and t interval across seeds of every (x, group, metric), clipped to the metric's bounds."""
    out = []
    for (_, group, metric), sub in df.groupby(["x", "group", "metric"], sort=True):
        x = float(sub["x"].iloc[0])  # the point's x (as_rows made it float)
        vals = sub["value"].to_numpy(dtype=float)
        ok = vals[np.isfinite(vals)]
        if ok.size == 0:
            out.append(PointSummary(x, str(group), str(metric), 0, int(vals.size), *(math.nan,) * 4))
            continue
        s = seed_summary(ok, bounds=metric_spec(str(metric)).bounds, level=level)
        out.append(PointSummary(x, str(group), str(metric), s.n, int(vals.size - ok.size), s.mean, s.std,
                                s.ci_low, s.ci_high))
    return out


def line_fit(x: Sequence[float], y: Sequence[float], group: str, metric: str, level: float = 0.95) -> LineFit:
    """OLS of y on x (scipy linregress): slope ± t_{n-2}·stderr, Pearson r with scipy's Fisher-z interval
    (n >= 4), and the interpolation MAE of the line through the two extreme x's at the interior x's."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    order = np.argsort(xs, kind="stable")
    xs, ys = xs[order], ys[order]
    n = xs.size
    nan = math.nan
    if n < 3 or np.unique(xs).size < 3:
        return LineFit(group, metric, n, *(nan,) * 9, n_interior=0,
                       note=f"{np.unique(xs).size} distinct shares: a line with an interval needs at least 3")
    interior = slice(1, n - 1)
    line = ys[0] + (ys[-1] - ys[0]) * (xs[interior] - xs[0]) / (xs[-1] - xs[0])
    mae = float(np.mean(np.abs(line - ys[interior])))
    if np.ptp(ys) == 0:
        return LineFit(group, metric, n, 0.0, 0.0, 0.0, float(ys[0]), nan, nan, nan, nan, mae, n - 2,
                       note="the metric is the same at every share: Pearson r is undefined")
    reg = sps.linregress(xs, ys)
    half = float(sps.t.ppf(0.5 + level / 2, n - 2)) * float(reg.stderr)
    note = None
    if n >= 4:
        ci = sps.pearsonr(xs, ys).confidence_interval(confidence_level=level)
        r_lo, r_hi = float(ci.low), float(ci.high)
    else:
        r_lo = r_hi = nan
        note = "3 shares: the Fisher-z interval of r needs at least 4"
    return LineFit(group, metric, n, float(reg.slope), float(reg.slope) - half, float(reg.slope) + half,
                   float(reg.intercept), float(reg.rvalue), r_lo, r_hi, float(reg.pvalue), mae, n - 2, note)


def balanced_share(xs: Iterable[float], target: float = 0.5) -> float:
    """The swept value closest to `target` (the lower one on a tie)."""
    vals = sorted(set(float(v) for v in xs))
    return min(vals, key=lambda v: (abs(v - target), v))


def fairness_laws(rows: Rows, share_group: str, metrics: Sequence[str] = ("auc", "sauroc"),
                  level: float = 0.95) -> FairnessLaws:
    """The fairness-law analysis of sweep rows (x = the share of `share_group` in the training set, seed, group,
    metric, value): per-share summaries, a line per (group, metric), the Welch test at the balanced share."""
    df = as_rows(rows)
    if ((df["x"] < 0) | (df["x"] > 1)).any():
        raise InputError("fairness laws: x is a training share and must lie in [0, 1]")
    df = df[df["metric"].isin(metrics)]
    if df.empty:
        raise InputError(f"fairness laws: no rows for the metrics {', '.join(metrics)}")
    points = summarise_points(df, level)
    fits, notes = [], []
    for (group, metric), sub in itertools.groupby(sorted(points, key=lambda p: (p.metric, p.group, p.x)),
                                                  key=lambda p: (p.group, p.metric)):
        seeded = [p for p in sub if p.n_seeds > 0]
        fits.append(line_fit([p.x for p in seeded], [p.mean for p in seeded], group, metric, level))
    x0 = balanced_share(df["x"])
    if x0 != 0.5:
        notes.append(f"no run at share 0.5: groups are compared at the closest share, {x0:g}")
    balanced = []
    at = df[df["x"] == x0]
    for metric in metrics:
        m = at[at["metric"] == metric]
        groups = sorted(m["group"].unique())
        for a, b in itertools.combinations(groups, 2):
            va = m[m["group"] == a].sort_values("seed")["value"].to_numpy(dtype=float)
            vb = m[m["group"] == b].sort_values("seed")["value"].to_numpy(dtype=float)
            va, vb = va[np.isfinite(va)], vb[np.isfinite(vb)]
            if va.size < 2 or vb.size < 2:
                balanced.append(GroupTest(metric, x0, a, b, float(np.mean(va)) if va.size else math.nan,
                                          float(np.mean(vb)) if vb.size else math.nan, math.nan, math.nan, math.nan,
                                          "Welch's test needs at least 2 seeds with a defined value per group"))
                continue
            w = welch_test(va, vb)
            balanced.append(GroupTest(metric, x0, a, b, float(va.mean()), float(vb.mean()), w.t, w.df, w.p_value,
                                      w.note))
    return FairnessLaws(share_group, points, fits, balanced, notes)
