"""The task layer's layout: each task is one module holding its runner, registered in tasks/base.py, and the
tasks layer never imports the benchmark layer above it (nor does the registry pull in torch or a task module)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from fairmedbench.tasks.base import TASKS

ROOT = Path(__file__).resolve().parents[2]
TASK_DIR = ROOT / "fairmedbench" / "tasks"


def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-level imports included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_tasks_never_import_the_benchmark_layer() -> None:
    offenders = {p.name: sorted(m for m in _imported_modules(p)
                                if m.startswith(("fairmedbench.benchmark", "fairmedbench.cli")))
                 for p in sorted(TASK_DIR.glob("*.py"))}
    assert {k: v for k, v in offenders.items() if v} == {}
    assert "common.py" in offenders and "classification.py" in offenders  # the scan did read the package


def test_every_task_is_registered_in_base_with_its_module_runner() -> None:
    assert sorted(TASKS.names()) == ["classification", "multiclass", "segmentation"]
    for name in TASKS.names():
        task = TASKS.get(name)
        assert task.runner == f"fairmedbench.tasks.{name}:run"
        runner = task.run()
        assert (runner.__module__, runner.__name__) == (f"fairmedbench.tasks.{name}", "run")


def test_task_registry_imports_no_torch_and_no_task_module() -> None:
    code = ("import json, sys\n"
            "from fairmedbench.tasks.base import TASKS\n"
            "print(json.dumps([sorted(TASKS.names()), sorted(m for m in sys.modules if m == 'torch' or "
            "m.startswith(('fairmedbench.tasks.', 'fairmedbench.benchmark')))]))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    names, loaded = json.loads(res.stdout.strip().splitlines()[-1])
    assert names == ["classification", "multiclass", "segmentation"]
    assert loaded == ["fairmedbench.tasks.base", "fairmedbench.tasks.table"]  # the table: torch- and pandas-free


def test_every_dataset_card_and_usage_names_registered_tasks() -> None:
    """Cards and usages name tasks the task registry holds (a card checks only that it names one: the registry
    sits above it, and a plugin's task registers alongside its card)."""
    from fairmedbench.adapters import USAGES
    from fairmedbench.registry.datasets import DATASETS

    named = {t for n in DATASETS.names() for t in DATASETS.get(n).tasks}
    named |= {t for n in USAGES.names() for t in USAGES.get(n).tasks}
    assert named == set(TASKS.names())
