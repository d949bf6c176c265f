"""Real data: CXR Foundation embeddings of 3,000 CheXpert test rows (biomedia-mira/cxr-foundation-bias).

`benchmark inspect` on the published `PCA Mode 1..4` columns must reproduce the repository notebook's
Benjamini-Yekutieli adjusted p-values (KS tests of Pleural Effusion vs No Finding, Asian vs White, Black vs
Asian, White vs Black and Female vs Male on each mode, corrected over those 20 tests)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairmedbench.cli import main

# notebooks/chexpert.bias-inspection.cxr-foundation.ipynb, "Adjusted p-values" (printed to 6 decimals):
# rows = modes 1..4; columns = disease (PE vs NF), Asian-White, Asian-Black, Black-White, Female-Male.
PUBLISHED_BY = np.array([[0.000000, 0.962124, 0.000027, 0.000308, 0.000000],
                         [0.000000, 0.001297, 0.000000, 0.004345, 0.001297],
                         [0.000000, 0.000000, 0.000000, 1.000000, 0.000000],
                         [1.000000, 0.000000, 0.000000, 0.000178, 0.000000]])
COLUMNS = [("disease", "No Finding", "Pleural Effusion"), ("race", "Asian", "White"), ("race", "Asian", "Black"),
           ("race", "Black", "White"), ("sex", "Female", "Male")]


@pytest.fixture(scope="module")
def cxr_file(real_data: Path) -> Path:
    path = real_data / "chexpert-cxr-foundation-embeddings" / "cxr-foundation.embeddings.csv"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    return path


def test_reproduces_published_by_adjusted_ks_pvalues(cxr_file: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    rc = main(["inspect", "--embeddings", str(cxr_file), "--label-pair", "Pleural Effusion:No Finding",
               "--attribute", "race,sex", "--n-boot", "0", "--out", str(tmp_path / "o"),
               "--out-table", str(tmp_path / "t.csv")])
    capsys.readouterr()
    assert rc == 0
    ks = pd.read_csv(tmp_path / "t.csv").query("analysis == 'ks'")
    assert len(ks) == 20
    for i in range(4):
        for j, (var, a, b) in enumerate(COLUMNS):
            row = ks[(ks["mode"] == f"PCA Mode {i + 1}") & (ks.variable == var) & (ks.group == a) & (ks.group_b == b)]
            assert len(row) == 1, (i, var, a, b)
            assert row["p_adjusted"].iloc[0] == pytest.approx(PUBLISHED_BY[i, j], abs=5e-7), (i, var, a, b)
            assert bool(row["reject"].iloc[0]) == (PUBLISHED_BY[i, j] <= 0.05)


def test_default_command_runs_end_to_end(cxr_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc = main(["inspect", "--embeddings", str(cxr_file), "--n-boot", "200", "--out", str(tmp_path / "o"),
               "--out-table", str(tmp_path / "t.csv")])
    out = capsys.readouterr().out
    assert rc == 0
    doc = json.loads((tmp_path / "o" / "inspect.json").read_text())
    # defaults: label 'disease' (3 classes, every pair), attributes sex and race, the file's modes as given
    assert doc["label"] == {"name": "disease", "classes": ["No Finding", "Other", "Pleural Effusion"]}
    assert doc["attributes"] == {"sex": ["Female", "Male"], "race": ["Asian", "Black", "White"]}
    assert doc["modes"] == {"names": [f"PCA Mode {i}" for i in range(1, 5)], "projected_in_input": True,
                            "explained_variance_ratio": None}
    assert doc["ks"]["n_tests"] == 4 * (3 + 1 + 3) and doc["ks"]["correction"] == "by"
    table = pd.read_csv(tmp_path / "t.csv")
    ks = table[table.analysis == "ks"]
    assert ks["p_value"].notna().all() and (ks["p_adjusted"] >= ks["p_value"]).all()
    sex = table[(table.analysis == "split_auc") & (table.variable == "sex")].iloc[0]
    assert 0.55 < sex["value"] < 0.75 and sex["ci_low"] < sex["value"] < sex["ci_high"]  # 4 modes: weak but real
    names = {Path(f).name for f in doc["figures"]}
    assert {f"{p}-{v}.png" for p in ("pca-1+2", "pca-3+4", "tsne") for v in ("disease", "sex", "race")} <= names
    assert "KS tests per mode (28 tests" in out
