"""Real data: the CheXNet reproduction's 22,433 NIH ChestX-ray14 test predictions, by sex and age."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from fairmedbench.cli import main
from fairmedbench.engine import store


@pytest.fixture(scope="module")
def nih_predictions(real_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """preds.csv joined to the official metadata, labels from `Finding Labels`."""
    root = real_data / "nih-cxr14"
    preds = pd.read_csv(root / "preds.csv")
    meta = pd.read_csv(root / "Data_Entry_2017_v2020.csv.gz")
    findings = pd.read_csv(root / "aucs.csv")["label"].tolist()
    df = preds.merge(meta[["Image Index", "Finding Labels", "Patient Age", "Patient Gender", "Patient ID"]],
                     on="Image Index",
                     how="left", validate="one_to_one")
    assert df["Finding Labels"].notna().all()
    labels = df["Finding Labels"].str.split("|")
    for f in findings:
        df[f] = labels.apply(lambda items, f=f: int(f in items))
    path = tmp_path_factory.mktemp("nih") / "nih.csv"
    df.to_csv(path, index=False)
    return path, findings


def test_reproduces_published_aucs_and_reports_subgroups(nih_predictions, real_data: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    path, findings = nih_predictions
    out = tmp_path / "nih.json"
    rc = main(["evaluate", "--predictions", str(path), "--label", ",".join(findings),
               "--score", ",".join(f"prob_{f}" for f in findings), "--attribute", "Patient Gender,Patient Age",
               "--bins", "Patient Age=0,40,60,200", "--n-boot", "200", "--n-perm", "200", "--out", str(out),
               "--out-table", str(tmp_path / "tidy.csv")])
    capsys.readouterr()
    assert rc == 0
    tidy = pd.read_csv(tmp_path / "tidy.csv")
    published = pd.read_csv(real_data / "nih-cxr14" / "aucs.csv").set_index("label")["auc"]
    ours = tidy[(tidy.metric == "auc") & (tidy.group == "__overall__") & (tidy.attribute == "Patient Gender")]
    ours = ours.set_index("task")["value"]
    assert len(ours) == 14
    assert (ours - published.loc[ours.index]).abs().max() < 5e-5  # 4 decimals
    doc = store.read_json(out)
    for rep in doc["result"]["reports"]:
        # 'Patient ID' is found by name: whole patients are resampled (6,187 patients; a patient whose follow-ups
        # cross an age bin is one unit in each bin)
        assert rep["resampling"]["unit"] == "patient"
        if rep["attribute"] == "Patient Gender":
            assert rep["resampling"]["n_clusters"]["__overall__"] == 6187
        assert 0 < rep["tests"]["auc_gap"]["p_value"] <= 1
        expected = {"F", "M"} if rep["attribute"] == "Patient Gender" else {"<40", "40-60", ">=60"}
        assert set(rep["groups"]) == expected
        m = rep["metrics"]
        for g in expected:
            for name in ("auc", "sauroc", "balanced_brier", "ece"):
                cell = m[name][g]
                assert cell["ci_low"] <= cell["value"] <= cell["ci_high"], (rep["task"], g, name)
        for name in ("auc_gap", "auc_es", "eqodds_diff", "ece_gap"):
            cell = m[name]["__gap__"]
            assert cell["value"] is not None, (rep["task"], name)
            # an interval, or the reason there is none (e.g. a rare finding whose threshold is positive for no
            # one in any resample: eqodds_diff is 0 in every resample, not a certainty to print as [0, 0])
            assert cell["ci_low"] is not None or rep["ci_notes"][name]["__gap__"], (rep["task"], name)
    # Example reported numbers: Cardiomegaly by sex.
    cardio = tidy[(tidy.task == "Cardiomegaly") & (tidy.attribute == "Patient Gender")]
    assert set(cardio[cardio.metric == "auc"]["group"]) == {"__overall__", "F", "M"}
