"""Plugin modules (FMB_PLUGINS, or the `fairmedbench.plugins` entry points) register models, datasets, usages
and mitigations from outside the package; they are imported once, lazily, before the first lookup."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PLUGIN = """
print("plugin imported")
from fairmedbench.mitigation.base import Mitigation, register_mitigation


@register_mitigation
class PluginErm(Mitigation):
    name = "plugin-erm"
"""


def _python(code: str, folder: Path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("FMB_PLUGINS", "PYTHONPATH")}
    base.update(PYTHONPATH=f"{ROOT}{os.pathsep}{folder}", **env)
    return subprocess.run([sys.executable, "-c", code], cwd=folder, env=base, capture_output=True, text=True,
                          timeout=120)


def test_env_plugin_is_loaded_once_and_only_when_a_registry_is_consulted(tmp_path: Path) -> None:
    (tmp_path / "my_plugin.py").write_text(PLUGIN)
    code = ("import fairmedbench.metrics, fairmedbench.mitigation as m\n"
            "print('before lookup')\n"
            "print('plugin-erm' in m.MITIGATIONS, m.MITIGATIONS.names().count('plugin-erm'))\n"
            "print(m.make_mitigation('plugin-erm').describe()['tasks'])")
    out = _python(code, tmp_path, FMB_PLUGINS=" my_plugin ,")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["before lookup", "plugin imported", "True 1",
                                       "['classification', 'segmentation', 'multiclass']"]


def test_entry_point_plugin_of_an_installed_package(tmp_path: Path) -> None:
    (tmp_path / "ep_plugin.py").write_text(PLUGIN)
    dist = tmp_path / "ep_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[fairmedbench.plugins]\nmine = ep_plugin\n")
    out = _python("from fairmedbench.mitigation import MITIGATIONS; print(MITIGATIONS.names())", tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "plugin imported" and "'plugin-erm'" in out.stdout


def test_a_missing_plugin_is_one_line_and_its_names_stay_unknown(tmp_path: Path) -> None:
    code = "from fairmedbench.cli import main; raise SystemExit(main(['describe', 'model', 'toy-x']))"
    out = _python(code, tmp_path, FMB_PLUGINS="no_such_plugin_module")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert lines[0].startswith("fairmedbench: warning: plugin module 'no_such_plugin_module' (from FMB_PLUGINS) "
                               "cannot be imported (No module named 'no_such_plugin_module')")
    assert lines[1].startswith("benchmark: error: unknown model 'toy-x'") and len(lines) == 2


def test_a_plugin_name_clash_with_a_builtin_is_refused(tmp_path: Path) -> None:
    (tmp_path / "clash.py").write_text("from fairmedbench.mitigation.base import Mitigation, register_mitigation\n"
                                       "import fairmedbench.mitigation\n"
                                       "register_mitigation(type('Mine', (Mitigation,), {'name': 'groupdro'}))\n")
    out = _python("from fairmedbench.mitigation import MITIGATIONS; MITIGATIONS.get('erm')", tmp_path,
                  FMB_PLUGINS="clash")
    assert out.returncode == 1 and "mitigation 'groupdro' is registered twice" in out.stderr


def test_the_key_is_the_item_s_own_name() -> None:
    """A usage or mitigation is registered under its class's `name`; an item filed under another key is refused
    (its results would record a name other than the one it was chosen by)."""
    from fairmedbench.adapters import USAGES, Usage
    from fairmedbench.mitigation import MITIGATIONS, Mitigation

    assert all(USAGES.get(n).name == n for n in USAGES.names())
    assert all(MITIGATIONS.get(n).name == n for n in MITIGATIONS.names())
    with pytest.raises(ValueError, match="names itself 'erm'"):
        MITIGATIONS.add("not-erm", Mitigation)
    with pytest.raises(ValueError, match="has no `name`"):
        USAGES.add_named(Usage())
    assert "not-erm" not in MITIGATIONS and "" not in USAGES
