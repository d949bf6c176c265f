"""Segmentation fairness from per-sample scores: group means, ΔDSC, ES-DSC, skewness, bootstrap CIs."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

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


def _analyse(d: np.ndarray, iou: np.ndarray | None, hd: np.ndarray | None, empty: np.ndarray, attr: Attribute,
             profile: Profile, n_boot: int, seed: int, ci_level: float, min_group_size: int,
             patient_ids: np.ndarray | None = None, n_perm: int = 0) -> AttributeReport:
    keep = attr.codes >= 0
    codes = attr.codes[keep]
    units = bs.make_units(codes, None if patient_ids is None else patient_ids[keep])
    d_k, hd_k, iou_k = d[keep], None if hd is None else hd[keep], None if iou is None else iou[keep]
    groups = list(attr.groups)
    idx = [np.nonzero(codes == g)[0] for g in range(len(groups))]
    order = np.concatenate(idx) if idx else np.zeros(0, dtype=np.int64)

    def run(ws: list[np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
        per: dict[str, dict[str, np.ndarray]] = {}

        def sub(a: np.ndarray | None, i: np.ndarray) -> np.ndarray | None:
            return None if a is None else a[i]

        for g, i, w in zip(groups, idx, ws):
            for m, v in _weighted(w, d_k[i], sub(hd_k, i), sub(iou_k, i)).items():
                per.setdefault(m, {})[g] = v
        w_all = np.concatenate(ws, axis=1)
        for m, v in _weighted(w_all, d_k[order], sub(hd_k, order), sub(iou_k, order)).items():
            per.setdefault(m, {})[OVERALL] = v
        return per

    def run_pooled(masks: list[np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
        """The same statistics with each group as 0/1 weights over all rows (a permutation's memberships)."""
        per: dict[str, dict[str, np.ndarray]] = {}
        for g, w in zip(groups, masks):
            for m, v in _weighted(w, d_k, hd_k, iou_k).items():
                per.setdefault(m, {})[g] = v
        for m, v in _weighted(np.ones_like(masks[0]), d_k, hd_k, iou_k).items():
            per.setdefault(m, {})[OVERALL] = v
        return per

    point = run([np.ones((1, len(i))) for i in idx])
    defined = {m: [g for g in groups if np.isfinite(point[m][g][0])] for m in point}
    point_between = _between(point, defined, profile)
    boot: dict[tuple[str, str], list[np.ndarray]] = {}
    one = np.zeros(len(codes), dtype=np.int64)  # segmentation samples carry no label: one stratum per group
    if n_boot > 0:
        rng = bs.stable_seed(seed, "segmentation", attr.name)
        strata = [bs.label_strata(units, i, one, (0,))[0] for i in idx]
        for start, stop in bs.chunks(n_boot, len(codes)):
            w = bs.unit_weights(rng, strata, units.n_units, stop - start)
            res = run([w[:, units.of_row[i]] for i in idx])
            for m, per_g in res.items():
                for g, v in per_g.items():
                    boot.setdefault((m, g), []).append(v)
            for m, v in _between(res, defined, profile).items():
                boot.setdefault((m, GAP), []).append(v)
    null: dict[str, list[np.ndarray]] = {}
    if n_perm > 0:
        # H0: the group label is exchangeable; units' group labels shuffled (no label strata in segmentation)
        rng = bs.stable_seed(seed, "segmentation", attr.name, "permutation")
        ugroup, all_units = bs.unit_group(units, codes), [bs.units_in_order(units, np.arange(len(codes)))]
        for start, stop in bs.chunks(n_perm, len(codes) * max(len(groups), 1)):
            perm = bs.permuted_groups(rng, all_units, ugroup, stop - start)[:, units.of_row]
            res = run_pooled([(perm == g).astype(np.float64) for g in range(len(groups))])
            for m, v in _between(res, defined, profile).items():
                null.setdefault(m, []).append(v)

    e = empty[keep]
    counts = {OVERALL: {"n": int(len(codes)), "n_empty_gt": int(e.sum())}}
    report = AttributeReport("segmentation", attr.name, groups, counts, n_missing=attr.n_missing)

    def triple(m: str, g: str, v: float) -> tuple[float, float, float]:
        if n_boot == 0 or not np.isfinite(v):
            return (float(v), math.nan, math.nan)
        if g in report.small_groups:
            why: str | None = bs.small_group_reason(counts[g]["n"], min_group_size)
            lo = hi = math.nan
        else:
            lo, hi, why = bs.interval(np.concatenate(boot[(m, g)]), ci_level)
        if why:
            report.ci_notes.setdefault(m, {})[g] = why
        return (float(v), lo, hi)
    for g, i in zip(groups, idx):
        counts[g] = {"n": int(len(i)), "n_empty_gt": int(e[i].sum())}
        if len(i) == 0:
            report.skipped[g] = "empty group: no samples, every metric undefined"
        if len(i) < min_group_size:
            report.small_groups.append(g)
    for m, per_g in point.items():
        report.values[m] = {g: triple(m, g, v[0]) for g, v in per_g.items()}
    for m, v in point_between.items():
        report.values.setdefault(m, {})[GAP] = triple(m, GAP, v[0])
    if len(defined["dsc"]) < 2:
        report.gap_notes["dsc_gap"] = f"fewer than two groups with a defined dsc ({len(defined['dsc'])})"
    if defined["dsc"]:
        report.worst_group["dsc"] = min(defined["dsc"], key=lambda g: point["dsc"][g][0])
    attach_tests(report, point_between, {m: v for (m, g), v in boot.items() if g == GAP},
                 {m: np.concatenate(v) for m, v in null.items()}, n_perm)
    n_units = bs.clusters_per_group(units, codes, len(groups))
    report.resampling = resampling_record(units.kind, {OVERALL: units.n_units, **dict(zip(groups, n_units))})
    return report
