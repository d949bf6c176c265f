"""Tasks as registered nouns: what a task predicts, how a run of it is executed and judged.

A task owns its runner and its scorer (each imported lazily as "module:function", so this module stays torch-free
and the leaderboards can read it), its training-config class, the columns of its predictions Parquet, the splits
those hold, its checkpoint-selection rules and whether a sample carries a class label. Its scorer turns a
predictions table into the typed result: runs, `evaluate`, `submit` and `verify` all score through `Task.score`.
Its metrics (headline, summary, what compare tests against ERM and ranks) are read from the MetricSpec registry,
never listed here.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.errors import InputError
from fairmedbench.metrics.specs import board_metrics, headline_metric, summary_metrics
from fairmedbench.registry.base import Registry
from fairmedbench.tasks.table import PATIENT_COLUMN as PATIENT_COLUMN  # re-exported: the table's home is tasks.table
from fairmedbench.tasks.table import PredictionTable as PredictionTable
from fairmedbench.tasks.table import label_names, read_table, record_settings, score_names, write_frame

if TYPE_CHECKING:
    import pandas as pd

    from fairmedbench.metrics.paired import PairedGroupAUC
    from fairmedbench.metrics.result import FairnessResult
    from fairmedbench.spec import ScoreSettings
    from fairmedbench.tasks.common import RunInputs, RunnerOutput
    from fairmedbench.tasks.table import SplitPredictions

def _load(ref: str) -> Any:
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class ValueColumn:
    """A per-sample column of a task's predictions besides ids, labels, scores and attributes: its name, the role a
    submitted file gives it ('unscored': 0/1, marking test rows that are covered but not scored, whose other value
    columns are null there; 'score': in [0, 1]; 'distance': >= 0, null where undefined), and whether a file may
    leave it out."""

    name: str
    role: str
    optional: bool = False


@dataclass(frozen=True)
class Task:
    """One task: its runner and config, predictions layout, metrics and selection rules."""

    name: str
    runner: str  # "module:function" taking one tasks.common.RunInputs
    scorer: str  # "module:function" (PredictionTable, ScoreSettings, on_step) -> FairnessResult; imports no torch
    config: str  # "module:Class", a dataclass of training hyperparameters with their defaults
    prediction_splits: tuple[str, ...]  # splits the predictions Parquet holds
    select_rules: tuple[str, ...]  # checkpoint selection on validation; the first is the default
    sample_labels: bool  # whether a sample has a class label (a mitigation may weigh group x class cells)
    run_kind: str  # the result document's kind
    label_column: str  # per-sample label column of each task column ("" when samples carry no class label)
    score_column: str  # per-sample score column of each task column ({task} is replaced by its name)
    decision: str  # how a prediction is decided, in words (a thresholded task's: by its threshold policy)
    head: str  # what a run trains and a mitigation's hooks see, e.g. 'classifier' (per-sample logits (b, K) on
    # features) or 'mask_decoder' (a prompted mask decoder's mask logits (b, L, L))
    extra_hparams: tuple[tuple[str, Any], ...] = ()  # task-level hparams beyond the config, with defaults
    samples_splits: bool = False  # whether its runner draws group shares, prevalences and test resamples
    class_index_labels: bool = False  # a sample's label is one class index (softmax head), not 0/1 per task column
    thresholded: bool = False  # whether a decision threshold policy (--threshold) applies to its scores
    value_columns: tuple[ValueColumn, ...] = ()  # per-sample columns besides ids, labels, scores, attributes
    # "module:function" (y, scores (S, n[, K]), groups, *, n_boot, seed, label, patient_ids) -> the headline per
    # group of S score sets on shared test-set resamples (metrics.paired); "": the task declares none
    headline_draws: str = ""

    @property
    def headline(self) -> str:
        """The utility metric a board ranks by (MetricSpec registry)."""
        return headline_metric(self.name)

    @property
    def headline_gap(self) -> str:
        """The between-group gap of the headline (the board's gap column)."""
        return board_metrics(self.name)["gap"].name

    @property
    def summary_metrics(self) -> tuple[str, ...]:
        """Metrics summarised across seeds and compared between mitigations (MetricSpec registry)."""
        return tuple(summary_metrics(self.name))

    @property
    def versus_erm(self) -> tuple[str, ...]:
        """Metrics compare pairs against ERM: worst-group utility, the gap, utility."""
        board = board_metrics(self.name)
        return tuple(board[c].name for c in ("worst_group", "gap", "utility"))

    @property
    def rank_metric(self) -> str:
        """The metric compare ranks methods by across datasets (Friedman): worst-group utility."""
        return board_metrics(self.name)["worst_group"].name

    def columns_of(self, role: str) -> tuple[str, ...]:
        """This task's value columns with `role` ('unscored', 'score' or 'distance'; see ValueColumn)."""
        return tuple(v.name for v in self.value_columns if v.role == role)

    def predictions_block(self, file: str, tasks: list[str], attributes: list[str],
                          classes: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
        """The result document's description of its predictions Parquet for this task (`classes`, the dataset
        card's class names, matter only to a task with one score column per class: MulticlassTask)."""
        from fairmedbench.engine import store

        labels = [self.label_column.format(task=t) for t in tasks] if self.label_column else []
        scores = list(dict.fromkeys(self.score_column.format(task=t) for t in tasks))
        return store.predictions_block(file, self.name, tasks, attributes, labels, scores)

    def run(self) -> Callable[[RunInputs], RunnerOutput]:
        """The runner function (imported on first use)."""
        runner: Callable[[RunInputs], RunnerOutput] = _load(self.runner)
        return runner

    def check(self, settings: ScoreSettings) -> None:
        """InputError for settings this task cannot score by: a threshold policy when it is not thresholded."""
        if settings.threshold is not None and not self.thresholded:
            raise InputError(f"the {self.name} task decides by {self.decision}: a threshold policy "
                             f"({settings.threshold}) does not apply; drop --threshold")

    def frame(self, parts: Sequence[SplitPredictions], seed: int, tasks: Sequence[str],
              classes: Sequence[str] = ()) -> pd.DataFrame:
        """The predictions Parquet frame a runner writes for one seed, laid out as this task declares its columns
        (tasks.table.write_frame)."""
        return write_frame(self, parts, seed, tasks, classes)

    def table(self, columns: Mapping[str, np.ndarray], tasks: Sequence[str], attributes: Sequence[str],
              classes: Sequence[str] = (), where: str = "") -> PredictionTable:
        """The table this task scores from any predictions frame's columns in its layout: role checks, val/test
        split, the rows its rules leave out (tasks.table.read_table)."""
        return read_table(self, columns, tasks, attributes, classes, where)

    def scored_rows(self, table: PredictionTable) -> PredictionTable:
        """`table` without the test rows this task's 'unscored' columns mark (segmentation: an empty ground truth),
        which no metric counts."""
        marks = [np.asarray(table.test[c], dtype=bool) for c in self.columns_of("unscored") if c in table.test]
        left_out = np.logical_or.reduce(marks) if marks else None
        return table if left_out is None or not left_out.any() else table.take(np.flatnonzero(~left_out))

    def headline_inputs(self, table: PredictionTable) -> tuple[np.ndarray | None, np.ndarray]:
        """What the headline is computed from on the table's test rows: the first task column's label (a
        multi-class task's class index; None without labels) and its score (a multi-class task's (n, K)
        probabilities; a per-sample value such as DSC)."""
        labels, scores = label_names(self, table.tasks), score_names(self, table.tasks, table.classes)
        y = table.test[labels[0]] if labels else None
        if self.class_index_labels:
            return y, np.column_stack([table.test[c] for c in scores])
        return y, np.asarray(table.test[scores[0] if scores else self.score_column], dtype=np.float64)

    def resampled_headline(self, y: np.ndarray | None, scores: np.ndarray, groups: np.ndarray, n_boot: int,
                           seed: int, stream: str, patient_ids: np.ndarray | None = None) -> PairedGroupAUC:
        """The headline per group of every score set (`scores` (S, n) or (S, n, K), on the test rows `y`, `groups`)
        on `n_boot` shared test-set resamples of the stream `stream` (whole patients with `patient_ids`): external
        shift and compare's paired bootstrap read it. InputError for a task that declares none."""
        if not self.headline_draws:
            raise InputError(f"the {self.name} task declares no resampled headline (Task.headline_draws): its "
                             "test-set bootstrap cannot be drawn")
        draws: PairedGroupAUC = _load(self.headline_draws)(y, scores, groups, n_boot=n_boot, seed=seed,
                                                          label=stream, patient_ids=patient_ids)
        return draws

    def score(self, table: PredictionTable, settings: ScoreSettings,
              on_step: Callable[[int, int, str], None] | None = None) -> FairnessResult:
        """The result of a predictions table under `settings`, by the task's scorer (imported on first use), on the
        rows its rules score (`scored_rows`), after the patient and sample-id checks (analysis.data_checks; refused
        tables raise InputError before any work), with the settings' equivalence margins applied."""
        from fairmedbench.analysis import data_checks

        self.check(settings)
        table = self.scored_rows(table)
        labels = {t: self.label_column.format(task=t) for t in table.tasks} if self.label_column else {}
        checks = data_checks.enforce(data_checks.check_table(table, settings, labels), settings.data_checks)
        result: FairnessResult = _load(self.scorer)(table, settings, on_step)
        record_settings(result.meta, settings)  # read back by tasks.table.settings_from_meta
        result.meta["data_checks"] = checks.to_dict()
        if settings.margins:  # each tested two-group difference: equivalent within its margin or not (TOST)
            from fairmedbench.metrics.result import apply_margins

            apply_margins(result.reports, dict(settings.margins))
            result.meta["margins"] = dict(settings.margins)  # recorded, so a recomputation applies the same
        return result

    def config_defaults(self) -> dict[str, Any]:
        """The training config's fields and defaults, plus the task-level hparams."""
        cls = _load(self.config)
        out = {f.name: f.default for f in dataclasses.fields(cls)}
        out.update(dict(self.extra_hparams))
        return out

    def make_config(self, values: dict[str, Any]) -> Any:
        """The training config built from resolved hparams (keys of the config class only)."""
        cls = _load(self.config)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


@dataclass(frozen=True)
class MulticlassTask(Task):
    """A Task whose predictions hold one label column (the class index) and one score column per class."""

    def predictions_block(self, file: str, tasks: list[str], attributes: list[str],
                          classes: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
        """The predictions description: `label_column`, `score:<class>` for each of `classes` (in index order)."""
        from fairmedbench.engine import store

        block = store.predictions_block(file, self.name, tasks, attributes, [self.label_column],
                                        [self.score_column.format(task=c) for c in classes])
        block["classes"] = list(classes)
        return block


TASKS: Registry[Task] = Registry("task", plugins=True)

TASKS.add_named(Task(
    name="classification", runner="fairmedbench.tasks.classification:run",
    scorer="fairmedbench.tasks.scoring:score_classification",
    config="fairmedbench.tasks.classification:TrainConfig", prediction_splits=("val", "test"),
    select_rules=("val_loss", "overall_auc", "worst_group_auc", "dto"), sample_labels=True, samples_splits=True,
    thresholded=True, headline_draws="fairmedbench.metrics.paired:paired_group_auc",
    run_kind="run-classification", label_column="label:{task}", score_column="score:{task}",
    decision="a threshold on each score, chosen by the threshold policy", head="classifier",
    extra_hparams=(("tasks", "main"),)))

TASKS.add_named(Task(
    name="segmentation", runner="fairmedbench.tasks.segmentation:run",
    scorer="fairmedbench.tasks.scoring:score_segmentation",
    config="fairmedbench.tasks.segmentation:DecoderConfig", prediction_splits=("test",),
    select_rules=("val_dsc", "worst_group_dsc"), sample_labels=False, run_kind="run-segmentation",
    headline_draws="fairmedbench.metrics.paired:paired_group_mean",
    value_columns=(ValueColumn("empty_gt", "unscored"), ValueColumn("dsc", "score"), ValueColumn("iou", "score"),
                   ValueColumn("hd95", "distance", optional=True)),
    label_column="", score_column="dsc", decision="the predicted mask (logit > 0 per pixel)",
    head="mask_decoder"))

TASKS.add_named(MulticlassTask(
    name="multiclass", runner="fairmedbench.tasks.multiclass:run", scorer="fairmedbench.tasks.scoring:score_multiclass",
    config="fairmedbench.tasks.multiclass:MulticlassConfig", prediction_splits=("val", "test"),
    select_rules=("val_loss", "macro_auc", "worst_group_macro_auc"),
    sample_labels=True, class_index_labels=True, run_kind="run-multiclass", label_column="label",
    headline_draws="fairmedbench.metrics.paired:paired_group_macro_auc",
    score_column="score:{task}", decision="the argmax of the class probabilities", head="classifier"))


def unscored_columns() -> tuple[str, ...]:
    """The 'unscored' value columns of every registered task: a true value marks a test row that is covered but
    not scored (a segmentation sample with an empty ground truth), left out of every metric and flag."""
    return tuple(dict.fromkeys(c for n in TASKS.names() for c in TASKS.get(n).columns_of("unscored")))


def unscored_mask(columns: Mapping[str, Any], n: int) -> np.ndarray:
    """True on the `n` rows of `columns` (a mapping of arrays or a DataFrame) that an 'unscored' column marks; all
    False when the columns have none."""
    marks = [np.asarray(columns[c], dtype=bool) for c in unscored_columns() if c in columns]
    return np.logical_or.reduce(marks) if marks else np.zeros(n, dtype=bool)


def get_task(name: str) -> Task:
    """The registered task `name` (unknown: InputError listing the known ones)."""
    return TASKS.get(name)

