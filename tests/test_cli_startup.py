"""A fast start: `benchmark --help`, `list` and `evaluate` import only the libraries they use (scipy.optimize came in
through the calibration module at import: most of a cold start), and only the given command's parser is built (its
module imported). Each import check runs in a fresh interpreter."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fairmedbench.cli import COMMANDS, build_parser, main

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "scipy", "scipy.optimize", "scipy.stats", "sklearn", "pandas", "pyarrow", "rich", "matplotlib",
         "ray", "PIL", "jsonschema", "yaml", "networkx", "fastapi", "sqlalchemy", "onnxruntime")
#: what the other commands use: `evaluate` on a binary prediction file must load none of it
OTHER_COMMANDS = ("fairmedbench.adapters", "fairmedbench.mitigation", "fairmedbench.registry.models",
                  "fairmedbench.registry.datasets", "fairmedbench.leaderboards", "fairmedbench.serve",
                  "fairmedbench.engine.features", "fairmedbench.benchmark.run", "fairmedbench.benchmark.compare",
                  "fairmedbench.benchmark.sweep", "fairmedbench.benchmark.suite", "fairmedbench.benchmark.inspect",
                  "fairmedbench.metrics.multiclass", "fairmedbench.metrics.seg_fairness")
_LOADED = ("import contextlib, io, json, sys\n"
           "from fairmedbench.cli import main\n"
           "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
           "    try:\n        code = main(sys.argv[1:])\n    except SystemExit as exc:\n        code = exc.code\n"
           f"print(json.dumps([code, [m for m in {HEAVY!r} if m in sys.modules], sorted(sys.modules)]))")


def _run(*args: str) -> tuple[int, list[str], list[str]]:
    """(exit code, the HEAVY modules loaded, every module loaded) of `benchmark ARGS` in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", _LOADED, *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    code, loaded, modules = json.loads(proc.stdout.splitlines()[-1])
    return code, loaded, modules


def _loaded(*args: str) -> tuple[int, list[str]]:
    """(exit code, the HEAVY modules loaded) of `benchmark ARGS` in a fresh interpreter."""
    code, loaded, _ = _run(*args)
    return code, loaded


def _package(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith("fairmedbench.")]


def test_importing_the_cli_loads_no_heavy_library() -> None:
    proc = subprocess.run([sys.executable, "-c", f"import sys, fairmedbench.cli; "
                           f"print([m for m in {HEAVY!r} if m in sys.modules])"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_help_and_a_mistyped_command_import_no_command_module() -> None:
    """The command list comes from cli.COMMANDS: no subcommand's module (nor spec.py, nor the metrics) loads."""
    for args, expected in ((["--help"], 0), (["evalute"], 2)):
        code, loaded, modules = _run(*args)
        assert (code, loaded) == (expected, [])
        assert _package(modules) == ["fairmedbench.cli", "fairmedbench.errors"]


def test_help_and_list_load_only_the_terminal_renderer() -> None:
    assert _loaded("--help") == (0, [])
    assert _loaded("list", "models") == (0, ["rich"])  # the table it prints


def test_evaluate_loads_what_its_metrics_use_and_no_torch_pandas_or_sklearn(tmp_path: Path) -> None:
    """A 100-row file: scipy's PAV kernel (loaded without the scipy.optimize package, whose import was most of the
    start-up), pyarrow (read and write) and rich (the terminal) are what evaluate computes and prints with; the BY
    correction no longer loads scipy.stats; nothing else heavy."""
    rows = ["y,p,sex"] + [f"{i % 2},{(i * 37 % 100) / 100:.2f},{'FM'[i % 3 == 0]}" for i in range(100)]
    (tmp_path / "p.csv").write_text("\n".join(rows) + "\n")
    code, loaded, modules = _run("evaluate", "--predictions", str(tmp_path / "p.csv"), "--label", "y", "--score",
                                 "p", "--attribute", "sex", "--n-boot", "200", "--out", str(tmp_path / "r.json"))
    assert code == 0 and (tmp_path / "r.json").is_file()
    assert loaded == ["scipy", "pyarrow", "rich"]
    assert [m for m in _package(modules) if m.startswith(OTHER_COMMANDS)] == []


def _output(argv: list[str]) -> tuple[object, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: object = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def test_each_lazily_built_parser_is_the_full_parsers_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """`benchmark --help`, a mistyped command and every `benchmark COMMAND --help` print what the parser with every
    command built prints, exit codes included: COMMANDS holds each command's help and order."""
    monkeypatch.setenv("COLUMNS", "120")
    full = build_parser()
    commands = full._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert list(commands) == list(COMMANDS)
    assert _output(["--help"]) == (0, full.format_help(), "")
    code, out, err = _output(["evalute"])
    assert (code, out) == (2, "") and err.endswith(f"invalid choice: 'evalute' (choose from "
                                                   f"{', '.join(map(repr, COMMANDS))})\n")
    for name, parser in commands.items():
        assert _output([name, "--help"]) == (0, parser.format_help(), ""), name
