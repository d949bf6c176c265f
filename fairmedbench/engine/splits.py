"""Split policies (patient-level, seeded, stratified; official), split fingerprints, export/import.

Torch-free and dataset-agnostic: a split is three lists of sample ids; positions into a sample table
are attached by `Split.bind`. The fingerprint is sha256 over the sorted sample ids of each split.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fairmedbench.engine.store import write_json
from fairmedbench.errors import InputError, MissingResourceError

SPLIT_NAMES = ("train", "val", "test")
SPLIT_FORMAT = "fairmedbench-split"
SPLIT_FORMAT_VERSION = 1
#: one value per sample (ids, labels, strata): a sequence or a 1-D array
Column = Sequence[str] | np.ndarray


def test_fingerprint(sample_ids: Sequence[str] | np.ndarray) -> str:
    """sha256 (hex) of the sorted sample ids joined by newlines, utf-8: a test set's identity."""
    return hashlib.sha256("\n".join(sorted(str(s) for s in sample_ids)).encode("utf-8")).hexdigest()


def split_fingerprint(ids: Mapping[str, Sequence[str]]) -> str:
    """sha256 over the sorted sample ids of each split (train, val, test), in that order."""
    h = hashlib.sha256()
    for name in SPLIT_NAMES:
        h.update(f"[{name}]\n".encode())
        for sid in sorted(str(s) for s in ids.get(name, ())):
            h.update(sid.encode())
            h.update(b"\n")
    return h.hexdigest()


@dataclass(frozen=True)
class Split:
    """Train/val/test sample ids (and, once bound to a sample table, their positions)."""

    ids: Mapping[str, tuple[str, ...]]
    policy: str
    seed: int | None = None
    dataset: str | None = None
    dataset_fingerprint: str | None = None
    positions: Mapping[str, np.ndarray] | None = field(default=None, compare=False, repr=False)

    @property
    def fingerprint(self) -> str:
        """sha256 over the sorted sample ids of each split."""
        return split_fingerprint(self.ids)

    def _pos(self, name: str) -> np.ndarray:
        if self.positions is None:
            raise InputError(
                "this split is not bound to a dataset; call dataset.apply_split(split) "
                "(or Split.bind(sample_ids)) to get positions"
            )
        return self.positions[name]

    @property
    def train(self) -> np.ndarray:
        """Positions of the training samples in the bound sample table."""
        return self._pos("train")

    @property
    def val(self) -> np.ndarray:
        """Positions of the validation samples in the bound sample table."""
        return self._pos("val")

    @property
    def test(self) -> np.ndarray:
        """Positions of the test samples in the bound sample table."""
        return self._pos("test")

    def sizes(self) -> dict[str, int]:
        """Number of samples in each split."""
        return {name: len(self.ids.get(name, ())) for name in SPLIT_NAMES}

    def bind(self, sample_ids: Sequence[str]) -> Split:
        """Attach positions in `sample_ids`; every id of the split must be present there."""
        index = {str(s): i for i, s in enumerate(sample_ids)}
        positions = {}
        for name in SPLIT_NAMES:
            ids = self.ids.get(name, ())
            missing = [s for s in ids if s not in index]
            if missing:
                raise InputError(
                    f"split {name!r} names {len(missing)} sample id(s) absent from the dataset "
                    f"(first: {missing[:3]}); the split was made on other data "
                    f"(dataset fingerprint {self.dataset_fingerprint})"
                )
            positions[name] = np.fromiter((index[s] for s in ids), dtype=np.int64, count=len(ids))
        return Split(self.ids, self.policy, self.seed, self.dataset, self.dataset_fingerprint, positions)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (ids sorted, fingerprint included)."""
        return {
            "format": SPLIT_FORMAT,
            "version": SPLIT_FORMAT_VERSION,
            "dataset": self.dataset,
            "dataset_fingerprint": self.dataset_fingerprint,
            "policy": self.policy,
            "seed": self.seed,
            "fingerprint": self.fingerprint,
            "sizes": self.sizes(),
            "ids": {name: sorted(self.ids.get(name, ())) for name in SPLIT_NAMES},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "split") -> Split:
        """Rebuild a split from `to_dict` output; checks format and fingerprint."""
        if not isinstance(data, Mapping) or data.get("format") != SPLIT_FORMAT:
            raise InputError(f"{source}: not a fairmedbench split file (field 'format' != {SPLIT_FORMAT!r})")
        ids = data.get("ids")
        if not isinstance(ids, Mapping) or set(ids) != set(SPLIT_NAMES):
            raise InputError(f"{source}: field 'ids' must map exactly {list(SPLIT_NAMES)} to id lists")
        split = cls(
            ids={name: tuple(str(s) for s in ids[name]) for name in SPLIT_NAMES},
            policy=str(data.get("policy", "imported")),
            seed=data.get("seed"),
            dataset=data.get("dataset"),
            dataset_fingerprint=data.get("dataset_fingerprint"),
        )
        check_disjoint(split.ids, source)
        if data.get("fingerprint") and data["fingerprint"] != split.fingerprint:
            raise InputError(
                f"{source}: recorded fingerprint {data['fingerprint'][:12]}... does not match the ids "
                f"({split.fingerprint[:12]}...); the file was edited or corrupted"
            )
        return split


def check_disjoint(ids: Mapping[str, Sequence[str]], source: str = "split") -> None:
    """Fail if a sample id occurs in two splits (or twice in one)."""
    seen: dict[str, str] = {}
    for name in SPLIT_NAMES:
        for sid in ids.get(name, ()):
            if sid in seen:
                raise InputError(f"{source}: sample id {sid!r} is in both {seen[sid]!r} and {name!r}")
            seen[sid] = name


def check_nonempty(split: Split, context: str = "") -> None:
    """Fail with the split sizes if any of train/val/test is empty."""
    sizes = split.sizes()
    empty = [n for n, k in sizes.items() if k == 0]
    if empty:
        where = f" of {context}" if context else ""
        raise InputError(
            f"split{where} ({split.policy}, seed={split.seed}) has empty {', '.join(empty)} "
            f"(sizes {sizes}); use more data, other fractions, or another split policy"
        )


def _largest_remainder(n: int, fractions: Sequence[float]) -> list[int]:
    """Split the integer n in the given fractions (largest-remainder rounding)."""
    raw = [n * f for f in fractions]
    counts = [int(np.floor(r)) for r in raw]
    order = sorted(range(len(raw)), key=lambda k: (-(raw[k] - counts[k]), k))
    for k in order[: n - sum(counts)]:
        counts[k] += 1
    return counts


def _check_fractions(fractions: Sequence[float]) -> tuple[float, ...]:
    fr = tuple(float(f) for f in fractions)
    if len(fr) != 3 or any(f < 0 for f in fr) or not np.isclose(sum(fr), 1.0):
        raise InputError(f"split fractions must be three non-negative numbers summing to 1, got {fractions}")
    return fr


def _patient_strata(patients: np.ndarray, strata: np.ndarray) -> dict[str, str]:
    """Each patient's stratum: the most frequent among its samples (ties: smallest)."""
    order = np.lexsort((strata, patients))
    out: dict[str, str] = {}
    best: dict[str, tuple[int, str]] = {}
    p_sorted, s_sorted = patients[order], strata[order]
    if len(p_sorted) == 0:
        return out
    change = np.flatnonzero((p_sorted[1:] != p_sorted[:-1]) | (s_sorted[1:] != s_sorted[:-1])) + 1
    starts = np.concatenate([[0], change])
    ends = np.concatenate([change, [len(p_sorted)]])
    for a, b in zip(starts, ends):
        p, s, k = p_sorted[a], s_sorted[a], b - a
        if p not in best or k > best[p][0]:
            best[p] = (k, s)
    for p, (_, s) in best.items():
        out[p] = s
    return out


def _assign_patients(
    patients: np.ndarray, strata: np.ndarray, fractions: Sequence[float], names: Sequence[str],
    seed: int | tuple[int, int],
) -> dict[str, str]:
    """Patient -> split name, stratified by stratum, seeded.

    Patients are ordered stratum by stratum (strata and patients within each in seeded random order)
    and dealt to the split furthest below its target share so far. Each stratum is thus split in the
    given fractions to within one patient, and small strata (singletons) still fill val and test."""
    rng = np.random.default_rng(seed)
    pstrata = _patient_strata(patients, strata)
    by_stratum: dict[str, list[str]] = {}
    for p in sorted(pstrata):
        by_stratum.setdefault(pstrata[p], []).append(p)
    keys = sorted(by_stratum)
    order = [by_stratum[keys[k]][j] for k in rng.permutation(len(keys))
             for j in rng.permutation(len(by_stratum[keys[k]]))]
    fr = np.asarray(fractions, dtype=float)
    counts = np.zeros(len(fr))
    assign: dict[str, str] = {}
    for k, p in enumerate(order):
        s = int(np.argmax((k + 1) * fr - counts))
        counts[s] += 1
        assign[p] = names[s]
    return assign


def _as_str_array(values: Column) -> np.ndarray:
    return np.asarray([str(v) for v in values], dtype=object)


def patient_split(
    sample_ids: Column,
    patient_ids: Column,
    strata: Column | None = None,
    fractions: Sequence[float] = (0.7, 0.1, 0.2),
    seed: int = 0,
    dataset: str | None = None,
    dataset_fingerprint: str | None = None,
) -> Split:
    """Patient-level seeded split, stratified by `strata` (e.g. 'label|group'); positions bound."""
    fr = _check_fractions(fractions)
    sids = _as_str_array(sample_ids)
    pids = _as_str_array(patient_ids)
    if len(sids) != len(pids):
        raise InputError(f"{len(sids)} sample ids but {len(pids)} patient ids")
    st = _as_str_array(strata) if strata is not None else np.full(len(sids), "", dtype=object)
    assign = _assign_patients(pids, st, fr, SPLIT_NAMES, int(seed))
    labels = np.asarray([assign[p] for p in pids], dtype=object)
    return _from_labels(sids, labels, f"patient{fr}", seed, dataset, dataset_fingerprint)


def redraw_train_val(split: Split, sample_ids: Column, patient_ids: Column, strata: Column, seed: int) -> Split:
    """The same test samples; the rest re-dealt into train and val at patient level, stratified, seeded by the
    split seed `seed`, in the proportions of `split`'s train and val sizes (repeated splits: the spread across
    split seeds is the train/val variance measured on one fixed test set). `split` is bound to the table whose
    `sample_ids`, `patient_ids` and `strata` are given."""
    sids, pids, st = _as_str_array(sample_ids), _as_str_array(patient_ids), _as_str_array(strata)
    n_tr, n_val = len(split.train), len(split.val)
    if n_val == 0 or n_tr == 0:
        raise InputError(f"split seeds re-draw train and val; the split has {n_tr} train and {n_val} val samples")
    labels = np.full(len(sids), "-", dtype=object)  # '-': outside the split (none for a split of the whole table)
    labels[split.test] = "test"
    pool = np.concatenate([split.train, split.val])
    assign = _assign_patients(pids[pool], st[pool], (n_tr / (n_tr + n_val), n_val / (n_tr + n_val)),
                              ("train", "val"), (int(seed), 0x5E1D))  # a stream apart from the base split's
    labels[pool] = [assign[p] for p in pids[pool]]
    out = _from_labels(sids, labels, f"{split.policy}+redraw", seed, split.dataset, split.dataset_fingerprint)
    check_nonempty(out, split.dataset or "")
    return out


def official_split(
    sample_ids: Column,
    patient_ids: Column,
    official: Column,
    strata: Column | None = None,
    val_fraction: float = 0.1,
    seed: int = 0,
    dataset: str | None = None,
    dataset_fingerprint: str | None = None,
) -> Split:
    """The provider's split (values train/val/test, or trainval/train + test): when it has no
    validation set, one is carved from its training patients, patient-level, stratified, seeded."""
    sids = _as_str_array(sample_ids)
    pids = _as_str_array(patient_ids)
    off = np.asarray([str(v).lower() for v in official], dtype=object)
    off[off == "trainval"] = "train"
    off[(off == "valid") | (off == "validation")] = "val"
    bad = sorted(set(off) - set(SPLIT_NAMES))
    if bad:
        raise InputError(f"official split column has values {bad}; expected train/val/test (or trainval)")
    for a, b in (("train", "test"), ("val", "test"), ("train", "val")):
        cross = set(pids[off == a]) & set(pids[off == b])
        if cross:
            raise InputError(
                f"the official split puts {len(cross)} patient(s) in both {a} and {b} "
                f"(e.g. {sorted(cross)[:3]}); use the 'patient' split policy instead"
            )
    labels = off.copy()
    if "val" not in set(off):
        tr = off == "train"
        st = _as_str_array(strata) if strata is not None else np.full(len(sids), "", dtype=object)
        vf = float(val_fraction)
        if not 0 < vf < 1:
            raise InputError(f"val_fraction must be in (0, 1), got {val_fraction}")
        assign = _assign_patients(pids[tr], st[tr], (1 - vf, vf), ("train", "val"), int(seed))
        labels[tr] = [assign[p] for p in pids[tr]]
        return _from_labels(sids, labels, f"official+val{vf}", seed, dataset, dataset_fingerprint)
    return _from_labels(sids, labels, "official", None, dataset, dataset_fingerprint)


def _from_labels(sids: np.ndarray, labels: np.ndarray, policy: str, seed: int | None, dataset: str | None,
                 dataset_fingerprint: str | None) -> Split:
    positions = {name: np.flatnonzero(labels == name).astype(np.int64) for name in SPLIT_NAMES}
    ids = {name: tuple(sids[positions[name]]) for name in SPLIT_NAMES}
    check_disjoint(ids, "split")
    return Split(ids, policy, None if seed is None else int(seed), dataset, dataset_fingerprint, positions)


def save_split(split: Split, path: str | os.PathLike[str]) -> Path:
    """Write the split as JSON (atomic); returns the path."""
    out = Path(path)
    write_json(out, split.to_dict())
    return out


def load_split(path: str | os.PathLike[str]) -> Split:
    """Read a split JSON written by `save_split`; checks the fingerprint against the ids."""
    p = Path(path)
    if not p.is_file():
        raise MissingResourceError(f"split file {p} not found; write one with `benchmark splits export`")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"split file {p} is not valid JSON: {exc}") from None
    return Split.from_dict(data, source=str(p))
