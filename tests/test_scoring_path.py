"""One scoring path: the metric engine's entry points are called only by the tasks' scorers (and the metrics and
analysis layers); runs, `evaluate`, `submit` and `verify` reach them through `Task.score`, whose modules import no
torch."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fairmedbench.errors import InputError
from fairmedbench.spec import ScoreSettings
from fairmedbench.tasks.base import TASKS, PredictionTable, get_task

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fairmedbench"
ALLOWED = ("tasks", "metrics", "analysis")


def engine_entry_points() -> set[str]:
    """The metric engine's `evaluate_*` functions, read from metrics/ itself."""
    names = set()
    for path in (PACKAGE / "metrics").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("evaluate_")}
    return names


def test_the_metric_engine_is_called_only_below_the_tasks() -> None:
    engine = engine_entry_points()
    assert {"evaluate_classification", "evaluate_segmentation", "evaluate_multiclass"} <= engine
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] in ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            used = (node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
                    else None)
            imported = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
            for name in [used, *imported]:
                if name in engine:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert offenders == []


def test_every_scorer_loads_without_torch() -> None:
    code = ("import json, sys\nfrom fairmedbench.tasks.base import TASKS, _load\n"
            "refs = [TASKS.get(n).scorer for n in TASKS.names()]\n[_load(r) for r in refs]\n"
            "print(json.dumps([refs, 'torch' in sys.modules]))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    refs, torch_loaded = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(refs) == len(TASKS.names()) and not torch_loaded


def _binary_table(n: int = 200) -> PredictionTable:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, n)
    sex = np.where(rng.random(n) < 0.5, "F", "M")
    return PredictionTable({"label:t": y, "score:t": np.clip(0.3 * y + rng.random(n) * 0.7, 0, 1), "attr:sex": sex,
                            "patient_id": np.arange(n) // 2}, ("t",), ("sex",))


def test_settings_reach_the_engine() -> None:
    """The resampling unit, the group order and the seed in ScoreSettings decide what the engine computes."""
    task, table = get_task("classification"), _binary_table()
    patients = task.score(table, ScoreSettings(n_boot=50, n_perm=0))
    rows = task.score(table, ScoreSettings(n_boot=50, n_perm=0, resampling_unit="row"))
    assert patients.reports[0].to_dict()["resampling"]["unit"] == "patient"
    assert rows.reports[0].to_dict()["resampling"]["unit"] == "row"
    ordered = task.score(table, ScoreSettings(n_boot=0, n_perm=0, groups={"sex": ("M", "F")}))
    assert ordered.reports[0].groups == ["M", "F"]
    with pytest.raises(InputError, match=r"group\(s\) \['M'\] outside the groups given"):
        task.score(table, ScoreSettings(n_boot=0, n_perm=0, groups={"sex": ("F",)}))
    with pytest.raises(InputError, match="resampling unit 'visit'"):
        ScoreSettings(resampling_unit="visit")


@pytest.mark.parametrize("name, decision", [("segmentation", "predicted mask"), ("multiclass", "argmax")])
def test_a_task_that_is_not_thresholded_refuses_a_threshold_policy(name: str, decision: str) -> None:
    with pytest.raises(InputError, match=f"{name} task decides by .*{decision}.*drop --threshold"):
        get_task(name).score(_binary_table(), ScoreSettings(threshold="fixed:0.5"))
