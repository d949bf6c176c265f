"""Tasks as registered nouns: what a task predicts, how a run of it is executed and judged.

A task owns its runner (imported lazily as "module:function", so this module stays torch-free and the
leaderboards can read it), its training-config class, the columns of its predictions Parquet, the splits
those hold, its headline metric and the metrics its summaries and comparisons show (names from the
MetricSpec registry), its checkpoint-selection rules and whether a sample carries a class label.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any, Callable

from fairmedbench.registry.base import Registry


def _load(ref: str) -> Any:
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Task:
    """One task: its runner and config, predictions layout, metrics and selection rules."""

    name: str
    runner: str  # "module:function" (spec, adapter, model, dataset, split, ctx, opts, out_dir, info, t_load)
    config: str  # "module:Class", a dataclass of training hyperparameters with their defaults
    prediction_splits: tuple[str, ...]  # splits the predictions Parquet holds
    prediction_columns: tuple[str, ...]  # fixed columns besides attr:<attribute> (and per-task label/score)
    headline: str  # the metric a board ranks by
    summary_metrics: tuple[str, ...]  # shown across seeds in run summaries
    compare_metrics: tuple[str, ...]  # compared between mitigations
    versus_erm: tuple[str, ...]  # paired against ERM in compare
    rank_metric: str  # ranked across datasets (Friedman) in compare
    select_rules: tuple[str, ...]  # checkpoint selection on validation; the first is the default
    sample_labels: bool  # whether a sample has a class label (a mitigation may weigh group x class cells)
    run_kind: str  # the result document's kind
    extra_hparams: tuple[tuple[str, Any], ...] = ()  # task-level hparams beyond the config, with defaults

    def run(self) -> Callable[..., Any]:
        """The runner function (imported on first use)."""
        return _load(self.runner)

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


TASKS: Registry[Task] = Registry("task")

TASKS.add("classification", Task(
    name="classification", runner="fairmedbench.benchmark.run:run_classification_task",
    config="fairmedbench.tasks.classification:TrainConfig", prediction_splits=("val", "test"),
    prediction_columns=("sample_id", "split", "seed"), headline="auc",
    summary_metrics=("auc", "worst_group_auc", "auc_gap", "auc_es", "eqodds_diff", "ece_gap"),
    compare_metrics=("auc", "worst_group_auc", "auc_gap", "auc_diff", "ece_gap", "auc_es", "eqodds_diff"),
    versus_erm=("worst_group_auc", "auc_gap", "auc"), rank_metric="worst_group_auc",
    select_rules=("val_loss", "overall_auc", "worst_group_auc", "dto"), sample_labels=True,
    run_kind="run-classification", extra_hparams=(("tasks", "main"),)))

TASKS.add("segmentation", Task(
    name="segmentation", runner="fairmedbench.benchmark.run:run_segmentation_task",
    config="fairmedbench.tasks.segmentation:DecoderConfig", prediction_splits=("test",),
    prediction_columns=("sample_id", "split", "seed", "dsc", "iou", "empty_gt"), headline="dsc",
    summary_metrics=("dsc", "worst_group_dsc", "dsc_gap", "dsc_es", "dsc_skew_ratio"),
    compare_metrics=("dsc", "worst_group_dsc", "dsc_gap", "dsc_diff", "dsc_es", "dsc_skew_ratio", "iou"),
    versus_erm=("worst_group_dsc", "dsc_gap", "dsc"), rank_metric="worst_group_dsc",
    select_rules=("val_dsc", "worst_group_dsc"), sample_labels=False, run_kind="run-segmentation"))


def get_task(name: str) -> Task:
    """The registered task `name` (unknown: InputError listing the known ones)."""
    return TASKS.get(name)
