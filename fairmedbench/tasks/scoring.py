"""The built-in tasks' scorers (Task.scorer): a predictions table laid out as the task declares its columns and one
ScoreSettings -> the metric engine's FairnessResult. Runs, `evaluate`, `submit` and `verify` all score through
`Task.score`, which calls these; this module imports no torch (the leaderboards recompute submissions with it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from fairmedbench.errors import InputError
from fairmedbench.metrics import FairnessResult, evaluate_classification
from fairmedbench.metrics.groups import Attribute
from fairmedbench.spec import ScoreSettings
from fairmedbench.tasks.base import PATIENT_COLUMN, PredictionTable, get_task

#: progress of the engine: (done, total, what)
Step = Callable[[int, int, str], None]


def attributes(table: PredictionTable, settings: ScoreSettings) -> dict[str, np.ndarray | Attribute]:
    """The table's attr:<name> columns by attribute name; an attribute whose groups the settings fix is encoded in
    that order (a recomputation draws the groups in the order the result reported them)."""
    out: dict[str, np.ndarray | Attribute] = {}
    for name in table.attributes:
        values = table.test[f"attr:{name}"]
        groups = settings.groups.get(name)
        out[name] = values if groups is None else _encode(name, values, tuple(groups))
    return out


def _encode(name: str, values: np.ndarray, groups: tuple[str, ...]) -> Attribute:
    """Group names as codes into `groups` (None = missing, -1)."""
    index = {g: i for i, g in enumerate(groups)}
    unknown = sorted({str(v) for v in values if v is not None and v not in index})
    if unknown:
        raise InputError(f"attribute {name!r} has group(s) {unknown[:5]} outside the groups given for it "
                         f"{list(groups)}")
    return Attribute(name, np.array([-1 if v is None else index[v] for v in values], dtype=np.int64), groups)


def patients(table: PredictionTable, settings: ScoreSettings) -> np.ndarray | None:
    """The patient of each test row when the settings resample patients and the table names them, else None
    (rows are resampled)."""
    if settings.resampling_unit == "row":
        return None
    return table.test.get(PATIENT_COLUMN)


def _stack(columns: Mapping[str, np.ndarray], names: list[str]) -> np.ndarray:
    return np.column_stack([columns[c] for c in names])


def score_classification(table: PredictionTable, settings: ScoreSettings, on_step: Step | None = None
                         ) -> FairnessResult:
    """Binary (multi-label) classification: label:<task> and score:<task> per task column; the threshold policy
    reads the validation rows when the table has any."""
    task = get_task("classification")
    labels = [task.label_column.format(task=t) for t in table.tasks]
    scores = [task.score_column.format(task=t) for t in table.tasks]
    val = table.n_val > 0
    return evaluate_classification(
        _stack(table.test, labels), _stack(table.test, scores), attributes(table, settings),
        task_names=list(table.tasks), bins=dict(settings.bins), intersect=settings.intersect,
        threshold=settings.threshold, val_y_true=_stack(table.val, labels) if val else None,
        val_y_score=_stack(table.val, scores) if val else None, profile=settings.profile, n_boot=settings.n_boot,
        seed=settings.seed, ci_level=settings.ci_level, min_group_size=settings.min_group_size,
        fpr_at_tpr=settings.fpr_at_tpr, rates_at_fpr=settings.rates_at_fpr, ece_bins=settings.ece_bins,
        logits=settings.logits, on_step=on_step, patient_ids=patients(table, settings), n_perm=settings.n_perm)


def score_multiclass(table: PredictionTable, settings: ScoreSettings, on_step: Step | None = None) -> FairnessResult:
    """Multi-class: one label column (the class index) and score:<class> per class, decided by the argmax under
    the default profile."""
    from fairmedbench.metrics.multiclass import evaluate_multiclass  # loaded by the task that scores with it

    if settings.profile != "default":
        raise InputError(f"metric profile {settings.profile!r} defines binary conventions; the multiclass task uses "
                         "the default profile (drop --profile)")
    task = get_task("multiclass")
    return evaluate_multiclass(
        table.test[task.label_column], _stack(table.test, [task.score_column.format(task=c) for c in table.classes]),
        attributes(table, settings), classes=list(table.classes), task_name=table.tasks[0],
        bins=dict(settings.bins), intersect=settings.intersect, n_boot=settings.n_boot, seed=settings.seed,
        ci_level=settings.ci_level, min_group_size=settings.min_group_size, logits=settings.logits, on_step=on_step,
        patient_ids=patients(table, settings), n_perm=settings.n_perm)


def score_segmentation(table: PredictionTable, settings: ScoreSettings, on_step: Step | None = None
                       ) -> FairnessResult:
    """Segmentation: a DSC per row (a sample or a volume), with IoU, HD95 and empty_gt where the table has them."""
    from fairmedbench.metrics.seg_fairness import evaluate_segmentation

    t = table.test
    return evaluate_segmentation(
        t["dsc"], attributes(table, settings), iou=t.get("iou"), hd95=t.get("hd95"), empty_gt=t.get("empty_gt"),
        bins=dict(settings.bins), intersect=settings.intersect, profile=settings.profile, n_boot=settings.n_boot,
        seed=settings.seed, ci_level=settings.ci_level, min_group_size=settings.min_group_size,
        patient_ids=patients(table, settings), n_perm=settings.n_perm)
