"""No import loop between the package's files, deferred (function-level) imports counted: the graph and its loops
come from benchmarks/import_cycles.py, checked first on a small package with a known loop."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _tool():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("import_cycles", REPO / "benchmarks/import_cycles.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_deferred_import_closes_a_loop_and_a_type_checking_one_does_not(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub/__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub/b.py").write_text("def f():\n    from ..c import x\n    return x\n")  # deferred, relative
    (pkg / "c.py").write_text("import pkg.a\nx = 1\n")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import e\n")
    (pkg / "e.py").write_text("from pkg.d import TYPE_CHECKING\n")
    tool = _tool()
    graph = tool.import_graph(pkg)
    assert sorted(graph.edges) == [("pkg.a", "pkg.sub.b"), ("pkg.c", "pkg.a"), ("pkg.e", "pkg.d"),
                                   ("pkg.sub.b", "pkg.c")]
    assert tool.import_cycles(pkg) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]


def test_the_package_has_no_import_loop() -> None:
    assert _tool().import_cycles() == []
