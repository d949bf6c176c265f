"""Training- and test-set sampling for the study sweeps: a group's share of a fixed-size training set (Meissen
et al.'s fairness laws) and a class prevalence imposed on the train or test split in every group (Mosquera et
al.'s imbalance study). Drawn after feature extraction, from positions of the unsampled split, seeded per run
seed; torch-free."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.errors import InputError

if TYPE_CHECKING:
    from fairmedbench.tasks.base import Task

PREVALENCE_SPLITS = ("train", "test")


@dataclass(frozen=True)
class Sampling:
    """A run's resolved sampling; every field is part of the run id (empty when nothing is sampled)."""

    train_group_share: float | None = None
    share_group: str | None = None  # a value of the run's first attribute
    train_size: int | None = None
    prevalence: float | None = None
    prevalence_on: str | None = None
    test_resample: str | None = None  # analysis.resample spec: a second, resampled test set reported beside

    @property
    def active(self) -> bool:
        """Whether any split is sampled."""
        return self.train_group_share is not None or self.prevalence is not None

    def identity(self) -> dict[str, Any]:
        """The fields that are set (an unsampled run's identity is {})."""
        return {k: v for k, v in asdict(self).items() if v is not None}


def check_request(share: float | None, share_group: str | None, train_size: int | None, prevalence: float | None,
                  prevalence_on: str, attributes: tuple[str, ...], task: Task) -> None:
    """Cheap checks of the sampling options (names and ranges), before any data is read."""
    if (share_group is not None or train_size is not None) and share is None:
        raise InputError("--share-group and --train-size go with --train-group-share (the share of that group "
                         "in a fixed-size training set)")
    if share is None and prevalence is None:
        return
    if not task.samples_splits:
        raise InputError(f"--train-group-share and --prevalence sample labelled binary classification splits; this "
                         f"run's task is {task.name}")
    if share is not None:
        if not (isinstance(share, (int, float)) and 0.0 <= share <= 1.0):
            raise InputError(f"--train-group-share must be a number in [0, 1], got {share!r}")
        if not attributes:
            raise InputError("--train-group-share needs an attribute (the share is of a group of the first one)")
        if train_size is not None and (not isinstance(train_size, int) or train_size < 2):
            raise InputError(f"--train-size must be an integer >= 2, got {train_size!r}")
    if prevalence is not None:
        if not (isinstance(prevalence, (int, float)) and 0.0 < prevalence < 1.0):
            raise InputError(f"--prevalence must be a number strictly between 0 and 1, got {prevalence!r}")
        if prevalence_on not in PREVALENCE_SPLITS:
            raise InputError(f"--prevalence-on must be one of {', '.join(PREVALENCE_SPLITS)}, got {prevalence_on!r}")
        if share is not None and prevalence_on == "train":
            raise InputError("--train-group-share and --prevalence-on train both resample the training set; "
                             "sweep one at a time (or use --prevalence-on test)")


def resolve(share: float | None, share_group: str | None, train_size: int | None, prevalence: float | None,
            prevalence_on: str, groups: np.ndarray, train: np.ndarray, test_resample: str | None = None) -> Sampling:
    """Fill in the share group (default: the smallest group of the first attribute in the training split) and
    the fixed training size (default: the largest size at which every share from 0 to 1 can be drawn)."""
    if share is None:
        return Sampling(prevalence=prevalence, prevalence_on=prevalence_on if prevalence is not None else None,
                        test_resample=test_resample)
    values = groups[train]
    present = sorted({v for v in values if isinstance(v, str)})
    if len(present) < 2:
        raise InputError(f"--train-group-share needs two groups in the training split; it has {present}")
    counts = {g: int(np.sum(values == g)) for g in present}
    group = share_group if share_group is not None else min(present, key=lambda g: (counts[g], g))
    if group not in counts:
        raise InputError(f"--share-group {group!r} is not a group of the training split: {', '.join(present)}")
    n_group, n_other = counts[group], sum(c for g, c in counts.items() if g != group)
    most = min(n_group, n_other)
    size = most if train_size is None else train_size
    need_group, need_other = round(share * size), size - round(share * size)
    if need_group > n_group or need_other > n_other:
        raise InputError(f"a training set of {size} with {share:.0%} {group!r} needs {need_group} {group!r} and "
                         f"{need_other} others; the training split has {n_group} and {n_other}. Use --train-size "
                         f"{most} or less (every share from 0 to 1 fits)")
    return Sampling(train_group_share=float(share), share_group=group, train_size=int(size),
                    prevalence=prevalence, prevalence_on=prevalence_on if prevalence is not None else None,
                    test_resample=test_resample)


def _rng(split_seed: int, seed: int) -> np.random.Generator:
    # split_seed is -1 for an imported split (--split-file, board runs): SeedSequence takes only non-negative
    # entropy, so it is taken mod 2**32 (every seed from 0 to 2**32 - 1 keeps its stream)
    return np.random.default_rng([int(split_seed) % 2 ** 32, int(seed), 0x5A3F])


def _group_share(sampling: Sampling, groups: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Indices (into the split) of a training set of `train_size` with the share group at its share."""
    size = int(sampling.train_size or 0)
    k = round(float(sampling.train_group_share or 0.0) * size)
    is_str = np.array([isinstance(v, str) for v in groups], dtype=bool)
    mine = np.flatnonzero(is_str & (groups == sampling.share_group))
    other = np.flatnonzero(is_str & (groups != sampling.share_group))
    chosen = np.concatenate([rng.choice(mine, size=k, replace=False), rng.choice(other, size=size - k, replace=False)])
    return np.sort(chosen)


def _prevalence(p: float, labels: np.ndarray, groups: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Indices with prevalence `p` in every group (samples without a group form their own stratum), as many as
    each group allows: n = floor(min(P / p, N / (1 - p))) with round(p * n) positives."""
    keys = np.array([v if isinstance(v, str) else "\0missing" for v in groups], dtype=object)
    chosen = []
    for key in sorted(set(keys.tolist())):
        idx = np.flatnonzero(keys == key)
        pos, neg = idx[labels[idx] == 1], idx[labels[idx] == 0]
        n = math.floor(min(len(pos) / p, len(neg) / (1.0 - p)) + 1e-9)
        n_pos = min(round(p * n), len(pos))
        n_neg = min(n - n_pos, len(neg))
        if n_pos == 0 or n_neg == 0:
            what = "the samples without a group" if key == "\0missing" else f"group {key!r}"
            raise InputError(f"prevalence {p}: {what} has {len(pos)} positives and {len(neg)} negatives, too few "
                             "to impose it; choose a prevalence nearer the group's own or a larger dataset")
        chosen += [rng.choice(pos, size=n_pos, replace=False), rng.choice(neg, size=n_neg, replace=False)]
    return np.sort(np.concatenate(chosen))


def draw(sampling: Sampling, positions: Mapping[str, np.ndarray], groups: np.ndarray, labels: np.ndarray,
         split_seed: int, seed: int) -> dict[str, np.ndarray]:
    """For each split, the indices into its positions that the run keeps (all of them when not sampled).
    `groups`/`labels` are the first attribute and the main label of every sample of the dataset."""
    rng = _rng(split_seed, seed)
    keep = {name: np.arange(len(p)) for name, p in positions.items()}
    if sampling.train_group_share is not None:
        keep["train"] = _group_share(sampling, groups[positions["train"]], rng)
    if sampling.prevalence is not None:
        name = sampling.prevalence_on or "test"
        p = positions[name]
        keep[name] = _prevalence(float(sampling.prevalence), labels[p], groups[p], rng)
    return keep


def describe(keep: Mapping[str, np.ndarray], positions: Mapping[str, np.ndarray], groups: np.ndarray,
             labels: np.ndarray) -> dict[str, Any]:
    """Per sampled split: n, positives and prevalence per group (for the result document)."""
    out: dict[str, Any] = {}
    for name, idx in keep.items():
        if len(idx) == len(positions[name]):
            continue
        rows = positions[name][idx]
        by_group: dict[str, Any] = {}
        for g in sorted({v if isinstance(v, str) else "(missing)" for v in groups[rows]}):
            mask = np.array([(v if isinstance(v, str) else "(missing)") == g for v in groups[rows]])
            n, n_pos = int(mask.sum()), int(labels[rows][mask].sum())
            by_group[g] = {"n": n, "n_pos": n_pos, "prevalence": n_pos / n if n else None}
        out[name] = {"n": int(len(rows)), "of": int(len(positions[name])), "by_group": by_group}
    return out
