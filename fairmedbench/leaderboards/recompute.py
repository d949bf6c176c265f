"""One result of a bundle read and recomputed: its predictions Parquet read by the entry's task with the bundle's
rules, every number recomputed with the document's own settings and compared within TOLERANCE, and the board's
headline columns of a document. Shared by the submission checks (submit) and the external datasets' (external).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import jsonschema
import numpy as np

from fairmedbench.engine import store
from fairmedbench.errors import InputError
from fairmedbench.leaderboards.flags import class_indices
from fairmedbench.leaderboards.suites import Entry
from fairmedbench.metrics.result import GAP, OVERALL
from fairmedbench.metrics.specs import board_metrics
from fairmedbench.spec import ScoreSettings
from fairmedbench.tasks.base import PATIENT_COLUMN, PredictionTable, get_task

TOLERANCE = 1e-9
MAX_LINES_PER_FILE = 6


@dataclass(frozen=True)
class Limits:
    """Size limits of a bundle (bytes) and the most bootstrap resamples a recomputation may ask for."""

    json_bytes: int = 8 << 20
    parquet_bytes: int = 256 << 20
    total_bytes: int = 1 << 30
    files: int = 5000
    n_boot: int = 10000
    n_perm: int = 10000


class _Stop(Exception):
    """A stage found problems that make the next stages meaningless."""


def _schema_lines(where: str, doc: Any, schema: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    errs = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    return [f"{where}: schema violation at {'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
            for e in errs]


_RESULT_SCHEMA: dict[str, Any] | None = None


def result_schema() -> dict[str, Any]:
    """The result document schema (engine/result_schema.json), loaded once."""
    global _RESULT_SCHEMA
    if _RESULT_SCHEMA is None:
        _RESULT_SCHEMA = json.loads(store.SCHEMA_PATH.read_text())
    return _RESULT_SCHEMA


def _close(a: Any, b: Any, path: str, out: list[str]) -> None:
    """Append a line per difference between reported `a` and recomputed `b` (numbers within TOLERANCE)."""
    num = (int, float)
    if isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool) and not isinstance(b, bool):
        fa, fb = float(a), float(b)
        if math.isnan(fb) or abs(fa - fb) > TOLERANCE * max(1.0, abs(fb)):
            out.append(f"{path}: reported {a!r}, recomputed {b!r}")
    elif isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in b:
                out.append(f"{path}/{k}: reported but not produced by recomputation")
            elif k not in a:
                out.append(f"{path}/{k}: missing (recomputation gives {b[k]!r})")
            else:
                _close(a[k], b[k], f"{path}/{k}", out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: reported {len(a)} items, recomputed {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: reported {a!r}, recomputed {b!r}")


@dataclass
class _Columns:
    """The predictions of one result, split into val and test (every row, as numpy arrays per column), and the
    table its task scores (Task.table: the rows its rules leave out are left out)."""

    test: dict[str, np.ndarray]
    val: dict[str, np.ndarray]
    table: PredictionTable


def _label(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v).strip()


#: what a Parquet column of each role may be stored as
_TYPES: dict[str, tuple[str, ...]] = {
    "id": ("string", "integer"), "text": ("string",), "int": ("integer",),
    "label": ("integer", "boolean", "floating"), "unscored": ("integer", "boolean", "floating"),
    "class": ("integer", "floating", "string"), "score": ("floating", "integer"), "distance": ("floating", "integer"),
    "attr": ("string", "integer", "floating", "boolean", "null")}


def _roles(table: Any, entry: Entry, cols: dict[str, Any], rel: str) -> dict[str, str]:
    """Each column the entry's task lays out, by its role; _Stop when one is missing or another is there."""
    task = get_task(entry.task)
    classes = list(entry.classes) if task.class_index_labels else []
    want: dict[str, str] = {cols["id"]: "id", cols["split"]: "text", cols["seed"]: "int"}
    want.update({v.name: v.role for v in task.value_columns if not v.optional or v.name in table.column_names})
    want.update({c: "class" if classes else "label" for c in cols["labels"]})
    want.update({c: "score" for c in cols["scores"]})
    want.update({c: "attr" for c in cols["attributes"]})
    if PATIENT_COLUMN in table.column_names:  # optional: the recomputation then resamples whole patients
        want[PATIENT_COLUMN] = "id"
    problems = [f"{rel}: missing column {c!r}" for c in want if c not in table.column_names]
    problems += [f"{rel}: unexpected column {c!r}" for c in table.column_names if c not in want]
    if classes:  # say what a multi-class file must hold: the count of class columns missing or extra
        lost = [c for c in cols["scores"] if c not in table.column_names]
        extra = [c for c in table.column_names if c not in want]
        if lost or extra:
            others = ", ".join(c for c in want if c not in cols["scores"])
            problems.append(f"{rel}: {len(lost)} class probability column(s) missing and {len(extra)} unexpected "
                            f"column(s); {entry.dataset} has {len(classes)} classes, so the file holds exactly "
                            f"{', '.join(cols['scores'])} besides {others}")
    if problems:
        raise _Stop(problems)
    return want


def _arrays(table: Any, want: dict[str, str], entry: Entry, rel: str) -> dict[str, np.ndarray]:
    """Each column as numpy, by its Parquet type (nulls as NaN where the task's 'unscored' flag may mark rows;
    class names as their index); _Stop listing the columns stored as what their role cannot be."""
    import pyarrow as pa

    task = get_task(entry.task)
    nullable = bool(task.columns_of("unscored"))  # null where the flag marks the row; the task's reader checks
    arrays: dict[str, np.ndarray] = {}
    problems = []
    for name, role in want.items():
        col = table.column(name)
        t = col.type
        if pa.types.is_dictionary(t):
            col, t = col.cast(t.value_type), t.value_type
        kinds = {"string": pa.types.is_string(t) or pa.types.is_large_string(t), "integer": pa.types.is_integer(t),
                 "floating": pa.types.is_floating(t), "boolean": pa.types.is_boolean(t), "null": pa.types.is_null(t)}
        if not any(kinds[k] for k in _TYPES[role]):
            problems.append(f"{rel}: column {name!r} has type {t}, not usable as {role}")
        elif role not in ("attr",) and col.null_count and not (nullable and role in ("score", "distance")):
            problems.append(f"{rel}: column {name!r} has {col.null_count} missing or NaN value(s); every sample "
                            "needs a finite value" + (" (null only where the task's flag is true)" if nullable
                                                      and role in ("score", "distance") else ""))
        elif role == "class":  # a class index 0..C-1 or a class name of the card, stored as the index
            values = col.to_pylist()
            index = class_indices(values, list(entry.classes))
            unknown = [v for v, i in zip(values, index) if i < 0]
            if unknown:
                problems.append(f"{rel}: column {name!r} has {len(unknown)} value(s) that are not a class of "
                                f"{entry.dataset} (e.g. {unknown[0]!r}); a label is a class index "
                                f"0..{len(entry.classes) - 1} or a class name {list(entry.classes)}")
            arrays[name] = index.astype(np.float64)
        elif role == "attr":
            arrays[name] = np.array([None if v is None else _label(v) for v in col.to_pylist()], dtype=object)
        elif role in ("id", "text"):
            arrays[name] = np.array([str(v) for v in col.to_pylist()], dtype=object)
        else:
            arrays[name] = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
    if problems:
        raise _Stop(problems)
    return arrays


def _read_predictions(rel: str, data: bytes, entry: Entry, block: dict[str, Any], seed: int) -> _Columns:
    """Parquet bytes -> the columns by role, read by the entry's task (Task.table: its role checks, val/test split
    and left-out rows), with the bundle's own rules (softmax sums, splits, seed, unique ids); raises _Stop listing
    what is wrong."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fairmedbench.tasks.table import TableError

    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as err:
        raise _Stop([f"{rel}: unreadable Parquet ({err})"]) from None
    cols = block["columns"]
    task = get_task(entry.task)
    arrays = _arrays(table, _roles(table, entry, cols, rel), entry, rel)
    try:
        scored = task.table(arrays, list(block["tasks"]), list(block["attributes"]), tuple(entry.classes))
    except TableError as err:
        raise _Stop([f"{rel}: {p}" for p in err.problems]) from None
    problems = []
    split, ids = arrays.pop(cols["split"]), arrays[cols["id"]]
    allowed = set(task.prediction_splits)
    extra = sorted(set(split) - allowed)
    if extra:
        problems.append(f"{rel}: split values {extra} are not allowed here (only {sorted(allowed)})")
    seeds = arrays.pop(cols["seed"])
    if (seeds != seed).any():
        problems.append(f"{rel}: column 'seed' must be {seed} on every row (found {sorted(set(seeds.tolist()))[:5]})")
    for part in sorted(allowed):
        uniq, counts = np.unique(ids[split == part].astype(str), return_counts=True)
        if (counts > 1).any():
            problems.append(f"{rel}: {int((counts > 1).sum())} duplicate sample id(s) in split {part}, "
                            f"e.g. {uniq[counts > 1][0]!r}")
    both = set(ids[split == "val"]) & set(ids[split == "test"])
    if both:
        problems.append(f"{rel}: {len(both)} sample id(s) are in both val and test, e.g. {sorted(both)[0]!r}")
    if problems:
        raise _Stop(problems)
    return _Columns({k: v[split == "test"] for k, v in arrays.items()},
                    {k: v[split == "val"] for k, v in arrays.items()}, scored)


def recompute(rel: str, doc: dict[str, Any], entry: Entry, cols: _Columns, limits: Limits) -> dict[str, Any]:
    """The result the entry's task scores on these predictions with the document's own settings."""
    task = get_task(entry.task)
    block = doc["predictions"]
    settings = _score_settings(rel, doc["result"], entry, block, limits)
    table = cols.table  # read by the task: segmentation's empty-ground-truth rows are left out
    try:
        out = task.score(table, settings)  # refuses a table the data checks refuse (analysis.data_checks)
    except (InputError, TypeError, ValueError) as err:
        raise _Stop([f"{rel}: recomputation failed: {err}"]) from None
    out.meta.pop("data_checks", None)  # what the data hides, not a number a bundle reports (older ones lack it)
    return json.loads(json.dumps(out.to_dict()))


def _score_settings(rel: str, res: dict[str, Any], entry: Entry, block: dict[str, Any],
                    limits: Limits) -> ScoreSettings:
    """The settings a result records (tasks.table.settings_from_meta), within the board's limits."""
    from fairmedbench.tasks.table import settings_from_meta

    try:
        settings = settings_from_meta(res, get_task(entry.task), list(block["attributes"]), list(block["tasks"]))
    except InputError as err:
        raise _Stop([f"{rel}: {err}"]) from None
    if not isinstance(settings.n_boot, int) or settings.n_boot > limits.n_boot:
        raise _Stop([f"{rel}: result.meta.n_boot must be a whole number <= {limits.n_boot}, got {settings.n_boot!r}"])
    if not isinstance(settings.n_perm, int) or not 0 <= settings.n_perm <= limits.n_perm:
        raise _Stop([f"{rel}: result.meta.n_perm must be a whole number in [0, {limits.n_perm}], got "
                     f"{settings.n_perm!r}"])
    return settings


def _headline(doc: dict[str, Any], task: str) -> dict[str, dict[str, float | None]]:
    """{attribute: {column: mean over the document's tasks}} of the board's headline metrics (None = NaN)."""
    by_attr: dict[str, dict[str, list[float]]] = {}
    for r in doc["result"]["reports"]:
        cols = by_attr.setdefault(r["attribute"], {})
        for col, spec in board_metrics(task).items():  # what a board row shows: the registry's board columns
            slot = GAP if spec.between_groups else OVERALL
            v = r["metrics"].get(spec.name, {}).get(slot, {}).get("value")
            cols.setdefault(col, []).append(math.nan if v is None else float(v))
    return {a: {c: _mean(v) for c, v in cols.items()} for a, cols in by_attr.items()}


def _mean(values: list[float]) -> float | None:
    """Mean; None (undefined) when any value is undefined: an average over an undefined part is undefined."""
    if not values or any(math.isnan(v) for v in values):
        return None
    return float(np.mean(values))
