"""Multi-class / ordinal metrics: Cohen's kappa and the per-group multi-class evaluation (`evaluate_multiclass`).

Pure numpy. Definitions: fairmedbench/metrics/specs.py (the kappa rows). The uncertainty measures and the
uncertainty-based subgroup disparity δ of Lu et al. (2021) are in fairmedbench.analysis.uncertainty.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fairmedbench.errors import InputError
from fairmedbench.metrics import bootstrap as bs
from fairmedbench.metrics.auc import auc_from_sorted
from fairmedbench.metrics.defaults import CI_LEVEL, MIN_GROUP_SIZE
from fairmedbench.metrics.groups import Attribute
from fairmedbench.metrics.result import GAP, OVERALL, AttributeReport, FairnessResult
from fairmedbench.metrics.specs import gap_bases


def _labels_1d(x: ArrayLike, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise InputError(f"{name}: expected one class label per sample (1-D), got shape {arr.shape}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise InputError(f"{name}: contains NaN or infinite labels; drop or fix those samples")
    if arr.dtype.kind == "O" and any(v is None or (isinstance(v, float) and math.isnan(v)) for v in arr.tolist()):
        raise InputError(f"{name}: contains missing (None/NaN) labels; drop or fix those samples")
    return arr


def _label_set(y_true: np.ndarray, y_pred: np.ndarray, labels: Sequence[Any] | None) -> np.ndarray:
    """The ordered label set (sorted union, or `labels` as given); every label must be in it."""
    if labels is None:
        try:
            return np.unique(np.concatenate([y_true, y_pred]))
        except TypeError:
            raise InputError("y_true/y_pred: labels mix types that cannot be sorted; pass `labels`") from None
    lab = np.asarray(labels)
    if lab.ndim != 1 or lab.size == 0:
        raise InputError("labels: expected a non-empty 1-D list of class labels")
    if len(set(lab.tolist())) != lab.size:
        raise InputError("labels: contains duplicates")
    known = set(lab.tolist())
    for name, arr in (("y_true", y_true), ("y_pred", y_pred)):
        extra = sorted({str(v) for v in arr.tolist() if v not in known})
        if extra:
            raise InputError(f"{name}: values {extra[:5]} are not in `labels`; add them to `labels`")
    return lab


def _kappa_from_indices(ti: np.ndarray, pi: np.ndarray, k: int, weights: str | None) -> float:
    """Kappa from label indices in [0, k); NaN when the expected disagreement is 0."""
    n = ti.size
    if n == 0:
        return math.nan
    obs = np.bincount(ti * k + pi, minlength=k * k).reshape(k, k).astype(float)
    exp = np.outer(obs.sum(axis=1), obs.sum(axis=0)) / n
    idx = np.arange(k)
    if weights is None:
        w = 1.0 - np.eye(k)
    elif weights == "linear":
        w = np.abs(idx[:, None] - idx[None, :]).astype(float)
    else:
        w = ((idx[:, None] - idx[None, :]) ** 2).astype(float)
    denom = float(np.sum(w * exp))
    if denom == 0.0:
        return math.nan
    return 1.0 - float(np.sum(w * obs)) / denom


def cohen_kappa(
    y_true: ArrayLike, y_pred: ArrayLike, weights: str | None = None, labels: Sequence[Any] | None = None
) -> float:
    """Cohen's kappa; weights None, "linear" or "quadratic" by distance between label positions in
    `labels` (default: sorted union of the labels seen). NaN when undefined (no expected disagreement)."""
    if weights not in (None, "linear", "quadratic"):
        raise InputError(f"weights: must be None, 'linear' or 'quadratic', got {weights!r}")
    t = _labels_1d(y_true, "y_true")
    p = _labels_1d(y_pred, "y_pred")
    if t.size != p.size:
        raise InputError(f"y_true has {t.size} samples but y_pred has {p.size}; they must match")
    if t.size == 0:
        raise InputError("y_true: empty")
    lab = _label_set(t, p, labels)
    pos = {v: i for i, v in enumerate(lab.tolist())}
    ti = np.fromiter((pos[v] for v in t.tolist()), dtype=np.int64, count=t.size)
    pi = np.fromiter((pos[v] for v in p.tolist()), dtype=np.int64, count=p.size)
    return _kappa_from_indices(ti, pi, lab.size, weights)


# The same structure as the binary engine (metrics/classification.py): every metric comes from per-sample
# weights (ones for the point value, resample counts for the bootstrap), the bootstrap is stratified by the
# true class within each group (so each class's count per group is fixed), and the report is the binary
# engine's AttributeReport with its gaps, small-group and CI notes. The prediction is the argmax of the
# class probabilities (ties: lowest class index).

MC_KAPPA = {"kappa": None, "kappa_linear": "linear", "kappa_quadratic": "quadratic"}
#: the per-group metrics with a gap (metrics.specs.has_gap) but the per-class rates, whose names carry the class
MC_GAP_BASE = tuple(m for m in gap_bases("multiclass") if m != "class_tpr")
#: metrics whose best group is the reference of `<metric>_vs_best` (every one: all are higher-is-better)
MC_VS_BEST = MC_GAP_BASE
#: two-group attributes: `<metric>_diff` = second group - first, as the binary engine's (controls read these)
MC_DIFF_BASE = ("macro_auc", "balanced_accuracy")


def class_tpr_name(cls: str) -> str:
    """The per-class TPR (recall) metric of class `cls`: 'tpr:<cls>'."""
    return f"tpr:{cls}"


def _kappa_weights(k: int, weights: str | None) -> np.ndarray:
    idx = np.arange(k)
    if weights is None:
        return 1.0 - np.eye(k)
    d: np.ndarray = np.abs(idx[:, None] - idx[None, :]).astype(float)
    return d if weights == "linear" else d**2


class _MCBlock:
    """One subset's samples (group or population): its confusion cells and, per class, the one-vs-rest
    positives and negatives sorted by that class's probability."""

    def __init__(self, y: np.ndarray, pred: np.ndarray, s: np.ndarray, k: int) -> None:
        self.k = k
        self.cell = np.zeros((len(y), k * k))
        self.cell[np.arange(len(y)), y * k + pred] = 1.0
        self.ovr = []
        for c in range(k):
            pos, neg = np.flatnonzero(y == c), np.flatnonzero(y != c)
            op, on = np.argsort(s[pos, c], kind="stable"), np.argsort(s[neg, c], kind="stable")
            sp, sn = s[pos, c][op], s[neg, c][on]
            self.ovr.append((pos[op], neg[on], np.searchsorted(sn, sp, side="left"),
                             np.searchsorted(sn, sp, side="right")))

    def stats(self, w: np.ndarray) -> dict[str, np.ndarray]:
        """Every per-subset metric for each row of weights `w` (B, n)."""
        k = self.k
        conf = (w @ self.cell).reshape(-1, k, k)  # (B, true, predicted)
        total = conf.sum(axis=(1, 2))
        rows, cols = conf.sum(axis=2), conf.sum(axis=1)
        diag = np.diagonal(conf, axis1=1, axis2=2)
        out: dict[str, np.ndarray] = {}
        with np.errstate(divide="ignore", invalid="ignore"):
            recall = diag / rows  # NaN for a class without samples
            out["accuracy"] = diag.sum(axis=1) / total
            present = rows > 0
            out["balanced_accuracy"] = np.where(present.any(axis=1), np.nansum(recall, axis=1) / present.sum(axis=1),
                                                np.nan)
            expected = rows[:, :, None] * cols[:, None, :] / total[:, None, None]
            for name, wt in MC_KAPPA.items():
                wm = _kappa_weights(k, wt)
                denom = (wm * expected).sum(axis=(1, 2))
                # no expected disagreement (one class on both sides): kappa is undefined, never 0 or 1
                out[name] = np.where(denom > 0, 1.0 - (wm * conf).sum(axis=(1, 2)) / denom, np.nan)
            aucs = []
            for pos, neg, lo, hi in self.ovr:
                wn = w[:, neg]
                cn = np.zeros((w.shape[0], len(neg) + 1))
                np.cumsum(wn, axis=1, out=cn[:, 1:])
                aucs.append(auc_from_sorted(w[:, pos], cn, lo, hi))
            auc = np.stack(aucs, axis=1)  # (B, K); NaN for a class absent from the subset
            n_def = np.isfinite(auc).sum(axis=1)
            out["macro_auc"] = np.where(n_def > 0, np.nansum(auc, axis=1) / np.maximum(n_def, 1), np.nan)
        out["_recall"] = recall
        return out


#: |sum of a row's class probabilities - 1| above this is refused (here and by a board's submission check): float32
#: softmax outputs sum to 1 within ~1e-6 and probabilities rounded to 4 decimals (a CSV export) of 7 classes within
#: 3.5e-4, while unnormalised scores or a dropped class column are off by far more
PROB_SUM_TOLERANCE = 1e-3


def _as_class_scores(y_score: ArrayLike, k: int | None, logits: bool) -> np.ndarray:
    try:
        s = np.asarray(y_score, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError("y_score: class probabilities must be numbers") from None
    if s.ndim != 2 or s.shape[1] < 2 or s.shape[0] == 0:
        raise InputError(f"y_score: expected (n, C) class probabilities with C >= 2 columns, got shape {s.shape}")
    if k is not None and s.shape[1] != k:
        raise InputError(f"y_score has {s.shape[1]} class columns but {k} classes are named; one column per class")
    if not np.isfinite(s).all():
        raise InputError(f"y_score: {int((~np.isfinite(s)).sum())} NaN or infinite value(s); every sample needs "
                         "a finite probability per class")
    if logits:
        e = np.exp(s - s.max(axis=1, keepdims=True))
        probs: np.ndarray = e / e.sum(axis=1, keepdims=True)
        return probs
    if s.min() < 0 or s.max() > 1:
        raise InputError(f"y_score: class probabilities must be in [0, 1] (found min {s.min():g}, max "
                         f"{s.max():g}); if these are logits, say so (--logits / logits=True: softmax)")
    worst = float(np.abs(s.sum(axis=1) - 1.0).max())
    if worst > PROB_SUM_TOLERANCE:
        raise InputError(f"y_score: a sample's class probabilities must sum to 1 (softmax output); the largest "
                         f"deviation is {worst:.3g}. Pass all C class columns, or logits with logits=True")
    return s


def _as_class_index(y_true: ArrayLike, k: int) -> np.ndarray:
    arr = np.asarray(y_true)
    if arr.ndim != 1 or arr.size == 0:
        raise InputError(f"y_true: expected one integer class index per sample (1-D), got shape {arr.shape}")
    try:
        num = arr.astype(np.float64)
    except (TypeError, ValueError):
        raise InputError("y_true: class labels must be integer indices 0..C-1 (the score columns' order)") from None
    if np.isnan(num).any():
        raise InputError(f"y_true: {int(np.isnan(num).sum())} missing (NaN) labels; drop or fill those rows")
    bad = (num != np.round(num)) | (num < 0) | (num >= k)
    if bad.any():
        raise InputError(f"y_true: labels must be integer class indices 0..{k - 1} (one per score column), found "
                         f"{num[bad][0]:g}")
    return num.astype(np.int64)


def _mc_evaluate(blocks: list[_MCBlock], pop: _MCBlock, slots: list[np.ndarray], n: int, ws: list[np.ndarray],
                 groups: list[str], classes: list[str], pooled: bool = False) -> dict[str, dict[str, np.ndarray]]:
    """Per-group and population metrics for rows of weights; `pooled`: every block is the population and `ws`
    are a permutation's 0/1 memberships (the population's weights are all ones)."""
    b = ws[0].shape[0] if ws else 1
    w_all = np.ones((b, n)) if pooled else np.zeros((b, n))
    for sl, w in zip([] if pooled else slots, ws):
        w_all[:, sl] = w
    per: dict[str, dict[str, np.ndarray]] = {}
    for g, blk, w in [(OVERALL, pop, w_all)] + list(zip(groups, blocks, ws)):
        st = blk.stats(w)
        for m, v in st.items():
            if m == "_recall":
                for c, cls in enumerate(classes):
                    per.setdefault(class_tpr_name(cls), {})[g] = v[:, c]
            else:
                per.setdefault(m, {})[g] = v
    return per


def _mc_between(per: dict[str, dict[str, np.ndarray]], groups: list[str], defined: dict[str, list[str]],
                best: dict[str, str], classes: list[str]
                ) -> tuple[dict[str, np.ndarray], dict[str, dict[str, np.ndarray]]]:
    """Gaps (max - min over defined groups), worst-group values, two-group differences, and per group the signed
    difference to the group best on the point estimate (its identity fixed across resamples)."""
    from fairmedbench.metrics.result import gap_stats, signed_differences

    gaps: dict[str, np.ndarray] = {}
    for m in MC_GAP_BASE + tuple(class_tpr_name(c) for c in classes):
        gap, lo, _ = gap_stats(per[m], defined[m])
        gaps[f"{m}_gap"] = gap
        if m in ("macro_auc", "balanced_accuracy"):
            gaps[f"worst_group_{m}"] = lo
    for m, diff in signed_differences(per, groups, MC_DIFF_BASE).items():
        both = all(g in defined[m[:-len("_diff")]] for g in groups)
        gaps[m] = diff if both else np.full_like(diff, np.nan)
    vs_best: dict[str, dict[str, np.ndarray]] = {}
    for m in MC_VS_BEST:
        if m in best:
            vs_best[f"{m}_vs_best"] = {g: per[m][g] - per[m][best[m]] for g in defined[m]}
    return gaps, vs_best


def evaluate_multiclass(
    y_true: ArrayLike,
    y_score: ArrayLike,
    attributes: Mapping[str, ArrayLike | Attribute],
    *,
    classes: Sequence[str] | None = None,
    task_name: str = "task",
    bins: Mapping[str, Sequence[float]] | None = None,
    intersect: bool = False,
    n_boot: int = bs.N_BOOT,
    seed: int = 0,
    ci_level: float = CI_LEVEL,
    min_group_size: int = MIN_GROUP_SIZE,
    logits: bool = False,
    on_step: Callable[[int, int, str], None] | None = None,
    patient_ids: ArrayLike | None = None,
    n_perm: int = bs.N_PERM,
) -> FairnessResult:
    """Multi-class metrics per attribute and group with stratified bootstrap CIs (definitions:
    fairmedbench/metrics/specs.py, multi-class).

    `y_true` (n,) integer class indices 0..C-1; `y_score` (n, C) class probabilities (rows sum to 1; logits with
    `logits=True` go through the softmax); `classes` names the C columns (default '0'..'C-1'). Per group:
    macro one-vs-rest AUC (mean over the classes present in the group), balanced accuracy, accuracy, Cohen's
    kappa (unweighted, linear, quadratic) and per-class TPR `tpr:<class>` at the argmax; between groups:
    `<m>_gap`, `worst_group_<m>`, per group `<m>_vs_best` (value minus the best group's) and, for two groups,
    `<m>_diff` (second minus first, as in the binary engine). `patient_ids`: resample and permute whole patients;
    `n_perm` permutations test every gap and two-group difference (0 = none).
    """
    from fairmedbench.metrics.classification import (
        patient_column_values,
        resampling_unit_description,
        resolve_attributes,
    )
    from fairmedbench.metrics.result import adjust_tests

    bs.check_settings(n_boot, ci_level, min_group_size, n_perm)
    s = _as_class_scores(y_score, None if classes is None else len(classes), logits)
    k = s.shape[1]
    names = [str(c) for c in classes] if classes is not None else [str(c) for c in range(k)]
    if len(set(names)) != k:
        raise InputError(f"classes: names repeat ({names}); give each class once")
    y = _as_class_index(y_true, k)
    if len(y) != len(s):
        raise InputError(f"y_true has {len(y)} samples but y_score has {len(s)} rows; one row per sample")
    pred = np.argmax(s, axis=1)
    attrs = resolve_attributes(attributes, len(y), bins, intersect)
    pids = patient_column_values(patient_ids, len(y))
    reports = []
    for a in attrs:
        reports.append(_mc_analyse(y, pred, s, a, names, task_name, n_boot, seed, ci_level, min_group_size, pids,
                                   n_perm))
        if on_step is not None:
            on_step(len(reports), len(attrs), f"{task_name} / {a.name}")
    meta = {"kind": "multiclass", "profile": "default", "n_boot": n_boot, "seed": seed, "ci_level": ci_level,
            "ci_method": "percentile bootstrap, stratified by true class within each group; none for groups "
                         "below min_group_size or degenerate resamples (ci_notes)",
            "resampling_unit": resampling_unit_description(pids), "n_perm": n_perm,
            "tests": adjust_tests(reports) if n_perm else None,
            "min_group_size": min_group_size, "classes": names, "prediction": "argmax of the class probabilities "
            "(ties: lowest class index)", "macro_auc": "mean one-vs-rest AUC over the classes present in the "
            "evaluated samples (ties count 1/2)", "n_samples": int(len(y)), "tasks": [task_name],
            "attributes": [a.name for a in attrs]}
    return FairnessResult(reports, meta)


@dataclass(frozen=True)
class _MCRows:
    """One attribute's rows that have a group (`keep`): their true classes and group codes, each group's row
    positions and block, the population's block, the group and class names."""

    keep: np.ndarray
    y: np.ndarray
    codes: np.ndarray
    slots: list[np.ndarray]
    blocks: list[_MCBlock]
    pop: _MCBlock
    groups: list[str]
    classes: list[str]

    def evaluate(self, ws: list[np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
        """Per-group and population metrics for each row of the per-group weights `ws`."""
        return _mc_evaluate(self.blocks, self.pop, self.slots, len(self.y), ws, self.groups, self.classes)

    def evaluate_pooled(self, masks: list[np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
        """The same metrics with each group as a permutation's 0/1 memberships over all rows."""
        return _mc_evaluate([self.pop] * len(self.groups), self.pop, self.slots, len(self.y), masks, self.groups,
                            self.classes, pooled=True)


def _mc_rows(y: np.ndarray, pred: np.ndarray, s: np.ndarray, attr: Attribute, classes: list[str]) -> _MCRows:
    """The rows of `attr` with a group (code >= 0), split by group."""
    keep = attr.codes >= 0
    y, pred, s, codes = y[keep], pred[keep], s[keep], attr.codes[keep]
    k, groups = len(classes), list(attr.groups)
    slots = [np.flatnonzero(codes == g) for g in range(len(groups))]
    blocks = [_MCBlock(y[sl], pred[sl], s[sl], k) for sl in slots]
    return _MCRows(keep, y, codes, slots, blocks, _MCBlock(y, pred, s, k), groups, classes)


def _mc_bootstrap(rows: _MCRows, units: bs.Units, defined: dict[str, list[str]], best: dict[str, str],
                  n_boot: int, rng: np.random.Generator) -> dict[str, dict[str, list[np.ndarray]]]:
    """Every metric per group, the gaps and the differences to the best group over `n_boot` resamples."""
    boot: dict[str, dict[str, list[np.ndarray]]] = {}
    y, k = rows.y, len(rows.classes)
    # drawn within each (group, true class) cell, group by group: one row per patient is the row bootstrap
    strata = [st for sl in rows.slots for st in bs.label_strata(units, sl, y, range(k))]
    for start, stop in bs.chunks(n_boot, len(y) * k):
        w = bs.unit_weights(rng, strata, units.n_units, stop - start)
        res = rows.evaluate([w[:, units.of_row[sl]] for sl in rows.slots])
        g_res, v_res = _mc_between(res, rows.groups, defined, best, rows.classes)
        for m, per_g in list(res.items()) + list(v_res.items()):
            for g, v in per_g.items():
                boot.setdefault(m, {}).setdefault(g, []).append(v)
        for m, v in g_res.items():
            boot.setdefault(m, {}).setdefault(GAP, []).append(v)
    return boot


def _mc_null(rows: _MCRows, units: bs.Units, defined: dict[str, list[str]], best: dict[str, str], n_perm: int,
             rng: np.random.Generator) -> dict[str, list[np.ndarray]]:
    """The gaps over `n_perm` permutations of the units' groups within each true class."""
    null: dict[str, list[np.ndarray]] = {}
    y, k, n_groups = rows.y, len(rows.classes), len(rows.groups)
    pstrata, ugroup = bs.label_strata(units, np.arange(len(y)), y, range(k)), bs.unit_group(units, rows.codes)
    for start, stop in bs.chunks(n_perm, len(y) * k * max(n_groups, 1)):
        perm = bs.permuted_groups(rng, pstrata, ugroup, stop - start)[:, units.of_row]
        res = rows.evaluate_pooled([(perm == g).astype(np.float64) for g in range(n_groups)])
        for m, v in _mc_between(res, rows.groups, defined, best, rows.classes)[0].items():
            null.setdefault(m, []).append(v)
    return null


def _mc_empty_report(task: str, attr: Attribute, rows: _MCRows, min_group_size: int) -> AttributeReport:
    """The report before any value: counts per class, small groups, and groups empty or missing a class."""
    classes = rows.classes
    counts: dict[str, dict[str, int]] = {}
    for g, yy in [(OVERALL, rows.y)] + [(g, rows.y[sl]) for g, sl in zip(rows.groups, rows.slots)]:
        counts[g] = {"n": int(len(yy)), **{f"n:{c}": int((yy == i).sum()) for i, c in enumerate(classes)}}
    report = AttributeReport(task, attr.name, rows.groups, counts, n_missing=attr.n_missing)
    for g in rows.groups:
        if counts[g]["n"] < min_group_size:
            report.small_groups.append(g)
        absent = [c for c in classes if counts[g][f"n:{c}"] == 0]
        if counts[g]["n"] == 0:
            report.skipped[g] = "empty group: no samples, every metric undefined"
        elif absent:
            report.skipped[g] = (f"class(es) {', '.join(absent)} absent: their tpr undefined (NaN, left out of its "
                                 "gap); macro_auc averages the classes present, balanced_accuracy their recalls")
    return report


def _mc_triple(report: AttributeReport, best: dict[str, str], metric: str, group: str, value: float,
               draws: list[np.ndarray] | None, n_boot: int, min_group_size: int,
               ci_level: float) -> tuple[float, float, float]:
    """(value, low, high): no interval without a bootstrap, a finite value, or for the best group's own
    difference to itself; else the group's interval."""
    if n_boot == 0 or not np.isfinite(value):
        return (float(value), math.nan, math.nan)
    if metric.endswith("_vs_best") and best.get(metric[:-len("_vs_best")]) == group:
        report.ci_notes.setdefault(metric, {})[group] = "the reference (best) group: 0 by definition"
        return (float(value), math.nan, math.nan)
    n = report.counts[group]["n"] if group in report.counts else 0  # the gap "group" has no count (never small)
    return bs.group_interval(report, metric, group, value, n, draws, min_group_size, ci_level)


def _mc_notes(report: AttributeReport, point: dict[str, dict[str, np.ndarray]], defined: dict[str, list[str]],
              best: dict[str, str]) -> None:
    """Gaps left undefined, the worst group of the headline metrics, the argmax operating point and best groups."""
    for m, defs in defined.items():
        if len(defs) < 2:
            report.gap_notes[f"{m}_gap"] = f"fewer than two groups with a defined {m} ({len(defs)})"
    for m in ("macro_auc", "balanced_accuracy"):
        if defined[m]:
            report.worst_group[m] = min(defined[m], key=lambda g: point[m][g][0])
    report.thresholds = {"operating": {"policy": "argmax", "value": None, "comparator": "argmax"},
                         "best_group": dict(best)}


def _mc_analyse(y: np.ndarray, pred: np.ndarray, s: np.ndarray, attr: Attribute, classes: list[str], task: str,
                n_boot: int, seed: int, ci_level: float, min_group_size: int, patient_ids: np.ndarray | None = None,
                n_perm: int = 0) -> AttributeReport:
    """One attribute's report: metrics per group, gaps and differences to the best group, bootstrap intervals,
    permutation tests."""
    from fairmedbench.metrics.result import attach_tests, resampling_record

    rows = _mc_rows(y, pred, s, attr, classes)
    units = bs.make_units(rows.codes, None if patient_ids is None else patient_ids[rows.keep])
    groups = rows.groups
    point = rows.evaluate([np.ones((1, len(sl))) for sl in rows.slots])
    defined = {m: [g for g in groups if np.isfinite(point[m][g][0])] for m in point}
    best = {m: max(defined[m], key=lambda g: point[m][g][0]) for m in MC_VS_BEST if defined[m]}
    gaps, vs_best = _mc_between(point, groups, defined, best, classes)
    boot = _mc_bootstrap(rows, units, defined, best, n_boot, bs.stable_seed(seed, task, attr.name)
                         ) if n_boot > 0 else {}
    null = _mc_null(rows, units, defined, best, n_perm,
                    bs.stable_seed(seed, task, attr.name, "permutation")) if n_perm > 0 else {}
    report = _mc_empty_report(task, attr, rows, min_group_size)
    for m, per_g in list(point.items()) + list(vs_best.items()):
        report.values[m] = {g: _mc_triple(report, best, m, g, v[0], boot.get(m, {}).get(g), n_boot, min_group_size,
                                          ci_level) for g, v in per_g.items()}
    for m, v in gaps.items():
        report.values.setdefault(m, {})[GAP] = _mc_triple(report, best, m, GAP, v[0], boot.get(m, {}).get(GAP),
                                                          n_boot, min_group_size, ci_level)
    _mc_notes(report, point, defined, best)
    attach_tests(report, gaps, {m: per[GAP] for m, per in boot.items() if GAP in per},
                 {m: np.concatenate(v) for m, v in null.items()}, n_perm)
    n_units = bs.clusters_per_group(units, rows.codes, len(groups))
    report.resampling = resampling_record(units.kind, {OVERALL: units.n_units, **dict(zip(groups, n_units))})
    return report
