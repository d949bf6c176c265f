"""One verdict over every tested gap (issue 28.1, 28.7, 28.8): the answer reads every gap and signed difference in
the result's Benjamini-Yekutieli family, names the metrics larger than chance, gives a raw p outside the family no
verdict, says why group intervals and the test disagree, and is the same words on the terminal, the audit page
and summary.md."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fairmedbench.benchmark.evidence import md
from fairmedbench.cli import main
from fairmedbench.engine import store
from fairmedbench.report.html import answer_picture, signed_difference_table
from fairmedbench.report.verdicts import disparity, interval_test_notes, pair_answer, result_answer


def _cell(value: float, p: float | None, adj: float | None, lo: float = 0.0, hi: float = 0.0) -> dict[str, Any]:
    return {"value": value, "ci_low": lo, "ci_high": hi, "p_value": p, "p_adjusted": adj}


def _rep(task: str, attribute: str, **gaps: dict[str, Any]) -> dict[str, Any]:
    return {"task": task, "attribute": attribute, "groups": ["F", "M"],
            "metrics": {m: {"__gap__": c} for m, c in gaps.items()}}


def test_only_a_non_auc_gap_is_named_and_a_raw_p_gets_no_verdict() -> None:
    rep = _rep("y", "sex", auc_gap=_cell(0.02, 0.3, 0.6, 0.01, 0.05),
               fpr_at_tpr95_gap=_cell(0.31, 0.001, 0.01, 0.2, 0.4),
               ece_diff=_cell(0.05, 0.042, None, 0.01, 0.09))  # outside the adjusted family: raw p only
    pa = pair_answer(rep)
    assert pa.key == "disparity" and [m for m, _, _ in pa.hits] == ["fpr_at_tpr95_gap"]
    assert pa.sentence == ("y by sex: ΔFPR@95TPR 0.310 [0.200, 0.400] larger than chance (p_adj = 0.01); ΔAUC within "
                           "chance (p_adj = 0.6).")
    raw = disparity(rep, "ece_diff")
    assert raw.key == "raw-only" and raw.short == "no verdict (raw p = 0.042)"
    assert "larger than chance" not in raw.sentence and "no verdict" in raw.sentence
    # the raw p below 0.05 is not counted anywhere: one rule, one adjustment
    assert result_answer([rep]).headline == pa.sentence
    assert disparity(rep, "auc_gap").short == "within chance (p_adj = 0.6)"
    quiet = _rep("y", "age", auc_gap=_cell(0.02, 0.3, 0.6), ece_gap=_cell(0.01, 0.5, 0.9))
    assert pair_answer(quiet).sentence == ("y by age: every tested gap within chance (ΔAUC, ECE gap; p_adj ≥ 0.6).")


def test_many_pairs_open_with_one_sentence_and_a_picture() -> None:
    reps = [_rep("A", "sex", auc_gap=_cell(0.01, 0.5, 0.9), fpr_at_tpr95_gap=_cell(0.2, 0.001, 0.02)),
            _rep("A", "age", auc_gap=_cell(0.01, 0.5, 0.9), fpr_at_tpr95_gap=_cell(0.49, 0.001, 0.02),
                 ece_gap=_cell(0.03, 0.001, 0.03)),
            _rep("B", "sex", auc_gap=_cell(0.01, 0.5, 0.9), fpr_at_tpr95_gap=_cell(0.1, 0.2, 0.5)),
            _rep("B", "age", auc_gap=_cell(0.01, 0.5, 0.9), auc_diff=_cell(-0.04, 0.001, 0.04))]
    ans = result_answer(reps)
    # 9 tests in the family; pairs with a hit: A/sex, A/age, B/age
    assert ans.headline == (
        "3 of 4 tested task/attribute pairs show a gap larger than chance (Benjamini-Yekutieli over the 9 tests of "
        "this result, p_adj < 0.05): ΔFPR@95TPR in 2 pairs (largest A by age, 0.490); ECE gap in 1 pair (A by age, "
        "0.030); AUC difference M − F in 1 pair (B by age, -0.040); ΔAUC within chance in every tested pair.")
    assert len(ans.sentences) == 4 and ans.n_tests == 9
    pic = answer_picture(reps)
    assert pic.header == ["task", "sex", "age"]
    cells = {(r[0].text, a): c for r in pic.rows for a, c in zip(pic.header[1:], r[1:])}
    assert cells["A", "age"].text == "●\u00a0ΔFPR@95TPR 0.490 +1" and cells["A", "age"].css == "yes"
    assert cells["B", "age"].text == "●\u00a0AUC difference M − F -0.040"
    assert cells["B", "sex"].text == "within chance" and cells["B", "sex"].css == "muted"


def _groups(rep: dict[str, Any], metric: str, per: dict[str, tuple[float, float, float]]) -> dict[str, Any]:
    rep["groups"] = list(per)
    rep["metrics"][metric] = {g: {"value": v, "ci_low": lo, "ci_high": hi} for g, (v, lo, hi) in per.items()}
    return rep


def test_why_intervals_and_the_test_disagree() -> None:
    aucs = {"<40": (0.849, 0.830, 0.865), "40-60": (0.81, 0.79, 0.83), ">=60": (0.780, 0.763, 0.799)}
    multiplicity = _groups(_rep("Atelectasis", "age", auc_gap=_cell(0.069, 0.024, 0.564)), "auc", aucs)
    [why] = interval_test_notes([multiplicity], 126)
    assert why == ("Atelectasis by age: the AUC intervals of <40 0.849 [0.830, 0.865] and >=60 0.780 [0.763, 0.799] "
                   "do not overlap, yet ΔAUC is within chance because of multiplicity: its raw p = 0.024 becomes "
                   "p_adj = 0.564 after Benjamini-Yekutieli over the 126 tests of this result.")
    null = _groups(_rep("Atelectasis", "age", auc_gap=_cell(0.069, 0.08, 0.3)), "auc", aucs)
    null["resampling"] = {"unit": "patient"}
    [why] = interval_test_notes([null], 126)
    assert "(raw p = 0.08): the permutation test" in why and "whole patients" in why
    assert "max − min over all 3 groups" in why
    overlap = _groups(_rep("y", "sex", auc_gap=_cell(0.03, 0.001, 0.01)), "auc",
                      {"F": (0.80, 0.78, 0.82), "M": (0.83, 0.81, 0.85)})
    [why] = interval_test_notes([overlap])  # the family counted from the reports: 1 test
    assert why.startswith("y by sex: every two groups' AUC intervals overlap, yet ΔAUC is larger than chance "
                          "(p_adj = 0.01)")
    agree = _groups(_rep("y", "sex", auc_gap=_cell(0.03, 0.3, 0.6)), "auc",
                    {"F": (0.80, 0.78, 0.82), "M": (0.83, 0.81, 0.85)})
    assert interval_test_notes([agree]) == []


def test_signed_difference_table_uses_the_one_rule() -> None:
    rep = _rep("y", "sex", auc_diff=_cell(-0.04, 0.001, 0.04), ece_diff=_cell(0.05, 0.042, None))
    rows = {r[0].text: r[2].text for r in signed_difference_table(rep).rows}
    assert rows == {"auc_diff": "larger than chance (p_adj = 0.04)", "ece_diff": "no verdict (raw p = 0.042)"}


def _calibration_only(n: int = 300, seed: int = 0) -> pd.DataFrame:
    """M's rows are F's rows with every score squared: the same ranking (ΔAUC exactly 0), a different calibration
    and different rates at the global thresholds."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    p = 1 / (1 + np.exp(-(rng.normal(size=n) + 1.5 * (y - 0.5))))
    return pd.DataFrame({"y": np.r_[y, y], "p": np.r_[p, p ** 2], "sex": ["F"] * n + ["M"] * n})


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub("<[^>]+>", " ", fragment)).split())


def test_the_answer_is_the_same_words_on_every_surface(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "p.csv"
    _calibration_only().to_csv(csv, index=False)
    pack = tmp_path / "pack"
    assert main(["evaluate", "--predictions", str(csv), "--label", "y", "--score", "p", "--attribute", "sex",
                 "--n-boot", "50", "--evidence", str(pack)]) == 0
    terminal = " ".join(capsys.readouterr().out.split())
    doc = store.read_json(pack / "result.json")
    [rep] = doc["result"]["reports"]
    assert rep["metrics"]["auc_gap"]["__gap__"]["value"] == 0.0
    answer = result_answer(doc["result"]["reports"])
    hits = [m for m, _, _ in answer.pairs[0].hits]
    assert hits and "auc_gap" not in hits and "auc_diff" not in hits  # only non-AUC gaps are larger than chance
    assert "ΔAUC" in answer.headline and "ΔAUC 0.000" not in answer.headline  # named within chance, not as a hit
    assert answer.headline.startswith("y by sex: ") and "larger than chance (p_adj = " in answer.headline
    page = (pack / "audit.html").read_text()
    box = re.search(r'<div class="answer">(.*?)</div>', page, re.S)
    assert box and _text(box.group(1)) == answer.headline
    assert f"answer {answer.headline}" in terminal
    # the terminal's table of p-values marks the same tests (p_adj < 0.05) and no other
    n_star = len(re.findall(r"\(\S+\) \*", terminal))
    assert n_star == len(hits)
    summary = (pack / "summary.md").read_text()
    assert f"- {md(answer.headline)}\n" in summary  # the same words, escaped as markdown (evidence.md)


def test_values_are_signed_only_for_signed_differences_and_names_read_well() -> None:
    # EqOdds (eqodds_diff) is a gap by kind, never below 0: unsigned; auc_diff is signed
    rep = _rep("y", "sex", eqodds_diff=_cell(0.156, 0.001, 0.01), auc_diff=_cell(0.139, 0.001, 0.01),
               auc_gap=_cell(0.139, 0.001, 0.01))
    other = _rep("z", "sex", auc_gap=_cell(0.01, 0.5, 0.9))
    ans = result_answer([rep, other])
    assert "EqOdds in 1 pair (y by sex, 0.156)" in ans.headline
    assert "AUC difference M − F in 1 pair (y by sex, +0.139)" in ans.headline
    fpr = _groups(_rep("y", "age", fpr_at_tpr95_gap=_cell(0.3, 0.001, 0.01)), "fpr_at_tpr95",
                  {"a": (0.5, 0.4, 0.6), "b": (0.55, 0.45, 0.65)})
    [why] = interval_test_notes([fpr])
    assert why.startswith("y by age: every two groups' FPR@95TPR intervals overlap, yet ΔFPR@95TPR is larger")
    # two groups: the gap's sentence is said once, not again for the difference (the gap is |difference|)
    two = _groups(_rep("y", "sex", auc_gap=_cell(0.069, 0.024, 0.564), auc_diff=_cell(0.069, 0.024, 0.564)),
                  "auc", {"F": (0.849, 0.830, 0.865), "M": (0.780, 0.763, 0.799)})
    assert len(interval_test_notes([two], 126)) == 1


def test_a_difference_over_attributes_with_different_groups_is_named_without_them() -> None:
    sex = _rep("y", "sex", auc_diff=_cell(0.01, 0.5, 0.9))
    age = {**_rep("y", "age", auc_diff=_cell(0.01, 0.5, 0.9)), "groups": ["<60", ">=60"]}
    assert result_answer([sex, age]).headline.endswith("AUC difference within chance in every tested pair.")
    assert pair_answer(age).sentence == ("y by age: every tested gap within chance (AUC difference >=60 − <60; "
                                         "p_adj = 0.9).")
