"""`benchmark evaluate --uncertainty COL|MEASURE`: rejection curves per group and δ (Lu et al. 2021) on a
prediction file.

File convention (what `benchmark run --mc-samples T` writes; see analysis.uncertainty):
- `mc:<t>:<name>`, t = 0..T-1, one column per MC-dropout pass. Binary task: <name> is the task (the label column
  `label:<name>` or `<name>`) and the value is the pass's probability of class 1. Multi-class task: one column
  per class, <name> = the class, in class-index order, the values of one pass summing to 1; the labels are
  the class names or their indices 0..C-1 (a multiclass run's `label` column).
- `unc:<measure>` (or any column): one uncertainty per row, higher = more uncertain.
- a `patient_id` column (`--patient-column`): with a measure, each pass's probabilities are averaged per patient.
Rows with split = test are analysed when a split column exists. With a column, the prediction is the mean of
the MC passes when the file has them, else the score column(s).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.analysis.uncertainty import (
    MEASURES,
    PAIR_AGGREGATIONS,
    PERFORMANCE,
    binary_as_classes,
    rejection_curves,
    retention_grid,
    uncertainty_block,
)
from fairmedbench.engine import store
from fairmedbench.errors import InputError
from fairmedbench.spec import option

if TYPE_CHECKING:
    from fairmedbench.benchmark.evaluate import EvaluateOptions


@dataclass(frozen=True)
class UncertaintyOptions:
    """`benchmark evaluate`'s uncertainty-disparity options (Lu et al. 2021)."""

    uncertainty: str | None = field(default=None, metadata=option(
        f"rejection curves per group and δ instead of the metrics: a column with one uncertainty per row, or a measure "
        f"({', '.join(MEASURES)}) computed from mc:<t>:<name> MC columns", metavar="COL|MEASURE"))
    retention_step: float = field(default=0.05, metadata=option("retention 100%%..50%% in these steps"))
    uncertainty_pm: str | None = field(default=None, metadata=option(
        "performance on the kept cases (default: kappa for multi-class, auc for binary)", choices=PERFORMANCE))
    pair_aggregation: str = field(default="sum", metadata=option(
        "δ over group pairs: sum (Lu et al. Eq. 5) or mean", choices=PAIR_AGGREGATIONS))


_MC = re.compile(r"^mc:(\d+):(.+)$")


def _mc_passes(columns: list[str]) -> dict[str, list[str]]:
    """name -> its `mc:<t>:<name>` columns ordered by t; the passes must be 0..T-1 for every name."""
    by: dict[str, dict[int, str]] = {}
    for c in columns:
        m = _MC.match(c)
        if m:
            by.setdefault(m.group(2), {})[int(m.group(1))] = c
    out = {}
    for name, passes in by.items():
        if sorted(passes) != list(range(len(passes))):
            raise InputError(f"MC columns of {name!r}: passes {sorted(passes)[:8]} are not mc:0..mc:{len(passes) - 1}")
        out[name] = [passes[t] for t in range(len(passes))]
    if len({len(v) for v in out.values()}) > 1:
        raise InputError(f"MC columns: the names {sorted(out)} have different numbers of passes")
    return out


def _label_column(columns: list[str], label: str | None) -> str:
    if label:
        if label not in columns:
            raise InputError(f"label column {label!r} not in the file; its columns are: {', '.join(columns[:30])}")
        return label
    found = [c for c in columns if c.startswith("label:")] or [c for c in columns if c == "label"]
    if len(found) != 1:
        raise InputError(f"give --label COL: the file has {len(found)} `label:` columns ({', '.join(found[:5])})")
    return found[0]


def _numeric(col: np.ndarray, what: str) -> np.ndarray:
    try:
        return np.asarray(col, dtype=float)
    except (TypeError, ValueError):
        raise InputError(f"{what}: expected numbers") from None


def _mc_array(table: Any, rows: np.ndarray, passes: dict[str, list[str]], task: str,
              y_raw: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(MC samples (T, n, C), labels as class indices) from the file's MC columns, or None without them."""
    if not passes:
        return None
    if task in passes or len(passes) == 1:  # binary: the pass's probability of class 1
        columns_of_task = passes.get(task, next(iter(passes.values())))
        mc = binary_as_classes(np.stack([_numeric(table[c][rows], c) for c in columns_of_task]))
        return mc, _numeric(y_raw, "labels")
    names = list(passes)  # the file's column order is the class-index order
    mc = np.stack([np.stack([_numeric(table[c][rows], c) for c in passes[n]]) for n in names], axis=-1)  # (T, n, C)
    keys = [str(int(v)) if isinstance(v, (float, np.floating)) and float(v).is_integer() else str(v) for v in y_raw]
    index = {n: i for i, n in enumerate(names)}
    if not all(k in index for k in keys):  # labels as class indices 0..C-1 (a multiclass run's `label` column)
        index = {str(i): i for i in range(len(names))}
    unknown = sorted({k for k in keys if k not in index})
    if unknown:
        raise InputError(f"labels {unknown[:5]} are neither MC class names {names} nor class indices "
                         f"0..{len(names) - 1}")
    return mc, np.array([index[k] for k in keys])


def evaluate_uncertainty(path: str | Path, uncertainty: str, *, label: str | None = None,
                         scores: list[str] | None = None, attributes: list[str] | None = None,
                         split_column: str = "split", patient_column: str | None = "patient_id", pm: str | None = None,
                         retention_step: float = 0.05, pair_aggregation: str = "sum",
                         n_bins: int = 10) -> dict[str, Any]:
    """Rejection curves per group and δ of one task in a prediction file (module docstring: file convention)."""
    from fairmedbench.benchmark.evaluate import read_table

    table = read_table(Path(path))
    columns = list(table.columns)
    rows = np.ones(len(table), dtype=bool)
    notes: list[str] = []
    if split_column in columns:
        split = np.char.lower(np.asarray(table[split_column]).astype(str))
        if (split == "test").any():
            rows = split == "test"
        else:
            notes.append(f"no '{split_column}' = test rows: every row is analysed")
    lab = _label_column(columns, label)
    task = lab.split(":", 1)[1] if lab.startswith("label:") else lab
    attrs = attributes or [c for c in columns if c.startswith("attr:")]
    missing = [a for a in attrs if a not in columns]
    if not attrs or missing:
        raise InputError(f"attribute column(s) {missing or '(none found)'}: give --attribute COLS of the file")
    groups = {a.split(":", 1)[1] if a.startswith("attr:") else a: np.asarray(table[a][rows], dtype=object)
              for a in attrs}
    retention = retention_grid(retention_step)
    from_mc = _mc_array(table, rows, _mc_passes(columns), task, np.asarray(table[lab][rows]))
    doc: dict[str, Any] = {"kind": "evaluate-uncertainty", "source": str(path), "uncertainty": uncertainty,
                           "label": lab, "n_rows": int(rows.sum()), "notes": notes}
    if uncertainty in MEASURES and uncertainty not in columns:
        if from_mc is None:
            raise InputError(f"--uncertainty {uncertainty}: a measure needs MC-dropout columns mc:<t>:<name> "
                             f"(benchmark run --mc-samples T writes them); {path} has none")
        mc, y = from_mc
        pid = (np.asarray(table[patient_column][rows], dtype=object) if patient_column and patient_column in columns
               else None)
        block = uncertainty_block(y, mc, groups, patient_ids=pid, measures=[uncertainty], pm=pm,
                                  retention=retention, pair_aggregation=pair_aggregation, n_bins=n_bins)
        return {**doc, **block}
    if uncertainty not in columns:
        raise InputError(f"--uncertainty {uncertainty!r} is neither a column of {path} nor a measure "
                         f"({', '.join(MEASURES)}); columns: {', '.join(columns[:30])}")
    unc = _numeric(table[uncertainty][rows], f"uncertainty column {uncertainty!r}")
    if from_mc is not None:
        mc, y = from_mc
        probs = mc.mean(axis=0)
        doc["prediction"] = "argmax (binary: class-1 score) of the mean over the MC samples"
    else:
        cols = scores or [c for c in columns if c == f"score:{task}"]
        if not cols:
            raise InputError(f"no MC columns and no score column for {lab!r}: give --score COL(S)")
        s = np.stack([_numeric(table[c][rows], c) for c in cols], axis=-1)
        probs = binary_as_classes(s[:, 0]) if len(cols) == 1 else s
        y = _numeric(np.asarray(table[lab][rows]), "labels")
        doc["prediction"] = f"score column(s) {cols}"
    if not np.isfinite(unc).all():
        bad = np.flatnonzero(~np.isfinite(unc))
        raise InputError(f"uncertainty column {uncertainty!r}: {bad.size} of {unc.size} analysed rows are NaN or "
                         f"infinite (first: analysed row {int(bad[0])}); drop or fill those rows")
    curves = {a: {uncertainty: rejection_curves(y, probs, unc, g, measure=uncertainty, attribute=a, pm=pm,
                                                retention=retention, pair_aggregation=pair_aggregation).to_dict()}
              for a, g in groups.items()}
    return {**doc, "level": "image level (a given column is not averaged per patient)",
            "delta": {a: {uncertainty: c[uncertainty]["delta"]} for a, c in curves.items()}, "curves": curves}


def delta_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (attribute, measure, group, retention): the tidy table of a result's curves."""
    out = []
    for attr, per in doc["curves"].items():
        for measure, c in per.items():
            for g, vals in c["groups"].items():
                for r, n, v in zip(c["retention"], vals["n"], vals["pm"]):
                    out.append({"attribute": attr, "measure": measure, "group": g, "retention": r, "n": n,
                                "pm": c["pm"], "value": math.nan if v is None else v,
                                "delta": math.nan if c["delta"] is None else c["delta"]})
    return out


def uncertainty_patient_column(asked: str | None) -> str | None:
    """--patient-column for the uncertainty analysis: each MC pass is averaged per patient of this column."""
    if asked is not None and asked.strip().lower() == "none":
        return None
    return asked or "patient_id"


def run_uncertainty(predictions: list[str] | None, opts: EvaluateOptions, u: UncertaintyOptions) -> dict[str, Any]:
    """`benchmark evaluate --uncertainty`: one prediction file and one task analysed (`evaluate_uncertainty` with
    the options of `u`), the result written to `opts.out` (JSON) and its tidy rows to `opts.out_table` when given."""
    if not predictions or len(predictions) != 1:
        raise InputError(f"--uncertainty analyses one prediction file, not {len(predictions or [])}: give "
                         "--predictions FILE")
    if len(opts.labels) > 1:
        raise InputError(f"--uncertainty analyses one task: give one --label, not {opts.labels}")
    assert u.uncertainty is not None
    doc = evaluate_uncertainty(predictions[0], u.uncertainty, label=opts.labels[0] if opts.labels else None,
                               patient_column=uncertainty_patient_column(opts.patient_column),
                               scores=opts.scores or None, attributes=opts.attributes or None,
                               split_column=opts.split_column, pm=u.uncertainty_pm, retention_step=u.retention_step,
                               pair_aggregation=u.pair_aggregation)
    if opts.out:
        store.write_json(opts.out, doc)
    if opts.out_table:
        import pandas as pd

        store.write_table(opts.out_table, pd.DataFrame(delta_rows(doc)))
    return doc
