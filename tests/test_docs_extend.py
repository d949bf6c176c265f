"""The "add a model / dataset / usage / mitigation / task" guides, followed step by step in an empty folder.

Each guide's fenced blocks ARE the steps: a block with a `title="FILE"` is written to FILE; an untitled `bash`
block is run, in order, in one bash session (as a user types them; exports carry over). So a guide that
stops working, or whose code differs from what is tested, fails here. The package under test is this checkout
(first on PYTHONPATH); the runs are tiny (one seed, 80 or fewer 64-256 px images, random weights).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDES = ROOT / "docs" / "extend"
FENCE = re.compile(r'^```(\w+)(?: title="([^"]+)")?\n(.*?)^```', re.M | re.S)
STEP = "::fmb-guide-step {}::"


def guide_blocks(guide: str) -> list[tuple[str, str, str]]:
    """(language, title, body) of every fenced block of docs/extend/<guide>, in order."""
    return FENCE.findall((GUIDES / guide).read_text(encoding="utf-8"))


def clean_env() -> dict[str, str]:
    """This checkout first on PYTHONPATH, the venv's `benchmark` on PATH, offline, no inherited plugins."""
    env = {k: v for k, v in os.environ.items() if k not in ("FMB_PLUGINS", "PYTHONPATH")}
    env.update(PYTHONPATH=str(ROOT), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               HF_HUB_OFFLINE="1", NO_MKDOCS_2_WARNING="1")
    return env


def follow(guide: str, folder: Path) -> list[str]:
    """Do what the guide says in `folder`; return each bash step's stdout."""
    script = ["set -euo pipefail"]
    n_bash = 0
    for lang, title, body in guide_blocks(guide):
        if title:
            (folder / title).write_text(body, encoding="utf-8")
        elif lang == "bash":
            script += [f"echo '{STEP.format(n_bash)}'", body]
            n_bash += 1
    assert n_bash, f"{guide} has no bash step"
    proc = subprocess.run(["bash", "-c", "\n".join(script)], cwd=folder, env=clean_env(), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"{guide}: a step failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    parts = re.split(r"^::fmb-guide-step (\d+)::$", proc.stdout, flags=re.M)
    return [parts[i + 1] for i in range(1, len(parts), 2)]


def one_result(folder: Path, model: str, dataset: str, usage: str) -> tuple[dict, pd.DataFrame]:
    """The only run's seed-0 result document and its predictions."""
    runs = list((folder / "results" / "runs" / model / dataset / usage).iterdir())
    assert len(runs) == 1, runs
    doc = json.loads((runs[0] / "seed0.json").read_text())
    return doc, pd.read_parquet(runs[0] / doc["predictions"]["file"])


def check_auc_recomputes(doc: dict, pred: pd.DataFrame) -> None:
    """The reported overall and per-group test AUC equal sklearn's on the stored test predictions."""
    from sklearn.metrics import roc_auc_score

    test = pred[pred["split"] == "test"]
    assert len(test) == doc["inputs"]["dataset"]["n_test"] > 0
    report = next(r for r in doc["result"]["reports"] if r["attribute"] == "sex")
    auc = report["metrics"]["auc"]
    assert auc["__overall__"]["value"] == pytest.approx(roc_auc_score(test["label:label"], test["score:label"]))
    for group, rows in test.groupby("attr:sex"):
        if rows["label:label"].nunique() == 2:
            assert auc[group]["value"] == pytest.approx(roc_auc_score(rows["label:label"], rows["score:label"]))


def test_every_guide_step_is_a_file_or_a_command() -> None:
    for guide in ("add-model.md", "add-dataset.md", "add-usage.md", "add-mitigation.md", "add-task.md"):
        blocks = guide_blocks(guide)
        assert any(t.endswith(".py") for _, t, _ in blocks) and any(lang == "bash" and not t for lang, t, _ in blocks)
        assert all(t or lang == "bash" for lang, t, _ in blocks), f"{guide}: an untitled non-bash block is no step"


# slow: 6 s; test_add_a_mitigation_guide runs a guide's steps the same way and
# test_every_guide_step_is_a_file_or_a_command checks every guide's steps
@pytest.mark.slow
def test_add_a_model_guide(tmp_path: Path) -> None:
    listed, _ = follow("add-model.md", tmp_path)
    assert "toy-intensity" in listed
    summary = json.loads((tmp_path / "toy-run.json").read_text())
    assert summary["spec"]["model"] == "toy-intensity" and summary["spec"]["weights"] == "random:seed=0"
    doc, pred = one_result(tmp_path, "toy-intensity", "synth-contrast", "lp")
    assert doc["inputs"]["model"]["name"] == "toy-intensity"
    check_auc_recomputes(doc, pred)


# slow: 7 s; test_add_a_mitigation_guide runs a guide's steps the same way and
# test_every_guide_step_is_a_file_or_a_command checks every guide's steps
@pytest.mark.slow
def test_add_a_dataset_guide(tmp_path: Path) -> None:
    follow("add-dataset.md", tmp_path)
    data = json.loads((tmp_path / "toy-spots.json").read_text())["data"]
    # make_toy_release.py: image i of patient i // 2 (sex F for even patients), age 20 + 2i, finding = i odd
    assert (data["n_samples"], data["n_patients"]) == (40, 20)
    assert data["group_counts"]["sex"] == {"female": 20, "male": 20}
    assert data["group_counts"]["age"] == {"<60": 20, ">=60": 20}
    assert data["group_counts"]["age_bins"] == {"0-19": 0, "20-39": 10, "40-59": 10, "60-79": 10, "80+": 10}
    assert data["label_counts"] == {"0": 20, "1": 20}
    assert sum(data["split"]["sizes"].values()) == 40
    doc, pred = one_result(tmp_path, "c2l", "toy-spots", "lp")
    assert doc["inputs"]["dataset"]["name"] == "toy-spots"
    assert set(pred["sample_id"]) <= {f"img{i:03d}" for i in range(40)}
    check_auc_recomputes(doc, pred)


# slow: 7 s; test_add_a_mitigation_guide runs a guide's steps the same way and
# test_every_guide_step_is_a_file_or_a_command checks every guide's steps
@pytest.mark.slow
def test_add_a_usage_guide(tmp_path: Path) -> None:
    listed, _ = follow("add-usage.md", tmp_path)
    assert "lp-pca" in listed
    summary = json.loads((tmp_path / "pca-run.json").read_text())
    assert summary["spec"]["usage"] == "lp-pca" and summary["spec"]["usage_hparams"] == {"components": 4}
    doc, pred = one_result(tmp_path, "c2l", "synth-contrast", "lp-pca")
    assert doc["usage"]["name"] == "lp-pca" and doc["usage"]["components"] == 4
    check_auc_recomputes(doc, pred)


def test_add_a_mitigation_guide(tmp_path: Path) -> None:
    listed, _ = follow("add-mitigation.md", tmp_path)
    assert "group-power" in listed
    summary = json.loads((tmp_path / "power-run.json").read_text())
    assert summary["spec"]["mitigation"] == "group-power" and summary["spec"]["mitigation_hparams"] == {"power": 4.0}
    doc, pred = one_result(tmp_path, "c2l", "synth-underrep", "lp")
    check_auc_recomputes(doc, pred)
    # the guide's loss is the power mean it states: group means 2 and 4, p = 2 -> sqrt((4 + 16) / 2)
    check = ("import torch, toy_mitigation as t\n"
             "m = t.GroupPower(hparams={'power': 2})\n"
             "b = t.Batch(None, None, torch.tensor([0, 0, 1, 1]), None)\n"
             "print(float(m.loss(torch.tensor([1.0, 3.0, 2.0, 6.0]), b)))")
    env = {**clean_env(), "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    out = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) == pytest.approx(np.sqrt(10.0))


# slow: 8 s; test_add_a_mitigation_guide runs a guide's steps the same way and
# test_every_guide_step_is_a_file_or_a_command checks every guide's steps
@pytest.mark.slow
def test_add_a_task_guide(tmp_path: Path) -> None:
    listed, _ = follow("add-task.md", tmp_path)
    assert "lp-regression" in listed
    summary = json.loads((tmp_path / "regression-run.json").read_text())
    assert summary["spec"]["task"] == "regression" and summary["spec"]["usage"] == "lp-regression"
    doc, pred = one_result(tmp_path, "c2l", "synth-age", "lp-regression")
    assert doc["kind"] == "run-regression" and doc["training"]["alpha"] in doc["training"]["alphas"]
    assert doc["predictions"]["columns"]["labels"] == ["target:age"]
    assert len(pred) == doc["inputs"]["dataset"]["n_test"] > 0 and set(pred["split"]) == {"test"}
    # the reported MAE per group and overall is the mean |prediction - target| of the stored test rows
    report = next(r for r in doc["result"]["reports"] if r["attribute"] == "sex")
    err = (pred["prediction:age"] - pred["target:age"]).abs()
    mae = report["metrics"]["mae"]
    assert mae["__overall__"]["value"] == pytest.approx(err.mean())
    assert mae["__overall__"]["ci_low"] <= err.mean() <= mae["__overall__"]["ci_high"]
    by_group = err.groupby(pred["attr:sex"]).mean()
    for group, value in by_group.items():
        assert mae[group]["value"] == pytest.approx(value)
    assert report["metrics"]["mae_gap"]["__gap__"]["value"] == pytest.approx(by_group.max() - by_group.min())
    assert report["worst_group"]["mae"] == by_group.idxmax()
    assert report["resampling"]["unit"] == "patient"
    assert "mae" in summary["across_seeds"]["age/sex"]
