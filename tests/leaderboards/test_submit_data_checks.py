"""Bundles are held to the patient and sample-id rules of analysis.data_checks (checked when `submit` recomputes
each result through Task.score): a bundle giving every test row one patient, or the sex as the patient, is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from bundle_factory import model_card, pinned_suite, write_bundle

from fairmedbench.benchmark.leaderboard import submit_bundle

BOARD = "test-pinned"
CLS = "results/synth-control__linear_probe__sex+age"


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_bundle(tmp_path_factory.mktemp("good") / "bundle", pinned_suite(), model_card("good-model"))


@pytest.mark.parametrize(("patients", "expect"), [
    (lambda f: "p0", "rows names the same patient"),
    (lambda f: f["attr:sex"], "coincide with attribute 'sex'"),
])
def test_a_bundle_with_a_degenerate_patient_column_is_refused(good: Path, tmp_path: Path, patients,
                                                               expect: str) -> None:
    bundle = Path(shutil.copytree(good, tmp_path / "bundle"))
    for path in (bundle / CLS).glob("seed*.predictions.parquet"):
        frame = pd.read_parquet(path)
        frame.assign(patient_id=patients(frame)).to_parquet(path, index=False)
    out = submit_bundle(bundle, BOARD, tmp_path / "lb")
    assert not out.accepted and not (tmp_path / "lb" / BOARD).exists()
    assert any("recomputation failed" in r and expect in r for r in out.reasons), out.reasons

