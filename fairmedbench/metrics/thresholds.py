"""Operating thresholds: policies chosen on validation data, and attained global operating points.

A prediction is positive iff ``score >= t`` (comparator ``>=``); the fairmedfm profile uses ``>``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fairmedbench.errors import InputError

POLICIES = ("fixed:T", "val_best_f1", "val_youden", "val_fpr:F", "val_tpr:X")


@dataclass(frozen=True)
class Threshold:
    """A chosen operating threshold and how it was chosen (written into every result)."""

    value: float
    policy: str
    comparator: str = ">="
    source: str = "fixed"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (an infinite threshold becomes 'inf' or '-inf'; an undefined one None)."""
        d = asdict(self)
        if np.isnan(self.value):
            d["value"] = None
        else:
            d["value"] = float(self.value) if np.isfinite(self.value) else ("inf" if self.value > 0 else "-inf")
        return d


def threshold_curve(y: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct thresholds in decreasing order with TP and FP counts at `score >= t`."""
    order = np.argsort(-s, kind="mergesort")
    ss, yy = s[order], y[order].astype(np.float64)
    last = np.r_[ss[1:] != ss[:-1], True]
    return ss[last], np.cumsum(yy)[last], np.cumsum(1.0 - yy)[last]


def _need_both(y: np.ndarray, what: str) -> None:
    if y.sum() == 0 or y.sum() == len(y):
        raise InputError(f"{what} needs positive and negative samples, got only label {int(y[0])}")


def threshold_at_tpr(y: np.ndarray, s: np.ndarray, x: float) -> float:
    """Largest attained threshold with TPR >= x."""
    _need_both(y, f"a TPR>={x} threshold")
    thr, tp, _ = threshold_curve(y, s)
    ok = tp >= x * tp[-1] * (1 - 1e-12)
    return float(thr[np.argmax(ok)])


def threshold_at_fpr(y: np.ndarray, s: np.ndarray, f: float) -> float:
    """Smallest attained threshold with FPR <= f (inf when even the top score breaks it)."""
    _need_both(y, f"an FPR<={f} threshold")
    thr, _, fp = threshold_curve(y, s)
    ok = fp <= f * fp[-1] * (1 + 1e-12)
    return float(thr[np.nonzero(ok)[0][-1]]) if ok.any() else float("inf")


def threshold_best_f1(y: np.ndarray, s: np.ndarray) -> float:
    """Attained threshold with the highest F1 (the largest such threshold on ties)."""
    _need_both(y, "a best-F1 threshold")
    thr, tp, fp = threshold_curve(y, s)
    f1 = 2 * tp / (tp + fp + tp[-1])
    return float(thr[np.argmax(f1)])


def threshold_youden(y: np.ndarray, s: np.ndarray) -> float:
    """Attained threshold with the highest Youden J = TPR - FPR (the largest on ties)."""
    _need_both(y, "a Youden threshold")
    thr, tp, fp = threshold_curve(y, s)
    j = tp / tp[-1] - fp / fp[-1]
    return float(thr[np.argmax(j)])


def threshold_fairmedfm_f1(y: np.ndarray, s: np.ndarray) -> float:
    """FairMedFM's rule: best F1 = 2PR/(P+R+1e-8) over increasing thresholds, the lowest on ties."""
    _need_both(y, "a best-F1 threshold")
    thr, tp, fp = threshold_curve(y, s)
    thr, tp, fp = thr[::-1], tp[::-1], fp[::-1]
    precision, recall = tp / (tp + fp), tp / tp[0]
    f1 = 2 * precision * recall / (precision + recall + 1e-8)
    return float(thr[np.argmax(f1)])


def parse_policy(policy: str) -> tuple[str, float | None]:
    """Split 'val_fpr:0.2' into ('val_fpr', 0.2); validates the name and the number."""
    name, _, arg = policy.partition(":")
    needs_arg = {"fixed": True, "val_fpr": True, "val_tpr": True, "val_best_f1": False, "val_youden": False,
                 "eval_best_f1_fairmedfm": False}
    if name not in needs_arg:
        raise InputError(f"unknown threshold policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if needs_arg[name] != bool(arg):
        raise InputError(f"threshold policy {policy!r}: " + ("needs a number, e.g. fixed:0.5" if needs_arg[name]
                                                              else "takes no number"))
    if not arg:
        return name, None
    try:
        value = float(arg)
    except ValueError:
        raise InputError(f"threshold policy {policy!r}: {arg!r} is not a number") from None
    if np.isnan(value):
        raise InputError(f"threshold policy {policy!r}: the number is NaN; give e.g. fixed:0.5")
    if not 0.0 <= value <= 1.0 and name != "fixed":
        raise InputError(f"threshold policy {policy!r}: rate must be in [0, 1]")
    return name, value


def choose_threshold(
    policy: str,
    val_y: np.ndarray | None = None,
    val_s: np.ndarray | None = None,
    comparator: str = ">=",
    undefined_ok: bool = False,
) -> Threshold:
    """Apply a policy; 'val_*' policies need validation labels and scores and never see test labels.

    With `undefined_ok`, validation labels of one class (a rare finding in a multi-label task) give an
    undefined threshold (NaN, its reason in `source`) instead of an error.
    """
    name, arg = parse_policy(policy)
    number = math.nan if arg is None else arg  # parse_policy gives fixed, val_fpr and val_tpr their number
    if name == "fixed":
        return Threshold(number, policy, comparator, "fixed")
    if val_y is None or val_s is None or len(val_y) == 0:
        raise InputError(
            f"threshold policy {policy!r} needs a validation split (rows with split=val); "
            "give one, or use a fixed threshold such as --threshold fixed:0.5"
        )
    y = np.asarray(val_y)
    s = np.asarray(val_s, dtype=np.float64)
    if undefined_ok and (y.min() == y.max()):
        return Threshold(float("nan"), policy, comparator,
                         f"undefined: validation has only label {int(y[0])}, threshold metrics are NaN")
    fn = {"val_best_f1": threshold_best_f1, "val_youden": threshold_youden,
          "eval_best_f1_fairmedfm": threshold_fairmedfm_f1}
    if name in fn:
        value = fn[name](y, s)
    elif name == "val_fpr":
        value = threshold_at_fpr(y, s, number)
    else:
        value = threshold_at_tpr(y, s, number)
    source = "evaluated set (fairmedfm compatibility profile)" if name.startswith("eval_") else "validation"
    return Threshold(value, policy, comparator, source)
