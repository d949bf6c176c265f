"""Segmentation fairness from per-sample scores: group means, ΔDSC, ES-DSC, skewness, bootstrap CIs."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from fairmedbench.errors import InputError
from fairmedbench.metrics import bootstrap as bs
from fairmedbench.metrics.classification import patient_column_values, resampling_unit_description, resolve_attributes
from fairmedbench.metrics.defaults import CI_LEVEL, MIN_GROUP_SIZE
from fairmedbench.metrics.groups import Attribute
from fairmedbench.metrics.profiles import Profile, get_profile
from fairmedbench.metrics.result import (
    GAP,
    OVERALL,
    AttributeReport,
    FairnessResult,
    adjust_tests,
    attach_tests,
    equity_scaled,
    gap_stats,
    resampling_record,
    signed_differences,
)
from fairmedbench.metrics.specs import gap_bases


def _per_sample(name: str, values: ArrayLike, n: int | None, allow_nan: bool = False) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise InputError(f"{name}: per-sample values must be numbers") from None
    if n is not None and len(arr) != n:
        raise InputError(f"length mismatch: {name} has {len(arr)} values, dsc has {n}")
    bad = ~np.isfinite(arr) if not allow_nan else np.isinf(arr)
    if bad.any():
        raise InputError(f"{name}: {int(bad.sum())} non-finite value(s); every sample needs a score")
    if name in ("dsc", "iou") and ((arr < 0) | (arr > 1)).any():
        raise InputError(f"{name}: values must be in [0, 1]")
    if name == "hd95" and (arr < 0).any():
        raise InputError(f"hd95: {int((arr < 0).sum())} negative distance(s); HD95 is >= 0 (pixels or mm)")
    return arr


def _weighted(w: np.ndarray, d: np.ndarray, h: np.ndarray | None, iou: np.ndarray | None) -> dict[str, np.ndarray]:
    """Group statistics of per-sample values for each row of weights."""
    tot = w.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = (w @ d) / tot
        dev = d[None, :] - mean[:, None]
        m2 = (w * dev**2).sum(axis=1) / tot
        m3 = (w * dev**3).sum(axis=1) / tot
        out = {"dsc": mean, "dsc_sample_skew": np.where(m2 > 0, m3 / m2**1.5, np.nan)}
        if iou is not None:
            out["iou"] = (w @ iou) / tot
        if h is not None:
            ok = np.isfinite(h)
            out["hd95"] = (w @ np.where(ok, h, 0.0)) / (w @ ok.astype(np.float64))
    return out


def _between(per: dict[str, dict[str, np.ndarray]], defined: dict[str, list[str]], profile: Profile
             ) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    gap, lo, hi = gap_stats(per["dsc"], defined["dsc"])
    out["dsc_gap"], out["worst_group_dsc"] = gap, lo
    out["dsc_es"] = equity_scaled(per["dsc"][OVERALL], per["dsc"], defined["dsc"])
    with np.errstate(divide="ignore", invalid="ignore"):
        out["dsc_skew_ratio"] = np.where(hi < 1.0, (1.0 - lo) / (1.0 - hi), np.nan)
    out["dsc_skew_ratio"] = np.where(np.isnan(gap), np.nan, out["dsc_skew_ratio"])
    for m in gap_bases("segmentation"):  # dsc's gap is above, with the worst group
        if m != "dsc" and m in per:
            out[f"{m}_gap"] = gap_stats(per[m], defined[m])[0]
    out.update(signed_differences(per, [g for g in per["dsc"] if g != OVERALL], ("dsc", "iou")))
    if profile.es_std_name and len(defined["dsc"]) >= 2:
        means = np.vstack([per["dsc"][g] for g in defined["dsc"]])
        out[profile.es_std_name] = per["dsc"][OVERALL] / (1.0 + means.std(axis=0))
    return out


def evaluate_segmentation(
    dsc: ArrayLike,
    attributes: Mapping[str, ArrayLike | Attribute],
    *,
    iou: ArrayLike | None = None,
    hd95: ArrayLike | None = None,
    empty_gt: ArrayLike | None = None,
    bins: Mapping[str, Sequence[float]] | None = None,
    intersect: bool = False,
    profile: str | Profile = "default",
    n_boot: int = bs.N_BOOT,
    seed: int = 0,
    ci_level: float = CI_LEVEL,
    min_group_size: int = MIN_GROUP_SIZE,
    patient_ids: ArrayLike | None = None,
    n_perm: int = bs.N_PERM,
) -> FairnessResult:
    """Group DSC (mean of per-sample DSC), ΔDSC, ES-DSC, skew ratio, per-sample skewness, IoU/HD95, with CIs.

    `dsc` holds one DSC per sample (or per volume for 3D); `empty_gt` flags samples whose ground truth is
    empty, counted per group. Profile 'fairmedfm' adds `es_dsc` = mean / (1 + population std of group
    means); profile 'fairseg' adds the same quantity as `dsc_es_std`. `patient_ids`: resample and permute whole
    patients; `n_perm` permutations test every gap and two-group difference (0 = none).
    """
    profile = get_profile(profile)
    bs.check_settings(n_boot, ci_level, min_group_size, n_perm)
    d = _per_sample("dsc", dsc, None)
    if len(d) == 0:
        raise InputError("dsc: no samples to evaluate")
    n = len(d)
    iou_a = None if iou is None else _per_sample("iou", iou, n)
    hd_a = None if hd95 is None else _per_sample("hd95", hd95, n, allow_nan=True)
    empty = np.zeros(n, dtype=bool) if empty_gt is None else np.asarray(empty_gt, dtype=bool).ravel()
    if len(empty) != n:
        raise InputError(f"length mismatch: empty_gt has {len(empty)} values, dsc has {n}")
    attrs = resolve_attributes(attributes, n, bins, intersect)
    pids = patient_column_values(patient_ids, n)
    reports = [_analyse(d, iou_a, hd_a, empty, a, profile, n_boot, seed, ci_level, min_group_size, pids, n_perm)
               for a in attrs]
    meta = {"kind": "segmentation", "profile": profile.name, "n_boot": n_boot, "seed": seed, "ci_level": ci_level,
            "ci_method": "percentile bootstrap, stratified by group; none for groups below min_group_size or "
                         "degenerate resamples (ci_notes)", "min_group_size": min_group_size,
            "resampling_unit": resampling_unit_description(pids), "n_perm": n_perm,
            "tests": adjust_tests(reports) if n_perm else None,
            "group_statistic": "mean of per-sample DSC (not pooled pixels)", "n_samples": n,
            "n_empty_gt": int(empty.sum()), "tasks": ["segmentation"], "attributes": [a.name for a in attrs]}
    return FairnessResult(reports, meta)


@dataclass(frozen=True)
class _Kept:
    """One attribute's rows that have a group (`keep`): their group codes, per-sample values, the group names, each
    group's row positions and every row group by group (the order of the bootstrap weights' columns)."""

    keep: np.ndarray
    codes: np.ndarray
    d: np.ndarray
    hd: np.ndarray | None
    iou: np.ndarray | None
    groups: list[str]
    idx: list[np.ndarray]
    order: np.ndarray


def _kept(d: np.ndarray, iou: np.ndarray | None, hd: np.ndarray | None, attr: Attribute) -> _Kept:
    """The rows of `attr` with a group (code >= 0), split by group."""
    keep = attr.codes >= 0
    codes = attr.codes[keep]
    idx = [np.nonzero(codes == g)[0] for g in range(len(attr.groups))]
    order = np.concatenate(idx) if idx else np.zeros(0, dtype=np.int64)
    return _Kept(keep, codes, d[keep], _take(hd, keep), _take(iou, keep), list(attr.groups), idx, order)


def _take(a: np.ndarray | None, i: np.ndarray) -> np.ndarray | None:
    return None if a is None else a[i]


def _group_stats(rows: _Kept, ws: list[np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """Each group's and the overall statistics for every row of the per-group weights `ws`."""
    per: dict[str, dict[str, np.ndarray]] = {}
    for g, i, w in zip(rows.groups, rows.idx, ws):
        for m, v in _weighted(w, rows.d[i], _take(rows.hd, i), _take(rows.iou, i)).items():
            per.setdefault(m, {})[g] = v
    w_all, o = np.concatenate(ws, axis=1), rows.order
    for m, v in _weighted(w_all, rows.d[o], _take(rows.hd, o), _take(rows.iou, o)).items():
        per.setdefault(m, {})[OVERALL] = v
    return per


def _pooled_stats(rows: _Kept, masks: list[np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """The same statistics with each group as 0/1 weights over all rows (a permutation's memberships)."""
    per: dict[str, dict[str, np.ndarray]] = {}
    for g, w in zip(rows.groups, masks):
        for m, v in _weighted(w, rows.d, rows.hd, rows.iou).items():
            per.setdefault(m, {})[g] = v
    for m, v in _weighted(np.ones_like(masks[0]), rows.d, rows.hd, rows.iou).items():
        per.setdefault(m, {})[OVERALL] = v
    return per


def _bootstrap(rows: _Kept, units: bs.Units, defined: dict[str, list[str]], profile: Profile, n_boot: int,
               rng: np.random.Generator) -> dict[tuple[str, str], list[np.ndarray]]:
    """Every group's statistics and the between-group values over `n_boot` resamples, keyed (metric, group)."""
    boot: dict[tuple[str, str], list[np.ndarray]] = {}
    one = np.zeros(len(rows.codes), dtype=np.int64)  # segmentation samples carry no label: one stratum per group
    strata = [bs.label_strata(units, i, one, (0,))[0] for i in rows.idx]
    for start, stop in bs.chunks(n_boot, len(rows.codes)):
        w = bs.unit_weights(rng, strata, units.n_units, stop - start)
        res = _group_stats(rows, [w[:, units.of_row[i]] for i in rows.idx])
        for m, per_g in res.items():
            for g, v in per_g.items():
                boot.setdefault((m, g), []).append(v)
        for m, v in _between(res, defined, profile).items():
            boot.setdefault((m, GAP), []).append(v)
    return boot


def _null(rows: _Kept, units: bs.Units, defined: dict[str, list[str]], profile: Profile, n_perm: int,
          rng: np.random.Generator) -> dict[str, list[np.ndarray]]:
    """The between-group values over `n_perm` permutations of the units' groups (H0: the group label is
    exchangeable; no label strata in segmentation)."""
    null: dict[str, list[np.ndarray]] = {}
    codes = rows.codes
    ugroup, all_units = bs.unit_group(units, codes), [bs.units_in_order(units, np.arange(len(codes)))]
    for start, stop in bs.chunks(n_perm, len(codes) * max(len(rows.groups), 1)):
        perm = bs.permuted_groups(rng, all_units, ugroup, stop - start)[:, units.of_row]
        res = _pooled_stats(rows, [(perm == g).astype(np.float64) for g in range(len(rows.groups))])
        for m, v in _between(res, defined, profile).items():
            null.setdefault(m, []).append(v)
    return null


def _empty_report(attr: Attribute, rows: _Kept, empty: np.ndarray, min_group_size: int) -> AttributeReport:
    """The report before any value: counts (with empty ground truths), empty and small groups."""
    counts = {OVERALL: {"n": int(len(rows.codes)), "n_empty_gt": int(empty.sum())}}
    report = AttributeReport("segmentation", attr.name, rows.groups, counts, n_missing=attr.n_missing)
    for g, i in zip(rows.groups, rows.idx):
        counts[g] = {"n": int(len(i)), "n_empty_gt": int(empty[i].sum())}
        if len(i) == 0:
            report.skipped[g] = "empty group: no samples, every metric undefined"
        if len(i) < min_group_size:
            report.small_groups.append(g)
    return report


def _triple(report: AttributeReport, metric: str, group: str, value: float, draws: list[np.ndarray] | None,
            n_boot: int, min_group_size: int, ci_level: float) -> tuple[float, float, float]:
    """(value, low, high): no interval without a bootstrap or a finite value, else the group's interval."""
    if n_boot == 0 or not np.isfinite(value):
        return (float(value), math.nan, math.nan)
    n = report.counts[group]["n"] if group in report.counts else 0  # the gap "group" has no count (never small)
    return bs.group_interval(report, metric, group, value, n, draws, min_group_size, ci_level)


def _analyse(d: np.ndarray, iou: np.ndarray | None, hd: np.ndarray | None, empty: np.ndarray, attr: Attribute,
             profile: Profile, n_boot: int, seed: int, ci_level: float, min_group_size: int,
             patient_ids: np.ndarray | None = None, n_perm: int = 0) -> AttributeReport:
    """One attribute's report: group statistics, between-group values, bootstrap intervals, permutation tests."""
    rows = _kept(d, iou, hd, attr)
    units = bs.make_units(rows.codes, _take(patient_ids, rows.keep))
    point = _group_stats(rows, [np.ones((1, len(i))) for i in rows.idx])
    defined = {m: [g for g in rows.groups if np.isfinite(point[m][g][0])] for m in point}
    point_between = _between(point, defined, profile)
    boot = _bootstrap(rows, units, defined, profile, n_boot, bs.stable_seed(seed, "segmentation", attr.name)
                      ) if n_boot > 0 else {}
    null = _null(rows, units, defined, profile, n_perm,
                 bs.stable_seed(seed, "segmentation", attr.name, "permutation")) if n_perm > 0 else {}
    report = _empty_report(attr, rows, empty[rows.keep], min_group_size)
    for m, per_g in point.items():
        report.values[m] = {g: _triple(report, m, g, v[0], boot.get((m, g)), n_boot, min_group_size, ci_level)
                            for g, v in per_g.items()}
    for m, v in point_between.items():
        report.values.setdefault(m, {})[GAP] = _triple(report, m, GAP, v[0], boot.get((m, GAP)), n_boot,
                                                       min_group_size, ci_level)
    if len(defined["dsc"]) < 2:
        report.gap_notes["dsc_gap"] = f"fewer than two groups with a defined dsc ({len(defined['dsc'])})"
    if defined["dsc"]:
        report.worst_group["dsc"] = min(defined["dsc"], key=lambda g: point["dsc"][g][0])
    attach_tests(report, point_between, {m: v for (m, g), v in boot.items() if g == GAP},
                 {m: np.concatenate(v) for m, v in null.items()}, n_perm)
    n_units = bs.clusters_per_group(units, rows.codes, len(rows.groups))
    report.resampling = resampling_record(units.kind, {OVERALL: units.n_units, **dict(zip(rows.groups, n_units))})
    return report
