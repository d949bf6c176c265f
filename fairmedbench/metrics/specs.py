"""The MetricSpec registry: what every metric the engine emits is (direction, bounds, role, one-line definition).

The run summary, compare, terminal tables, HTML report and leaderboards read this one source; no other module
lists metric names with their direction. The docs site's metric sheet is generated from it
(fairmedbench/report/docs.py). Registration order is display order.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from fairmedbench._registry import Registry

UNIT = (0.0, 1.0)
SIGNED_UNIT = (-1.0, 1.0)
NONNEG = (0.0, math.inf)


@dataclass(frozen=True)
class MetricSpec:
    """One metric: `kind` is 'group' (per group and overall), 'gap' (max - min over groups), 'diff' (second
    group - first, two-group attributes), 'worst' (lowest group value), 'es' (equity-scaled), 'ratio',
    'score' (a fairness score, higher is fairer) or 'count'. `higher_is_better` None = no direction (signed
    or descriptive). `bounds` = the values it can take (intervals are clipped to them). `headline` = the
    task's utility metric; `summary` = shown in run summaries and compare tables; `table` = shown in the
    terminal and HTML tables (per group for kind 'group', between groups otherwise); `board` = the leaderboard
    column it fills; `label` = short header."""

    name: str
    task: str
    kind: str
    higher_is_better: bool | None
    bounds: tuple[float, float] | None
    headline: bool
    summary: bool
    definition: str
    label: str = ""
    table: bool = False
    board: str | None = None

    @property
    def header(self) -> str:
        """The short header for tables (the name when no label is set)."""
        return self.label or self.name

    @property
    def diff_bounds(self) -> tuple[float, float] | None:
        """Bounds of a difference of two values of this metric (e.g. method - ERM): (lo - hi, hi - lo)."""
        return None if self.bounds is None else (self.bounds[0] - self.bounds[1], self.bounds[1] - self.bounds[0])

    @property
    def between_groups(self) -> bool:
        """True for quantities over groups (gaps, differences, ES, worst group), stored under GAP."""
        return self.kind != "group"


METRIC_SPECS: Registry[MetricSpec] = Registry("metric")


def _add(name: str, task: str, kind: str, hib: bool | None, bounds: tuple[float, float] | None, definition: str,
         *, headline: bool = False, summary: bool = False, label: str = "", table: bool = False,
         board: str | None = None) -> None:
    METRIC_SPECS.add_named(MetricSpec(name, task, kind, hib, bounds, headline, summary, definition, label, table,
                                      board))


def _gap(base: str, task: str, bounds: tuple[float, float] | None = UNIT, **kw: object) -> None:
    _add(f"{base}_gap", task, "gap", False, bounds, f"max_g {base}_g - min_g {base}_g over groups where it is "
         "defined (NaN with a reason when fewer than two)", **kw)  # type: ignore[arg-type]


def _diff(base: str, task: str, **kw: object) -> None:
    _add(f"{base}_diff", task, "diff", None, SIGNED_UNIT, f"{base} of the second group - {base} of the first "
         "(attributes with exactly two groups, sorted order); its CI can include 0", **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------ classification: summary metrics first
C = "classification"
_add("auc", C, "group", True, UNIT, "ROC AUC, ties count 1/2 (Mann-Whitney)", headline=True, summary=True,
     label="AUC", table=True, board="utility")
_add("worst_group_auc", C, "worst", True, UNIT, "lowest group AUC among groups where it is defined",
     summary=True, board="worst_group")
_gap("auc", C, summary=True, label="ΔAUC", table=True, board="gap")
_diff("auc", C, summary=True)
_gap("ece", C, summary=True, label="ECE gap", table=True, board="ece_gap")
_add("auc_es", C, "es", True, UNIT, "AUC_overall / (1 + Σ_g |AUC_g - AUC_overall|) (FairCLIP form, alpha 1)",
     summary=True, label="ES-AUC", table=True, board="es")
_add("eqodds_diff", C, "gap", False, UNIT, "max(ΔTPR, ΔFPR) at the operating threshold (fairlearn worst_case)",
     summary=True, label="EqOdds", table=True, board="eqodds")
# per-group metrics (each with its gap)
_add("prevalence", C, "group", None, UNIT, "fraction of positives (fixed in each resample: the bootstrap is "
     "stratified by label within each group)")
_add("ap", C, "group", True, UNIT, "average precision, step integral (sklearn average_precision_score)", label="AP")
_add("brier", C, "group", False, UNIT, "mean (p - y)^2")
_add("brier_pos", C, "group", False, UNIT, "mean (p - y)^2 over positives")
_add("brier_neg", C, "group", False, UNIT, "mean (p - y)^2 over negatives")
_add("tpr", C, "group", True, UNIT, "true positive rate at the operating threshold", label="TPR", table=True)
_add("fpr", C, "group", False, UNIT, "false positive rate at the operating threshold", label="FPR", table=True)
_add("tnr", C, "group", True, UNIT, "true negative rate at the operating threshold")
_add("ppv", C, "group", True, UNIT, "positive predictive value at the operating threshold")
_add("acc", C, "group", True, UNIT, "accuracy at the operating threshold")
_add("f1", C, "group", True, UNIT, "F1 at the operating threshold (NaN without positives)")
_add("selection_rate", C, "group", None, UNIT, "fraction predicted positive at the operating threshold")
_add("ece", C, "group", False, UNIT, "positive-class reliability, 15 equal-width bins on [0, 1] (bin = "
     "floor(p·B) clipped), Σ_b (n_b/N)·|mean p_b - mean y_b|", label="ECE", table=True)
_add("balanced_brier", C, "group", False, UNIT, "mean of brier_pos and brier_neg", label="bal.Brier", table=True)
_add("calibration_loss", C, "group", False, UNIT, "brier - refinement: what the best monotone recalibration "
     "removes (Mosquera et al.)", label="Cal.loss", table=True)
_add("refinement", C, "group", False, UNIT, "Brier of the PAV (isotonic) recalibrated scores on the same set")
_add("balanced_calibration_loss", C, "group", False, UNIT, "balanced_brier - balanced_refinement",
     label="bal.Cal.loss")
_add("balanced_refinement", C, "group", False, UNIT, "balanced Brier of the scores recalibrated by the PAV fitted "
     "with class-balanced weights (the monotone map minimising the balanced Brier)")
_add("youden_j", C, "group", True, SIGNED_UNIT, "TPR - FPR at the (global) operating threshold")
_add("youden_j_max", C, "group", True, UNIT, "the group's own maximum of TPR - FPR over thresholds")
_add("sauroc", C, "group", True, UNIT, "subgroup AUROC: AUC on all positives and the group's negatives",
     label="sAUROC", table=True)
_add("fpr_at_tpr95", C, "group", False, UNIT, "FPR per group at the largest threshold with overall TPR >= 0.95")
_add("tpr_at_fpr20", C, "group", True, UNIT, "TPR per group at the smallest threshold with overall FPR <= 0.2",
     label="TPR@FPR.2")
_add("fpr_at_fpr20", C, "group", False, UNIT, "FPR per group at the smallest threshold with overall FPR <= 0.2",
     label="FPR@FPR.2")
_add("youden_j_at_fpr20", C, "group", True, SIGNED_UNIT, "TPR - FPR per group at the smallest threshold with "
     "overall FPR <= 0.2", label="J@FPR.2")
for _m in ("ap", "brier", "balanced_brier", "calibration_loss", "refinement", "balanced_calibration_loss",
           "balanced_refinement", "tpr", "fpr", "tnr", "ppv", "acc", "f1", "selection_rate",
           "youden_j_max", "sauroc"):
    _gap(_m, C)
_gap("tpr_at_fpr20", C, label="ΔTPR@FPR.2")
_gap("fpr_at_fpr20", C, label="ΔFPR@FPR.2")
_gap("fpr_at_tpr95", C, label="ΔFPR@95TPR", table=True)
_gap("youden_j", C, bounds=(0.0, 2.0))
_gap("youden_j_at_fpr20", C, bounds=(0.0, 2.0))
for _m in ("ap", "tpr", "fpr", "ece", "balanced_brier"):
    _diff(_m, C)
_add("eqodds_mean", C, "gap", False, UNIT, "mean of ΔTPR and ΔFPR at the operating threshold")
_add("eqopp_diff", C, "gap", False, UNIT, "ΔTPR at the operating threshold (equal opportunity)")
_add("dp_diff", C, "gap", False, UNIT, "Δ selection rate (demographic parity)")
_add("n_groups_auc", C, "count", None, None, "number of groups with a defined AUC (the G of auc_es)")
_add("eod", C, "score", True, UNIT, "fairmedfm profile: 1 - (ΔTPR + ΔTNR)/2, a score where 1 is fair")

# ------------------------------------------------------------------ segmentation
S = "segmentation"
_add("dsc", S, "group", True, UNIT, "mean of per-sample DSC 2|P∩G|/(|P|+|G|) (both empty = 1.0), not pooled "
     "pixels", headline=True, summary=True, label="DSC", table=True, board="utility")
_add("worst_group_dsc", S, "worst", True, UNIT, "lowest group DSC", summary=True, board="worst_group")
_gap("dsc", S, summary=True, label="ΔDSC", table=True, board="gap")
_diff("dsc", S, summary=True)
_add("dsc_es", S, "es", True, UNIT, "DSC_overall / (1 + Σ_g |DSC_g - DSC_overall|) (FairSeg form)", summary=True,
     label="ES-DSC", table=True, board="es")
_add("dsc_skew_ratio", S, "ratio", False, (1.0, math.inf), "(1 - min_g DSC_g) / (1 - max_g DSC_g), FairMedFM's "
     "'DSC skewness'; NaN if the best group is 1", summary=True, label="skew ratio", table=True)
_add("iou", S, "group", True, UNIT, "mean of per-sample IoU |P∩G|/|P∪G|", summary=True, label="IoU", table=True)
_add("hd95", S, "group", False, NONNEG, "mean of per-sample 95th-percentile symmetric Hausdorff distance "
     "(pixels or mm), over samples where it is defined", label="HD95", table=True)
_add("dsc_sample_skew", S, "group", None, None, "distributional skewness of per-sample DSC (not the skew ratio)")
_gap("iou", S)
_gap("hd95", S, bounds=NONNEG)
_diff("iou", S)
_add("es_dsc", S, "es", True, UNIT, "fairmedfm profile: DSC_overall / (1 + population std of group DSC means)")
_add("dsc_es_std", S, "es", True, UNIT, "fairseg profile: DSC_overall / (1 + population std of group DSC means)")

# ------------------------------------------------------------------ multi-class (metrics/multiclass.py)
M = "multiclass"
# Headline: macro one-vs-rest AUC, not balanced accuracy. It is threshold-free like the binary task's AUC (so a
# board's utility, worst-group and gap columns mean the same across tasks), and each class's AUC is unaffected
# by that class's prevalence, which differs between groups; balanced accuracy judges only the argmax decision,
# whose class priors a head learns from train, so it mixes calibration shift into the group comparison.
_add("macro_auc", M, "group", True, UNIT, "mean over the classes present of the one-vs-rest ROC AUC (ties 1/2) of "
     "each class's probability (sklearn roc_auc_score multi_class='ovr', average='macro')", headline=True,
     summary=True, label="macro AUC", table=True, board="utility")
_add("worst_group_macro_auc", M, "worst", True, UNIT, "lowest group macro AUC among groups where it is defined",
     summary=True, board="worst_group")
_gap("macro_auc", M, summary=True, label="Δmacro AUC", table=True, board="gap")
_add("balanced_accuracy", M, "group", True, UNIT, "mean over the classes present of the recall at the argmax "
     "(sklearn balanced_accuracy_score)", summary=True, label="bal.acc", table=True)
_add("worst_group_balanced_accuracy", M, "worst", True, UNIT, "lowest group balanced accuracy", summary=True)
_gap("balanced_accuracy", M, summary=True, label="Δbal.acc", table=True)
_add("accuracy", M, "group", True, UNIT, "fraction of samples whose argmax is the true class")
_add("kappa", M, "group", True, SIGNED_UNIT, "Cohen's kappa, unweighted, at the argmax (NaN when no disagreement "
     "is expected: one class on both sides)")
_add("kappa_linear", M, "group", True, SIGNED_UNIT, "Cohen's kappa, linear weights |i-j| over the class order "
     "(ordinal labels)", label="κ lin", table=True)
_add("kappa_quadratic", M, "group", True, SIGNED_UNIT, "Cohen's kappa, quadratic weights (i-j)^2 over the class "
     "order (ordinal labels)", summary=True, label="κ quad", table=True)
_add("class_tpr", M, "group", True, UNIT, "per-class TPR (recall) at the argmax, reported as tpr:<class>; NaN for "
     "a class absent from the group")
_gap("accuracy", M)
for _m in ("kappa", "kappa_linear", "kappa_quadratic"):
    _gap(_m, M, bounds=(0.0, 2.0), summary=_m == "kappa_quadratic")
_gap("class_tpr", M)
for _m, _b in (("macro_auc", SIGNED_UNIT), ("balanced_accuracy", SIGNED_UNIT), ("accuracy", SIGNED_UNIT),
               ("kappa", (-2.0, 2.0)), ("kappa_linear", (-2.0, 2.0)), ("kappa_quadratic", (-2.0, 2.0))):
    _add(f"{_m}_vs_best", M, "group", None, _b, f"per group: {_m} of the group minus that of the group best on the "
         "point estimate (its identity fixed in every resample); 0 for the best group, its CI can include 0")
_diff("macro_auc", M)
_diff("balanced_accuracy", M)
_add("uncertainty_disparity", M, "gap", False, NONNEG, "δ = mean over retention thresholds of Σ over group "
     "pairs |PM(A) - PM(A')| (Lu et al. Eq. 5)")

#: families whose name carries an operating point (fpr_at_tpr95 -> fpr_at_tpr90 with another target)
_FAMILY = re.compile(r"(fpr_at_tpr|tpr_at_fpr|fpr_at_fpr|youden_j_at_fpr)(\d+(?:p\d+)?)(_gap|_diff)?")
#: per-class multi-class rates: tpr:<class> and tpr:<class>_gap resolve to class_tpr / class_tpr_gap
_CLASS_FAMILY = re.compile(r"tpr:(.+?)(_gap)?")
_FAMILY_DEFAULT = {"fpr_at_tpr": "95", "tpr_at_fpr": "20", "fpr_at_fpr": "20", "youden_j_at_fpr": "20"}


def metric_spec(name: str) -> MetricSpec:
    """The spec of a metric the engine emits (operating-point names with another target resolve to their
    family); an unknown name is an InputError listing close names."""
    if name in METRIC_SPECS:
        return METRIC_SPECS.get(name)
    m = _FAMILY.fullmatch(name)
    if m:
        family, pct, suffix = m.group(1), m.group(2), m.group(3) or ""
        base = METRIC_SPECS.get(f"{family}{_FAMILY_DEFAULT[family]}{suffix}")
        target = pct.replace("p", ".")
        return replace(base, name=name, label="", table=False,
                       definition=f"{base.definition} (here with the target {target}% instead)")
    c = _CLASS_FAMILY.fullmatch(name)
    if c:
        base = METRIC_SPECS.get(f"class_tpr{c.group(2) or ''}")
        return replace(base, name=name, definition=f"{base.definition} (here class {c.group(1)!r})")
    return METRIC_SPECS.get(name)


def find_spec(name: str) -> MetricSpec | None:
    """`metric_spec(name)`, or None for a name the registry does not know."""
    from fairmedbench.errors import InputError

    try:
        return metric_spec(name)
    except (InputError, KeyError):
        return None


def has_gap(metric: str) -> bool:
    """Whether a per-group metric has a gap (`<metric>_gap`, max - min over groups): stated only by the gap's
    registration here (`_gap`), read by every engine (operating points with another target and per-class rates
    resolve to their family)."""
    spec = find_spec(f"{metric}_gap")
    return spec is not None and spec.kind == "gap"


def gap_bases(task: str) -> tuple[str, ...]:
    """The task's per-group metrics that have a gap, in registration order."""
    return tuple(s.name for s in task_metrics(task) if s.kind == "group" and has_gap(s.name))


def task_metrics(task: str) -> list[MetricSpec]:
    """Specs of one task in display order."""
    return [s for s in METRIC_SPECS.values() if s.task == task]


def summary_metrics(task: str) -> list[str]:
    """Names shown in run summaries and compare tables for `task`, in display order."""
    return [s.name for s in task_metrics(task) if s.summary]


def table_metrics(task: str, between_groups: bool) -> list[MetricSpec]:
    """Specs shown in the terminal/HTML tables: per-group columns, or between-group columns."""
    return [s for s in task_metrics(task) if s.table and s.between_groups == between_groups]


def headline_metric(task: str) -> str:
    """The task's headline (utility) metric, e.g. 'auc' or 'dsc'."""
    hits = [s.name for s in task_metrics(task) if s.headline]
    if len(hits) != 1:
        raise ValueError(f"task {task!r} has {len(hits)} headline metrics registered; it needs exactly one")
    return hits[0]


def board_metrics(task: str) -> dict[str, MetricSpec]:
    """Leaderboard column key -> the spec that fills it for `task`."""
    return {s.board: s for s in task_metrics(task) if s.board}


def board_higher_is_better(column: str) -> bool:
    """Direction of a leaderboard column, the same for every task's metric that fills it."""
    dirs = {s.higher_is_better for s in METRIC_SPECS.values() if s.board == column}
    if len(dirs) != 1 or None in dirs:
        raise ValueError(f"board column {column!r} has directions {dirs} across tasks; it needs exactly one")
    return bool(dirs.pop())
