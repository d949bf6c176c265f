"""A run's numbers agree within numbers_support.KERNEL_TOLERANCE whatever CPU kernels compute them: ATen's
instruction set and oneMKL's code branch chosen as on another CPU kind (an Intel Xeon's oneMKL takes another
branch than an AMD EPYC's), in subprocesses, features extracted afresh; the result records the kernels."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from numbers_support import KERNEL_TOLERANCE, differences

REPO = Path(__file__).resolve().parents[2]
RUN_ARGS = ["run", "--model", "moco-cxr", "--weights", "random", "--dataset", "synth-control", "--usage", "lp",
            "--attribute", "sex", "--n-boot", "20", "--device", "cpu", "--precision", "fp32", "--batch-size", "8",
            "--mitigation", "groupdro"]
#: ATen's portable kernels with oneMKL's compatible branch, against ATen's AVX2 kernels with oneMKL's own choice
OTHER_KERNELS = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2"}


def _runs(tmp: Path, n: int, epochs: int) -> list[tuple[Path, np.ndarray]]:
    """RUN_ARGS under AVX2 and under OTHER_KERNELS, in two fresh processes at once (each is mostly single-threaded
    start-up), each with its own feature cache: per process the run folder and its features."""
    procs = []
    for name, kernels in (("avx2", AVX2), ("other", OTHER_KERNELS)):
        env = {k: v for k, v in os.environ.items()
               if k not in ("MKL_CBWR", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")}
        env.update(kernels, PYTHONPATH=str(REPO))
        out = tmp / name
        procs.append((out, subprocess.Popen(
            [sys.executable, "-m", "fairmedbench", *RUN_ARGS, "--dataset-option", f"n={n}", "--hparam",
             f"epochs={epochs}", "--out", str(out), "--cache-dir", str(out / "cache")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)))
    errors = [proc.communicate(timeout=300)[1] for _, proc in procs]  # both finish before either is judged
    runs = []
    for (out, proc), stderr in zip(procs, errors):
        assert proc.returncode == 0, stderr[-2000:]
        [folder] = (out / "runs").glob("*/*/*/*/")
        runs.append((folder, np.concatenate(
            [np.load(f).ravel() for f in sorted((out / "cache").glob("moco-cxr/*/features.npy"))])))
    return runs


def _agree(a: tuple[Path, np.ndarray], b: tuple[Path, np.ndarray]) -> float:
    """Assert two runs agree within the tolerance (identity, predictions, every number); their largest feature
    difference."""
    (one, f1), (two, f2) = a, b
    assert one.name == two.name  # kernels are not part of a run's identity
    p1, p2 = (pd.read_parquet(next(f.glob("*.parquet"))) for f in (one, two))
    assert list(p1.columns) == list(p2.columns) and len(p1) == len(p2)
    for c in p1.columns:
        if p1[c].dtype.kind == "f":
            np.testing.assert_allclose(p1[c], p2[c], rtol=0, atol=KERNEL_TOLERANCE)
        else:
            assert p1[c].tolist() == p2[c].tolist(), c
    docs = [json.loads((f / "seed0.json").read_text()) for f in (one, two)]
    assert differences(docs[0]["result"], docs[1]["result"]) == []
    return float(np.abs(f1.astype(np.float64) - f2).max())


def test_the_tolerance_compares_floats_within_it_and_anything_else_exactly() -> None:
    a = {"auc": 0.26360664494, "n": 40, "groups": ["F", "M"], "p": float("nan"), "ci": [0.1, 0.2]}
    assert differences(a, {**a, "auc": 0.26360664161}) == []  # the Intel report's 8th-decimal difference
    assert differences(a, {**a, "auc": 0.26360664494 + 2 * KERNEL_TOLERANCE}) == [
        f".auc: 0.26360664494 vs {0.26360664494 + 2 * KERNEL_TOLERANCE!r}"]
    assert differences(a, {**a, "n": 41}) == [".n: 40 vs 41"]
    assert differences(a, {**a, "groups": ["F"]}) == [".groups: 2 vs 1 items"]
    assert differences(a, {**a, "ci": [0.1, 0.3]}) == [".ci[1]: 0.2 vs 0.3"]
    assert differences(a, {k: v for k, v in a.items() if k != "p"}) == [": keys ['p']"]
    assert math.isclose(KERNEL_TOLERANCE, 1e-5)


def test_other_kernels_give_the_same_numbers_within_the_tolerance_small(tmp_path: Path) -> None:
    """40 images, 2 epochs: the kernels change the features (so every later stage sees other inputs) and the
    numbers still agree; each result names its kernels."""
    runs = _runs(tmp_path, 40, 2)
    assert 0 < _agree(*runs) < 1e-4
    computed = [json.loads((f / "seed0.json").read_text())["environment"]["compute"] for f, _ in runs]
    assert [c["cpu_capability"] for c in computed] == ["AVX2", "DEFAULT"]
    assert computed[1]["env"]["MKL_CBWR"] == "COMPATIBLE" and "MKL_CBWR" not in computed[0]["env"]


@pytest.mark.slow  # 2 x 12 s; the test above checks the same on 40 images
def test_other_kernels_give_the_same_numbers_within_the_tolerance(tmp_path: Path) -> None:
    runs = _runs(tmp_path, 120, 5)
    assert 0 < _agree(*runs) < 1e-4
