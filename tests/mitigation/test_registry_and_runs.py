"""Every method: registered, validated, runs end to end; attribute needs give clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from fairmedbench.adapters.linear_probe import make_linear_head
from fairmedbench.errors import InputError
from fairmedbench.mitigation import MITIGATIONS, make_mitigation
from fairmedbench.tasks.classification import SplitArrays, TrainConfig, run_classification

METHODS = ["erm", "resampling", "groupdro", "adversarial", "fairness_loss", "domainind", "group_thresholds"]
CFG = TrainConfig(epochs=5, patience=5, batch_size=64)


def test_all_methods_registered() -> None:
    assert set(METHODS) <= set(MITIGATIONS.names())


def test_needs_are_task_traits_not_task_names() -> None:
    """A method is checked against a task's traits: a new task with a classifier head and no threshold is served by
    the head-reading methods, refused by the threshold-moving one; a need no Task field names is a clear error."""
    import dataclasses

    from fairmedbench.mitigation.base import Mitigation
    from fairmedbench.tasks.base import get_task

    fields = {f.name for f in dataclasses.fields(get_task("classification"))}
    for name in MITIGATIONS.names():
        assert set(MITIGATIONS.get(name).needs) <= fields, name
    ordinal = dataclasses.replace(get_task("multiclass"), name="ordinal-regression", thresholded=False)
    assert make_mitigation("adversarial").unsupported(ordinal) is None
    assert make_mitigation("domainind").unsupported(ordinal) is None
    with pytest.raises(InputError, match="group_thresholds.*does not apply to ordinal-regression"):
        make_mitigation("group_thresholds").check_task(ordinal)
    assert "segmentation" not in make_mitigation("adversarial").describe()["tasks"]

    class Typo(Mitigation):
        needs = {"heads": "classifier"}

    with pytest.raises(InputError, match="task trait 'heads'"):
        Typo().check_task(ordinal)


def test_unknown_name_suggests_close_names() -> None:
    with pytest.raises(InputError, match="groupdro"):
        MITIGATIONS.get("groupdr0")


@pytest.mark.parametrize("name, hp, pattern", [
    ("groupdro", {"etaa": 0.1}, "eta"),
    ("groupdro", {"eta": "fast"}, "eta"),
    ("groupdro", {"eta": -1}, ">= 0"),
    ("resampling", {"by": "sex"}, "group_class"),
    ("adversarial", {"variant": "eqodds"}, "eo"),
    ("domainind", {"combine": "max"}, "sum_logits"),
    ("fairness_loss", {"penalty": "l2"}, "maxmin"),
    ("group_thresholds", {"policy": "fixed:0.3"}, "validation"),
    ("erm", {"lr": 1}, "no hyperparameters"),
])
def test_bad_hyperparameters_are_input_errors(name: str, hp: dict, pattern: str) -> None:
    with pytest.raises(InputError, match=pattern):
        make_mitigation(name, **hp)


def test_cli_strings_are_coerced_and_recorded() -> None:
    m = make_mitigation("groupdro", eta="0.1", label_column="1")
    assert m.describe()["hparams"] == {"eta": 0.1, "by": "group", "label_column": 1}
    assert make_mitigation("groupdro").describe()["hparams"]["eta"] == 0.01


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("k", [1, 2])
def test_every_method_runs_end_to_end(toy, name: str, k: int) -> None:
    train, val, test = toy(n=400, k=k)
    runs = run_classification(train, val, test.x, make_linear_head, lambda: make_mitigation(name), [0, 1], CFG,
                              test_groups=test.groups)
    assert len(runs) == 2
    for r in runs:
        assert r.test_scores.shape == (len(test.x), k)
        assert np.isfinite(r.test_scores).all() and (r.test_scores >= 0).all() and (r.test_scores <= 1).all()
        assert r.fit.best_epoch >= 0 and r.val_scores.shape == (len(val.x), k)  # the scorer picks thresholds on these


@pytest.mark.parametrize("name", [n for n in METHODS if n != "erm"])
def test_attribute_needed_at_training_without_groups(toy, name: str) -> None:
    train, val, test = toy(n=200)
    bare = SplitArrays(train.x, train.y)
    assert make_mitigation(name).needs_attribute_at_training
    with pytest.raises(InputError, match="attribute"):
        run_classification(bare, val, test.x, make_linear_head, lambda: make_mitigation(name), [0], CFG)


def test_class_resampling_needs_no_attribute(toy) -> None:
    train, val, test = toy(n=200)
    m = make_mitigation("resampling", by="class")
    assert not m.needs_attribute_at_training
    runs = run_classification(SplitArrays(train.x, train.y), SplitArrays(val.x, val.y), test.x, make_linear_head,
                              lambda: make_mitigation("resampling", by="class"), [0], CFG)
    assert runs[0].test_scores.shape == (len(test.x), 1)
