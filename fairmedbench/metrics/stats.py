"""Statistics for fairness results: multiple-testing correction, KS tests between groups,
summaries across training seeds, Welch's t-test, and Friedman/Nemenyi over many datasets.

Pure numpy/scipy (scipy.stats is imported where a test needs it: its import is most of `evaluate`'s start-up).
Each function's docstring defines its statistic.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fairmedbench.errors import InputError

ADJUST_METHODS = ("by", "bh", "holm", "bonferroni", "none")


def _as_finite_1d(x: ArrayLike, name: str) -> np.ndarray:
    """A finite 1-D float array, or an InputError naming `name`."""
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name}: expected numbers, got values numpy cannot read as float ({exc})") from None
    if arr.ndim != 1:
        raise InputError(f"{name}: expected a 1-D array, got shape {arr.shape}")
    bad = ~np.isfinite(arr)
    if bad.any():
        raise InputError(
            f"{name}: {int(bad.sum())} of {arr.size} values are NaN or infinite "
            f"(first at index {int(np.flatnonzero(bad)[0])}); remove or impute them first"
        )
    return arr


def group_labels(groups: ArrayLike, n: int, name: str = "groups") -> tuple[np.ndarray, list[Any]]:
    """Validate a column of group labels of length n; return it and its sorted distinct labels."""
    g = np.asarray(groups)
    if g.ndim != 1:
        raise InputError(f"{name}: expected one label per sample (1-D), got shape {g.shape}")
    if g.shape[0] != n:
        raise InputError(f"{name}: has {g.shape[0]} labels but there are {n} samples; they must match")
    missing = np.array([v is None or (isinstance(v, float) and math.isnan(v)) for v in g.tolist()], dtype=bool)
    if missing.any():
        raise InputError(
            f"{name}: {int(missing.sum())} labels are missing (None/NaN), first at index "
            f"{int(np.flatnonzero(missing)[0])}; label them (e.g. 'unknown') or drop those rows"
        )
    try:
        uniq = np.unique(g)
    except TypeError:
        raise InputError(f"{name}: labels mix types that cannot be sorted (e.g. str and int); use one type") from None
    return g, uniq.tolist()


def adjust_pvalues(p: ArrayLike, method: str = "by") -> np.ndarray:
    """Multiple-testing adjusted p-values, clipped to [0, 1], in the input order.

    by: Benjamini–Yekutieli (default), bh: Benjamini–Hochberg (both step-up, FDR), holm: Holm
    step-down (FWER), bonferroni: m·p, none: p unchanged.
    """
    if method not in ADJUST_METHODS:
        raise InputError(f"method: unknown correction {method!r}; choose one of {', '.join(ADJUST_METHODS)}")
    pv = _as_finite_1d(p, "p")
    if ((pv < 0) | (pv > 1)).any():
        raise InputError("p: p-values must lie in [0, 1]")
    m = pv.size
    adjusted: np.ndarray
    if m == 0 or method == "none":
        adjusted = pv.copy()
    elif method in ("bh", "by"):
        adjusted = _fdr_step_up(pv, method == "by")
    elif method == "bonferroni":
        adjusted = np.minimum(pv * m, 1.0)
    else:  # Holm: scipy has no Holm adjustment (statsmodels does, but is not a dependency for three lines)
        order = np.argsort(pv, kind="stable")
        adjusted = np.empty(m)
        adjusted[order] = np.minimum(np.maximum.accumulate((m - np.arange(m)) * pv[order]), 1.0)
    return adjusted


def _fdr_step_up(pv: np.ndarray, by: bool) -> np.ndarray:
    """Benjamini-Hochberg (`by`: Benjamini-Yekutieli) adjusted p-values, the operations of
    scipy.stats.false_discovery_control in its order (so bit-identical to it) without importing scipy.stats."""
    out: np.ndarray = pv.copy()
    if pv.size <= 1:
        return out
    m = pv.size
    order = np.argsort(pv)
    ps = pv[order]
    i = np.arange(1, m + 1, dtype=ps.dtype)
    ps *= m / i
    if by:
        ps *= np.sum(1 / i)
    np.minimum.accumulate(ps[::-1], out=ps[::-1])
    out[order] = ps
    np.clip(out, 0.0, 1.0, out=out)
    return out


@dataclass(frozen=True)
class KSRecord:
    """One two-sample KS test: `feature` compared between groups `group_a` and `group_b` of `variable`, on the
    rows `within` names (both empty when the family has one variable and all rows)."""

    feature: str
    group_a: Hashable
    group_b: Hashable
    n_a: int
    n_b: int
    statistic: float
    p_value: float
    p_adjusted: float
    reject: bool
    variable: str = ""
    within: str = ""


@dataclass(frozen=True)
class KSResult:
    """All pairwise KS tests, corrected together; `reject` means p_adjusted <= alpha."""

    records: tuple[KSRecord, ...]
    correction: str
    alpha: float
    n_tests: int
    skipped: dict[Hashable, str]
    note: str | None


def correct_ks(records: Sequence[KSRecord], correction: str, alpha: float) -> list[KSRecord]:
    """The records with their p-values adjusted together by `correction`, `reject` = p_adjusted <= alpha."""
    adjusted = adjust_pvalues([r.p_value for r in records], correction) if records else np.empty(0)
    return [replace(r, p_adjusted=float(q), reject=bool(q <= alpha)) for r, q in zip(records, adjusted)]


def ks_between_groups(
    values: ArrayLike,
    groups: ArrayLike,
    feature_names: Sequence[str] | None = None,
    correction: str = "by",
    alpha: float = 0.05,
) -> KSResult:
    """Two-sample KS test (scipy ks_2samp, two-sided) for every unordered group pair and feature,
    with every p-value of the family corrected together by `correction`."""
    from scipy import stats as sps

    if correction not in ADJUST_METHODS:
        raise InputError(f"correction: unknown method {correction!r}; choose one of {', '.join(ADJUST_METHODS)}")
    if not (0 < alpha < 1):
        raise InputError(f"alpha: must be in (0, 1), got {alpha}")
    try:
        x = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise InputError("values: expected numbers (n,) or (n, d)") from None
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2:
        raise InputError(f"values: expected shape (n,) or (n, d), got {x.shape}")
    bad = ~np.isfinite(x)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise InputError(
            f"values: {int(bad.sum())} entries are NaN or infinite (first at row {r}, column {c}); "
            "remove or impute them first"
        )
    n, d = x.shape
    if feature_names is None:
        names = [str(j) for j in range(d)] if d > 1 else ["value"]
    else:
        names = [str(f) for f in feature_names]
        if len(names) != d:
            raise InputError(f"feature_names: {len(names)} names given for {d} feature columns")
    g, uniq = group_labels(groups, n)

    skipped: dict[Hashable, str] = {}
    usable = []
    for lab in uniq:
        cnt = int(np.sum(g == lab))
        if cnt < 2:
            skipped[lab] = f"only {cnt} sample(s); a KS test needs at least 2 per group"
        else:
            usable.append(lab)
    raw = []
    for j, name in enumerate(names):
        for a, b in itertools.combinations(usable, 2):
            xa, xb = x[g == a, j], x[g == b, j]
            res = sps.ks_2samp(xa, xb, alternative="two-sided")
            p = float(res.pvalue)
            raw.append(KSRecord(name, a, b, int(xa.size), int(xb.size), float(res.statistic), p, p, False))
    note = None
    if not raw:
        note = f"fewer than two groups with >= 2 samples ({len(usable)} usable): no pairs to test"
    records = tuple(correct_ks(raw, correction, alpha))
    return KSResult(records, correction, float(alpha), len(records), skipped, note)


@dataclass(frozen=True)
class SeedSummary:
    """Mean over training seeds with sample std (ddof=1) and a Student-t CI (clipped to the metric's bounds)."""

    n: int
    mean: float
    std: float
    ci_low: float
    ci_high: float
    level: float = 0.95
    clipped: bool = False


def seed_summary(values: ArrayLike, bounds: tuple[float, float] | None = None, level: float = 0.95) -> SeedSummary:
    """n, mean, std (ddof=1) and the t interval mean ± t_{n-1}·std/√n (NaN std and CI when n < 2).

    With few seeds the normal quantile 1.96 is far too narrow (t_1 = 12.7 at 95%). `bounds` (e.g. (0, 1) for
    an AUC, see MetricSpec.bounds) clips the interval to the values the metric can take; `clipped` says so.
    """
    from scipy import stats as sps

    v = _as_finite_1d(values, "values")
    if v.size == 0:
        raise InputError("values: empty; give one result per training seed")
    if not 0.0 < level < 1.0:
        raise InputError(f"level: must be in (0, 1), got {level}")
    mean = float(v.mean())
    if v.size < 2:
        return SeedSummary(1, mean, math.nan, math.nan, math.nan, level)
    std = float(v.std(ddof=1))
    half = float(sps.t.ppf(0.5 + level / 2.0, v.size - 1)) * std / math.sqrt(v.size)
    lo, hi = mean - half, mean + half
    clipped = False
    if bounds is not None:
        clipped = lo < bounds[0] or hi > bounds[1]
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return SeedSummary(int(v.size), mean, std, lo, hi, level, clipped)


@dataclass(frozen=True)
class WelchResult:
    """Welch's unequal-variance t-test of mean(a) − mean(b), two-sided."""

    t: float
    df: float
    p_value: float
    mean_diff: float
    n_a: int
    n_b: int
    note: str | None


def welch_test(a: ArrayLike, b: ArrayLike) -> WelchResult:
    """Welch's t-test between two configurations' per-seed results (scipy ttest_ind, equal_var=False)."""
    from scipy import stats as sps

    a = _as_finite_1d(a, "a")
    b = _as_finite_1d(b, "b")
    for name, arr in (("a", a), ("b", b)):
        if arr.size < 2:
            raise InputError(f"{name}: needs at least 2 values (seeds) for a variance, got {arr.size}")
    diff = float(a.mean() - b.mean())
    if a.var(ddof=1) == 0 and b.var(ddof=1) == 0:
        return WelchResult(math.nan, math.nan, math.nan, diff, a.size, b.size,
                           "both samples have zero variance: Welch's t is undefined")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        res = sps.ttest_ind(a, b, equal_var=False)
    note = None
    if caught:  # e.g. precision loss on nearly identical values: say so in the result, not on stderr
        note = f"scipy warned: {caught[0].message}"
    return WelchResult(float(res.statistic), float(res.df), float(res.pvalue), diff, a.size, b.size, note)


@dataclass(frozen=True)
class FriedmanResult:
    """Friedman test over datasets and the Nemenyi critical difference of average ranks."""

    method_names: tuple[str, ...]
    avg_ranks: dict[str, float]
    n_datasets: int
    k_methods: int
    chi2: float
    p_value: float
    q_alpha: float
    cd: float
    alpha: float
    higher_is_better: bool
    significant_pairs: tuple[tuple[str, str, float], ...]
    note: str | None


def friedman_nemenyi(
    scores: ArrayLike,
    method_names: Sequence[str],
    higher_is_better: bool = True,
    alpha: float = 0.05,
) -> FriedmanResult:
    """Average ranks (1 = best, ties averaged), Friedman chi² and p, Nemenyi CD (Demšar 2006) and
    the method pairs whose average-rank difference exceeds CD."""
    from scipy import stats as sps

    try:
        s = np.asarray(scores, dtype=float)
    except (TypeError, ValueError):
        raise InputError("scores: expected a numeric matrix (n_datasets, k_methods)") from None
    if s.ndim != 2:
        raise InputError(f"scores: expected shape (n_datasets, k_methods), got {s.shape}")
    if not np.isfinite(s).all():
        raise InputError("scores: contains NaN or infinite values; every method needs a score on every dataset")
    n, k = s.shape
    names = tuple(str(m) for m in method_names)
    if len(names) != k:
        raise InputError(f"method_names: {len(names)} names for {k} score columns")
    if len(set(names)) != k:
        raise InputError("method_names: names must be distinct")
    if k < 2 or n < 1:
        raise InputError(f"scores: need at least 2 methods and 1 dataset, got shape {s.shape}")
    if not (0 < alpha < 1):
        raise InputError(f"alpha: must be in (0, 1), got {alpha}")
    ranks = sps.rankdata(-s if higher_is_better else s, axis=1, method="average")
    avg = ranks.mean(axis=0)
    note = None
    if k >= 3 and n >= 2:
        res = sps.friedmanchisquare(*s.T)
        chi2, p = float(res.statistic), float(res.pvalue)
    else:
        chi2 = p = math.nan
        note = f"Friedman test needs k >= 3 methods and n >= 2 datasets (got k={k}, n={n}); chi2 and p are NaN"
    q = float(sps.studentized_range.ppf(1 - alpha, k, np.inf) / math.sqrt(2))
    cd = q * math.sqrt(k * (k + 1) / (6.0 * n))
    pairs = tuple(
        (names[i], names[j], float(abs(avg[i] - avg[j])))
        for i, j in itertools.combinations(range(k), 2)
        if abs(avg[i] - avg[j]) > cd
    )
    return FriedmanResult(
        names, {m: float(r) for m, r in zip(names, avg)}, n, k, chi2, p, q, cd, float(alpha),
        bool(higher_is_better), pairs, note,
    )
