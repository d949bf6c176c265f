"""The metric engine's result: overall / by_group / gaps with CIs, skipped groups, tidy export."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

OVERALL = "__overall__"
GAP = "__gap__"


@dataclass
class AttributeReport:
    """All metrics of one task for one sensitive attribute (groups, overall and between-group values).

    `ci_notes[metric][group]` says why a finite value has no interval (a group below min_group_size, or a
    degenerate bootstrap distribution); `small_groups` lists the groups below min_group_size. `tests[metric]`
    holds the permutation test of a gap or two-group difference (p_value, p_adjusted, n_perm, alternative) and
    its bias-corrected value; `resampling` the unit (patient or row) and the number of units per group.
    """

    task: str
    attribute: str
    groups: list[str]
    counts: dict[str, dict[str, int]]
    values: dict[str, dict[str, tuple[float, float, float]]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    gap_notes: dict[str, str] = field(default_factory=dict)
    small_groups: list[str] = field(default_factory=list)
    worst_group: dict[str, str] = field(default_factory=dict)
    thresholds: dict[str, Any] = field(default_factory=dict)
    n_missing: int = 0
    ci_notes: dict[str, dict[str, str]] = field(default_factory=dict)
    tests: dict[str, dict[str, Any]] = field(default_factory=dict)
    resampling: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def value(self, metric: str, group: str = OVERALL) -> float:
        """Point value of `metric` for `group` (NaN when absent or undefined)."""
        return self.values.get(metric, {}).get(group, (math.nan,) * 3)[0]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AttributeReport:
        """The report back from its `to_dict` form (None becomes NaN); documents older than a key get its default."""
        values = {m: {g: (_nan(c["value"]), _nan(c["ci_low"]), _nan(c["ci_high"])) for g, c in per.items()}
                  for m, per in d["metrics"].items()}
        tests = {m: {k: (_nan(v) if k in TEST_KEYS else v) for k, v in t.items()}
                 for m, t in d.get("tests", {}).items()}
        return cls(d["task"], d["attribute"], list(d["groups"]), d["counts"], values, dict(d["skipped"]),
                   dict(d.get("gap_notes", {})), list(d.get("small_groups", [])), dict(d.get("worst_group", {})),
                   d["thresholds"], d.get("n_missing_attribute", 0), dict(d.get("ci_notes", {})), tests,
                   dict(d.get("resampling", {})), list(d.get("warnings", [])))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready nested form; NaN becomes None."""
        metrics: dict[str, Any] = {}
        for metric, per_group in self.values.items():
            metrics[metric] = {
                g: {"value": _num(v), "ci_low": _num(lo), "ci_high": _num(hi)} for g, (v, lo, hi) in per_group.items()
            }
            if metric in self.tests and GAP in metrics[metric]:
                metrics[metric][GAP].update({k: _num(self.tests[metric].get(k, math.nan)) for k in TEST_KEYS})
        return {
            "task": self.task,
            "attribute": self.attribute,
            "groups": list(self.groups),
            "counts": self.counts,
            "metrics": metrics,
            "skipped": dict(self.skipped),
            "gap_notes": dict(self.gap_notes),
            "small_groups": list(self.small_groups),
            "worst_group": dict(self.worst_group),
            "thresholds": self.thresholds,
            "n_missing_attribute": self.n_missing,
            "ci_notes": {m: dict(per) for m, per in self.ci_notes.items()},
            "tests": {m: {k: (_num(v) if isinstance(v, float) else v) for k, v in t.items()}
                      for m, t in self.tests.items()},
            "resampling": dict(self.resampling),
            "warnings": list(self.warnings),
        }


@dataclass
class FairnessResult:
    """Metrics for every (task, attribute); fairlearn-style views plus CIs and skipped-group records."""

    reports: list[AttributeReport]
    meta: dict[str, Any]

    def report(self, task: str | None = None, attribute: str | None = None) -> AttributeReport:
        """The report of one (task, attribute); either may be omitted when it is unique."""
        hits = [r for r in self.reports if (task is None or r.task == task)
                and (attribute is None or r.attribute == attribute)]
        if len(hits) != 1:
            raise KeyError(f"{len(hits)} reports match task={task!r} attribute={attribute!r}")
        return hits[0]

    def records(self) -> list[dict[str, Any]]:
        """Tidy rows: task, attribute, group, metric, value, ci_low, ci_high, n, the resampling unit and, on a
        tested between-group row, p_value, p_adjusted, bias_corrected and mde (NaN elsewhere)."""
        rows = []
        nan = math.nan
        for r in self.reports:
            n_all = r.counts.get(OVERALL, {}).get("n", 0)
            unit = r.resampling.get("unit", "row")
            for metric, per_group in r.values.items():
                test = r.tests.get(metric, {})
                for g, (v, lo, hi) in per_group.items():
                    n = n_all if g in (OVERALL, GAP) else r.counts.get(g, {}).get("n", 0)
                    t = test if g == GAP else {}
                    rows.append({"task": r.task, "attribute": r.attribute, "group": g, "metric": metric,
                                 "value": v, "ci_low": lo, "ci_high": hi, "n": n, "unit": unit,
                                 **{k: t.get(k, nan) for k in TEST_KEYS}})
        return rows

    def to_frame(self) -> pd.DataFrame:
        """Tidy pandas DataFrame of `records()`."""
        import pandas as pd

        frame: pd.DataFrame = pd.DataFrame(self.records(), columns=list(TIDY_COLUMNS))
        return frame

    def _pivot(self, which: str) -> pd.DataFrame:
        df = self.to_frame()
        if which == "groups":
            df = df[~df["group"].isin([OVERALL, GAP])]
            index = ["task", "attribute", "group"]
        else:
            df = df[df["group"] == which]
            index = ["task", "attribute"]
        table: pd.DataFrame = df.pivot_table(index=index, columns="metric", values="value", aggfunc="first",
                                             dropna=False)
        return table

    @property
    def overall(self) -> pd.DataFrame:
        """Point values on the whole population, one row per (task, attribute)."""
        return self._pivot(OVERALL)

    @property
    def by_group(self) -> pd.DataFrame:
        """Point values per group, one row per (task, attribute, group)."""
        return self._pivot("groups")

    @property
    def gaps(self) -> pd.DataFrame:
        """Between-group quantities (gaps, ES scores, worst group), one row per (task, attribute)."""
        return self._pivot(GAP)

    @property
    def skipped(self) -> dict[tuple[str, str], dict[str, str]]:
        """{(task, attribute): {group: reason}} for groups whose metrics are undefined."""
        return {(r.task, r.attribute): dict(r.skipped) for r in self.reports if r.skipped}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form of the whole result."""
        return {"meta": self.meta, "reports": [r.to_dict() for r in self.reports]}


#: the keys a tested between-group entry adds beside value / ci_low / ci_high
TEST_KEYS = ("p_value", "p_adjusted", "bias_corrected", "mde")
#: the tidy table's columns, in order
TIDY_COLUMNS = ("task", "attribute", "group", "metric", "value", "ci_low", "ci_high", "n", "unit", *TEST_KEYS)


def test_alternative(metric: str) -> str | None:
    """How a between-group quantity is tested: 'greater' for a gap or ratio (max - min, never below 0, so only a
    larger value than under exchangeable groups is evidence), 'two-sided' for a signed two-group difference, None
    for what is no difference (equity-scaled scores, worst-group values, counts)."""
    from fairmedbench.metrics.specs import find_spec

    spec = find_spec(metric)
    kind = spec.kind if spec else "gap" if metric.endswith("_gap") else "diff" if metric.endswith("_diff") else ""
    return {"gap": "greater", "ratio": "greater", "diff": "two-sided"}.get(kind)


#: the power a minimum detectable effect is stated at, and the level of each single test it assumes
MDE_POWER = 0.8
MDE_ALPHA = 0.05


def minimum_detectable_effect(null: np.ndarray, draws: np.ndarray, alternative: str) -> float:
    """The smallest true gap or |difference| this permutation test detects with MDE_POWER at level MDE_ALPHA:
    the null's critical value c (the (1 - alpha) quantile of the permuted statistic, |.| for a difference) plus
    z_power times the statistic's bootstrap standard error (the statistic ~ Normal(effect, se²) under the
    alternative, so P(statistic >= c) = power at effect = c + z_power·se). NaN without both resamplings."""
    from statistics import NormalDist

    null = null[np.isfinite(null)]
    draws = draws[np.isfinite(draws)]
    if null.size == 0 or draws.size < 2:
        return math.nan
    stat = np.abs(null) if alternative == "two-sided" else null
    crit = float(np.quantile(stat, 1.0 - MDE_ALPHA))
    return crit + NormalDist().inv_cdf(MDE_POWER) * float(draws.std(ddof=1))


def attach_tests(report: AttributeReport, point: dict[str, np.ndarray], boot: dict[str, list[np.ndarray]],
                 null: dict[str, np.ndarray], n_perm: int) -> None:
    """Record the permutation test (p_value, n_perm used, alternative), its minimum detectable effect and the
    bias-corrected value of every gap and two-group difference of `point` (between-group values, (1,) arrays);
    `boot` = their bootstrap draws. A difference also keeps its bootstrap 90% percentile interval
    (`tost_interval`): two one-sided tests at 5% declare it equivalent within ±m exactly when that interval lies
    inside (-m, m), so any margin can be applied later without the draws."""
    from fairmedbench.metrics import bootstrap as bs

    for m, v in point.items():
        alt = test_alternative(m)
        if alt is None or not n_perm or m not in null:  # a quantity the permutations do not compute is untested
            continue
        p, used = bs.permutation_p(float(v[0]), null.get(m, np.zeros(0)), alt)
        draws = np.concatenate(boot[m]) if m in boot else np.zeros(0)
        corrected = bs.bias_corrected(float(v[0]), draws) if alt == "greater" else math.nan
        report.tests[m] = {"p_value": p, "p_adjusted": math.nan, "bias_corrected": corrected,
                           "n_perm": used, "alternative": alt, "mde": minimum_detectable_effect(null[m], draws, alt)}
        finite = draws[np.isfinite(draws)]
        if alt == "two-sided" and finite.size >= 2:
            report.tests[m]["tost_interval"] = [float(q) for q in np.quantile(finite, [0.05, 0.95])]


def equivalent_within(test: dict[str, Any], margin: float) -> bool | None:
    """TOST at 5%: whether a tested difference is equivalent to 0 within ±margin (its 90% bootstrap interval
    inside (-margin, margin)); None when the test recorded no interval."""
    iv = test.get("tost_interval")
    if not iv or not all(np.isfinite(iv)):
        return None
    return bool(-margin < iv[0] and iv[1] < margin)


def parse_margins(text: str | None) -> dict[str, float]:
    """`--margin`: one value for every tested difference ('0.05') or metric=value pairs ('auc=0.02,ece=0.01', by
    the difference's metric); {} without one. InputError on anything else."""
    from fairmedbench.errors import InputError

    out: dict[str, float] = {}
    for part in [p.strip() for p in (text or "").split(",") if p.strip()]:
        name, eq, value = part.rpartition("=")
        try:
            margin = float(value)
        except ValueError:
            margin = math.nan
        if not (margin > 0 and math.isfinite(margin)) or (eq and not name.strip()):
            raise InputError(f"--margin {text}: {part!r} is not a positive number or metric=number (e.g. --margin "
                             "0.05, or --margin auc=0.02,ece=0.01)")
        out[name.strip() or "*"] = margin
    return out


def apply_margins(reports: list[AttributeReport], margins: dict[str, float]) -> None:
    """Stamp each tested two-group difference with its margin (by metric, else the '*' one) and whether TOST calls
    it equivalent within it (`equivalent_within`); in place, read by the verdict rule."""
    for r in reports:
        for m, test in r.tests.items():
            margin = margins.get(m.removesuffix("_diff"), margins.get("*"))
            if test.get("alternative") == "two-sided" and margin is not None:
                test["margin"] = margin
                test["equivalent"] = equivalent_within(test, margin)


def in_family(metric: str) -> bool:
    """Whether a tested metric is in the corrected family: a gap or difference that summaries and tables show."""
    from fairmedbench.metrics.specs import find_spec

    spec = find_spec(metric)
    return spec is not None and (spec.summary or spec.table)


def adjust_tests(reports: list[AttributeReport], method: str = "by") -> dict[str, Any]:
    """Adjust every p-value of a result together (one family: what one page shows), in place; the description
    for the result's meta."""
    from fairmedbench.metrics.stats import adjust_pvalues

    cells = [(r, m) for r in reports for m, t in r.tests.items() if np.isfinite(t["p_value"]) and in_family(m)]
    if cells:
        adj = adjust_pvalues([r.tests[m]["p_value"] for r, m in cells], method)
        for (r, m), a in zip(cells, adj):
            r.tests[m]["p_adjusted"] = float(a)
    return {"method": "permutation of the group label within label strata (whole patients where ids are known), "
                      "the operating threshold held fixed; p = (1 + #{permuted >= observed}) / (1 + #permutations), "
                      "|.| for signed differences",
            "correction": f"{method.upper()} over the {len(cells)} tests of this result's reported gaps and "
                          "differences (those the metric registry shows in summaries and tables: p_adjusted); the "
                          "other gaps keep a raw p_value only",
            "bias_corrected": "Efron's bootstrap bias correction 2*gap - mean(bootstrap gaps), clipped at 0: the "
                              "max - min of noisy group estimates is biased upward (positive even for identical "
                              "groups), and the bootstrap estimates that bias"}


def resampling_record(units_kind: str, n_clusters: dict[str, int]) -> dict[str, Any]:
    """The report's resampling block: unit ('patient' or 'row') and units per group (and overall)."""
    return {"unit": units_kind, "n_clusters": dict(n_clusters)}


def _nan(v: float | None) -> float:
    return math.nan if v is None else float(v)


def _num(v: float) -> float | None:
    return None if v is None or not np.isfinite(v) else float(v)


def gap_stats(per_group: dict[str, np.ndarray], defined: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """max - min, min and max over defined groups, per resample; NaN where < 2 groups are defined."""
    if not defined:
        nan = np.full(1, np.nan)
        return nan, nan, nan
    stack = np.vstack([per_group[g] for g in defined])
    valid = np.isfinite(stack)
    with np.errstate(invalid="ignore"):
        hi = np.where(valid, stack, -np.inf).max(axis=0)
        lo = np.where(valid, stack, np.inf).min(axis=0)
    enough = valid.sum(axis=0) >= 2
    gap = np.where(enough, hi - lo, np.nan)
    anyv = valid.any(axis=0)
    return gap, np.where(anyv, lo, np.nan), np.where(anyv, hi, np.nan)


def equity_scaled(overall: np.ndarray, per_group: dict[str, np.ndarray], defined: list[str]) -> np.ndarray:
    """overall / (1 + sum_g |value_g - overall|) over defined groups (FairCLIP/FairSeg form, alpha 1)."""
    if len(defined) < 2:
        return np.full_like(overall, np.nan)
    dev = sum(np.abs(per_group[g] - overall) for g in defined)
    scaled: np.ndarray = overall / (1.0 + dev)
    return scaled


def signed_differences(per_group: dict[str, dict[str, np.ndarray]], groups: list[str],
                       metrics: tuple[str, ...]) -> dict[str, np.ndarray]:
    """For an attribute with exactly two groups: `{m}_diff` = value(second group) - value(first group).

    Unlike a gap (max - min, never below 0), its bootstrap interval can include 0, so it shows whether a
    two-group difference is distinguishable from none. Groups are in the attribute's (sorted) order.
    """
    if len(groups) != 2:
        return {}
    first, second = groups
    return {f"{m}_diff": per_group[m][second] - per_group[m][first] for m in metrics if m in per_group}
