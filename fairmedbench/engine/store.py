"""Results store: versioned result JSON and per-sample Parquet, written atomically; torch-free.

A run result is a JSON document (`result_document`, schema in result_schema.json) plus a predictions
Parquet beside it, described by the document's `predictions` block (`predictions_block`):
  classification: columns `sample_id`, `split` (val | test), `seed`, `label:<task>`, `score:<task>`
                  (probabilities), `attr:<attribute>` (group names; null = missing);
  segmentation:   columns `sample_id`, `split` (test), `seed`, `dsc`, `iou`, `empty_gt`, `attr:<attribute>`.
                  A run's row with `empty_gt` true was not prompted: null dsc/iou, left out of the metrics.
Every metric in `result` can be recomputed from those rows with `fairmedbench.metrics` and the settings
in `result.meta` (profile, threshold policy, n_boot, seed, ci_level, min_group_size, operating points).
"""

from __future__ import annotations

import datetime as _dt
import errno
import functools
import hashlib
import json
import math
import os
import platform
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairmedbench import __version__

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

SCHEMA_VERSION = "1.0"
SCHEMA_PATH = Path(__file__).with_name("result_schema.json")


def umask() -> int:
    """The process's file-creation mask (read from /proc on Linux; elsewhere set and restored at once)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _atomic(path: Path, write: Callable[[str], object]) -> Path:
    """Write through a temporary file in the same folder, then rename over `path`; the file gets the mode a
    plain open() would give it (0666 less the umask; mkstemp alone makes it 0600)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def check_writable(folder: Path | str, what: str) -> None:
    """InputError (one line) unless a file can be created in `folder`, or in its nearest existing parent when it
    does not exist yet (read-only, not a folder, no permission, full): checked before a run creates anything."""
    from fairmedbench.errors import InputError

    folder = Path(folder)
    probe = next((p for p in (folder, *folder.absolute().parents) if p.exists()), Path("/"))
    try:
        if not probe.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(probe))
        fd, tmp = tempfile.mkstemp(prefix=".fmb-write-check-", dir=probe)
        try:
            os.write(fd, b"x")
        finally:
            os.close(fd)
            os.unlink(tmp)
    except OSError as exc:
        raise InputError(f"{what} {folder}: cannot write in {probe} ({exc.strerror or exc}); "
                         f"give {what} a folder you can write to, with free space") from None


def remove_partial_files(folder: Path | str) -> list[Path]:
    """Delete the temporary files (`.<name>.<8 random characters>.tmp`, as `_atomic` names them) that a process
    killed mid-write (kill -9) left in `folder`; other names are kept. Call it only while holding the folder's
    lock: a live writer's temporary file would go too."""
    gone = []
    for tmp in Path(folder).glob(".*.tmp"):
        if _PARTIAL.fullmatch(tmp.name) and tmp.is_file() and not tmp.is_symlink():
            tmp.unlink(missing_ok=True)
            gone.append(tmp)
    return gone


_PARTIAL = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")  # tempfile.mkstemp's random part: 8 of [a-z0-9_]


STAGING_PREFIX = ".tmp-"


def staging_dir(parent: Path | str, tag: str) -> Path:
    """A new, empty folder under `parent` to fill and then rename into place (mode 0777 less the umask).

    Its name records this process (`.tmp-<tag>-<random>-<pid>@<host>`) so that `remove_stale_staging` can
    delete what a killed process left behind.
    """
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{tag}-", suffix=f"-{os.getpid()}@{platform.node()}",
                                 dir=parent))
    os.chmod(path, 0o777 & ~umask())
    return path


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (a process of another user counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def remove_stale_staging(parent: Path | str) -> list[Path]:
    """Delete staging folders under `parent` whose process (on this host) is no longer running; the removed paths.

    Folders of live processes and of other hosts are kept. Folders named `.tmp-<key>-<pid>-<random>` (the
    feature cache's earlier naming) are read as this host's.
    """
    parent = Path(parent)
    if not parent.is_dir():
        return []
    removed = []
    for path in parent.glob(f"{STAGING_PREFIX}*"):
        owner = _staging_owner(path.name)
        if owner is None or owner[1] != platform.node() or pid_alive(owner[0]):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _staging_owner(name: str) -> tuple[int, str] | None:
    """(pid, host) from a staging folder's name, or None when it is not one."""
    rest, at, host = name.rpartition("@")
    if at:
        pid = rest.rpartition("-")[2]
        return (int(pid), host) if pid.isdigit() else None
    parts = name.split("-")  # earlier naming: .tmp-<key12>-<pid>-<hex8>
    if len(parts) == 4 and parts[2].isdigit():
        return int(parts[2]), platform.node()
    return None


def jsonable(obj: Any) -> Any:
    """A copy with tuples as lists and non-finite floats as None, ready for strict JSON."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", 1) == 0:
        return jsonable(obj.item())
    return obj


def write_text(path: Path | str, text: str) -> Path:
    """Atomically write a UTF-8 text file."""
    return _atomic(Path(path), lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_json(path: Path | str, obj: Any) -> Path:
    """Atomically write strict JSON (NaN is refused: undefined values must already be null)."""
    text = json.dumps(obj, indent=2, allow_nan=False, sort_keys=False) + "\n"
    return _atomic(Path(path), lambda tmp: Path(tmp).write_text(text))


def write_parquet(path: Path | str, frame: pd.DataFrame) -> Path:
    """Atomically write a pandas DataFrame as Parquet."""
    return _atomic(Path(path), lambda tmp: frame.to_parquet(tmp, index=False))


def write_columns(path: Path | str, columns: dict[str, np.ndarray]) -> Path:
    """Atomically write named numpy columns as Parquet without importing pandas (engine.columns)."""
    from fairmedbench.engine.columns import write_parquet_columns

    return _atomic(Path(path), lambda tmp: write_parquet_columns(tmp, columns))


# OWASP "CSV Injection": a spreadsheet runs a cell that starts with one of these as a formula (a tab or carriage
# return can hide one); such a text cell is written with a leading single quote, which the spreadsheet shows as text.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def csv_safe_cell(value: Any) -> Any:
    """`value` with a single quote in front when it is text that a spreadsheet would run as a formula (starts with
    = + - @, a tab or a carriage return); numbers, and text that reads as a number such as '-0.12', unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_START) and not _is_number(value):
        return "'" + value
    return value


def csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of a DataFrame whose text cells and column names are neutralised by `csv_safe_cell` (numeric
    columns untouched). Every CSV/TSV this package writes goes through it (`write_table`); Parquet keeps the
    text as it is."""
    out: pd.DataFrame = frame.copy()
    for col in out.columns:
        if out[col].dtype.kind == "O":  # object, str and category columns (numbers are never quoted)
            out[col] = [csv_safe_cell(v) for v in out[col].astype(object)]
    out.columns = [csv_safe_cell(c) for c in out.columns]
    return out


def csv_note(path: Path | str, frame: pd.DataFrame) -> str | None:
    """A line telling the user that `write_table` quoted some of `frame`'s text cells in the CSV/TSV at `path`;
    None when it quoted none (or `path` is Parquet)."""
    if Path(path).suffix == ".parquet":
        return None
    n = sum(csv_safe_cell(v) is not v for col in frame.columns if frame[col].dtype.kind == "O" for v in frame[col])
    n += sum(csv_safe_cell(c) is not c for c in frame.columns)
    return (f"{path}: {n} text cell(s) start with = + - @, a tab or a carriage return and are written with a leading "
            "' so that a spreadsheet shows them as text instead of running them as a formula") if n else None


def write_table(path: Path | str, frame: pd.DataFrame) -> Path:
    """Atomically write a DataFrame as Parquet (name ends in .parquet), TSV (.tsv) or CSV (anything else); text
    cells of a CSV/TSV that a spreadsheet would run as a formula get a leading single quote (`csv_safe`)."""
    path = Path(path)
    if path.suffix == ".parquet":
        return write_parquet(path, frame)
    sep = "\t" if path.suffix == ".tsv" else ","
    return _atomic(path, lambda tmp: csv_safe(frame).to_csv(tmp, index=False, sep=sep))


def sha256_file(path: Path | str, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def run_id(spec: dict[str, Any]) -> str:
    """Short stable id of a run or evaluation: sha256 of its canonical JSON spec."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the fairmedbench source checkout, when it is one and git is available."""
    src = Path(__file__).resolve().parents[2]
    if not (src / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    """Versions and machine facts for provenance, looked up once per process (a batch evaluates many files)."""
    return dict(_env_facts())


@functools.lru_cache(maxsize=1)
def _env_facts() -> dict[str, Any]:
    """Versions and machine facts for provenance (reads package metadata; imports no heavy library)."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "numpy": _version("numpy"),
        "scipy": _version("scipy"),
        "pandas": _version("pandas"),
        "torch": _version("torch"),
    }


def result_document(kind: str, spec: dict[str, Any], result: dict[str, Any], inputs: dict[str, Any],
                    timings: dict[str, float]) -> dict[str, Any]:
    """The versioned result JSON: schema, spec, provenance, inputs with hashes, metrics with CIs."""
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "run_id": run_id({"kind": kind, "spec": spec, "inputs": inputs}),
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "fairmedbench_version": __version__,
        "git_commit": git_commit(),
        "spec": spec,
        "inputs": inputs,
        "environment": environment(),
        "timings_s": timings,
        "result": result,
    }


def predictions_block(file: str, kind: str, tasks: list[str], attributes: list[str], labels: list[str],
                      scores: list[str]) -> dict[str, Any]:
    """The document's description of its predictions Parquet (see the module docstring for columns); the label
    and score columns are the task's (tasks.base.Task.predictions_block)."""
    return {"file": file, "format": kind, "tasks": list(tasks), "attributes": list(attributes),
            "columns": {"id": "sample_id", "split": "split", "seed": "seed", "labels": list(labels),
                        "scores": list(scores), "attributes": [f"attr:{a}" for a in attributes]}}


REQUIRED = ("schema_version", "kind", "run_id", "created_at", "fairmedbench_version", "spec", "inputs",
            "environment", "result")


def validate_document(doc: Any) -> list[str]:
    """Problems that make `doc` not a result of this schema (an empty list when it is one)."""
    if not isinstance(doc, dict):
        return ["a result must be a JSON object"]
    problems = [f"missing field {k!r}" for k in REQUIRED if k not in doc]
    if doc.get("schema_version") not in (None, SCHEMA_VERSION):
        problems.append(f"schema_version {doc.get('schema_version')!r} is not {SCHEMA_VERSION!r}")
    res = doc.get("result")
    if isinstance(res, dict):
        if not isinstance(res.get("reports"), list):
            problems.append("result.reports must be a list")
        if not isinstance(res.get("meta"), dict):
            problems.append("result.meta must be an object")
    elif "result" in doc:
        problems.append("result must be an object")
    return problems


def read_json(path: Path | str) -> Any:
    """Read a JSON file."""
    return json.loads(Path(path).read_text())
