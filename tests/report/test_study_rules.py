"""The study report's decision rules on hand-made rows: when a configuration counts as biased, which ERM run a
mitigation is paired with."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from fairmedbench.report.study import CONFIG, _Builder, _erm_match, _names, _Section


def _diff_row(model: str, seed_values: list[float], seed_p: list[float], small: str = "") -> dict:
    finite = [p for p in seed_p if math.isfinite(p)]
    return {"small_groups": small, "model": model, "dataset": "d", "usage": "lp", "attribute": "sex",
            "metric": "auc_diff", "scope": "between", "mean": sum(seed_values) / len(seed_values), "ci_low": -1.0,
            "ci_high": 1.0, "n_seeds": len(seed_values), "seed_values": seed_values, "seed_p_values": seed_p,
            "p_value": max(finite) if len(finite) == len(seed_p) and finite else math.nan}


def test_bias_needs_every_seed_to_reject_with_one_sign(tmp_path: Path) -> None:
    # the verdict reads each seed's permutation test (the largest p decides), never an interval
    rows = pd.DataFrame([
        _diff_row("a", [0.1, 0.12], [0.001, 0.004]),           # every seed rejects, one sign: biased
        _diff_row("b", [0.1, 0.12], [0.001, 0.2]),             # one seed does not reject: not
        _diff_row("c", [0.1, -0.12], [0.001, 0.002]),          # both reject, opposite signs: not
        _diff_row("d", [-0.2, -0.3], [0.003, 0.01]),           # every seed rejects below 0: biased
        _diff_row("e", [0.1, 0.1], [0.001, math.nan]),         # a seed without a test: not tested
        _diff_row("f", [0.2], [0.004]),                        # one seed: its test decides
        _diff_row("g", [0.1, 0.12], [0.001, 0.002], small="female"),  # a small group: the test still counts
    ])
    b = _Builder.__new__(_Builder)
    b.answers = []
    sec = _Section("gaps", "t")
    b._bias_answer(rows, _names("classification"), "classification", sec)
    assert b.answers[0].startswith("Bias exists in 4 of 6 tested FM × dataset configurations")
    assert b.answers[0].endswith("; 1 configuration(s) carry no permutation test.")
    table = sec.tables[0]
    bias = {r[0].text: r[6].text for r in table.rows}
    assert {k: v.split(" (")[0] for k, v in bias.items()} == {"a": "yes", "b": "no", "c": "no", "d": "yes",
                                                              "e": "not tested", "f": "yes", "g": "yes"}
    assert bias["b"].startswith("no (largest seed p = 0.2")


def test_erm_pairing_prefers_equal_hparams_else_the_only_erm_run() -> None:
    base = {c: None for c in CONFIG}
    base.update(task_kind="classification", model="m", dataset="d", usage="lp", task="y", attribute="sex")
    erm = pd.DataFrame([{**base, "hparams": json.dumps({"epochs": 5}), "run_id": "e1"}])
    row = pd.Series({**base, "hparams": json.dumps({"epochs": 5, "eta": 0.1}), "run_id": "g"})
    assert _erm_match(erm, row)["run_id"] == "e1"  # the mitigation's own hparams differ: the only ERM run
    two = pd.concat([erm, pd.DataFrame([{**base, "hparams": json.dumps({"epochs": 9}), "run_id": "e2"}])])
    assert _erm_match(two, row) is None  # ambiguous
    nine = row.copy()
    nine["hparams"] = json.dumps({"epochs": 9})
    assert _erm_match(two, nine)["run_id"] == "e2"  # equal hparams win
    other = row.copy()
    other["dataset"] = "other"
    assert _erm_match(erm, other) is None


def test_favoured_group_sign_test_across_fms(tmp_path: Path) -> None:
    rows = []
    for model, f, m in (("a", 0.70, 0.80), ("b", 0.60, 0.75), ("c", 0.72, 0.71), ("d", 0.65, 0.65)):
        for group, v in (("female", f), ("male", m)):
            rows.append({"task_index": 0, "train_group_share": None, "prevalence": None, "mitigation": "erm",
                         "task_kind": "classification", "metric": "auc", "scope": "group", "group": group,
                         "dataset": "d", "attribute": "sex", "usage": "lp", "model": model, "mean": v,
                         "ci_low": math.nan, "ci_high": math.nan})
    b = _Builder(pd.DataFrame(rows), tmp_path)
    sec = b.consistency()
    # a and b favour male, c female, d ties (left out): 2 of 3, two-sided binomial p = 1
    [row] = sec.tables[0].rows
    assert [c.text for c in row] == ["d", "sex", "lp", "male", "2", "3", "1"]
    assert {p.name for p in b.figures} == {"fig5-groups-d-sex-lp.png", "fig5-groups-d-sex-lp.svg"}
    assert b.answers == ["The favoured group is consistent across FMs (sign test p < 0.05) on 0 of 1 dataset × "
                         "attribute × usage combinations."]
