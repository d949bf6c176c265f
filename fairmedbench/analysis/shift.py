"""Fairness under dataset shift: a model trained on one dataset applied to other datasets' test splits.

What can be compared across datasets (`check_alignment`): the same task, the same class names (and extra label
columns), the same mask classes, the same dimension, and each of the run's sensitive attributes present on the
external card with the same group vocabulary. Raw codes are never compared: each card maps its provider's own
codes to group names (NIH `Patient Gender` M/F, HAM10000 `sex` male/female/unknown, the synthetic cards' F/M all
become `female`/`male`; age becomes `<60`/`>=60` from each card's own age column), so two datasets are aligned
when those mapped groups agree: equal group names and, for binned attributes, equal bin edges. Anything else is
refused before any work.

The shift (`shift_block`) is external minus internal of the task's headline per group (AUC, macro AUC or DSC), of
the gap between groups (max - min) and, for two groups, of the signed difference (second - first in the sorted
group order, the metric engine's `_diff`). The two test sets are different samples, so the interval of a shift
comes from independent bootstrap draws of each set (stratified by group x class, the same number of resamples,
seeded by the run seed on two named streams): the percentile interval of the B differences of independent draws.
`seeds_shift_block` gives the same for the mean over training seeds tested on the same two sets (a board's row):
each quantity is computed per seed on shared draws, then averaged; `shift_block` is its one-seed case.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.errors import InputError
from fairmedbench.metrics import bootstrap as bs

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.card import AttributeSpec, DatasetCard

#: the per-group utility whose shift is reported, per task (the task's headline)
SHIFT_METRIC = {"classification": "auc", "multiclass": "macro_auc", "segmentation": "dsc"}
#: a reader option naming where an external dataset's data lives (a where, not a what: not part of the identity)
ROOT_OPTION = "root"
#: which samples of an external dataset are evaluated: its test split (default) or all of them (nothing of an
#: external dataset is trained on, so a small external site can be evaluated whole)
SPLIT_OPTION = "split"
EVAL_SPLITS = ("test", "all")


@dataclass(frozen=True)
class EvalRequest:
    """One `--eval-dataset` entry: a dataset card name and its reader options (`root`: its data folder)."""

    text: str
    name: str
    options: dict[str, Any] = field(default_factory=dict)
    root: str | None = None
    split: str = "test"

    @property
    def label(self) -> str:
        """How results name it: the card name, with its options (`nih-cxr14:view=AP`) and `split=all`."""
        import json

        opts = ":".join(f"{k}={v if isinstance(v, str) else json.dumps(v, separators=(',', ':'))}"
                        for k, v in sorted({**self.options, **({SPLIT_OPTION: self.split} if self.split != "test"
                                                              else {})}.items()))
        return f"{self.name}:{opts}" if opts else self.name


def split_eval_list(text: str) -> list[str]:
    """`a,b:k=v` -> ['a', 'b:k=v']: commas split entries except inside brackets or braces (JSON option values)."""
    out, depth, cur = [], 0, ""
    for ch in str(text):
        depth += ch in "[{"
        depth -= ch in "]}"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [t.strip() for t in out if t.strip()]


def parse_eval_dataset(text: str) -> EvalRequest:
    """`NAME` or `NAME:KEY=VALUE[:KEY=VALUE...]`: reader options (values parsed like --dataset-option: numbers,
    JSON, text), plus `root=DIR` (where its data lives) and `split=test|all` (which samples are evaluated)."""
    import json

    parts = [p.strip() for p in re.split(r":(?=[A-Za-z_][\w-]*=)", str(text))]  # a ':' inside a value stays
    name = parts[0]
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name or ""):
        raise InputError(f"--eval-dataset {text!r}: expected NAME or NAME:KEY=VALUE[:KEY=VALUE], e.g. "
                         "nih-cxr14:view=AP or synth-flip:n=200")
    options: dict[str, Any] = {}
    root, split = None, "test"
    for part in parts[1:]:
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise InputError(f"--eval-dataset {text!r}: {part!r} is not KEY=VALUE")
        if key == ROOT_OPTION:
            root = value
            continue
        if key == SPLIT_OPTION:
            if value not in EVAL_SPLITS:
                raise InputError(f"--eval-dataset {text!r}: split={value!r}; use split=test (its test split, the "
                                 "default) or split=all (every sample)")
            split = value
            continue
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return EvalRequest(str(text), name, options, root, split)


def _edges(attr: AttributeSpec) -> tuple[float, ...] | None:
    return None if attr.bins is None else tuple(float(b) for b in attr.bins)


def check_alignment(internal: DatasetCard, external: DatasetCard, task: str, attributes: Sequence[str],
                    label_columns: str, what: str, sample_labels: bool = True) -> dict[str, Any]:
    """How the external card's labels and groups line up with the internal card's (a JSON-ready record), or
    InputError saying what cannot be aligned. `label_columns` is the run's `tasks` hparam (main | all);
    `sample_labels`: the task's samples carry class labels (Task.sample_labels), else masks."""
    head = f"--eval-dataset {what}"
    if task not in external.tasks:
        raise InputError(f"{head}: the run's task is {task}; dataset {external.name!r} offers "
                         f"{', '.join(external.tasks)}: evaluate on a dataset of the same task")
    if external.dim != internal.dim:
        raise InputError(f"{head}: dataset {external.name!r} is {external.dim}D, {internal.name!r} is {internal.dim}D")
    if sample_labels and tuple(external.classes) != tuple(internal.classes):
        raise InputError(f"{head}: class names differ ({internal.name!r}: {list(internal.classes)}, "
                         f"{external.name!r}: {list(external.classes)}); a head can only be applied to the same "
                         "classes")
    if label_columns == "all" and tuple(external.extra_label_columns) != tuple(internal.extra_label_columns):
        raise InputError(f"{head}: tasks=all trains on {internal.name!r}'s extra labels "
                         f"{list(internal.extra_label_columns)}; {external.name!r} has "
                         f"{list(external.extra_label_columns) or 'none'}")
    if not sample_labels and tuple(external.mask_classes) != tuple(internal.mask_classes):
        raise InputError(f"{head}: mask classes differ ({list(internal.mask_classes)} vs "
                         f"{list(external.mask_classes)})")
    known = {a.name: a for a in external.attributes}
    record: dict[str, Any] = {}
    for name in attributes:
        mine = internal.attribute(name)
        theirs = known.get(name)
        if theirs is None:
            raise InputError(f"{head}: dataset {external.name!r} has no attribute {name!r} (it has "
                             f"{', '.join(known) or 'none'}); drop it with --attribute")
        if tuple(theirs.groups) != tuple(mine.groups) or _edges(theirs) != _edges(mine):
            raise InputError(f"{head}: attribute {name!r} has groups {list(mine.groups)} on {internal.name!r} but "
                             f"{list(theirs.groups)}{' with other bin edges' if _edges(theirs) != _edges(mine) else ''}"
                             f" on {external.name!r}: the groups cannot be aligned")
        record[name] = {"groups": list(mine.groups), "internal": _rule(mine), "external": _rule(theirs)}
    return record


def _rule(attr: AttributeSpec) -> dict[str, Any]:
    """How a card maps its raw column to the groups (JSON-ready: open bin edges as null)."""
    if attr.mapping is not None:
        return {"column": attr.column, "mapping": dict(attr.mapping)}
    return {"column": attr.column, "bins": [None if np.isinf(b) else b for b in _edges(attr) or ()]}


# ------------------------------------------------------------------------------------------------ the shift

@dataclass(frozen=True)
class GroupDraws:
    """A test set's per-group utility: point values (G,) and bootstrap values (B, G), groups in sorted order."""

    groups: list[str]
    point: np.ndarray
    resampled: np.ndarray
    counts: tuple[int, ...] = ()  # samples per group (in `groups` order)


def _named(groups: np.ndarray) -> np.ndarray:
    """Samples that have a group (a missing attribute value is left out, as by the metric engine)."""
    return np.array([isinstance(g, str) for g in groups], dtype=bool)


def group_draws(y: np.ndarray | None, scores: np.ndarray, groups: np.ndarray, n_boot: int, seed: int,
                stream: str, patient_ids: np.ndarray | None = None) -> GroupDraws:
    """Per-group headline utility of one test set with `n_boot` stratified resamples on its own named stream,
    drawing whole patients when `patient_ids` are given (as every interval of the engine does).

    The data say which: AUC of `scores` (n,) against 0/1 `y`; macro one-vs-rest AUC of (n, K) probabilities against
    class indices; without `y`, the mean of per-sample DSC `scores`."""
    from fairmedbench.metrics.paired import paired_group_auc, paired_group_macro_auc

    keep = _named(np.asarray(groups, dtype=object))
    g = np.asarray(groups, dtype=object)[keep].astype(str)
    pids = None if patient_ids is None else np.asarray(patient_ids, dtype=object)[keep]
    b = max(int(n_boot), 1)
    if y is not None and np.ndim(scores) == 1:
        d = paired_group_auc(np.asarray(y)[keep], np.asarray(scores)[keep][None], g, n_boot=b, seed=seed, label=stream,
                             patient_ids=pids)
        return GroupDraws(d.groups, d.point[0], d.resampled[:, 0, :], tuple(int((g == x).sum()) for x in d.groups))
    if y is not None:
        d = paired_group_macro_auc(np.asarray(y)[keep], np.asarray(scores)[keep][None], g, n_boot=b, seed=seed,
                                   label=stream, patient_ids=pids)
        return GroupDraws(d.groups, d.point[0], d.resampled[:, 0, :], tuple(int((g == x).sum()) for x in d.groups))
    dsc = np.asarray(scores, dtype=np.float64)[keep]
    names = sorted(set(g))
    codes = np.searchsorted(names, g)
    units = bs.make_units(codes, pids)
    rng = bs.stable_seed(seed, "shift-group-dsc", stream)
    one = np.zeros(len(dsc), dtype=np.int64)
    strata = [bs.label_strata(units, np.flatnonzero(codes == k), one, (0,))[0] for k in range(len(names))]
    w = bs.unit_weights(rng, strata, units.n_units, b)[:, units.of_row]
    point, res = np.empty(len(names)), np.empty((b, len(names)))
    for k in range(len(names)):
        m = codes == k
        point[k] = dsc[m].mean()
        res[:, k] = (w[:, m] @ dsc[m]) / w[:, m].sum(axis=1)
    return GroupDraws(names, point, res, tuple(int((g == x).sum()) for x in names))


def _interval(draws: np.ndarray, n_boot: int) -> tuple[float | None, float | None]:
    ok = draws[np.isfinite(draws)]
    if n_boot < 1 or ok.size < 2:
        return None, None
    lo, hi, _ = bs.interval(ok)
    return (float(lo) if np.isfinite(lo) else None), (float(hi) if np.isfinite(hi) else None)


def _num(v: float) -> float | None:
    return float(v) if np.isfinite(v) else None


def _gap(values: np.ndarray) -> np.ndarray:
    """max - min over the last axis, NaN where fewer than two groups are defined."""
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(values)
        hi = np.where(ok, values, -np.inf).max(axis=-1)
        lo = np.where(ok, values, np.inf).min(axis=-1)
    return np.where(ok.sum(axis=-1) >= 2, hi - lo, np.nan)


def _entry(internal: np.ndarray, external: np.ndarray, n_boot: int, small: Sequence[str] = ()) -> dict[str, Any]:
    """One shifted quantity: internal and external point values, their shift, and its interval (from the
    differences of the independent draws, rows 1.. of each array; row 0 is the point); no interval when it
    involves a group below the minimum group size in either set (`small`), as the metric engine rules."""
    shift = external[0] - internal[0]
    lo, hi = (None, None) if small else _interval(external[1:] - internal[1:], n_boot)
    out: dict[str, float | bool | str | None] = {
           "internal": _num(internal[0]), "external": _num(external[0]), "shift": _num(shift), "ci_low": lo,
           "ci_high": hi, "excludes_0": None if lo is None or hi is None else bool(lo > 0 or hi < 0)}
    if small:
        out["no_ci"] = f"group(s) {', '.join(small)} below the minimum group size in one of the two test sets"
    return out


def shift_block(task: str, attribute: str, internal: GroupDraws, external: GroupDraws, n_boot: int,
                min_group_size: int = 0) -> dict[str, Any]:
    """External minus internal per group, of the gap and (two groups) of the signed difference, with intervals
    from independent draws of the two test sets (none where a group is below `min_group_size` in either)."""
    return seeds_shift_block(task, attribute, [internal], [external], n_boot, min_group_size)


def seeds_shift_block(task: str, attribute: str, internal: Sequence[GroupDraws], external: Sequence[GroupDraws],
                      n_boot: int, min_group_size: int = 0) -> dict[str, Any]:
    """`shift_block` of the mean over training seeds evaluated on the same two test sets: each quantity (a group's
    value, the gap, the difference) is computed per seed, on every row of the draws, then averaged over seeds, so
    the interval is the two test sets' sampling error of the seed mean. The seeds' draws must share their resamples
    (`group_draws` with one seed and the same stream names for every training seed); one seed is `shift_block`."""
    first_i, first_e = internal[0], external[0]
    if any(d.groups != first_i.groups for d in internal) or any(d.groups != first_e.groups for d in external):
        raise InputError(f"shift of {attribute}: the seeds' test sets hold different groups; a seed mean needs the "
                         "same two test sets in every seed")
    groups = [g for g in first_i.groups if g in first_e.groups]
    size = {g: min(d.counts[d.groups.index(g)] if d.counts else min_group_size for d in (first_i, first_e))
            for g in groups}
    small = [g for g in groups if size[g] < min_group_size]

    def table(d: GroupDraws) -> np.ndarray:  # (1 + B, G): the point, then the resamples, in `groups` order
        cols = [d.groups.index(g) for g in groups]
        return np.vstack([d.point[None, cols], d.resampled[:, cols]])

    def mean(quantity: Any) -> tuple[np.ndarray, np.ndarray]:  # (internal, external) of a quantity, seed mean
        return (np.mean([quantity(table(d)) for d in internal], axis=0),
                np.mean([quantity(table(d)) for d in external], axis=0))

    out: dict[str, Any] = {
        "attribute": attribute, "metric": SHIFT_METRIC[task], "groups": groups,
        "only_internal": [g for g in first_i.groups if g not in groups],
        "only_external": [g for g in first_e.groups if g not in groups],
        "per_group": {g: _entry(*mean(lambda t, k=k: t[:, k]), n_boot, [g] if g in small else [])
                      for k, g in enumerate(groups)},
        "gap": _entry(*mean(_gap), n_boot, small),
        "min_group_size": min_group_size,
    }
    if len(groups) == 2:
        out["diff"] = {"of": f"{groups[1]} - {groups[0]}", **_entry(*mean(lambda t: t[:, 1] - t[:, 0]), n_boot,
                                                                     small)}
    return out


SHIFT_METHOD = ("shift = external - internal; interval: 2.5th-97.5th percentile of the differences of independent "
                "bootstrap draws of the two test sets (each stratified by group x class, the run's n_boot "
                "resamples each, seeded by the run seed on the streams 'internal' and 'external:<dataset>'), since "
                "the two test sets are different samples, not a paired resample of one")
