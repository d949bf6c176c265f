"""Real data: `benchmark inspect --discover` on 3,000 CheXpert test rows (biomedia-mira/cxr-foundation-bias):
the CheXpert DenseNet's own Pleural Effusion logits over its published PCA modes, and CXR Foundation's modes with
a logistic probe fitted on the discovery half standing in for a model (that file has no scores)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from fairmedbench.analysis.encoding import make_target
from fairmedbench.analysis.slices import discover_slices
from fairmedbench.cli import main

ARGS = ("--attribute", "race,sex,age_bin,AP/PA", "--discover", "--discover-positive", "Pleural Effusion",
        "--no-tsne", "--n-boot", "50", "--n-perm", "500")


def _discover(real_data: Path, name: str, tmp_path: Path, *extra: str) -> dict:
    path = real_data / "chexpert-cxr-foundation-embeddings" / name
    if not path.is_file():
        pytest.skip(f"{path} not present")
    assert main(["inspect", "--embeddings", str(path), *ARGS, *extra, "--out", str(tmp_path)]) == 0
    assert (tmp_path / "discover.html").is_file()
    return json.loads((tmp_path / "inspect.json").read_text())["discovery"]


def test_discovery_alone_on_chexpert_model_logits(real_data: Path) -> None:
    """The cheap sibling of the two command runs below: discovery only, on the same rows and settings."""
    path = real_data / "chexpert-cxr-foundation-embeddings" / "chexpert-model.embeddings.csv"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    df = pd.read_csv(path)
    x = df[[f"PCA Mode {i}" for i in range(1, 5)]].to_numpy()
    y = (df["disease"] == "Pleural Effusion").to_numpy().astype(int)
    r = discover_slices(x, y, df["Logit - Pleural Effusion"].to_numpy(), patients=df["patient_id"].to_numpy(),
                        attributes=[make_target("AP/PA", df["AP/PA"])], n_perm=500)
    sig = [s for s in r.slices if s.significant]
    assert sig and all(s.gap > 0.05 for s in sig)
    assert any(e.group == "AP" and e.p_adjusted < 0.05 and e.share_slice > e.share_rest
               for s in sig for e in s.enrichment)
    assert not set(df["patient_id"][r.holdout]) & set(df["patient_id"][~r.holdout])
    assert sum(s.n for s in r.slices) <= r.holdout.sum()


@pytest.mark.slow
def test_chexpert_model_logits_have_worse_slices_of_ap_films(real_data: Path, tmp_path: Path) -> None:
    d = _discover(real_data, "chexpert-model.embeddings.csv", tmp_path, "--score", "Logit - Pleural Effusion")
    assert d["settings"]["n_discovery"] + d["settings"]["n_holdout"] == 3000
    sig = [s for s in d["slices"] if s["significant"]]
    assert sig and all(s["gap"] > 0.05 for s in sig)
    over = {(e["attribute"], e["group"]) for s in sig for e in s["enrichment"]
            if e["p_adjusted"] < 0.05 and e["share_slice"] > e["share_rest"]}
    assert ("AP/PA", "AP") in over


@pytest.mark.slow
def test_cxr_foundation_probe_runs_and_says_what_scored(real_data: Path, tmp_path: Path) -> None:
    d = _discover(real_data, "cxr-foundation.embeddings.csv", tmp_path)
    assert d["score"] == "logistic probe (discovery half)"
    assert any("logistic probe" in n for n in d["notes"])
    assert all(s["n"] > 0 for s in d["slices"])
