"""Group thresholds: each group's val-chosen threshold becomes 0.5; within-group ranking is kept."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from fairmedbench.adapters.linear_probe import make_linear_head
from fairmedbench.errors import InputError
from fairmedbench.metrics.thresholds import threshold_youden
from fairmedbench.mitigation import make_mitigation
from fairmedbench.mitigation.group_thresholds import to_half
from fairmedbench.tasks.classification import TrainConfig, run_classification

CFG = TrainConfig(epochs=10, batch_size=64)


@pytest.mark.parametrize("t", [0.0, 1e-6, 0.2, 0.5, 0.93, 1.0, np.inf])
def test_map_is_increasing_and_sends_threshold_to_half(t: float) -> None:
    s = np.sort(np.r_[np.linspace(0, 1, 501), [t] if np.isfinite(t) else []])
    m = to_half(s, np.full_like(s, t))
    assert np.all(np.diff(m) >= 0) and np.all(np.diff(m)[np.diff(s) > 0] > 0)
    assert np.array_equal(m >= 0.5, s >= t) and m.min() >= 0 and m.max() <= 1


def test_operating_points_move_to_group_thresholds(toy) -> None:
    train, val, test = toy(n=800, minority=0.3)
    erm = run_classification(train, val, test.x, make_linear_head, lambda: make_mitigation("erm"), [0], CFG)[0]
    gt = run_classification(train, val, test.x, make_linear_head, lambda: make_mitigation("group_thresholds"),
                            [0], CFG, test_groups=test.groups)[0]
    # the run scores at the mitigation's operating point (the scorer applies it; the runner picks none itself)
    assert make_mitigation("group_thresholds").threshold_policy == "fixed:0.5"
    yv = val.y
    for g in (0, 1):
        rows = val.groups == g
        t_g = threshold_youden(yv[rows], erm.val_scores[rows, 0])
        assert np.array_equal(gt.val_scores[rows, 0] >= 0.5, erm.val_scores[rows, 0] >= t_g)
        trows = test.groups == g
        raw_t = erm.test_scores[trows, 0]
        assert np.array_equal(gt.test_scores[trows, 0] >= 0.5, raw_t >= t_g)
        assert np.isclose(roc_auc_score(test.y[trows], gt.test_scores[trows, 0]),
                          roc_auc_score(test.y[trows], raw_t))
    thresholds = [threshold_youden(yv[val.groups == g], erm.val_scores[val.groups == g, 0]) for g in (0, 1)]
    assert thresholds[0] != thresholds[1]


def test_unseen_or_one_class_group_falls_back_to_global() -> None:
    m = make_mitigation("group_thresholds")
    s = np.array([[0.1], [0.4], [0.6], [0.9], [0.7], [0.8]])
    y = np.array([[0], [0], [1], [1], [1], [1]])
    m.fit_postprocess(s, y, np.array([0, 0, 0, 0, 1, 1]))
    assert m.fallback == [(1, 0)]
    assert np.allclose(m.group_thresholds(np.array([0, 1, 5])), m.global_thresholds[None, :])


def test_needs_groups_at_inference(toy) -> None:
    train, val, test = toy(n=200)
    assert make_mitigation("group_thresholds").describe()["needs_attribute_at_inference"] is True
    assert "INFERENCE" in make_mitigation("group_thresholds").describe()["notes"]
    with pytest.raises(InputError, match="at inference"):
        run_classification(train, val, test.x, make_linear_head, lambda: make_mitigation("group_thresholds"),
                           [0], CFG)
