"""Epistemic uncertainty and subgroup disparity, after Lu, Lemay, Hoebel & Kalpathy-Cramer, "Evaluating
subgroup disparity using epistemic uncertainty in mammography", ICML 2021 Workshop on Interpretable ML in
Healthcare, arXiv:2107.02716 (Eqs. 1-5).

(Not Mehta, Shui & Arbel, "Evaluating the Fairness of Deep Learning Uncertainty Estimates in Medical Image
Analysis", MIDL 2023: that paper studies fairness methods' effect on uncertainty and defines no δ.)

From T Monte-Carlo-dropout samples p_t (n cases, C classes) of class probabilities: four per-case measures
(higher = more uncertain), rejection curves per group (performance on the cases kept as the most uncertain
are referred, thresholds global over all cases) and the disparity δ over retention levels. numpy/scipy only.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fairmedbench.errors import InputError
from fairmedbench.metrics.auc import auc

MEASURES = ("naive", "variance", "entropy", "bhattacharyya")
PERFORMANCE = ("kappa", "kappa_quadratic", "accuracy", "auc")
PAIR_AGGREGATIONS = ("sum", "mean")
MIN_GROUP_N = 10  # a group with fewer kept cases than this at some retention is named in the notes
_PROB_TOL = 1e-4


def binary_as_classes(p_positive: ArrayLike) -> np.ndarray:
    """Sigmoid outputs (..., ) of a binary task as two-class probabilities (..., 2): [1 - p, p]."""
    p = np.asarray(p_positive, dtype=float)
    return np.stack([1.0 - p, p], axis=-1)


def check_mc(mc: ArrayLike, name: str = "MC samples") -> np.ndarray:
    """(T, n, C) class probabilities with T >= 2, C >= 2, finite, in [0, 1], each row summing to 1."""
    try:
        arr = np.asarray(mc, dtype=float)
    except (TypeError, ValueError):
        raise InputError(f"{name}: expected numeric class probabilities") from None
    if arr.ndim != 3:
        raise InputError(f"{name}: expected shape (T samples, n cases, C classes), got {arr.shape}")
    t, _, c = arr.shape
    if t < 2:
        raise InputError(f"{name}: MC dropout needs T >= 2 samples per case, got {t}; give --mc-samples 2 or more")
    if c < 2:
        raise InputError(f"{name}: needs at least 2 classes, got {c} (a binary task: use binary_as_classes)")
    if not np.isfinite(arr).all():
        raise InputError(f"{name}: contains NaN or infinite probabilities; drop or fix those cases")
    if (arr < -_PROB_TOL).any() or (arr > 1 + _PROB_TOL).any():
        raise InputError(f"{name}: values outside [0, 1]; give softmax/sigmoid probabilities, not logits")
    if np.abs(arr.sum(axis=-1) - 1.0).max() > _PROB_TOL:
        raise InputError(f"{name}: the class probabilities of a case must sum to 1 (softmax outputs)")
    return np.clip(arr, 0.0, 1.0)


def uncertainty_measures(mc: ArrayLike, n_bins: int = 10) -> dict[str, np.ndarray]:
    """The four measures of Lu et al. (Eqs. 1-4) per case, from MC samples (T, n, C); p̄ = mean over t.

    naive = 1 − max_c p̄_c;  variance = (1/C) Σ_c Var_t(p_t,c) (population variance, ddof 0);
    entropy = −(1/C) Σ_c p̄_c ln p̄_c (Eq. 3 keeps the 1/C; 0·ln 0 = 0);
    bhattacharyya = (1/N) Σ_{b=1..N} sqrt(h¹_b h²_b), h¹, h² the histograms (N = `n_bins` equal-width bins on
    [0, 1], bin = min(floor(p·N), N−1), each normalised to sum 1) of the T samples of the two classes with the
    highest p̄ (ties: lower class index): high when the two leading classes' sampled probabilities overlap.
    The constant factors 1/C and 1/N never change which cases a quantile threshold keeps, hence neither the
    rejection curves nor δ.
    """
    arr = check_mc(mc)
    if not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise InputError(f"n_bins: must be a positive integer, got {n_bins!r}")
    t, n, c = arr.shape
    mean = arr.mean(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(mean > 0, mean * np.log(mean), 0.0)
    top2 = np.argsort(-mean, axis=1, kind="stable")[:, :2]
    vals = np.take_along_axis(arr, np.broadcast_to(top2[None], (t, n, 2)), axis=2)
    bins = np.minimum(np.floor(vals * n_bins).astype(np.int64), n_bins - 1)
    hist = np.zeros((n, 2, n_bins))
    np.add.at(hist, (np.broadcast_to(np.arange(n)[None, :, None], bins.shape),
                     np.broadcast_to(np.arange(2)[None, None, :], bins.shape), bins), 1.0 / t)
    return {"naive": 1.0 - mean.max(axis=1),
            "variance": arr.var(axis=0).mean(axis=1),
            "entropy": -plogp.sum(axis=1) / c,
            "bhattacharyya": np.sqrt(hist[:, 0] * hist[:, 1]).sum(axis=1) / n_bins}


def patient_average(mc: np.ndarray, patient_ids: Sequence[Hashable] | np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Per-patient MC samples: for each pass t, the mean of the patient's per-image class probabilities.

    Returns ((T, n_patients, C), index of each patient's first image); patients in order of first appearance.
    """
    arr = np.asarray(mc, dtype=float)
    ids = np.asarray(patient_ids, dtype=object)
    if ids.shape != (arr.shape[1],):
        raise InputError(f"patient ids: {ids.shape[0]} given for {arr.shape[1]} cases; they must match")
    _, first, inverse = np.unique(ids.astype(str), return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    code = rank[inverse]
    sums = np.zeros((arr.shape[0], order.size, arr.shape[2]))
    np.add.at(sums, (slice(None), code), arr)  # type: ignore[arg-type]  # numpy's stubs reject this valid index
    return sums / np.bincount(code)[None, :, None], first[order]


def retention_grid(step: float = 0.05, lowest: float = 0.5) -> tuple[float, ...]:
    """Retention fractions 1.0, 1 − step, ..., down to `lowest` (inclusive when it falls on the grid)."""
    if not (0 < step <= 0.5) or not (0 < lowest <= 1):
        raise InputError(f"retention step {step!r} must be in (0, 0.5] and the lowest retention {lowest!r} in (0, 1]")
    k = int(math.floor((1.0 - lowest) / step + 1e-9))
    return tuple(round(1.0 - i * step, 10) for i in range(k + 1))


def performance(pm: str, y: np.ndarray, mean_probs: np.ndarray) -> tuple[float, str]:
    """PM of the cases (labels 0..C−1, predictive distribution (n, C)), or NaN with the reason.

    kappa: Cohen's kappa with linear weights over all C classes (kappa_quadratic: quadratic) of argmax p̄;
    accuracy of argmax p̄; auc (binary only): of p̄ of class 1.
    """
    n, c = mean_probs.shape
    if n == 0:
        return math.nan, "no case kept"
    if pm == "auc":
        if c != 2:
            raise InputError(f"performance 'auc' is for binary tasks; this one has {c} classes: use kappa")
        v = auc(y, mean_probs[:, 1])
        return v, "" if not math.isnan(v) else f"AUC undefined: the {n} kept cases hold one class"
    pred = mean_probs.argmax(axis=1)
    if pm == "accuracy":
        return float(np.mean(pred == y)), ""
    from fairmedbench.metrics.multiclass import cohen_kappa

    v = cohen_kappa(y, pred, weights="quadratic" if pm == "kappa_quadratic" else "linear", labels=list(range(c)))
    return v, "" if not math.isnan(v) else f"kappa undefined on the {n} kept cases (no expected disagreement)"


@dataclass
class RejectionCurves:
    """Per-group performance as the most uncertain cases are referred, and the disparity δ (Lu et al. Eq. 5)."""

    measure: str
    pm: str
    attribute: str
    pair_aggregation: str
    retention: list[float]
    thresholds: list[float]
    n_kept: list[int]
    groups: dict[str, dict[str, list[Any]]]  # group -> {"n": [...], "pm": [...]} per retention level
    disparity: list[float | None]
    delta: float | None
    undefined: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN as None)."""
        return {"measure": self.measure, "pm": self.pm, "attribute": self.attribute,
                "pair_aggregation": self.pair_aggregation, "retention": self.retention,
                "thresholds": self.thresholds, "n_kept": self.n_kept, "groups": self.groups,
                "disparity": self.disparity, "delta": self.delta, "undefined": self.undefined, "notes": self.notes}


def _none(v: float) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


def _curve_inputs(y_true: ArrayLike, mean_probs: ArrayLike, unc: ArrayLike, groups: ArrayLike, measure: str,
                  attribute: str, pm: str | None, retention: Sequence[float] | None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, str, tuple[float, ...], np.ndarray, list[str],
                             np.ndarray]:
    """`rejection_curves`' inputs checked (InputError naming what is wrong): class indices, probabilities,
    uncertainties, the performance measure, the retention grid, which cases have a group, the groups, the group
    of each case as a string."""
    y = np.asarray(y_true)
    probs = np.asarray(mean_probs, dtype=float)
    if probs.ndim != 2 or probs.shape[0] != y.shape[0] or y.ndim != 1:
        raise InputError(f"labels {y.shape} and predictive distribution {probs.shape} must be (n,) and (n, C)")
    n, c = probs.shape
    if n == 0:
        raise InputError("no cases to evaluate")
    if not np.isfinite(probs).all():
        raise InputError("predictive distribution: contains NaN or infinite values")
    try:
        yi = y.astype(np.int64)
    except (TypeError, ValueError):
        raise InputError("labels: expected class indices 0..C-1") from None
    if (yi != y).any() or yi.min() < 0 or yi.max() >= c:
        raise InputError(f"labels: expected class indices 0..{c - 1}, got values {sorted(set(y.tolist()))[:6]}")
    u = np.asarray(unc, dtype=float)
    if u.shape != (n,):
        raise InputError(f"uncertainty: expected one value per case ({n}), got shape {u.shape}")
    if not np.isfinite(u).all():
        bad = int((~np.isfinite(u)).sum())
        raise InputError(f"uncertainty {measure!r}: {bad} of {n} values are NaN or infinite (first at row "
                         f"{int(np.flatnonzero(~np.isfinite(u))[0])}); drop or fix those rows")
    pm = pm or ("kappa" if c > 2 else "auc")
    if pm not in PERFORMANCE:
        raise InputError(f"performance measure {pm!r}: choose one of {', '.join(PERFORMANCE)}")
    if pm == "auc" and c != 2:
        raise InputError(f"performance 'auc' is for binary tasks; this one has {c} classes: use kappa")
    grid = tuple(float(r) for r in (retention if retention is not None else retention_grid()))
    if not grid or any(not (0 < r <= 1) for r in grid):
        raise InputError(f"retention levels must be in (0, 1], got {list(grid)}")
    g = np.asarray(groups, dtype=object)
    if g.shape != (n,):
        raise InputError(f"groups: expected one value per case ({n}), got shape {g.shape}")
    present = np.array([v is not None and not (isinstance(v, float) and math.isnan(v)) for v in g], dtype=bool)
    names = sorted({str(v) for v in g[present]})
    if len(names) < 2:
        raise InputError(f"attribute {attribute!r} has {len(names)} group(s) among the cases; disparity needs two")
    gs = np.array([str(v) for v in g], dtype=object)
    return yi, probs, u, pm, grid, present, names, gs


def rejection_curves(y_true: ArrayLike, mean_probs: ArrayLike, unc: ArrayLike, groups: ArrayLike, *,
                     measure: str = "uncertainty", attribute: str = "group", pm: str | None = None,
                     retention: Sequence[float] | None = None,
                     pair_aggregation: str = "sum", min_group_n: int = MIN_GROUP_N) -> RejectionCurves:
    """Rejection curves per group and δ, as Lu et al. (2021) define them.

    Threshold τ_r at retention r is the global (all cases, every group and those with no group) r-quantile of
    the uncertainty, taken as the ⌈r·n⌉-th smallest value (numpy "inverted_cdf"); a case is kept when
    UQ ≤ τ_r, so ⌈r·n⌉ cases are kept unless values tie at τ_r (then all tied cases are; `n_kept` says how many).
    f(r, A) = PM on the kept cases of group A (`pm`: kappa (linear weights; default for C > 2), kappa_quadratic,
    accuracy, auc (default for binary)). The paper's Eq. 5:

        δ = (1/|R|) Σ_{r ∈ R} Σ_{unordered pairs {A, A'}} |f(r, A) − f(r, A')|

    a SUM over group pairs and a MEAN over retention levels; `pair_aggregation="mean"` divides each level's
    sum by its number of pairs instead (comparable across attributes with different numbers of groups; not
    the paper's δ, and named in the result). The sum is the default because it is the paper's equation and
    the issue asks for it "exactly" (the earlier library function averaged over pairs). A group whose f is
    undefined at a level (no kept case, one class for AUC, no expected disagreement for kappa) is left out of
    that level's pairs and listed; a level with fewer than two defined groups is left out of the mean over R.
    Cases with a missing group value count for the thresholds but in no group.
    """
    if pair_aggregation not in PAIR_AGGREGATIONS:
        raise InputError(f"pair aggregation {pair_aggregation!r}: choose sum (Lu et al. Eq. 5) or mean")
    yi, probs, u, pm, grid, present, names, gs = _curve_inputs(y_true, mean_probs, unc, groups, measure, attribute,
                                                                pm, retention)
    n = len(yi)

    su = np.sort(u)
    out_g: dict[str, dict[str, list[Any]]] = {a: {"n": [], "pm": []} for a in names}
    thresholds: list[float] = []
    n_kept: list[int] = []
    disparity: list[float] = []
    undefined: list[str] = []
    small: dict[str, list[float]] = {}
    for r in grid:
        tau = float(su[max(math.ceil(r * n - 1e-9), 1) - 1])
        keep = u <= tau
        vals: dict[str, float] = {}
        for a in names:
            sel = keep & present & (gs == a)
            v, why = performance(pm, yi[sel], probs[sel])
            out_g[a]["n"].append(int(sel.sum()))
            out_g[a]["pm"].append(_none(v))
            if math.isnan(v):
                undefined.append(f"{a} at retention {r:g}: {why}")
            else:
                vals[a] = v
            if sel.sum() < min_group_n:
                small.setdefault(a, []).append(r)
        diffs = [abs(vals[a] - vals[b]) for a, b in itertools.combinations(sorted(vals), 2)]
        level = (sum(diffs) if pair_aggregation == "sum" else sum(diffs) / len(diffs)) if diffs else math.nan
        thresholds.append(tau)
        n_kept.append(int(keep.sum()))
        disparity.append(level)
    defined = [d for d in disparity if not math.isnan(d)]
    notes = [f"group {a!r} has fewer than {min_group_n} kept cases at retention {', '.join(f'{r:g}' for r in rs)}: "
             "its curve is noisy there" for a, rs in small.items()]
    if undefined:
        notes.append("a group undefined at a level is left out of that level's pairs (see `undefined`), so that "
                     "level's sum covers fewer pairs")
    if len(defined) < len(disparity):
        notes.append(f"{len(disparity) - len(defined)} retention level(s) have fewer than two groups with a "
                     "defined performance: left out of the mean over levels" + ("" if defined else "; δ undefined"))
    delta = float(np.mean(defined)) if defined else math.nan
    return RejectionCurves(measure, pm, attribute, pair_aggregation, list(grid), thresholds, n_kept, out_g,
                           [_none(d) for d in disparity], _none(delta), undefined, notes)


def _per_patient(y: np.ndarray, attrs: dict[str, np.ndarray], patient_ids: ArrayLike, mc: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], str]:
    """MC samples, labels and groups per patient when every patient has one label and one group per attribute;
    else the images unchanged, with the reason."""
    ids = np.asarray(patient_ids, dtype=object).astype(str)
    for name, col in (("label", y), *((f"attribute {a}", v) for a, v in attrs.items())):
        per: dict[str, set[str]] = {}
        for pid, v in zip(ids, col):
            per.setdefault(pid, set()).add(str(v))
        mixed = [pid for pid, vs in per.items() if len(vs) > 1]
        if mixed:
            return mc, y, attrs, (f"image level: patient {mixed[0]!r} (and {len(mixed) - 1} more) has images with "
                                  f"different {name} values, so a patient-level {name} is undefined")
    pmc, first = patient_average(mc, ids)
    if pmc.shape[1] == mc.shape[1]:
        return mc, y, attrs, "image level: every patient has one image"
    return (pmc, y[first], {a: v[first] for a, v in attrs.items()},
            f"patient level: each MC pass's class probabilities averaged over a patient's images "
            f"({mc.shape[1]} images -> {pmc.shape[1]} patients)")


def uncertainty_block(y_true: ArrayLike, mc: ArrayLike, attributes: Mapping[str, ArrayLike], *,
                      patient_ids: ArrayLike | None = None,
                      measures: Sequence[str] = MEASURES, pm: str | None = None,
                      retention: Sequence[float] | None = None, pair_aggregation: str = "sum",
                      n_bins: int = 10, min_group_n: int = MIN_GROUP_N) -> dict[str, Any]:
    """The result document's `uncertainty` block from MC samples (T, n, C) of one task's test cases.

    With `patient_ids`, each pass's per-image probabilities are first averaged per patient (when every
    patient has one label and group); the measures, predictions (argmax / class-1 score of the MC mean) and
    curves are then per patient. Rejection curves and δ per attribute and measure.
    """
    arr = check_mc(mc)
    y = np.asarray(y_true)
    attrs = {a: np.asarray(v, dtype=object) for a, v in attributes.items()}
    level = "image level: the dataset has no patient ids"
    if patient_ids is not None:
        arr, y, attrs, level = _per_patient(y, attrs, patient_ids, arr)
    unknown = [m for m in measures if m not in MEASURES]
    if unknown:
        raise InputError(f"uncertainty measure {unknown[0]!r}: choose from {', '.join(MEASURES)}")
    unc = uncertainty_measures(arr, n_bins=n_bins)
    mean = arr.mean(axis=0)
    curves = {a: {m: rejection_curves(y, mean, unc[m], g, measure=m, attribute=a, pm=pm, retention=retention,
                                      pair_aggregation=pair_aggregation, min_group_n=min_group_n).to_dict()
                  for m in measures} for a, g in attrs.items()}
    return {"reference": "Lu, Lemay, Hoebel & Kalpathy-Cramer, ICML 2021 IMLH workshop, arXiv:2107.02716, Eqs. 1-5",
            "mc_samples": int(arr.shape[0]), "n_cases": int(arr.shape[1]), "level": level, "n_bins": n_bins,
            "prediction": "argmax (binary: class-1 score) of the mean over the MC samples",
            "delta": {a: {m: c["delta"] for m, c in per.items()} for a, per in curves.items()},
            "curves": curves}


def mc_column(t: int, name: str) -> str:
    """The predictions-file column of MC pass t (0-based) for `name`: `mc:<t>:<name>`."""
    return f"mc:{t}:{name}"


def unc_column(measure: str, task: str, tasks: Sequence[str]) -> str:
    """`unc:<measure>` (one task column), or `unc:<measure>:<task>` when a file holds several."""
    return f"unc:{measure}" if len(tasks) == 1 else f"unc:{measure}:{task}"


def mc_columns(mc: ArrayLike, tasks: Sequence[str], n_bins: int = 10) -> dict[str, np.ndarray]:
    """Per-sample columns of a binary (sigmoid) run's MC samples (T, n, K tasks): `mc:<t>:<task>` = the pass-t
    probability of class 1 and `unc:<measure>[:<task>]` = each measure of the sample (image level)."""
    arr = np.asarray(mc, dtype=float)
    out: dict[str, np.ndarray] = {}
    for j, task in enumerate(tasks):
        out.update({mc_column(t, task): arr[t, :, j] for t in range(arr.shape[0])})
        for m, v in uncertainty_measures(binary_as_classes(arr[:, :, j]), n_bins=n_bins).items():
            out[unc_column(m, task, tasks)] = v
    return out


def mc_class_columns(mc: ArrayLike, classes: Sequence[str], n_bins: int = 10) -> dict[str, np.ndarray]:
    """Per-sample columns of a multi-class (softmax) run's MC samples (T, n, C): `mc:<t>:<class>` = the pass-t
    probability of the class (in class-index order) and `unc:<measure>` (image level)."""
    arr = check_mc(mc)
    out = {mc_column(t, c): arr[t, :, j] for t in range(arr.shape[0]) for j, c in enumerate(classes)}
    out.update({unc_column(m, "", [""]): v for m, v in uncertainty_measures(arr, n_bins=n_bins).items()})
    return out


def run_uncertainty(y: ArrayLike, mc: ArrayLike, tasks: Sequence[str], attributes: Mapping[str, ArrayLike],
                    patient_ids: ArrayLike | None = None) -> dict[str, Any]:
    """A binary (sigmoid) run's `uncertainty` block: per task column, `uncertainty_block` of its test cases
    (labels (n, K), MC samples (T, n, K)); the defaults of `benchmark evaluate --uncertainty`."""
    yy = np.asarray(y).reshape(len(np.asarray(y)), -1)
    arr = np.asarray(mc, dtype=float)
    return {task: uncertainty_block(yy[:, j], binary_as_classes(arr[:, :, j]), attributes, patient_ids=patient_ids)
            for j, task in enumerate(tasks)}
