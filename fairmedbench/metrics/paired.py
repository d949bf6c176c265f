"""Paired test-set bootstrap over several score sets on one test set (seeds x methods).

Every score set is evaluated on the same stratified resamples (group x label), so differences between
methods and means over training seeds carry the test set's sampling uncertainty, which an interval
across seeds alone (same test set every seed) does not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fairmedbench.errors import InputError
from fairmedbench.metrics import bootstrap as bs
from fairmedbench.metrics.auc import weighted_auc


@dataclass(frozen=True)
class PairedGroupAUC:
    """Per score set: group AUCs at the point (S, G) and on each resample (B, S, G); group names in order."""

    groups: list[str]
    point: np.ndarray
    resampled: np.ndarray


def paired_group_auc(y: np.ndarray, scores: np.ndarray, groups: np.ndarray, *, n_boot: int = bs.N_BOOT,
                     seed: int = 0, label: str = "", patient_ids: np.ndarray | None = None) -> PairedGroupAUC:
    """Group AUCs of every score set (rows of `scores`, (S, n)) on one shared set of resamples, stratified
    by group x label; `groups` holds group names (n,); `patient_ids` (n,): draw whole patients."""
    y = np.asarray(y)
    scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    groups = np.asarray(groups)
    if scores.shape[1] != y.size or groups.size != y.size:
        raise InputError(f"paired bootstrap: {y.size} labels, {groups.size} group values and scores of shape "
                         f"{scores.shape}; give one score per test sample in every row")
    if not np.isin(y, (0, 1)).all() or not np.isfinite(scores).all():
        raise InputError("paired bootstrap: labels must be 0/1 and scores finite")
    names, codes, weights = _shared_resamples(y.astype(int), 2, groups, n_boot, seed, "paired-group-auc", label,
                                              patient_ids)
    point = np.empty((scores.shape[0], len(names)))
    resampled = np.empty((n_boot, scores.shape[0], len(names)))
    for gi in range(len(names)):
        m = codes == gi
        ones = np.ones((1, int(m.sum())))
        for si, s in enumerate(scores):
            point[si, gi] = weighted_auc(y[m], s[m], ones)[0]
            resampled[:, si, gi] = weighted_auc(y[m], s[m], weights[:, m])
    return PairedGroupAUC(names, point, resampled)


def paired_group_macro_auc(y: np.ndarray, scores: np.ndarray, groups: np.ndarray, *, n_boot: int = bs.N_BOOT,
                           seed: int = 0, label: str = "", patient_ids: np.ndarray | None = None) -> PairedGroupAUC:
    """Group macro AUCs (the multi-class engine's: mean one-vs-rest AUC over the classes with positives and
    negatives in the group) of every score set ((S, n, K) class probabilities, `y` class indices 0..K-1) on one
    shared set of resamples, stratified by group x class (so each group's set of defined classes is fixed);
    `patient_ids` (n,): draw whole patients."""
    y = np.asarray(y)
    scores = np.asarray(scores, dtype=np.float64)
    groups = np.asarray(groups)
    if scores.ndim != 3 or scores.shape[1] != y.size or groups.size != y.size or scores.shape[2] < 2:
        raise InputError(f"paired bootstrap: {y.size} labels, {groups.size} group values and scores of shape "
                         f"{scores.shape}; give (score sets, samples, classes) probabilities")
    k = scores.shape[2]
    if not (np.isin(y, np.arange(k)).all() and np.isfinite(scores).all()):
        raise InputError(f"paired bootstrap: labels must be class indices 0..{k - 1} and scores finite")
    names, codes, weights = _shared_resamples(y.astype(int), k, groups, n_boot, seed, "paired-group-macro-auc",
                                              label, patient_ids)
    point = np.empty((scores.shape[0], len(names)))
    resampled = np.empty((n_boot, scores.shape[0], len(names)))
    for gi in range(len(names)):
        m = codes == gi
        yg = y[m]
        present = [c for c in range(k) if 0 < int((yg == c).sum()) < yg.size]
        ones = np.ones((1, int(m.sum())))
        for si, s in enumerate(scores):
            if not present:
                point[si, gi], resampled[:, si, gi] = np.nan, np.nan
                continue
            point[si, gi] = np.mean([weighted_auc(yg == c, s[m, c], ones)[0] for c in present])
            resampled[:, si, gi] = np.mean([weighted_auc(yg == c, s[m, c], weights[:, m]) for c in present], axis=0)
    return PairedGroupAUC(names, point, resampled)


def paired_group_mean(y: np.ndarray | None, scores: np.ndarray, groups: np.ndarray, *, n_boot: int = bs.N_BOOT,
                      seed: int = 0, label: str = "", patient_ids: np.ndarray | None = None) -> PairedGroupAUC:
    """Group means of a per-sample value (segmentation: DSC; `y` is not read, such a sample has no class label)
    of every score set ((S, n)) on one shared set of resamples, stratified by group; `patient_ids` (n,): draw
    whole patients. The stream is the one the external shift has drawn its DSC resamples from."""
    scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    groups = np.asarray(groups)
    if scores.shape[1] != groups.size or not np.isfinite(scores).all():
        raise InputError(f"paired bootstrap: {groups.size} group values and scores of shape {scores.shape}; give one "
                         "finite value per test sample in every row")
    names, codes, weights = _shared_resamples(np.zeros(groups.size, dtype=int), 1, groups, n_boot, seed,
                                              "shift-group-dsc", label, patient_ids)
    point = np.empty((scores.shape[0], len(names)))
    resampled = np.empty((n_boot, scores.shape[0], len(names)))
    for gi in range(len(names)):
        m = codes == gi
        for si, s in enumerate(scores):
            point[si, gi] = s[m].mean()
            resampled[:, si, gi] = (weights[:, m] @ s[m]) / weights[:, m].sum(axis=1)
    return PairedGroupAUC(names, point, resampled)


def _shared_resamples(y: np.ndarray, k: int, groups: np.ndarray, n_boot: int, seed: int, stream: str,
                      label: str, patient_ids: np.ndarray | None = None) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Sorted group names, each sample's group code and (n_boot, n) resample counts drawn within each
    group x class stratum (`k` classes); with `patient_ids`, whole patients are drawn (stratified by class at the
    patient level, as the metric engine's bootstrap)."""
    bs.check_settings(n_boot, 0.95, 0)
    names = sorted({str(g) for g in groups})
    codes = np.searchsorted(names, groups.astype(str))
    units = bs.make_units(codes, patient_ids)
    rng = bs.stable_seed(seed, stream, label)
    strata = [st for gi in range(len(names)) for st in bs.label_strata(units, np.flatnonzero(codes == gi), y,
                                                                       range(k))]
    weights = bs.unit_weights(rng, strata, units.n_units, n_boot)[:, units.of_row]
    return names, codes, weights
