"""A fast start: `benchmark --help`, `list` and `evaluate` import only the libraries they use (scipy.optimize came in
through the calibration module at import: most of a cold start). Each check runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "scipy", "scipy.optimize", "scipy.stats", "sklearn", "pandas", "pyarrow", "rich", "matplotlib",
         "ray", "PIL")
_LOADED = ("import contextlib, io, json, sys\n"
           "from fairmedbench.cli import main\n"
           "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
           "    try:\n        code = main(sys.argv[1:])\n    except SystemExit as exc:\n        code = exc.code\n"
           f"print(json.dumps([code, [m for m in {HEAVY!r} if m in sys.modules]]))")


def _loaded(*args: str) -> tuple[int, list[str]]:
    """(exit code, the HEAVY modules loaded) of `benchmark ARGS` in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", _LOADED, *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    code, loaded = json.loads(proc.stdout.splitlines()[-1])
    return code, loaded


def test_importing_the_cli_loads_no_heavy_library() -> None:
    proc = subprocess.run([sys.executable, "-c", f"import sys, fairmedbench.cli; "
                           f"print([m for m in {HEAVY!r} if m in sys.modules])"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_help_and_list_load_only_the_terminal_renderer() -> None:
    assert _loaded("--help") == (0, [])
    assert _loaded("list", "models") == (0, ["rich"])  # the table it prints


def test_evaluate_loads_what_its_metrics_use_and_no_torch_pandas_or_sklearn(tmp_path: Path) -> None:
    """A 100-row file: scipy's PAV kernel (loaded without the scipy.optimize package, whose import was most of the
    start-up), pyarrow (read and write) and rich (the terminal) are what evaluate computes and prints with; the BY
    correction no longer loads scipy.stats; nothing else heavy."""
    rows = ["y,p,sex"] + [f"{i % 2},{(i * 37 % 100) / 100:.2f},{'FM'[i % 3 == 0]}" for i in range(100)]
    (tmp_path / "p.csv").write_text("\n".join(rows) + "\n")
    code, loaded = _loaded("evaluate", "--predictions", str(tmp_path / "p.csv"), "--label", "y", "--score", "p",
                           "--attribute", "sex", "--n-boot", "200", "--out", str(tmp_path / "r.json"))
    assert code == 0 and (tmp_path / "r.json").is_file()
    assert loaded == ["scipy", "pyarrow", "rich"]
