"""`inspect --features` on columns named as PCA modes: analysed as already projected (no refit) unless --refit-pca,
a mix of modes and other columns refused, and the choice printed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairmedbench.benchmark.inspect import InspectOptions, _feature_columns
from fairmedbench.cli import main
from fairmedbench.errors import InputError


def _modes(n: int = 120, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(rng.normal(size=(n, 3)) * [5.0, 2.0, 1.0], columns=[f"PCA Mode {j}" for j in (1, 2, 3)])
    df["emb_0"] = rng.normal(size=n)
    df["label"], df["sex"] = rng.integers(0, 2, n), rng.choice(["F", "M"], n)
    return df


MODES = ["PCA Mode 1", "PCA Mode 2", "PCA Mode 3"]


def test_named_modes_are_projected_unless_refit_is_asked() -> None:
    df, notes = _modes(), []
    x, names, projected = _feature_columns(df, InspectOptions(features=MODES), "f", notes)
    assert projected and names == MODES and "already-projected modes (named as PCA modes" in notes[-1]
    np.testing.assert_array_equal(x, df[MODES].to_numpy())
    _, _, projected = _feature_columns(df, InspectOptions(feature_prefix="PCA Mode"), "f", notes)
    assert projected
    _, _, projected = _feature_columns(df, InspectOptions(features=MODES, refit_pca=True), "f", notes)
    assert not projected and "PCA fitted on the 3 given column(s) (--refit-pca)" in notes[-1]
    _, _, projected = _feature_columns(df, InspectOptions(refit_pca=True), "f", notes)  # automatic detection
    assert not projected and "refitted" in notes[-1]


def test_a_mix_and_contradicting_flags_are_refused() -> None:
    with pytest.raises(InputError, match="mix PCA modes"):
        _feature_columns(_modes(), InspectOptions(features=[*MODES, "emb_0"]), "f", [])
    with pytest.raises(InputError, match="contradict"):
        _feature_columns(_modes(), InspectOptions(features=MODES, projected=True, refit_pca=True), "f", [])


def test_cli_prints_which_it_did_and_keeps_the_given_modes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    src = tmp_path / "modes.csv"
    _modes().to_csv(src, index=False)
    rc = main(["inspect", "--embeddings", str(src), "--features", ",".join(MODES), "--attribute", "sex",
               "--n-boot", "20", "--modes", "2", "--no-tsne", "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert rc == 0 and "analysed as already-projected modes" in " ".join(out.split())
    doc = json.loads((tmp_path / "o" / "inspect.json").read_text())
    assert doc["modes"]["explained_variance_ratio"] is None and doc["modes"]["names"] == MODES[:2]
