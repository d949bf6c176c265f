"""A task's predictions table both ways (Task.frame, Task.table): the Parquet frame a runner writes, laid out as
the task declares its columns, and the table any predictions frame (a run's, a user's file for `evaluate`, a
submitted bundle's) is scored as: its role checks, its val/test split and the test rows the task's rules leave
out (an 'unscored' value column, e.g. segmentation's empty ground truth). Imports no torch; pandas only to write.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

    from fairmedbench.spec import ScoreSettings
    from fairmedbench.tasks.base import Task

#: the split names a predictions frame may give validation rows (case and spaces ignored); test rows say 'test'
VAL_SPLITS = ("val", "valid", "validation")
#: the columns that say which row is which (written by every runner; a user's file may lack any of them)
SAMPLE_ID, SPLIT, SEED = "sample_id", "split", "seed"


#: the optional per-row patient column of a predictions table (every runner writes it): the resampling unit
PATIENT_COLUMN = "patient_id"


@dataclass(frozen=True)
class PredictionTable:
    """Predictions laid out as a task declares its columns (its label and score columns per task column, or per
    class; attr:<name> per attribute; optionally patient_id): the test rows it scores and the validation rows a
    threshold policy may read (none: empty), each column a numpy array. `tasks` names the task columns (a
    multi-class table: its one label), `classes` a multi-class task's classes in index order."""

    test: Mapping[str, np.ndarray]
    tasks: tuple[str, ...]
    attributes: tuple[str, ...]
    val: Mapping[str, np.ndarray] = field(default_factory=dict)
    classes: tuple[str, ...] = ()

    @property
    def n_val(self) -> int:
        """Validation rows (0 without any)."""
        return len(next(iter(self.val.values()))) if self.val else 0

    def take(self, rows: np.ndarray) -> PredictionTable:
        """The same table with only the test rows at `rows` (a resampled test set); validation rows unchanged."""
        return dataclasses.replace(self, test={k: v[rows] for k, v in self.test.items()})


@dataclass(frozen=True)
class SplitPredictions:
    """One split's predictions as a runner holds them: ids, patients, attribute groups, and the task's values:
    labels ((n, K) 0/1 per task column, or (n,) class indices), scores ((n, K), one column per task column or
    class), the task's value columns by name (segmentation: dsc, iou, empty_gt, hd95) and further columns
    written as given (MC dropout samples)."""

    split: str
    sample_ids: np.ndarray
    patient_ids: np.ndarray
    attributes: Mapping[str, np.ndarray]
    labels: np.ndarray | None = None
    scores: np.ndarray | None = None
    values: Mapping[str, np.ndarray] = field(default_factory=dict)
    extra: Mapping[str, np.ndarray] = field(default_factory=dict)


def label_names(task: Task, tasks: Sequence[str]) -> list[str]:
    """The label column of each task column (one class-index column for a multi-class task; none without
    labels)."""
    if not task.label_column:
        return []
    if task.class_index_labels:
        return [task.label_column]
    return [task.label_column.format(task=t) for t in tasks]


def score_names(task: Task, tasks: Sequence[str], classes: Sequence[str]) -> list[str]:
    """The score column of each task column, or of each class for a multi-class task (none when its score is a
    value column, as segmentation's dsc)."""
    if any(v.name == task.score_column for v in task.value_columns):
        return []
    return [task.score_column.format(task=c) for c in (classes if task.class_index_labels else tasks)]


def write_frame(task: Task, parts: Sequence[SplitPredictions], seed: int, tasks: Sequence[str],
                classes: Sequence[str] = ()) -> pd.DataFrame:
    """The predictions Parquet frame of one seed: per row its sample id, split, seed and patient, then the task's
    label and score columns (a label beside its score per task column), its value columns, the attributes
    (missing as null) and the extra columns, the parts' rows in order."""
    import pandas as pd

    labels, scores = label_names(task, tasks), score_names(task, tasks, classes)
    frames = []
    for part in parts:
        n = len(part.sample_ids)
        frame = pd.DataFrame({SAMPLE_ID: np.asarray(part.sample_ids).astype(str), SPLIT: part.split,
                              SEED: np.full(n, seed), "patient_id": part.patient_ids})
        if task.class_index_labels:  # the class index, then one probability per class
            frame[labels[0]] = part.labels
        for j, name in enumerate(scores):
            if labels and not task.class_index_labels:  # a 0/1 label beside its score per task column
                assert part.labels is not None, f"the {task.name} task writes labels"
                frame[labels[j]] = np.asarray(part.labels)[:, j]
            assert part.scores is not None, f"the {task.name} task writes scores"
            frame[name] = part.scores[:, j]
        for name, v in part.values.items():
            frame[name] = v
        for a, v in part.attributes.items():
            frame[f"attr:{a}"] = pd.Series(v, dtype=object).where(pd.notna(v), None)
        frames.append(frame.assign(**part.extra) if part.extra else frame)
    out: pd.DataFrame = pd.concat(frames, ignore_index=True)
    return out


class TableError(InputError):
    """A predictions frame the task cannot score: every problem found, one line each."""

    def __init__(self, where: str, problems: list[str]) -> None:
        super().__init__(where + "; ".join(problems))
        self.problems = problems


def _numbers(name: str, values: np.ndarray, where: str) -> np.ndarray:
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise TableError(where, [f"column {name!r} must hold numbers"]) from None


def _role_problems(name: str, role: str, v: np.ndarray, classes: Sequence[str]) -> list[str]:
    """What is wrong with a column's values (the rows the task scores) for its role."""
    if role == "distance" and (v < 0).any():
        return [f"column {name!r} has {int((v < 0).sum())} negative value(s); a distance is >= 0 (pixels or mm)"]
    bad = np.isinf(v) if role == "distance" else ~np.isfinite(v)
    if bad.any():
        kind = "NaN" if np.isnan(v[bad]).any() else "infinite"
        return [f"column {name!r} has {int(bad.sum())} {kind} value(s); every sample needs a finite value"]
    if role == "score" and ((v < 0) | (v > 1)).any():
        return [f"column {name!r} must hold values in [0, 1] ({int(((v < 0) | (v > 1)).sum())} outside)"]
    if role in ("label", "unscored") and not np.isin(v, (0.0, 1.0)).all():
        return [f"column {name!r} must hold 0/1 labels"]
    if role == "class" and not np.isin(v, np.arange(len(classes))).all():
        return [f"column {name!r} must hold class indices 0..{len(classes) - 1} (the classes {list(classes)})"]
    return []


def _softmax_sums(columns: Mapping[str, np.ndarray], probs: list[np.ndarray], names: list[str],
                  rows: np.ndarray) -> list[str]:
    """One softmax per row of a multi-class frame: its class probabilities sum to 1 (metrics.multiclass's
    tolerance)."""
    from fairmedbench.metrics.multiclass import PROB_SUM_TOLERANCE

    dev = np.where(rows, np.abs(np.column_stack(probs).sum(axis=1) - 1.0), 0.0)
    off = dev > PROB_SUM_TOLERANCE
    if not off.any():
        return []
    first = int(np.argmax(off))
    which = f"sample {str(columns[SAMPLE_ID][first])!r}" if SAMPLE_ID in columns else f"row {first}"
    return [f"{int(off.sum())} row(s) whose class probabilities ({', '.join(names)}) do not sum to 1 within "
            f"{PROB_SUM_TOLERANCE:g} (largest deviation {dev.max():.3g}, e.g. {which}); write the softmax over all "
            f"{len(names)} classes"]


def _undefined_distances(task: Task, arrays: Mapping[str, np.ndarray], rows: np.ndarray) -> list[str]:
    """A distance (HD95) is undefined only where the predicted mask is empty, i.e. where the task's score (DSC)
    is 0: a null distance beside a positive score hides one."""
    score = arrays.get(task.score_column)
    out = []
    for name in task.columns_of("distance"):
        if name in arrays and score is not None:
            n = int((np.isnan(arrays[name]) & rows & (score > 0)).sum())
            if n:
                out.append(f"column {name!r} is null on {n} row(s) with {task.score_column} > 0; HD95 is undefined "
                           f"only where the predicted mask is empty ({task.score_column} 0), so give the distance "
                           "there")
    return out


def read_table(task: Task, columns: Mapping[str, np.ndarray], tasks: Sequence[str], attributes: Sequence[str],
               classes: Sequence[str] = (), where: str = "") -> PredictionTable:
    """The table `task` scores from a predictions frame's columns (its own layout): each label, score and value
    column checked for its role (InputError naming every problem, prefixed by `where`), the rows split into
    validation ('val', 'valid', 'validation') and test ('test'; all rows without a split column), and the test rows
    an 'unscored' column marks left out (their other value columns may be null there, and only there)."""
    n = len(next(iter(columns.values()))) if columns else 0
    labels, scores = label_names(task, tasks), score_names(task, tasks, classes)
    roles = {**{c: "class" if task.class_index_labels else "label" for c in labels},
             **{c: "score" for c in scores},
             **{v.name: v.role for v in task.value_columns if v.name in columns or v.name == task.score_column}}
    # a frame may lack the other value columns (a user's file without IoU); a bundle's format asks for them
    wanted = [*roles, *(f"attr:{a}" for a in attributes)]
    missing = [c for c in wanted if c not in columns]
    if missing:
        raise TableError(where, [f"missing column(s) {missing} (the {task.name} task's layout)"])
    if SPLIT in columns:
        split = np.char.lower(np.char.strip(np.asarray(columns[SPLIT]).astype(str)))
        val, test = np.isin(split, VAL_SPLITS), split == "test"
    else:
        val, test = np.zeros(n, dtype=bool), np.ones(n, dtype=bool)
    if not test.any():
        raise TableError(where, ["no 'test' rows to score"])
    unscored = np.zeros(n, dtype=bool)
    problems = []
    for name in task.columns_of("unscored"):
        flag = _numbers(name, columns[name], where)
        problems += _role_problems(name, "unscored", flag, classes)
        unscored |= flag == 1.0
    unscored &= test
    flags = ", ".join(task.columns_of("unscored"))
    arrays: dict[str, np.ndarray] = {}
    for name, role in roles.items():
        v = _numbers(name, columns[name], where)
        if role == "class":
            arrays[name] = np.where(np.isfinite(v), v, -1).astype(np.int64)
        else:
            arrays[name] = v.astype(bool) if role == "unscored" else v
        if role == "unscored":
            continue
        filled = int((~np.isnan(v) & unscored).sum()) if role in ("score", "distance") else 0
        if filled:
            problems.append(f"column {name!r} has a value on {filled} row(s) with {flags} true; such a row is not "
                            "scored (segmentation: an empty ground truth is not prompted), so leave it null there")
        problems += _role_problems(name, role, v[(val | test) & ~unscored], classes)
    if task.class_index_labels and all(np.isfinite(arrays[c][val | test]).all() for c in scores):
        problems += _softmax_sums(columns, [arrays[c] for c in scores], scores, val | test)
    problems = problems or _undefined_distances(task, arrays, (val | test) & ~unscored)
    if problems:
        raise TableError(where, problems)
    keep = test & ~unscored
    arrays.update({c: np.asarray(columns[c]) for c in (PATIENT_COLUMN, SAMPLE_ID, *(f"attr:{a}" for a in attributes))
                   if c in columns})
    decided = [*labels, *scores]  # what a threshold policy reads on validation rows
    return PredictionTable({k: v[keep] for k, v in arrays.items()}, tuple(tasks), tuple(attributes),
                           {k: arrays[k][val] for k in decided} if val.any() and decided else {}, tuple(classes))


#: the settings a result's meta records at its top level (the engine writes them; `record_settings` fills a gap)
RECORDED = ("profile", "n_boot", "n_perm", "seed", "ci_level", "min_group_size")


def record_settings(meta: dict[str, Any], settings: ScoreSettings) -> None:
    """The score settings into a result's meta, as `settings_from_meta` reads them back (a scorer's engine writes
    them already; a value it wrote is kept, e.g. a profile's own minimum group size)."""
    for key in RECORDED:
        meta.setdefault(key, getattr(settings, key))


def settings_from_meta(result: Mapping[str, Any], task: Task, attributes: Sequence[str],
                       tasks: Sequence[str]) -> ScoreSettings:
    """The settings a result was scored under, from its meta (`record_settings`) and reports: groups in the order
    the reports give them (so a recomputation draws them alike), the threshold policy of a thresholded task under
    a profile that takes one, operating points and ECE bins where the engine records them; InputError naming what
    is missing."""
    from fairmedbench.metrics.profiles import get_profile
    from fairmedbench.spec import ScoreSettings

    meta = result["meta"]
    first: dict[str, Mapping[str, Any]] = {}
    for r in result["reports"]:
        first.setdefault(r.get("attribute"), r)
    missing = [a for a in attributes if a not in first]
    if missing:
        raise InputError(f"no report for attribute(s) {missing}")

    def recorded(path: tuple[str, ...], default: Any = None) -> Any:
        cur: Any = meta
        for k in path:
            if not isinstance(cur, dict) or k not in cur:
                if default is not None:
                    return default
                raise InputError(f"result.meta lacks {'.'.join(path)}; the result cannot be recomputed")
            cur = cur[k]
        return cur

    policy = None
    if task.thresholded and get_profile(recorded(("profile",))).accepts_threshold:
        policies = {(recorded(("thresholds", t)) or {}).get("policy") for t in tasks}
        if len(policies) != 1 or None in policies:
            raise InputError("result.meta.thresholds must name one policy for every task")
        policy = policies.pop()
    default = ScoreSettings()
    margins = meta.get("margins", {})  # equivalence margins the scorer applied (results without any carry none)
    if not (isinstance(margins, dict) and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                                              for v in margins.values())):
        raise InputError(f"result.meta.margins must map metric names to positive numbers, got {margins!r}")
    return ScoreSettings(
        profile=recorded(("profile",)), threshold=policy, n_boot=recorded(("n_boot",)),
        n_perm=meta.get("n_perm", 0),  # results written before the permutation tests carry none
        seed=recorded(("seed",)), ci_level=recorded(("ci_level",)), min_group_size=recorded(("min_group_size",)),
        intersect=len(attributes) > 1 and "|".join(attributes) in first,
        groups={a: tuple(first[a]["groups"]) for a in attributes},
        fpr_at_tpr=recorded(("operating_points", "fpr_at_tpr"), default.fpr_at_tpr),
        rates_at_fpr=recorded(("operating_points", "rates_at_fpr"), default.rates_at_fpr),
        ece_bins=recorded(("ece", "bins"), default.ece_bins), margins=margins)
