"""Whether a metric has a gap is stated once, by the gap's registration in metrics.specs (`has_gap`): every engine
reports exactly those gaps."""

from __future__ import annotations

import numpy as np

from fairmedbench.metrics.classification import GAP_BASE, evaluate_classification
from fairmedbench.metrics.multiclass import MC_GAP_BASE, evaluate_multiclass
from fairmedbench.metrics.result import GAP
from fairmedbench.metrics.seg_fairness import evaluate_segmentation
from fairmedbench.metrics.specs import gap_bases, has_gap

OPERATING_POINTS = {"fpr_at_tpr95", "tpr_at_fpr20", "fpr_at_fpr20", "youden_j_at_fpr20"}


def test_has_gap_reads_the_registered_gaps_and_their_families() -> None:
    assert all(has_gap(m) for m in ("auc", "ece", "dsc", "macro_auc", "fpr_at_tpr90", "tpr:Pneumonia"))
    assert not any(has_gap(m) for m in ("prevalence", "worst_group_auc", "auc_gap", "auc_es", "no_such_metric"))
    assert set(GAP_BASE) | OPERATING_POINTS == set(gap_bases("classification")) and len(GAP_BASE) == 19
    assert MC_GAP_BASE + ("class_tpr",) == gap_bases("multiclass")
    assert gap_bases("segmentation") == ("dsc", "iou", "hd95")


def _gaps(result) -> set[str]:  # type: ignore[no-untyped-def]
    return {m for rep in result.reports for m, per in rep.values.items() if m.endswith("_gap") and GAP in per}


def test_each_engine_reports_exactly_the_gaps_the_specs_state() -> None:
    rng = np.random.default_rng(0)
    n = 200
    groups = {"sex": rng.choice(["F", "M"], n)}
    y = rng.integers(0, 2, n)
    binary = evaluate_classification(y, rng.random(n), groups, n_boot=0, n_perm=0)
    assert _gaps(binary) == {f"{m}_gap" for m in gap_bases("classification")}
    multi = evaluate_multiclass(rng.integers(0, 3, n), rng.dirichlet([1, 1, 1], n), groups, classes=["a", "b", "c"],
                                n_boot=0, n_perm=0)
    assert _gaps(multi) == {f"{m}_gap" for m in MC_GAP_BASE} | {f"tpr:{c}_gap" for c in "abc"}
    seg = evaluate_segmentation(rng.random(n), groups, iou=rng.random(n), hd95=rng.random(n) * 10, n_boot=0, n_perm=0)
    assert _gaps(seg) == {"dsc_gap", "iou_gap", "hd95_gap"}
