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

Independence is checked, not assumed (`find_overlap`, before any work): an external set that shares items (the same
image content, or the same sample id of one file-backed card) with the run's test split is refused, unless the
request says `overlap=paired`: then `paired_group_draws` resamples the union of the two sets once, every shared item
(with its patient) drawn jointly in both, so the interval carries the correlation the overlap creates. An external
item that the run trained or validated on is always refused. `seeds_shift_summary` gives each seed's shift and
their mean, std and t interval across training seeds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.errors import InputError
from fairmedbench.metrics import bootstrap as bs

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.card import AttributeSpec, DatasetCard
    from fairmedbench.registry.datasets.dataset import Dataset

#: a reader option naming where an external dataset's data lives (a where, not a what: not part of the identity)
ROOT_OPTION = "root"
#: which samples of an external dataset are evaluated: its test split (default) or all of them (nothing of an
#: external dataset is trained on, so a small external site can be evaluated whole)
SPLIT_OPTION = "split"
EVAL_SPLITS = ("test", "all")
#: what an external set sharing items with the run's test split gets: refused (default) or a paired resampling
OVERLAP_OPTION = "overlap"
OVERLAP_MODES = ("refuse", "paired")


@dataclass(frozen=True)
class EvalRequest:
    """One `--eval-dataset` entry: a dataset card name and its reader options (`root`: its data folder)."""

    text: str
    name: str
    options: dict[str, Any] = field(default_factory=dict)
    root: str | None = None
    split: str = "test"
    overlap: str = "refuse"

    @property
    def label(self) -> str:
        """How results name it: the card name, with its options (`nih-cxr14:view=AP`), `split=all` and
        `overlap=paired`."""
        import json

        extra = {**({SPLIT_OPTION: self.split} if self.split != "test" else {}),
                 **({OVERLAP_OPTION: self.overlap} if self.overlap != "refuse" else {})}
        opts = ":".join(f"{k}={v if isinstance(v, str) else json.dumps(v, separators=(',', ':'))}"
                        for k, v in sorted({**self.options, **extra}.items()))
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
    JSON, text), plus `root=DIR` (where its data lives), `split=test|all` (which samples are evaluated) and
    `overlap=refuse|paired` (what items shared with the run's test split get)."""
    import json

    parts = [p.strip() for p in re.split(r":(?=[A-Za-z_][\w-]*=)", str(text))]  # a ':' inside a value stays
    name = parts[0]
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name or ""):
        raise InputError(f"--eval-dataset {text!r}: expected NAME or NAME:KEY=VALUE[:KEY=VALUE], e.g. "
                         "nih-cxr14:view=AP or synth-flip:n=200")
    options: dict[str, Any] = {}
    root, split, overlap = None, "test", "refuse"
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
        if key == OVERLAP_OPTION:
            if value not in OVERLAP_MODES:
                raise InputError(f"--eval-dataset {text!r}: overlap={value!r}; use overlap=refuse (the default: an "
                                 "external set sharing items with the run's test split is refused) or overlap=paired "
                                 "(the shared items are resampled jointly)")
            overlap = value
            continue
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return EvalRequest(str(text), name, options, root, split, overlap)


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
    for name in dict.fromkeys(p.name for a in attributes for p in internal.attribute_parts(a)):  # sex*age: its parts
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


# ------------------------------------------------------------------------------------------------ overlap

@dataclass(frozen=True)
class Overlap:
    """What an external evaluated set shares with the run's own dataset: `pairs` (m, 2) of dataset positions
    (internal test row, external row) holding the same item, how many external items are in the internal test split
    (`n_test`) and in its train or validation split (`n_trained`), out of `n_external`."""

    pairs: np.ndarray
    n_test: int
    n_trained: int
    n_external: int


def _item_keys(ds: Dataset, positions: np.ndarray, by_id: bool) -> list[set[str]]:
    """Each sample's identities: its image content (card-free) and, where `by_id`, its sample id."""
    content = ds.content_keys(positions, with_card=False)
    ids = ds.samples["sample_id"].to_numpy()[positions].astype(str)
    return [{f"content:{c}", *((f"id:{i}",) if by_id else ())} for c, i in zip(content, ids)]


def find_overlap(internal: Dataset, internal_test: np.ndarray, internal_trained: np.ndarray, external: Dataset,
                 external_positions: np.ndarray) -> Overlap:
    """The items an external set shares with the run's dataset (`Dataset`s: the run's, with its test and train+val
    positions, and the external one with its evaluated positions): the same image content (file bytes and locator,
    or generated pixels, whatever the card), or the same sample id where both are read from files of one card (a
    generated sample's id is only its row number, so there the content decides). Renders or hashes each image once
    (file digests are cached), before any encoding."""
    by_id = (internal.card.name == external.card.name and "image" in internal.samples.columns
             and "image" in external.samples.columns)
    ext_pos = np.asarray(external_positions, dtype=np.int64)
    test_pos = np.asarray(internal_test, dtype=np.int64)
    trained_pos = np.asarray(internal_trained, dtype=np.int64)
    test_index: dict[str, list[int]] = {}
    for p, keys in zip(test_pos, _item_keys(internal, test_pos, by_id)):
        for k in keys:
            test_index.setdefault(k, []).append(int(p))
    trained = {k for keys in _item_keys(internal, trained_pos, by_id) for k in keys} if len(trained_pos) else set()
    pairs: set[tuple[int, int]] = set()
    n_test = n_trained = 0
    for p, keys in zip(ext_pos, _item_keys(external, ext_pos, by_id)):
        hits = {q for k in keys for q in test_index.get(k, ())}
        pairs.update((q, int(p)) for q in hits)
        n_test += bool(hits)
        n_trained += bool(keys & trained)
    arr = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)
    return Overlap(arr, n_test, n_trained, len(ext_pos))


def check_overlap(request: EvalRequest, overlap: Overlap) -> None:
    """Refuse what cannot be an external evaluation: items the run trained or validated on; items of the run's test
    split unless `overlap=paired`; `overlap=paired` without any shared item."""
    head = f"--eval-dataset {request.text}"
    if overlap.n_trained:
        raise InputError(f"{head}: {overlap.n_trained} of its {overlap.n_external} items are in the run's training or "
                         "validation split (same image content or sample id), so it is not external: evaluate on "
                         "data the run did not train on (another site, or a synthetic card's other data_seed)")
    if overlap.n_test and request.overlap != "paired":
        raise InputError(f"{head}: {overlap.n_test} of its {overlap.n_external} items are also in the run's test "
                         "split (same image content or sample id), and the shift interval assumes two independent "
                         "samples: evaluate on disjoint data (another site, or a synthetic card's other data_seed), or "
                         "add :overlap=paired where the overlap is the point (the shared items are resampled jointly)")
    if not overlap.n_test and request.overlap == "paired":
        raise InputError(f"{head}: overlap=paired, but it shares no item with the run's test split (the two sets "
                         "are independent): drop overlap=paired")


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


def group_draws(task: str, y: np.ndarray | None, scores: np.ndarray, groups: np.ndarray, n_boot: int, seed: int,
                stream: str, patient_ids: np.ndarray | None = None) -> GroupDraws:
    """Per-group headline utility of one test set with `n_boot` stratified resamples on its own named stream,
    drawing whole patients when `patient_ids` are given (as every interval of the engine does), as the task
    computes it (Task.resampled_headline: AUC of (n,) scores against 0/1 `y`, macro AUC of (n, K) probabilities
    against class indices, the mean of per-sample DSC)."""
    from fairmedbench.tasks.base import get_task

    keep = _named(np.asarray(groups, dtype=object))
    g = np.asarray(groups, dtype=object)[keep].astype(str)
    pids = None if patient_ids is None else np.asarray(patient_ids, dtype=object)[keep]
    d = get_task(task).resampled_headline(None if y is None else np.asarray(y)[keep], np.asarray(scores)[keep][None],
                                          g, max(int(n_boot), 1), seed, stream, pids)
    return GroupDraws(d.groups, d.point[0], d.resampled[:, 0, :], tuple(int((g == x).sum()) for x in d.groups))


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
    from fairmedbench.tasks.base import get_task

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
        "attribute": attribute, "metric": get_task(task).headline, "groups": groups,
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


@dataclass(frozen=True)
class SiteScores:
    """One test set's inputs to its shift: labels (None: per-sample DSC in `scores`), scores (n,) or (n, K), each
    attribute's groups, patient ids, and the dataset positions of its rows (to find the items both sets share)."""

    y: np.ndarray | None
    scores: np.ndarray
    groups: Mapping[str, np.ndarray]
    patient_ids: np.ndarray | None
    positions: np.ndarray


def _group_values(y: np.ndarray | None, scores: np.ndarray, codes: np.ndarray, n_groups: int,
                  weights: np.ndarray) -> np.ndarray:
    """(B, G) headline utility per group under each row of `weights` (B, n): AUC, macro AUC or mean DSC, as
    `group_draws` computes them."""
    from fairmedbench.metrics.auc import weighted_auc

    out = np.full((weights.shape[0], n_groups), np.nan)
    for k in range(n_groups):
        m = codes == k
        w = weights[:, m]
        if y is None:
            out[:, k] = (w @ scores[m]) / w.sum(axis=1)
        elif np.ndim(scores) == 1:
            out[:, k] = weighted_auc(y[m], scores[m], w)
        else:
            yg, sg = y[m], scores[m]
            present = [c for c in range(sg.shape[1]) if 0 < int((yg == c).sum()) < yg.size]
            if present:
                out[:, k] = np.mean([weighted_auc(yg == c, sg[:, c], w) for c in present], axis=0)
    return out


def paired_group_draws(internal: SiteScores, external: SiteScores, attribute: str, pairs: np.ndarray, n_boot: int,
                       seed: int, stream: str) -> tuple[GroupDraws, GroupDraws]:
    """Per-group draws of two overlapping test sets on one joint resampling: each set's units (patients within
    groups, else rows) that hold a shared item (`pairs`: (internal, external) dataset positions) are merged into one
    joint unit, and the joint units are resampled within strata of (their internal group x class strata, their
    external ones), so a shared item weighs the same in both sets' draw and each set keeps its group x class sizes."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    sides = []
    for site in (internal, external):
        g = np.asarray(site.groups[attribute], dtype=object)
        keep = _named(g)
        names = sorted({str(v) for v in g[keep]})
        codes = np.searchsorted(names, g[keep].astype(str))
        y = None if site.y is None else np.asarray(site.y)[keep]
        pids = None if site.patient_ids is None else np.asarray(site.patient_ids, dtype=object)[keep]
        units = bs.make_units(codes, pids)
        cls = np.zeros(len(codes), dtype=np.int64) if y is None else y.astype(np.int64)
        strata = [f"{c}|{k}" for c, k in zip(codes, cls)]
        sides.append((names, codes, y, np.asarray(site.scores, dtype=np.float64)[keep], units, strata,
                      np.asarray(site.positions)[keep]))
    n_i, n_e = sides[0][4].n_units, sides[1][4].n_units
    row_i = {int(p): r for r, p in enumerate(sides[0][6])}
    row_e = {int(p): r for r, p in enumerate(sides[1][6])}
    links = [(int(sides[0][4].of_row[row_i[int(a)]]), n_i + int(sides[1][4].of_row[row_e[int(b)]]))
             for a, b in np.asarray(pairs).reshape(-1, 2) if int(a) in row_i and int(b) in row_e]
    src, dst = (np.array([x[j] for x in links], dtype=np.int64) for j in (0, 1))
    graph = coo_matrix((np.ones(len(links)), (src, dst)), shape=(n_i + n_e, n_i + n_e))
    n_comp, comp = connected_components(graph, directed=False)
    held: list[tuple[set[str], set[str]]] = [(set(), set()) for _ in range(n_comp)]
    for side, (_, _, _, _, units, strata, _) in enumerate(sides):
        offset = 0 if side == 0 else n_i
        for u, st in zip(units.of_row, strata):
            held[comp[offset + int(u)]][side].add(st)
    by_key: dict[str, list[int]] = {}
    for c, (mine, theirs) in enumerate(held):
        by_key.setdefault(f"{','.join(sorted(mine))}/{','.join(sorted(theirs))}", []).append(c)
    b = max(int(n_boot), 1)
    rng = bs.stable_seed(seed, "shift-paired", stream)
    w = bs.unit_weights(rng, [np.array(by_key[k], dtype=np.int64) for k in sorted(by_key)], n_comp, b)
    out = []
    for side, (names, codes, y, scores, units, _, _) in enumerate(sides):
        rows_w = w[:, comp[(0 if side == 0 else n_i) + units.of_row]]
        point = _group_values(y, scores, codes, len(names), np.ones((1, len(codes))))[0]
        out.append(GroupDraws(names, point, _group_values(y, scores, codes, len(names), rows_w),
                              tuple(int((codes == k).sum()) for k in range(len(names)))))
    return out[0], out[1]


def site_shifts(task: str, internal: SiteScores, external: SiteScores, n_boot: int, seed: int, label: str,
                min_group_size: int, pairs: np.ndarray | None = None) -> list[dict[str, Any]]:
    """The shift block of each attribute between the run's test set and external set `label`: independent draws of
    the two (streams 'internal' and 'external:<label>'), or with `pairs` (the items both hold, overlap=paired) one
    joint draw (`paired_group_draws`), every entry then marked `paired`."""
    out = []
    for a in internal.groups:
        if pairs is None:
            di = group_draws(task, internal.y, internal.scores, internal.groups[a], n_boot, seed, "internal",
                             internal.patient_ids)
            de = group_draws(task, external.y, external.scores, external.groups[a], n_boot, seed, f"external:{label}",
                             external.patient_ids)
        else:
            di, de = paired_group_draws(internal, external, a, pairs, n_boot, seed, f"external:{label}")
        block = shift_block(task, a, di, de, n_boot, min_group_size)
        if pairs is not None:
            for e in (*block["per_group"].values(), block["gap"], *([block["diff"]] if "diff" in block else [])):
                e["paired"] = True
        out.append(block)
    return out


def _seed_entry(doc: dict[str, Any], k: int, j: int, key: str) -> dict[str, Any]:
    """One seed document's shift entry: external dataset k, attribute j, a group ('group:NAME'), 'gap' or 'diff'."""
    sh = doc["external"][k]["shift"][j]
    return sh["per_group"][key[6:]] if key.startswith("group:") else sh[key]


def external_summary(docs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per external dataset and attribute: each seed's shift of every group, of the gap and of the difference
    (value and its bootstrap interval over the two test sets), and their mean, std and t 95% CI across seeds."""
    from fairmedbench.metrics.stats import seed_summary

    out: list[dict[str, Any]] = []
    for k, first in enumerate(docs[0].get("external", []) if docs else []):  # a run without --eval-dataset: none
        attrs = []
        for j, sh0 in enumerate(first["shift"]):
            rows = {}
            for key in [*(f"group:{g}" for g in sh0["per_group"]), "gap", *(["diff"] if "diff" in sh0 else [])]:
                per_seed = [{"seed": d["spec"]["seed"],
                             **{f: _seed_entry(d, k, j, key).get(f) for f in ("shift", "ci_low", "ci_high")}}
                            for d in docs]
                vals = [r["shift"] for r in per_seed if r["shift"] is not None]
                row: dict[str, Any] = {"per_seed": per_seed}
                if len(vals) == len(per_seed) and vals:
                    ss = seed_summary(vals)
                    row.update(mean=ss.mean, std=ss.std if ss.n > 1 else None,
                               ci_low=ss.ci_low if ss.n > 1 else None, ci_high=ss.ci_high if ss.n > 1 else None)
                rows[key] = row
            attrs.append({"attribute": sh0["attribute"], "metric": sh0["metric"], "shift": rows,
                          **({"diff_of": sh0["diff"]["of"]} if "diff" in sh0 else {})})
        paired = first.get("shift_method") == SHIFT_METHOD_PAIRED
        out.append({"label": first["label"], "dataset": first["dataset"], "options": first["options"],
                    "attributes": attrs,
                    "note": "every seed sees the same two test sets, so the t interval across seeds leaves out their "
                            "sampling error; each seed's ci_low/ci_high "
                            f"({'a paired bootstrap' if paired else 'independent bootstraps'} of the two test sets) "
                            "carries it"})
    return out


SHIFT_METHOD = ("shift = external - internal; interval: 2.5th-97.5th percentile of the differences of independent "
                "bootstrap draws of the two test sets (each stratified by group x class, the run's n_boot "
                "resamples each, seeded by the run seed on the streams 'internal' and 'external:<dataset>'), since "
                "the two test sets are different samples, not a paired resample of one")
SHIFT_METHOD_PAIRED = ("shift = external - internal; the two test sets share items (overlap=paired), so the interval "
                       "is the 2.5th-97.5th percentile of the differences on one paired bootstrap: the union of the "
                       "two sets resampled once (stratified by each set's group x class, the run's n_boot resamples, "
                       "seeded by the run seed on the stream 'external:<dataset>'), every shared item and its patient "
                       "drawn jointly in both")
