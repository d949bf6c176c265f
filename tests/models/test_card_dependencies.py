"""Every third-party module a shipped model card's loader imports (directly, or through the fairmedbench modules it
imports, at any depth and inside functions) belongs to a distribution declared in setup.cfg install_requires, so
the README's install runs every card (SegVol's `monai` used to be in the test extra only)."""

from __future__ import annotations

import ast
import configparser
import functools
import importlib.metadata as md
import re
import sys
from pathlib import Path

import pytest

from fairmedbench.registry.models import MODELS

ROOT = Path(__file__).resolve().parents[2]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(section: str, key: str) -> set[str]:
    """Normalised distribution names of a setup.cfg requirement list (version pins and extras dropped)."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    lines = [ln.split("#")[0].strip() for ln in cfg[section][key].splitlines()]
    return {_norm(re.split(r"[\[<>=!~; ]", ln, maxsplit=1)[0]) for ln in lines if ln}


@functools.cache
def install_requires() -> set[str]:
    """Normalised distribution names of setup.cfg's install_requires."""
    return _requirements("options", "install_requires")


def _source(module: str) -> Path | None:
    """The file of a fairmedbench module or package, None for a name that is not one (e.g. a class)."""
    base = ROOT.joinpath(*module.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


@functools.cache
def _imports(module: str) -> frozenset[str]:
    """Absolute module names `module`'s source imports anywhere (relative imports do not occur here)."""
    src = _source(module)
    assert src is not None, module
    tree = ast.parse(src.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            if node.module.startswith("fairmedbench"):  # `from fairmedbench.x import y` may name a module y
                out |= {f"{node.module}.{a.name}" for a in node.names if _source(f"{node.module}.{a.name}")}
    return frozenset(out)


def third_party_imports(module: str) -> set[str]:
    """Top-level names of the non-stdlib, non-fairmedbench modules reachable from `module`."""
    seen, todo, found = set(), [module], set()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        for name in _imports(m):
            top = name.split(".")[0]
            if top == "fairmedbench":
                if _source(name) is not None:
                    todo.append(name)
            elif top not in sys.stdlib_module_names and top != "__future__":
                found.add(top)
    return found


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return md.packages_distributions()


@pytest.mark.parametrize("card", sorted(MODELS.names()))
def test_loader_imports_are_declared_in_install_requires(card: str) -> None:
    module = MODELS.get(card).loader.split(":")[0]
    declared = install_requires()
    dists = _distributions()
    missing = {}
    for top in sorted(third_party_imports(module)):
        names = {_norm(d) for d in dists.get(top, [])}
        if not names & declared:
            missing[top] = sorted(names) or ["(no installed distribution provides it)"]
    assert not missing, (f"card {card!r} ({module}) imports modules "
                        f"whose distribution is not in install_requires: {missing}")


def test_segvol_needs_monai_and_it_is_declared() -> None:
    assert "monai" in third_party_imports(MODELS.get("segvol").loader.split(":")[0])
    assert "monai" in install_requires()


def test_the_onnx_runtime_encoder_path_needs_no_extra() -> None:
    """The README's install runs every frozen encoder's fastest CPU path: ONNX Runtime and its exporter are
    dependencies, not an extra."""
    assert {"onnxruntime", "onnx", "onnxscript"} <= install_requires()
