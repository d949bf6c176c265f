"""Hand-computed tests for evaluate_classification (fairmedbench/metrics/specs.py), edge cases and the result views."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fairmedbench.errors import InputError
from fairmedbench.metrics import GAP, OVERALL, evaluate_classification

# Main hand example: two groups of four, a positive and a negative tied AT the threshold 0.5 in A.
#   A: (0.9, 1) (0.5, 1) (0.5, 0) (0.2, 0)
#   B: (0.7, 1) (0.5, 0) (0.3, 1) (0.1, 0)
Y = np.array([1, 1, 0, 0, 1, 0, 1, 0])
S = np.array([0.9, 0.5, 0.5, 0.2, 0.7, 0.5, 0.3, 0.1])
G = np.array(list("AAAABBBB"))


def ev(y, s, attrs, **kw):
    kw.setdefault("n_boot", 0)
    kw.setdefault("min_group_size", 1)
    return evaluate_classification(y, s, attrs, **kw)


@pytest.fixture(scope="module")
def main():
    return ev(Y, S, {"g": G}).report()


def test_auc_with_ties(main):
    # A: pos {.9,.5} neg {.5,.2}: (.9>.5)1 (.9>.2)1 (.5=.5)1/2 (.5>.2)1 -> 3.5/4 = 0.875
    # B: pos {.7,.3} neg {.5,.1}: 1 + 1 + (.3<.5)0 + 1 -> 3/4 = 0.75
    # all: pos {.9,.7,.5,.3} neg {.5,.5,.2,.1}: .9->4, .7->4, .5->1/2+1/2+2=3, .3->2 => 13/16
    assert main.value("auc", "A") == pytest.approx(0.875, abs=1e-12)
    assert main.value("auc", "B") == pytest.approx(0.75, abs=1e-12)
    assert main.value("auc") == pytest.approx(13 / 16, abs=1e-12)
    # gap 0.125, worst group B with 0.75; ES = 0.8125 / (1 + 0.0625 + 0.0625) = 0.8125/1.125
    assert main.value("auc_gap", GAP) == pytest.approx(0.125, abs=1e-12)
    assert main.value("worst_group_auc", GAP) == pytest.approx(0.75, abs=1e-12)
    assert main.worst_group["auc"] == "B"
    assert main.value("auc_es", GAP) == pytest.approx(0.8125 / 1.125, abs=1e-12)
    assert main.value("n_groups_auc", GAP) == 2


def test_average_precision_step_not_trapezoid(main):
    # A sorted desc: .9(1) -> P=1 R=1/2; .5 tie {1,0} -> TP=2 FP=1 P=2/3 R=1
    #   AP = 1/2*1 + 1/2*2/3 = 5/6
    # all: .9 P=1 R=1/4; .7 P=1 R=2/4; .5 {1,0,0}: TP3 FP2 P=3/5 R=3/4; .3: TP4 FP2 P=4/6 R=1
    #   AP = (1 + 1 + 3/5 + 2/3)/4 = 49/60
    assert main.value("ap", "A") == pytest.approx(5 / 6, abs=1e-12)
    assert main.value("ap") == pytest.approx(49 / 60, abs=1e-12)
    # the trapezoid (linear interpolation) would give a different number:
    # A: R 0->1/2 at P 1->1 (0.5), 1/2->1 at P 1->2/3 (0.5*(5/6)) = 0.9167 != 5/6
    assert abs(main.value("ap", "A") - (0.5 + 0.5 * (1 + 2 / 3) / 2)) > 0.05


def test_brier_family(main):
    # A pos: (1-.9)^2=.01, (1-.5)^2=.25 -> brier_pos=.13; neg: .25, .04 -> brier_neg=.145
    #   brier = (.01+.25+.25+.04)/4 = .1375; balanced = (.13+.145)/2 = .1375
    # B pos: (1-.7)^2=.09, (1-.3)^2=.49 -> .29; neg: .25, .01 -> .13; brier = .84/4 = .21
    assert main.value("brier_pos", "A") == pytest.approx(0.13)
    assert main.value("brier_neg", "A") == pytest.approx(0.145)
    assert main.value("brier", "A") == pytest.approx(0.1375)
    assert main.value("balanced_brier", "A") == pytest.approx(0.1375)
    assert main.value("brier", "B") == pytest.approx(0.21)
    assert main.value("brier_gap", GAP) == pytest.approx(0.0725)


def test_balanced_brier_differs_with_unequal_classes():
    # one positive at .6 -> (.4)^2 = .16; three negatives .0, .0, .3 -> (0+0+.09)/3 = .03
    # brier = (.16 + .09)/4 = .0625; balanced = (.16 + .03)/2 = .095
    r = ev([1, 0, 0, 0], [0.6, 0.0, 0.0, 0.3], {"g": ["x"] * 4}).report()
    assert r.value("brier") == pytest.approx(0.0625)
    assert r.value("brier_pos") == pytest.approx(0.16)
    assert r.value("brier_neg") == pytest.approx(0.03)
    assert r.value("balanced_brier") == pytest.approx(0.095)


def test_ece_main(main):
    # 15 bins, bin = floor(15p): A: .9->13 (|.9-1|=.1), .5,.5->7 (mean p .5, mean y .5 -> 0), .2->3 (.2)
    #   ECE_A = (.1 + 0 + .2)/4 = .075
    # B: .7->10 (|.7-1|=.3), .5->7 (.5), .3->4 (|.3-1|=.7), .1->1 (.1) -> (.3+.5+.7+.1)/4 = .4
    assert main.value("ece", "A") == pytest.approx(0.075)
    assert main.value("ece", "B") == pytest.approx(0.4)
    assert main.value("ece_gap", GAP) == pytest.approx(0.325)


def test_ece_bin_edges_exact_rule():
    # p=0.2 = 3/15 lies ON an edge: floor(0.2*15)=3 -> bin [3/15, 4/15) together with 0.25 (floor 3.75 = 3).
    # p=1.0 -> floor(15)=15 clipped to 14: shares the last (closed) bin with 0.95 (floor 14.25 = 14).
    # bin 3: p {.2 (y1), .25 (y0)} mean p .225, mean y .5 -> 2*|.225-.5| = .55
    # bin 14: p {1.0 (y1), .95 (y0)} mean p .975, mean y .5 -> 2*.475 = .95
    # ECE = (.55 + .95)/4 = .375
    y, s = [1, 0, 1, 0], [0.2, 0.25, 1.0, 0.95]
    r = ev(y, s, {"g": ["x"] * 4}).report()
    assert r.value("ece") == pytest.approx(0.375, abs=1e-12)
    # Right-closed linspace bins (lower, upper] (the common Guo et al. loop) would put 0.2 into (2/15, 3/15]
    # alone: |.2-1| + |.25-0| + .95 = .8 + .25 + .95 -> 2.0/4 = .5, a different number.
    edges = np.linspace(0, 1, 16)
    right_closed = np.clip(np.searchsorted(edges, s, side="left") - 1, 0, 14)
    assert list(right_closed) == [2, 3, 14, 14]
    assert not math.isclose(r.value("ece"), 0.5)


def test_ece_linspace_left_closed_puts_03_lower_with_10_bins():
    # 0.3*10 = 3.0 -> bin 3 by the exact rule; linspace(0,1,11)[3] = 0.30000000000000004 > 0.3, so
    # left-closed linspace edges would put 0.3 into bin 2 together with 0.25.
    assert np.searchsorted(np.linspace(0, 1, 11), 0.3, side="right") - 1 == 2
    # exact rule: bin 2 {.25 (y0)} -> .25; bin 3 {.3 (y1), .35 (y0)}: mean p .325, mean y .5 -> 2*.175 = .35
    # ECE = (.25 + .35)/3 = .2; linspace would give {.25,.3} -> 2*|.275-.5| = .45, {.35} -> .35: .8/3
    r = ev([0, 1, 0], [0.25, 0.3, 0.35], {"g": ["x"] * 3}, ece_bins=10).report()
    assert r.value("ece") == pytest.approx(0.2, abs=1e-12)


def test_rates_at_threshold_ties_count_positive(main):
    # threshold 0.5, positive iff score >= 0.5 (ties AT .5 count as positive)
    # A: predicted + {.9(1), .5(1), .5(0)}: TP2 FP1 TN1 FN0 -> TPR 1, FPR 1/2, TNR 1/2, PPV 2/3, acc 3/4,
    #    F1 = 2*2/(2*2+1+0) = .8, selection 3/4, J = 1/2
    # B: predicted + {.7(1), .5(0)}: TP1 FP1 TN1 FN1 -> .5 everywhere, F1 = 2/(2+1+1) = .5, J = 0
    exp_a = dict(tpr=1, fpr=0.5, tnr=0.5, ppv=2 / 3, acc=0.75, f1=0.8, selection_rate=0.75, youden_j=0.5)
    exp_b = dict(tpr=0.5, fpr=0.5, tnr=0.5, ppv=0.5, acc=0.5, f1=0.5, selection_rate=0.5, youden_j=0.0)
    for m in exp_a:
        assert main.value(m, "A") == pytest.approx(exp_a[m], abs=1e-12), m
        assert main.value(m, "B") == pytest.approx(exp_b[m], abs=1e-12), m
    # overall: TP3 FP2 FN1 TN2: TPR 3/4, FPR 1/2
    assert main.value("tpr") == pytest.approx(0.75)
    assert main.value("fpr") == pytest.approx(0.5)
    # gaps: dTPR .5, dFPR 0 -> eqodds max .5, mean .25; eqopp .5; dp = .75 - .5
    assert main.value("eqodds_diff", GAP) == pytest.approx(0.5)
    assert main.value("eqodds_mean", GAP) == pytest.approx(0.25)
    assert main.value("eqopp_diff", GAP) == pytest.approx(0.5)
    assert main.value("dp_diff", GAP) == pytest.approx(0.25)
    assert main.thresholds["operating"] == {"value": 0.5, "policy": "fixed:0.5", "comparator": ">=",
                                            "source": "fixed"}


def test_eqodds_takes_fpr_gap_when_larger():
    # threshold .5: A: pos {.9} neg {.6,.7} -> TPR 1, FPR 1; B: pos {.8} neg {.1,.6} -> TPR 1, FPR 1/2
    # dTPR 0, dFPR .5 -> eqodds_diff .5, eqodds_mean .25, eqopp 0
    r = ev([1, 0, 0, 1, 0, 0], [0.9, 0.6, 0.7, 0.8, 0.1, 0.6], {"g": list("AAABBB")}).report()
    assert r.value("eqodds_diff", GAP) == pytest.approx(0.5)
    assert r.value("eqodds_mean", GAP) == pytest.approx(0.25)
    assert r.value("eqopp_diff", GAP) == pytest.approx(0.0)


def test_youden_j_max(main):
    # A: t=.9: 1/2-0; t=.5: 1-1/2; t=.2: 1-1 -> max 1/2.  B: t=.7: 1/2-0; t=.3: 1-1/2 -> max 1/2
    # all: t=.7: 2/4-0 = .5 (t=.5: 3/4-2/4; t=.3: 1-2/4)
    assert main.value("youden_j_max", "A") == pytest.approx(0.5)
    assert main.value("youden_j_max", "B") == pytest.approx(0.5)
    assert main.value("youden_j_max") == pytest.approx(0.5)
    assert main.value("youden_j_max_gap", GAP) == pytest.approx(0.0)


# Operating-point example, 10 samples:
#   A: pos .8 .6 ; neg .7 .4 .2        B: pos .9 .4 ; neg .5 .1
OP_Y = np.array([1, 1, 0, 0, 0, 1, 1, 0, 0, 0])
OP_S = np.array([0.8, 0.6, 0.7, 0.4, 0.2, 0.9, 0.4, 0.5, 0.1, 0.1])
OP_G = np.array(list("AAAAABBBBB"))


@pytest.fixture(scope="module")
def op():
    # B has a third negative at .1 so that B has 5 samples; B neg {.5, .1, .1}
    return ev(OP_Y, OP_S, {"g": OP_G}).report()


def test_fpr_at_tpr95(op):
    # overall positives {.9,.8,.6,.4}: TPR >= .95 needs all four -> largest threshold t = .4
    # FPR at score >= .4: A neg {.7,.4,.2}: .7 and .4 (tie at t counts) -> 2/3; B neg {.5,.1,.1}: 1/3
    # overall negatives {.7,.4,.2,.5,.1,.1}: .7 .4 .5 -> 3/6
    assert op.thresholds["fpr_at_tpr95"]["value"] == pytest.approx(0.4)
    assert op.value("fpr_at_tpr95", "A") == pytest.approx(2 / 3)
    assert op.value("fpr_at_tpr95", "B") == pytest.approx(1 / 3)
    assert op.value("fpr_at_tpr95") == pytest.approx(0.5)
    assert op.value("fpr_at_tpr95_gap", GAP) == pytest.approx(1 / 3)


def test_rates_at_fpr20(op):
    # N = 6, FPR <= .2 allows 1.2 -> at most 1 FP. Negatives desc .7 .5 .4 .2 .1 .1: only .7 may be >= t,
    # so t must be above .5; the smallest attained score above .5 is .6.
    # at t = .6: A: TP {.8,.6} TPR 1, FP {.7} FPR 1/3, J 2/3; B: TP {.9} TPR 1/2, FPR 0, J 1/2
    # overall: TPR 3/4, FPR 1/6
    assert op.thresholds["rates_at_fpr20"]["value"] == pytest.approx(0.6)
    assert op.value("tpr_at_fpr20", "A") == pytest.approx(1.0)
    assert op.value("fpr_at_fpr20", "A") == pytest.approx(1 / 3)
    assert op.value("youden_j_at_fpr20", "A") == pytest.approx(2 / 3)
    assert op.value("tpr_at_fpr20", "B") == pytest.approx(0.5)
    assert op.value("fpr_at_fpr20", "B") == pytest.approx(0.0)
    assert op.value("youden_j_at_fpr20", "B") == pytest.approx(0.5)
    assert op.value("tpr_at_fpr20") == pytest.approx(0.75)
    assert op.value("fpr_at_fpr20") == pytest.approx(1 / 6)
    assert op.value("tpr_at_fpr20_gap", GAP) == pytest.approx(0.5)
    assert op.value("youden_j_at_fpr20_gap", GAP) == pytest.approx(1 / 6)


def test_rates_at_fpr_exact_boundary_is_allowed():
    # 5 negatives .7 .5 .4 .3 .2; FPR <= .2 allows exactly one FP (1/5 == .2, no rounding slack lost):
    # t must be above .5, the smallest attained score above .5 is the positive .6 -> TPR 1, FPR 1/5
    y = [1, 1, 0, 0, 0, 0, 0]
    s = [0.9, 0.6, 0.7, 0.5, 0.4, 0.3, 0.2]
    r = ev(y, s, {"g": ["x"] * 7}).report()
    assert r.thresholds["rates_at_fpr20"]["value"] == pytest.approx(0.6)
    assert r.value("fpr_at_fpr20") == pytest.approx(0.2)
    assert r.value("tpr_at_fpr20") == pytest.approx(1.0)


def test_custom_operating_targets_named(op):
    # fpr_at_tpr=0.5: largest t with TPR >= .5 -> .8 (TP .9,.8); FPR per group: none >= .8 -> 0
    r = ev(OP_Y, OP_S, {"g": OP_G}, fpr_at_tpr=0.5, rates_at_fpr=0.5).report()
    assert r.thresholds["fpr_at_tpr50"]["value"] == pytest.approx(0.8)
    assert r.value("fpr_at_tpr50", "A") == 0.0
    # rates_at_fpr=.5: at most 3 FP: negatives desc .7 .5 .4 | .2 ... -> t just above .2: smallest score > .2 = .4
    # A: TPR 1, FPR 2/3 (.7,.4); B: TPR 1 (.9,.4), FPR 1/3 (.5)
    assert r.thresholds["rates_at_fpr50"]["value"] == pytest.approx(0.4)
    assert r.value("fpr_at_fpr50", "A") == pytest.approx(2 / 3)
    assert r.value("tpr_at_fpr50", "B") == pytest.approx(1.0)


def test_sauroc(op):
    # all positives {.9,.8,.6,.4} vs A's negatives {.7,.4,.2}: .9->3 .8->3 .6->2 .4->(tie .4) 1/2 + 1 = 1.5
    #   -> 9.5/12
    # vs B's negatives {.5,.1,.1}: .9->3 .8->3 .6->3 .4->2 -> 11/12
    assert op.value("sauroc", "A") == pytest.approx(9.5 / 12)
    assert op.value("sauroc", "B") == pytest.approx(11 / 12)
    assert op.value("sauroc_gap", GAP) == pytest.approx(1.5 / 12)


# ---------------------------------------------------------------- undefined groups


def _case_016():
    """Groups A (AUC .94), B (AUC .78) and C with negatives only."""
    # A: 5 pos, 10 neg. negatives .05,.10,...,.50; positives .91-.94 above all (4*10 = 40 pairs)
    #    and .36 above 7 negatives (.05..35) -> 47/50 = .94
    a_neg = [0.05 * k for k in range(1, 11)]
    a_pos = [0.91, 0.92, 0.93, 0.94, 0.36]
    # B: 3 positives above all (30) + one above 6 (.06) + one above 3 (.03) -> 39/50 = .78
    b_neg = [0.01 * k for k in range(1, 11)]
    b_pos = [0.8, 0.85, 0.9, 0.065, 0.035]
    c_neg = [0.2, 0.5, 0.7]
    y = [1] * 5 + [0] * 10 + [1] * 5 + [0] * 10 + [0] * 3
    s = a_pos + a_neg + b_pos + b_neg + c_neg
    g = ["A"] * 15 + ["B"] * 15 + ["C"] * 3
    return np.array(y), np.array(s), np.array(g)


def test_one_class_group_is_nan_and_skipped_not_zero():
    y, s, g = _case_016()
    r = ev(y, s, {"g": g}).report()
    assert r.value("auc", "A") == pytest.approx(0.94)
    assert r.value("auc", "B") == pytest.approx(0.78)
    for m in ("auc", "ap", "tpr", "brier_pos", "youden_j", "youden_j_max", "tpr_at_fpr20"):
        assert math.isnan(r.value(m, "C")), m
    # sAUROC of C IS defined (all positives vs C's negatives): A's .91-.94 beat all 3 (12), .36 beats .2 (1),
    # B's .8 .85 .9 beat all 3 (9), .065 .035 none -> 22/30
    assert r.value("sauroc", "C") == pytest.approx(22 / 30)
    assert "defined for this group: fpr, tnr, ece, brier, brier_neg, fpr_at_tpr and sauroc" in r.skipped["C"]
    assert "C" in r.skipped and "no positives" in r.skipped["C"]
    # gap over defined groups: .94 - .78 = .16, not .94 (what scoring C as 0 would give)
    assert r.value("auc_gap", GAP) == pytest.approx(0.16)
    assert r.value("worst_group_auc", GAP) == pytest.approx(0.78)
    assert r.value("n_groups_auc", GAP) == 2
    overall = r.value("auc")
    assert r.value("auc_es", GAP) == pytest.approx(overall / (1 + abs(0.94 - overall) + abs(0.78 - overall)))
    # ECE, Brier, FPR and brier_neg ARE defined for the negatives-only group (FPR: .5, .7 >= .5 -> 2/3)
    assert r.value("ece", "C") == pytest.approx((0.2 + 0.5 + 0.7) / 3)
    assert r.value("brier", "C") == pytest.approx((0.04 + 0.25 + 0.49) / 3)
    assert r.value("fpr", "C") == pytest.approx(2 / 3)
    # tpr gap only over A and B
    assert r.value("tpr_gap", GAP) == pytest.approx(abs(r.value("tpr", "A") - r.value("tpr", "B")))


def test_negatives_only_group_f1_ppv():
    # group C has no positives; at .5 it predicts two FPs (.5, .7): PPV = 0/2 = 0 (defined), TPR undefined
    y, s, g = _case_016()
    r = ev(y, s, {"g": g}).report()
    assert r.value("ppv", "C") == 0.0
    assert math.isnan(r.value("tpr", "C"))
    # F1 needs recall: NaN, not the 0 that sklearn's f1_score returns, and out of the F1 gap
    assert math.isnan(r.value("f1", "C"))
    assert r.value("f1_gap", GAP) == pytest.approx(abs(r.value("f1", "A") - r.value("f1", "B")))


def test_positives_only_group():
    # group P: positives only -> no AUC, no FPR; TPR defined
    y = [1, 0, 1, 0, 1, 1]
    s = [0.8, 0.3, 0.6, 0.7, 0.4, 0.9]
    r = ev(y, s, {"g": ["A"] * 4 + ["P"] * 2}).report()
    assert "no negatives" in r.skipped["P"]
    assert math.isnan(r.value("auc", "P")) and math.isnan(r.value("fpr", "P"))
    assert math.isnan(r.value("brier_neg", "P"))
    assert r.value("tpr", "P") == pytest.approx(0.5)  # .9 >= .5, .4 < .5
    # AP of a positives-only group would be 1 whatever the scores: NaN like its AUC
    assert math.isnan(r.value("ap", "P"))
    assert "P" not in [g for g in r.groups if not math.isnan(r.value("ap", g))]
    # only A has a defined AUC: no gap, with a note
    assert math.isnan(r.value("auc_gap", GAP))
    assert "auc_gap" in r.gap_notes
    assert math.isnan(r.value("auc_es", GAP))


def test_population_with_one_class_has_no_operating_points():
    # no positives at all: there is no TPR curve, so no fpr_at_tpr95 / rates_at_fpr20 threshold;
    # the per-group rates are NaN (before: FPR 0.0 at an undefined threshold)
    s = [0.9, 0.1, 0.8, 0.95, 0.3, 0.6]
    r = ev([0] * 6, s, {"g": list("AABBAB")}).report()
    for m in ("fpr_at_tpr95", "tpr_at_fpr20", "fpr_at_fpr20", "youden_j_at_fpr20"):
        for grp in (OVERALL, "A", "B"):
            assert math.isnan(r.value(m, grp)), (m, grp)
    assert r.thresholds["fpr_at_tpr95"]["value"] is None
    assert r.thresholds["rates_at_fpr20"]["value"] is None
    # FPR at the operating threshold and ECE are still defined: A {.9,.1,.3} -> 1/3 at .5
    assert r.value("fpr", "A") == pytest.approx(1 / 3)


def test_empty_group_from_bins():
    # bins 0,40,60,200: nobody in 40-60 -> an empty group, NaN everywhere, skipped, not in gaps
    y = [1, 0, 1, 0, 1, 0]
    s = [0.9, 0.2, 0.6, 0.7, 0.4, 0.3]
    age = [30, 35, 20, 70, 80, 65]
    r = ev(y, s, {"age": age}, bins={"age": [0, 40, 60, 200]}).report()
    assert r.groups == ["<40", "40-60", ">=60"]
    assert r.counts["40-60"] == {"n": 0, "n_pos": 0, "n_neg": 0}
    assert "empty" in r.skipped["40-60"]
    for m in ("auc", "ece", "brier", "selection_rate", "acc"):
        assert math.isnan(r.value(m, "40-60")), m
    # <40: pos {.9,.6} neg {.2} -> AUC 1; >=60: pos {.4} neg {.7,.3} -> 1/2
    assert r.value("auc_gap", GAP) == pytest.approx(0.5)
    assert r.value("ece_gap", GAP) == pytest.approx(abs(r.value("ece", "<40") - r.value("ece", ">=60")))


def test_single_group_has_no_gaps():
    r = ev(Y, S, {"site": ["s1"] * 8}).report()
    assert r.value("auc", "s1") == pytest.approx(13 / 16)
    for m in ("auc_gap", "tpr_gap", "ece_gap", "eqodds_diff", "dp_diff", "auc_es"):
        assert math.isnan(r.value(m, GAP)), m
    assert "auc_gap" in r.gap_notes and "fewer than two" in r.gap_notes["auc_gap"]


def test_small_groups_flagged_not_dropped():
    r = ev(Y, S, {"g": G}, min_group_size=5).report()
    assert sorted(r.small_groups) == ["A", "B"]
    assert r.value("auc", "A") == pytest.approx(0.875)
    r2 = ev(Y, S, {"g": G}, min_group_size=4).report()
    assert r2.small_groups == []


# ---------------------------------------------------------------- multi-label, attributes, inputs


def test_multilabel_per_task_not_one_hot():
    # rows 0 and 3 have two 1s: a one-hot reading would fail or argmax them; each column is its own task
    y = np.array([[1, 1], [0, 1], [1, 0], [1, 1], [0, 0], [0, 0]])
    s = np.array([[0.9, 0.2], [0.4, 0.8], [0.6, 0.1], [0.3, 0.7], [0.2, 0.3], [0.5, 0.6]])
    g = ["A", "A", "A", "B", "B", "B"]
    res = ev(y, s, {"g": g}, task_names=["effusion", "edema"])
    for k, task in enumerate(["effusion", "edema"]):
        single = ev(y[:, k], s[:, k], {"g": g}).report()
        r = res.report(task, "g")
        for m in ("auc", "ap", "ece", "tpr", "brier"):
            for grp in (OVERALL, "A", "B"):
                a, b = r.value(m, grp), single.value(m, grp)
                assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b), (task, m, grp)
    # effusion: pos {.9,.6,.3} neg {.4,.2,.5}: .9->3 .6->3 .3->1 => 7/9
    assert res.report("effusion").value("auc") == pytest.approx(7 / 9)
    # edema: pos {.2,.8,.7} neg {.1,.3,.6}: .2->1 .8->3 .7->3 => 7/9 as well; prevalence 3/6 each
    assert res.report("edema").value("prevalence") == pytest.approx(0.5)
    assert res.meta["tasks"] == ["effusion", "edema"]


def test_default_task_names_and_mismatch():
    y = np.array([[1, 0], [0, 1], [1, 1], [0, 0]])
    s = np.full((4, 2), 0.5)
    res = ev(y, s, {"g": list("AABB")})
    assert {r.task for r in res.reports} == {"task0", "task1"}
    with pytest.raises(InputError, match="task names"):
        ev(y, s, {"g": list("AABB")}, task_names=["only_one"])


def test_missing_attribute_values_excluded():
    # last two rows have no sex: left out of this attribute's analysis, counted in n_missing
    y = list(Y) + [1, 0]
    s = list(S) + [0.0, 1.0]
    sex = list(G) + [None, float("nan")]
    r = ev(y, s, {"sex": np.array(sex, dtype=object)}).report()
    assert r.n_missing == 2
    assert r.counts[OVERALL]["n"] == 8
    assert r.value("auc") == pytest.approx(13 / 16)  # the two badly scored rows are not counted
    assert r.to_dict()["n_missing_attribute"] == 2


def test_intersection_names_and_values():
    sex = ["F", "F", "M", "M", "F", "F", "M", "M"]
    age = [30, 70, 30, 70, 30, 70, 30, 70]
    res = ev(Y, S, {"sex": sex, "age": age}, bins={"age": [0, 60, 200]}, intersect=True)
    r = res.report(attribute="sex|age")
    assert r.groups == ["F|<60", "F|>=60", "M|<60", "M|>=60"]
    # F|<60 = rows 0, 4: (.9,1) (.7,1) -> positives only
    assert r.counts["F|<60"] == {"n": 2, "n_pos": 2, "n_neg": 0}
    assert "F|<60" in r.skipped
    assert res.report(attribute="age").groups == ["<60", ">=60"]


def test_too_many_values_without_bins():
    n = 60
    y = np.tile([0, 1], n // 2)
    s = np.linspace(0, 1, n)
    with pytest.raises(InputError, match="bins"):
        ev(y, s, {"age": np.arange(n)})


@pytest.mark.parametrize(
    "y,s,kw,match",
    [
        ([0, 1, 1], [0.1, float("nan"), 0.3], {}, "NaN"),
        ([0, 1, 1], [0.1, float("inf"), 0.3], {}, "infinite"),
        ([0, 1, 1], [0.1, 1.5, 0.3], {}, "logits"),
        ([0, 1, 1], [-2.0, 1.5, 0.3], {}, r"\[0, 1\]"),
        ([0, 2, 1], [0.1, 0.2, 0.3], {}, "0 or 1"),
        (["no", "yes", "yes"], [0.1, 0.2, 0.3], {}, "0 or 1"),
        ([0, 1, 1, 0], [0.1, 0.2, 0.3], {}, "shape"),
        ([0, 1, float("nan")], [0.1, 0.2, 0.3], {}, "missing"),
        ([], [], {}, "non-empty"),
    ],
)
def test_bad_inputs(y, s, kw, match):
    g = ["A"] * len(y) or ["A"]
    with pytest.raises(InputError, match=match):
        evaluate_classification(y, s, {"g": g}, n_boot=0, **kw)


def test_bad_arguments():
    with pytest.raises(InputError, match="length mismatch"):
        ev(Y, S, {"g": list("AAAABBB")})
    with pytest.raises(InputError, match="profile"):
        ev(Y, S, {"g": G}, profile="nope")
    with pytest.raises(InputError, match="n_boot"):
        ev(Y, S, {"g": G}, n_boot=-1)
    with pytest.raises(InputError, match="attribute"):
        ev(Y, S, {})
    with pytest.raises(InputError, match="validation"):
        ev(Y, S, {"g": G}, threshold="val_youden")


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"ece_bins": 0}, "ece_bins"),
        ({"ece_bins": 2.5}, "ece_bins"),
        ({"fpr_at_tpr": 1.5}, "fpr_at_tpr"),
        ({"fpr_at_tpr": 0.0}, "fpr_at_tpr"),
        ({"rates_at_fpr": -0.1}, "rates_at_fpr"),
        ({"ci_level": 1.5}, "ci_level"),
        ({"ci_level": 0.0}, "ci_level"),
        ({"min_group_size": -1}, "min_group_size"),
    ],
)
def test_bad_options_are_input_errors(kw, match):
    # before: ece_bins=0 gave ECE 0.0, fpr_at_tpr=1.5 a number, rates_at_fpr<0 an IndexError, ci_level>1 numpy's error
    with pytest.raises(InputError, match=match):
        ev(Y, S, {"g": G}, **kw)


def test_extreme_operating_targets():
    # rates_at_fpr=0: no FP allowed; the top negative of the main example is .5 -> t = .7 (smallest score above)
    r = ev(Y, S, {"g": G}, rates_at_fpr=0.0).report()
    assert r.thresholds["rates_at_fpr0"]["value"] == pytest.approx(0.7)
    assert r.value("fpr_at_fpr0") == 0.0 and r.value("tpr_at_fpr0") == pytest.approx(0.5)
    # rates_at_fpr=1: everything positive; fpr_at_tpr=1: t = lowest positive .3 -> FPR 2/4
    r = ev(Y, S, {"g": G}, rates_at_fpr=1.0, fpr_at_tpr=1.0).report()
    assert r.value("tpr_at_fpr100") == 1.0 and r.value("fpr_at_fpr100") == 1.0
    assert r.value("fpr_at_tpr100") == pytest.approx(0.5)


def test_logits_declared():
    # logits declared: sigmoid applied; ranking metrics unchanged, ECE computed on probabilities
    logit = np.log(S / (1 - S + 1e-300)).clip(-30, 30)
    r = ev(Y, logit, {"g": G}, logits=True).report()
    assert r.value("auc", "A") == pytest.approx(0.875)
    assert r.value("brier", "A") == pytest.approx(0.1375, abs=1e-9)


def test_validation_threshold_used_not_test_labels():
    # val: s .8(1) .6(0) .4(1) .2(0): Youden t=.8 J .5; t=.4: 1 - .5 = .5 -> tie, largest: .8
    res = ev(Y, S, {"g": G}, threshold="val_youden", val_y_true=[1, 0, 1, 0], val_y_score=[0.8, 0.6, 0.4, 0.2])
    r = res.report()
    assert r.thresholds["operating"]["value"] == pytest.approx(0.8)
    assert r.thresholds["operating"]["source"] == "validation"
    # at .8 on test: A: TP {.9} -> TPR 1/2, FPR 0; B: none -> TPR 0
    assert r.value("tpr", "A") == pytest.approx(0.5)
    assert r.value("tpr", "B") == pytest.approx(0.0)
    assert res.meta["thresholds"]["task"]["policy"] == "val_youden"
    with pytest.raises(InputError, match="validation"):
        ev(Y, S, {"g": G}, threshold="val_youden", val_y_true=[[1, 0]], val_y_score=[[0.1, 0.2]])


# ---------------------------------------------------------------- result views


def test_one_class_validation_task_has_an_undefined_threshold():
    # multi-label: the second finding has no positives in validation -> its threshold is undefined (NaN,
    # with the reason), its threshold metrics NaN, and the other task is unaffected
    y = np.array([[1, 0], [0, 1], [1, 0], [0, 1]])
    s = np.full((4, 2), 0.5)
    res = ev(y, s, {"g": list("AABB")}, task_names=["common", "rare"], threshold="val_youden",
             val_y_true=[[1, 0], [0, 0]], val_y_score=[[0.9, 0.2], [0.1, 0.3]])
    assert res.meta["thresholds"]["rare"]["value"] is None
    assert "only label 0" in res.meta["thresholds"]["rare"]["source"]
    assert np.isnan(res.report("rare", "g").value("tpr"))
    assert res.meta["thresholds"]["common"]["value"] == pytest.approx(0.9)


def test_result_views_and_export():
    res = ev(Y, S, {"g": G, "site": ["x"] * 8})
    df = res.to_frame()
    assert list(df.columns) == ["task", "attribute", "group", "metric", "value", "ci_low", "ci_high", "n", "unit",
                                "p_value", "p_adjusted", "bias_corrected", "mde"]
    row = df[(df.attribute == "g") & (df.group == "A") & (df.metric == "auc")]
    assert len(row) == 1 and row["value"].iloc[0] == pytest.approx(0.875) and row["n"].iloc[0] == 4
    assert res.overall.loc[("task", "g"), "auc"] == pytest.approx(13 / 16)
    assert res.by_group.loc[("task", "g", "B"), "auc"] == pytest.approx(0.75)
    assert res.gaps.loc[("task", "g"), "auc_gap"] == pytest.approx(0.125)
    d = res.to_dict()
    assert d["meta"]["profile"] == "default"
    rep = next(x for x in d["reports"] if x["attribute"] == "site")
    assert rep["metrics"]["auc_gap"][GAP]["value"] is None  # NaN -> None
    with pytest.raises(KeyError):
        res.report()  # two attributes: ambiguous
    assert res.skipped == {}
