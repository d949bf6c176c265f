"""`benchmark compare` on a multi-class dataset: mitigations train softmax heads, and the summaries, paired
differences and Welch tests use the multi-class task's own metrics (macro AUC family)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairmedbench.benchmark.compare import compare, save_compare
from fairmedbench.benchmark.run import RunOptions
from fairmedbench.tasks.base import get_task

DS = "synth-ordinal"
CLASSES = ["grade0", "grade1", "grade2", "grade3"]


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("mccompare")
    opts = RunOptions(out_root=str(tmp / "r"), cache_dir=str(tmp / "c"), device="cpu")
    out = compare("c2l", [DS], "sex", "lp", ["groupdro", "resampling"], (0, 1), opts, weights="random", n_boot=20,
                  dataset_options={"n": 60}, hparams={"epochs": 5})
    doc, path, page = save_compare(out, "c2l", [DS], str(tmp / "r"), report=True)
    return out, doc, path, page


def test_compare_uses_the_multiclass_metrics(compared) -> None:
    out, doc, path, page = compared
    task = get_task("multiclass")
    assert out.task == doc["task"] == "multiclass" and out.methods == ["erm", "groupdro", "resampling"]
    assert tuple(doc["metrics"]) == task.summary_metrics and "macro_auc" in doc["metrics"]
    assert {m for r in doc["table"] for m in r} >= {"macro_auc", "worst_group_macro_auc", "macro_auc_gap"}
    for row in doc["table"]:
        cell = row["macro_auc"]
        assert cell is not None and cell["ci_low"] <= cell["mean"] <= cell["ci_high"]
    pairs = {(v["method"], v["metric"]) for v in doc["versus_erm"]}
    assert pairs == {(m, k) for m in ("groupdro", "resampling")
                     for k in ("worst_group_macro_auc", "macro_auc_gap", "macro_auc")}
    assert not doc["notes"]
    # the paired test-set bootstrap of group macro AUCs starts from the engine's per-seed values
    boot = doc["test_bootstrap"][DS]
    assert boot["metric"] == "macro_auc" and boot["groups"] == ["female", "male"]
    assert boot["keys"] == ["worst_group_macro_auc", "macro_auc_diff", "worst_group_macro_auc_vs_erm",
                            "macro_auc_gap_vs_erm"]
    for m in out.methods:
        entry = boot["methods"][m]
        for key in ("worst_group_macro_auc", "macro_auc_diff"):
            assert entry[key]["value"] == pytest.approx(np.mean(out.values.get((DS, m, key)) or [
                r.value(key, "sex") for r in out.runs[(DS, m)].seeds]), abs=1e-9)
            assert entry[key]["ci_low"] <= entry[key]["value"] <= entry[key]["ci_high"]
    vs = boot["methods"]["groupdro"]["worst_group_macro_auc_vs_erm"]
    dro = next(v for v in doc["versus_erm"] if v["method"] == "groupdro" and v["metric"] == "worst_group_macro_auc")
    assert vs["value"] == pytest.approx(dro["mean_diff"], abs=1e-9)
    gap = next(v for v in doc["versus_erm"] if v["method"] == "groupdro" and v["metric"] == "macro_auc_gap")
    assert boot["methods"]["groupdro"]["macro_auc_gap_vs_erm"]["value"] == pytest.approx(gap["mean_diff"], abs=1e-9)
    json.loads(path.read_text())  # strict JSON on disk
    for (_ds, m), run in out.runs.items():
        sdoc = run.seed_docs[0]
        assert sdoc["kind"] == "run-multiclass" and sdoc["training"]["mitigation"]["name"] == m
        pred = pd.read_parquet(run.out_dir / sdoc["predictions"]["file"])
        probs = pred[[f"score:{c}" for c in CLASSES]].to_numpy()
        assert np.allclose(probs.sum(axis=1), 1.0) and set(pred["label"]) <= {0, 1, 2, 3}
    # the methods trained different heads on one harness (same split, same cached features)
    assert len({r.seed_docs[0]["inputs"]["dataset"]["split_fingerprint"] for r in out.runs.values()}) == 1
    dro = out.runs[(DS, "groupdro")].seed_docs[0]["training"]["mitigation"]
    assert dro["tasks"] == ["classification", "segmentation", "multiclass"]


def test_one_paired_difference_by_hand_from_the_per_seed_jsons(compared) -> None:
    out, doc, _, _ = compared
    metric = "worst_group_macro_auc"

    def per_seed(method: str) -> np.ndarray:
        run_dir = Path(doc["runs"][f"{DS}|{method}"])
        return np.array([json.loads((run_dir / f"seed{s}.json").read_text())["result"]["reports"][0]["metrics"]
                         [metric]["__gap__"]["value"] for s in (0, 1)])

    a, b = per_seed("resampling"), per_seed("erm")
    d = a - b
    mean = (d[0] + d[1]) / 2
    half = stats.t.ppf(0.975, 1) * abs(d[0] - d[1]) / math.sqrt(2) / math.sqrt(2)  # std of 2 values = |d0-d1|/√2
    row = next(v for v in doc["versus_erm"] if v["method"] == "resampling" and v["metric"] == metric)
    assert row["mean_diff"] == pytest.approx(mean, abs=1e-12)
    assert row["ci_low"] == pytest.approx(max(mean - half, -1.0))
    assert row["ci_high"] == pytest.approx(min(mean + half, 1.0))
    welch = stats.ttest_ind(a, b, equal_var=False)
    if np.isfinite(welch.pvalue):
        assert row["welch_p"] == pytest.approx(welch.pvalue)
    assert doc["per_seed"][f"{DS}|resampling|{metric}"] == pytest.approx(a.tolist())


def test_terminal_table_and_html_page(compared) -> None:
    from rich.console import Console

    from fairmedbench.report.terminal import render_compare

    _, doc, _, page = compared
    buf = io.StringIO()
    render_compare(doc, Console(file=buf, width=200))
    text = buf.getvalue()
    assert "worst_group_macro_auc" in text and "resampling" in text and "worst-group macro AUC - ERM" in text
    assert "answer synth-ordinal:" in text and "CI excludes 0" not in text  # one verdict per question
    html = page.read_text()
    assert "macro AUC" in html and "Δmacro AUC" in html and "per-seed differences from ERM" in html
    assert "<img" in html and "worst_group_macro_auc_vs_erm" in html  # the figure, the bootstrap table
