"""report/verdicts.py: one rule per question, undefined evidence called undefined (issue 19.3, 23.3)."""

from __future__ import annotations

from typing import Any

from fairmedbench.report.verdicts import (
    board_headline,
    compare_headline,
    disparity,
    study_friedman,
    study_mitigation,
    versus_erm,
)


def _rep(cell: dict[str, Any] | None, notes: dict[str, str] | None = None) -> dict[str, Any]:
    return {"task": "y", "attribute": "sex", "groups": ["F", "M"],
            "metrics": {} if cell is None else {"auc_gap": {"__gap__": cell}}, "gap_notes": notes or {}}


def test_disparity_reads_the_permutation_test_never_the_gap_ci() -> None:
    ci = {"value": 0.08, "ci_low": 0.02, "ci_high": 0.12}  # a gap's interval never contains 0
    untested = disparity(_rep(ci), "auc_gap")
    assert untested.key == "not-tested" and "CI" not in untested.sentence and untested.p is None
    assert "computed without one" in untested.sentence
    hit = disparity(_rep({**ci, "p_value": 0.0004, "p_adjusted": 0.012}), "auc_gap")
    assert hit.key == "disparity" and hit.p == 0.012  # the adjusted p decides
    assert hit.sentence == "y by sex: ΔAUC 0.080 larger than chance (p_adj = 0.012)."
    assert "Benjamini-Yekutieli" in hit.evidence and "raw p = < 0.001" in hit.evidence
    # a raw p outside the adjusted family is shown as raw, never as a verdict (even below 0.05)
    raw_only = disparity(_rep({**ci, "p_value": 0.02}), "auc_gap")
    assert raw_only.key == "raw-only" and raw_only.short == "no verdict (raw p = 0.02)"
    assert "outside this result's adjusted family of tests, so no verdict" in raw_only.sentence
    # adjusted above alpha although the raw p is below: within chance
    assert disparity(_rep({**ci, "p_value": 0.01, "p_adjusted": 0.09}), "auc_gap").key == "no-evidence"
    assert disparity(_rep({**ci, "p_value": None}), "auc_gap").key == "not-tested"
    undefined = disparity(_rep(None, {"auc_gap": "fewer than two groups with a defined auc (1)"}), "auc_gap")
    assert undefined.key == "undefined" and "fewer than two groups with a defined auc (1)" in undefined.sentence
    assert disparity(_rep({"value": None, "ci_low": None, "ci_high": None}), "auc_gap").key == "undefined"


def _row(**kw: Any) -> dict[str, Any]:
    return {"dataset": "d", "method": "groupdro", "metric": "auc", "mean_diff": -0.07, "ci_low": -0.12,
            "ci_high": -0.02, **kw}


def test_versus_erm_is_one_rule_with_named_evidence() -> None:
    # one seed: undefined, never "no clear difference"
    one = versus_erm(_row(ci_low=None, ci_high=None), n_seeds=1)
    assert one.key == "undefined" and "undefined: one seed" in one.sentence
    # paired p over seeds below 0.05 and no bootstrap: AUC lowered = worse
    worse = versus_erm(_row(paired_p=0.01), n_seeds=5)
    assert worse.key == "worse" and "p = 0.01" in worse.sentence and "paired t-test over 5 seeds" in worse.evidence
    # p = 0.035 over seeds, but the test-set bootstrap interval includes 0: ONE verdict, saying why
    mixed = versus_erm(_row(paired_p=0.035), n_seeds=5, boot={"value": -0.07, "ci_low": -0.15, "ci_high": 0.01})
    assert mixed.key == "no-difference"
    assert "not beyond the test set's sampling error" in mixed.sentence and "bootstrap" in mixed.evidence
    better = versus_erm(_row(metric="auc_gap", paired_p=0.001), n_seeds=5,
                        boot={"value": -0.07, "ci_low": -0.1, "ci_high": -0.03})
    assert better.key == "better" and better.short == "better than ERM (p = 0.001)"
    assert versus_erm(_row(paired_p=0.4, ci_low=-0.2, ci_high=0.06), n_seeds=3).key == "no-difference"
    # an older document without paired_p: the same paired t rule, read from its interval
    assert versus_erm(_row(), n_seeds=3).key == "worse"
    assert versus_erm(_row(mean_diff=None), n_seeds=3).key == "undefined"


def test_compare_headline_states_the_answer_first() -> None:
    doc = {"datasets": ["d"], "table": [{"dataset": "d", "method": m, "n_seeds": 5} for m in ("erm", "a", "b")],
           "versus_erm": [_row(method="a", metric="worst_group_auc", mean_diff=0.01, ci_low=-0.02, ci_high=0.04,
                               paired_p=0.4),
                          _row(method="b", metric="worst_group_auc", mean_diff=0.0, ci_low=-0.03, ci_high=0.03,
                               paired_p=0.9)]}
    [line] = compare_headline(doc)
    assert line.startswith("d: no mitigation changed") and "(p ≥ 0.4 for all 2)" in line
    doc["table"] = [{**r, "n_seeds": 1} for r in doc["table"]]
    [line] = compare_headline(doc)
    assert "undefined: one seed" in line and "no mitigation changed" not in line


def test_board_and_study_headlines() -> None:
    rows = [{"dataset": "d", "usage": "lp", "attribute": "sex", "model": "m", "revision": "r1", "rank": 1,
             "tier": "verified"},
            {"dataset": "d", "usage": "lp", "attribute": "sex", "model": "f", "revision": "r1", "rank": None,
             "tier": "self-reported"}]
    assert board_headline(rows).startswith("1 verified row(s) are ranked in 1 (dataset, usage, attribute) group(s); "
                                           "first by ES: d / sex: m r1. 1 self-reported row(s)")
    assert board_headline(rows[1:]).startswith("No row is ranked: none of the 1 row(s) has been verified")
    assert "all values tie" in study_friedman(None, None, 3, 4)
    assert study_friedman(5.2, 0.07, 3, 4) is None and "two blocks" in study_friedman(1.0, 0.5, 1, 4)
    assert "three methods" in study_friedman(None, None, 4, 2)
    assert study_mitigation(0.1, None, None, 1, True) == "undefined: one seed"
    assert study_mitigation(0.1, 0.05, 0.15, 3, True) == "better"
    assert study_mitigation(0.1, -0.05, 0.15, 3, True) == "n.s."
