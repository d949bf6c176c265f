"""Each scoring default is stated once (metrics.defaults) and read alike by the metric engine's parameters,
ScoreSettings, the run and evaluate specs and the command line's options."""

from __future__ import annotations

import argparse
import dataclasses
import inspect

import numpy as np

from fairmedbench.benchmark.evaluate import EvaluateOptions
from fairmedbench.cli import build_parser
from fairmedbench.metrics import defaults
from fairmedbench.metrics.classification import evaluate_classification
from fairmedbench.metrics.multiclass import evaluate_multiclass
from fairmedbench.metrics.seg_fairness import evaluate_segmentation
from fairmedbench.spec import RunSpec, ScoreSettings

STATED = {"n_boot": defaults.N_BOOT, "n_perm": defaults.N_PERM, "ci_level": defaults.CI_LEVEL,
          "min_group_size": defaults.MIN_GROUP_SIZE, "ece_bins": defaults.ECE_BINS}


def _parser(command: str) -> argparse.ArgumentParser:
    return build_parser()._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]


def test_the_engine_the_settings_the_specs_and_the_cli_default_to_the_stated_values() -> None:
    assert STATED == {"n_boot": 2000, "n_perm": 1000, "ci_level": 0.95, "min_group_size": 30, "ece_bins": 15}
    seen = 0
    for fn in (evaluate_classification, evaluate_multiclass, evaluate_segmentation):
        for name, p in inspect.signature(fn).parameters.items():
            if name in STATED:
                assert p.default == STATED[name], (fn.__name__, name)
                seen += 1
    assert seen == 13  # 5 + 4 + 4 parameters
    settings = {f.name: f.default for f in dataclasses.fields(ScoreSettings)}
    assert {k: settings[k] for k in STATED} == STATED
    for cls in (RunSpec, EvaluateOptions):
        fields = {f.name: f.default for f in dataclasses.fields(cls)}
        assert {k: v for k, v in fields.items() if k in STATED} == {k: STATED[k] for k in fields if k in STATED}
    for command, names in (("run", {"n_boot", "n_perm"}), ("evaluate", {"n_boot", "n_perm", "min_group_size"})):
        cli = {a.dest: a.default for a in _parser(command)._actions if a.dest in STATED}
        assert cli == {k: STATED[k] for k in names}, command


def test_the_threshold_policy_is_chosen_on_validation_rows_else_fixed_at_one_half() -> None:
    assert (defaults.threshold_policy(True), defaults.threshold_policy(False)) == ("val_youden", "fixed:0.5")
    help_text = next(a.help for a in _parser("evaluate")._actions if a.dest == "threshold")
    assert "default: val_youden with validation rows, else fixed:0.5" in (help_text or "")
    run_help = next(a.help for a in _parser("run")._actions if a.dest == "threshold")
    assert "(default: val_youden;" in (run_help or "")
    y, s = np.array([0, 1, 0, 1]), np.array([0.1, 0.4, 0.6, 0.9])
    sex = {"sex": np.array(["F", "F", "M", "M"])}
    without = evaluate_classification(y, s, sex, n_boot=0, n_perm=0)
    with_val = evaluate_classification(y, s, sex, n_boot=0, n_perm=0, val_y_true=y, val_y_score=s)
    assert without.meta["thresholds"]["task"]["policy"] == "fixed:0.5"
    assert with_val.meta["thresholds"]["task"]["policy"] == "val_youden"
