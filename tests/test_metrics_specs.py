"""The MetricSpec registry covers every metric the engine emits, with consistent roles and bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fairmedbench.errors import InputError
from fairmedbench.metrics import GAP, evaluate_classification
from fairmedbench.metrics.seg_fairness import evaluate_segmentation
from fairmedbench.metrics.specs import (
    METRIC_SPECS,
    board_metrics,
    headline_metric,
    metric_spec,
    summary_metrics,
    table_metrics,
)


def _emitted(result) -> dict[str, set[str]]:
    """metric -> the slots (groups, OVERALL, GAP) it was reported under, over all reports."""
    out: dict[str, set[str]] = {}
    for r in result.reports:
        for m, per in r.values.items():
            out.setdefault(m, set()).update(per)
    return out


def _cls(profile: str, **kw) -> dict[str, set[str]]:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    s = np.clip(0.5 + 0.2 * (2 * y - 1) + rng.normal(0, 0.2, 200), 0, 1)
    attrs = {"sex": rng.choice(["F", "M"], 200), "site": rng.choice(["a", "b", "c"], 200)}
    return _emitted(evaluate_classification(y, s, attrs, profile=profile, n_boot=0, **kw))


def _seg(profile: str) -> dict[str, set[str]]:
    rng = np.random.default_rng(1)
    d = rng.beta(8, 2, 100)
    hd = rng.uniform(0, 10, 100)
    return _emitted(evaluate_segmentation(d, {"sex": rng.choice(["F", "M"], 100)}, iou=d * 0.9, hd95=hd,
                                          profile=profile, n_boot=0))


@pytest.mark.parametrize("emitted,task", [
    (lambda: _cls("default"), "classification"),
    (lambda: _cls("fairmedfm"), "classification"),
    (lambda: _cls("default", fpr_at_tpr=0.9, rates_at_fpr=0.15), "classification"),
    (lambda: _seg("default"), "segmentation"),
    (lambda: _seg("fairmedfm"), "segmentation"),
    (lambda: _seg("fairseg"), "segmentation"),
])
def test_every_emitted_metric_has_a_spec(emitted, task):
    for name, slots in emitted().items():
        spec = metric_spec(name)
        assert spec.task == task, name
        # between-group quantities live under GAP only; per-group ones never do
        assert (slots == {GAP}) == spec.between_groups, (name, slots)


def test_registry_roles():
    assert headline_metric("classification") == "auc" and headline_metric("segmentation") == "dsc"
    assert summary_metrics("classification") == ["auc", "worst_group_auc", "auc_gap", "auc_diff", "ece_gap",
                                                  "auc_es", "eqodds_diff"]
    assert summary_metrics("segmentation") == ["dsc", "worst_group_dsc", "dsc_gap", "dsc_diff", "dsc_es",
                                               "dsc_skew_ratio", "iou"]
    assert [s.name for s in table_metrics("segmentation", False)] == ["dsc", "iou", "hd95"]
    # a board column means the same direction in every task
    for col in {c for t in ("classification", "segmentation") for c in board_metrics(t)}:
        dirs = {s.higher_is_better for t in ("classification", "segmentation")
                for c, s in board_metrics(t).items() if c == col}
        assert len(dirs) == 1, col
    for s in METRIC_SPECS.values():
        assert s.definition and "\n" not in s.definition
        if s.kind == "gap":
            assert s.higher_is_better is False and s.bounds[0] == 0.0, s.name
        if s.kind == "diff":
            assert s.higher_is_better is None and s.bounds == (-1.0, 1.0), s.name


def test_seed_interval_of_a_metric_and_of_a_difference_is_clipped_to_the_spec():
    from fairmedbench.metrics.stats import seed_summary

    # AUC 0.97, 0.99, 1.0: mean 0.986667, std 0.015275, t_2 half-width 4.302653 * 0.015275 / sqrt(3) = 0.037946
    s = seed_summary([0.97, 0.99, 1.0], bounds=metric_spec("auc").bounds)
    assert s.ci_low == pytest.approx(0.948721, abs=1e-6) and s.ci_high == 1.0
    assert metric_spec("auc").diff_bounds == (-1.0, 1.0) and metric_spec("hd95").diff_bounds == (-math.inf, math.inf)
    d = seed_summary([-0.9, 0.95], bounds=metric_spec("auc").diff_bounds)
    assert (d.ci_low, d.ci_high) == (-1.0, 1.0) and d.clipped


def test_family_names_and_unknown():
    assert metric_spec("fpr_at_tpr90").higher_is_better is False
    assert metric_spec("youden_j_at_fpr15_gap").bounds == (0.0, 2.0)
    assert metric_spec("tpr_at_fpr12p5").task == "classification"
    with pytest.raises(InputError, match="unknown metric 'acu'.*auc"):
        metric_spec("acu")


def test_point_values_lie_within_bounds():
    rng = np.random.default_rng(4)
    y = rng.integers(0, 2, 300)
    s = rng.uniform(0, 1, 300)
    res = evaluate_classification(y, s, {"g": rng.choice(["a", "b"], 300)}, n_boot=50)
    for r in res.reports:
        for m, per in r.values.items():
            lo_b, hi_b = metric_spec(m).bounds or (-math.inf, math.inf)
            for v in per.values():
                for x in v:
                    assert math.isnan(x) or lo_b <= x <= hi_b, (m, v)
