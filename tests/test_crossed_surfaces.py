"""Crossed attributes (`sex*age`) beyond run and evaluate: `inspect` (what the features encode about each cell, and
`--discover` enrichment of a cell), `compare` (each cell per method, the crossed gap against ERM) and the evidence
pack (the cells with their counts and small-cell reasons). Expectations are built by hand from the tables."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairmedbench.cli import main


def _older_women_frame(n: int = 1200, seed: int = 0) -> pd.DataFrame:
    """Embeddings where only women aged 60+ (a quarter of the rows) are shifted along features 0-1 and scored at
    random; sex alone and age alone leave no trace except through that cell."""
    rng = np.random.default_rng(seed)
    sex = rng.choice(["F", "M"], n)
    age = rng.choice(["<60", ">=60"], n)
    label = rng.integers(0, 2, n)
    cell = (sex == "F") & (age == ">=60")
    x = rng.normal(size=(n, 8))
    x[:, :2] += 3.0 * cell[:, None]
    score = np.where(cell, rng.normal(size=n), 2.0 * label + rng.normal(size=n))
    df = pd.DataFrame(x, columns=[f"emb_{j}" for j in range(8)])
    df["label"], df["sex"], df["age_group"], df["score"] = label, sex, age, score
    return df


def test_inspect_probes_and_discovers_the_crossed_cell(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    src = tmp_path / "emb.csv"
    df = _older_women_frame()
    df.to_csv(src, index=False)
    rc = main(["inspect", "--embeddings", str(src), "--attribute", "sex,sex*age_group", "--n-boot", "0", "--no-tsne",
               "--modes", "2", "--discover", "--score", "score", "--n-perm", "200", "--out", str(tmp_path / "o"),
               "--json"])
    err = capsys.readouterr().err
    assert rc == 0, err
    doc = json.loads((tmp_path / "o" / "inspect.json").read_text())
    assert doc["attributes"]["sex*age_group"] == ["F|<60", "F|>=60", "M|<60", "M|>=60"]
    split = {r["group"]: r["value"] for r in doc["split_probe"] if r["target"] == "sex*age_group"}
    assert split["F|>=60"] > 0.95  # the cell the features encode, one against the rest
    assert max(split[g] for g in ("F|<60", "M|<60", "M|>=60")) < 0.75
    # --discover: the slice that holds the randomly scored cell is enriched for it
    slices = [s for s in doc["discovery"]["slices"] if s["significant"]]
    assert slices
    top = {(e["attribute"], e["group"]): e for e in slices[0]["enrichment"]}
    older_women = top[("sex*age_group", "F|>=60")]
    assert older_women["share_slice"] > 0.8 and older_women["p_adjusted"] < 0.05
    assert older_women["share_all"] == pytest.approx(np.mean((df["sex"] == "F") & (df["age_group"] == ">=60")),
                                                     abs=0.05)


def test_inspect_refuses_a_crossed_part_that_is_not_a_column(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    src = tmp_path / "emb.csv"
    _older_women_frame(60).to_csv(src, index=False)
    rc = main(["inspect", "--embeddings", str(src), "--attribute", "sex*bmi", "--n-boot", "0", "--no-tsne",
               "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "['bmi'] not in" in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_inspect_model_features_cross_the_cards_attributes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc = main(["inspect", "--model", "moco-cxr", "--weights", "random", "--dataset", "synth-crossed",
               "--dataset-option", "n=48", "--attribute", "sex*age", "--device", "cpu", "--cache-dir",
               str(tmp_path / "c"), "--n-boot", "0", "--no-tsne", "--baselines", "none", "--modes", "2",
               "--out", str(tmp_path / "o"), "--json"])
    err = capsys.readouterr().err
    assert rc == 0, err
    doc = json.loads((tmp_path / "o" / "inspect.json").read_text())
    assert doc["attributes"] == {"sex*age": ["female|<60", "female|>=60", "male|<60", "male|>=60"]}
    cells = {"female|<60", "female|>=60", "male|<60", "male|>=60"}
    assert {r["group"] for r in doc["split_probe"]} == {*cells, "__macro__"}  # one against the rest, and their mean


# ---------------------------------------------------------------------------------------------------------- compare

def test_compare_reports_each_crossed_cell_and_tests_the_crossed_gap(tmp_path: Path) -> None:
    from rich.console import Console
    from scipy.stats import t

    from fairmedbench.benchmark.compare import compare, save_compare
    from fairmedbench.benchmark.run import RunOptions
    from fairmedbench.report.terminal import render_compare

    opts = RunOptions(out_root=str(tmp_path / "r"), cache_dir=str(tmp_path / "c"), device="cpu")
    out = compare("moco-cxr", ["synth-crossed"], "sex*age", "lp", ["resampling"], (0, 1), opts,
                  weights="random", n_boot=20, dataset_options={"n": 80}, hparams={"epochs": 5})
    cells = ["female|<60", "female|>=60", "male|<60", "male|>=60"]
    for row in out.table:
        assert list(row["cells"]) == cells
        runs = out.runs[("synth-crossed", row["method"])].seeds
        reports = [next(r for r in res.fairness().reports if r.attribute == "sex*age") for res in runs]
        assert sum(row["cells"][g]["n"] for g in cells) == runs[0].doc["inputs"]["dataset"]["n_test"]
        for g in cells:
            c = row["cells"][g]
            assert c["n"] == reports[0].counts[g]["n"] and c["n_pos"] + c["n_neg"] == c["n"]
            values = [rep.value("auc", g) for rep in reports]
            if all(np.isfinite(values)):
                assert c["mean"] == pytest.approx(np.mean(values))
                if values[0] != values[1]:  # the t interval over the two seeds
                    half = t.ppf(0.975, 1) * abs(values[0] - values[1]) / 2
                    assert c["ci_high"] == pytest.approx(min(1.0, np.mean(values) + half))
            else:
                assert c["mean"] is None
            # every cell of 24 test samples is below the minimum group size: a point estimate and the reason
            assert c["reason"] is not None and ("minimum group size" in c["reason"] or "positive" in c["reason"]
                                                or "negative" in c["reason"])
    # the crossed gap is tested against ERM, and the paired bootstrap resamples the cells
    assert {r["metric"] for r in out.versus_erm} >= {"auc_gap", "worst_group_auc"}
    assert out.test_bootstrap["synth-crossed"]["groups"] == cells
    doc, _, page = save_compare(out, "moco-cxr", ["synth-crossed"], str(tmp_path / "r"), report=True)
    console = Console(record=True, width=220)
    render_compare(doc, console)
    text = console.export_text()
    assert "AUC per crossed cell" in text and "female|>=60 (n=" in text and "minimum group size" in text
    assert page is not None and "per crossed cell" in page.read_text() and "female|&gt;=60 (n=" in page.read_text()


# ---------------------------------------------------------------------------------------------------- evidence pack

def test_the_evidence_pack_lists_each_crossed_cell_with_counts_and_reasons(tmp_path: Path) -> None:
    """12 rows in each (sex, age) cell, half positive, except women aged 60+: 5 rows, all positive."""
    rows = []
    for sex, age, labels in (("F", 30, [0, 1] * 6), ("F", 70, [1] * 5), ("M", 30, [0, 1] * 6),
                             ("M", 65, [0, 1] * 6)):
        rows += [{"label": y, "score": 0.3 + 0.4 * y + 0.01 * k, "sex": sex, "age": age} for k, y in enumerate(labels)]
    table = tmp_path / "p.csv"
    pd.DataFrame(rows).to_csv(table, index=False)
    pack = tmp_path / "pack"
    assert main(["evaluate", "--predictions", str(table), "--label", "label", "--score", "score", "--attribute",
                 "sex*age", "--bins", "age=0,60,200", "--min-group-size", "10", "--n-boot", "50", "--n-perm", "50",
                 "--evidence", str(pack)]) == 0
    summary = (pack / "summary.md").read_text()
    line = next(x for x in summary.splitlines() if "crosses" in x)
    from fairmedbench.benchmark.evidence import md

    cells = [f"{md(g)} n={n} ({p} positive, {q} negative)" for g, n, p, q in
             (("F|<60", 12, 6, 6), ("F|>=60", 5, 5, 0), ("M|<60", 12, 6, 6), ("M|>=60", 12, 6, 6))]
    assert f"crosses sex, age into 4 cells: {'; '.join(cells)}." in line
    assert f"a point estimate and no interval: {md('F|>=60')}." in line
    assert "no negative" in line.split(f"{md('F|>=60')}: ", 1)[1]  # the engine's reason, after the cell's name
