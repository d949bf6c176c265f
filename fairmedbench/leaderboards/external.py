"""External evaluation on a board: an entry's declared external datasets (`suites.External`), checked and recomputed
from the submitted predictions as the internal test set is, with the shift recomputed by the runs' own code.

A result of an entry with external datasets carries, as every run with `--eval-dataset` writes it:
  spec.eval_datasets[k]   the run identity of external dataset k (label, dataset, options, split, fingerprints,
                          attribute alignment), in the entry's order;
  external[k]             {label, dataset, options, split, n_test, predictions, result, shift, shift_method,
                          alignment} (`tasks.common.external_entry`);
  seed<s>.external<k>.predictions.parquet   its test rows, in the internal predictions' columns.
`check_seed` accepts them only when the labels are the entry's, the test ids are the pinned external test set (or
the run's own fingerprint while pending), the alignment is what the two cards give (`analysis.shift.check_alignment`),
the external result uses the internal run's settings and is reproduced by `recompute.recompute` (classification
picks its threshold on the internal validation rows, as the run did), and every shift (external − internal per group,
of the gap, of the difference) is reproduced by `analysis.shift.group_draws` + `shift_block` on the two
predictions files, seeded as the run seeds it. A board row then shows each external dataset's board columns
(mean over seeds) and the shift of the seed mean (`analysis.shift.seeds_shift_block`): every seed's predictions
are resampled with the same draws of the two test sets (those of the entry's first seed, so a one-seed entry shows
its run's own intervals), whole patients where ids are known.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from fairmedbench.analysis.shift import (
    SHIFT_METHOD,
    GroupDraws,
    check_alignment,
    group_draws,
    parse_eval_dataset,
    seeds_shift_block,
    shift_block,
)
from fairmedbench.engine.splits import test_fingerprint
from fairmedbench.errors import InputError
from fairmedbench.leaderboards.recompute import (
    MAX_LINES_PER_FILE,
    Limits,
    _close,
    _Columns,
    _headline,
    _mean,
    _read_predictions,
    _schema_lines,
    _Stop,
    recompute,
    result_schema,
)
from fairmedbench.leaderboards.suites import Entry
from fairmedbench.tasks.base import PATIENT_COLUMN, PredictionTable, Task, get_task
from fairmedbench.tasks.common import external_file

#: the predictions file of an external dataset inside a bundle's entry folder
FILE_RE = re.compile(r"^seed\d{1,6}\.external\d{1,3}\.predictions\.parquet$")
#: result.meta settings an external result must share with its run's internal result (what the run computed it with)
SETTINGS = ("kind", "profile", "n_boot", "n_perm", "seed", "ci_level", "min_group_size", "operating_points", "ece")
#: how the board's shift of a seed mean is resampled (shown on the page)
BOARD_SHIFT_METHOD = ("shift = external − internal of the mean over the entry's seeds, per group, of the gap and of "
                      "the signed difference; 95% interval: percentiles over resamples of the two test sets drawn "
                      "independently of each other (stratified by group × class, whole patients where ids are "
                      "known), the same draws applied to every seed's predictions (those of the entry's first seed, "
                      "so a one-seed entry shows its run's own interval): the test sets' sampling error of the seed "
                      "mean, not the seed-to-seed variation")


def _block_schema() -> dict[str, Any]:
    return {"type": "array", "items": {
        "type": "object",
        "required": ["label", "dataset", "options", "split", "n_test", "predictions", "result", "shift",
                     "shift_method", "alignment"],
        "properties": {"label": {"type": "string"}, "dataset": {"type": "string"}, "options": {"type": "object"},
                       "split": {"enum": ["test", "all"]}, "n_test": {"type": "integer", "minimum": 1},
                       "predictions": {"type": "string"}, "result": result_schema()["properties"]["result"],
                       "shift": {"type": "array", "items": {"type": "object"}}, "shift_method": {"type": "string"},
                       "alignment": {"type": "object"}}}}


@dataclass(frozen=True)
class SeedExternal:
    """One seed's checked evaluation on one external dataset: its (recomputed) result, and per attribute the headline
    draws of the internal and external test sets on the board's shared resamples (`BOARD_SHIFT_METHOD`)."""

    label: str
    n_test: int
    result: dict[str, Any]
    draws: dict[str, tuple[GroupDraws, GroupDraws]]
    n_boot: int
    min_group_size: int


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _draws(task: Task, table: PredictionTable, attribute: str, n_boot: int, seed: int, stream: str) -> GroupDraws:
    """The headline per group of a table the task read, as the runs draw it (Task.headline_inputs)."""
    y, s = task.headline_inputs(table)
    return group_draws(task.name, y, s, table.test[f"attr:{attribute}"], n_boot, seed, stream,
                       table.test.get(PATIENT_COLUMN))


def _own_files(files: dict[str, bytes], folder: str, seed: int) -> list[str]:
    """The external predictions files of one seed in an entry folder."""
    pattern = re.compile(rf"^seed{seed}\.external\d{{1,3}}\.predictions\.parquet$")
    return sorted(f for f in files if f.startswith(folder + "/") and pattern.match(f[len(folder) + 1:]))


def check_seed(rel: str, doc: dict[str, Any], entry: Entry, seed: int, files: dict[str, bytes], cols: _Columns,
               limits: Limits) -> list[SeedExternal]:
    """Check and recompute the external evaluations of one result (`rel`, its internal columns `cols` already
    checked); one SeedExternal per external dataset of the entry, or _Stop listing what is wrong."""
    folder = rel.rsplit("/", 1)[0]
    present = _own_files(files, folder, seed)
    metas, blocks = doc["spec"].get("eval_datasets") or [], doc.get("external")
    if not entry.externals:
        lines = ([f"{rel}: the run evaluated external datasets (spec.eval_datasets, external) but entry {entry.key} "
                  "declares none; submit the run without --eval-dataset"] if metas or blocks is not None else [])
        lines += [f"{f}: unexpected file (entry {entry.key} declares no external dataset)" for f in present]
        if lines:
            raise _Stop(lines)
        return []
    want = [x.label for x in entry.externals]
    labels = [m.get("label") if isinstance(m, dict) else None for m in metas]
    if labels != want:
        raise _Stop([f"{rel}: spec.eval_datasets name {labels}; entry {entry.key} evaluates {want}, in this order "
                     "(run it with `benchmark run-suite`)"])
    if blocks is None:
        raise _Stop([f"{rel}: no 'external' block; entry {entry.key} evaluates {want} (run it with `benchmark "
                     "run-suite`)"])
    lines = _schema_lines(f"{rel}: external", blocks, _block_schema())
    if lines:
        raise _Stop(lines)
    if len(blocks) != len(want):
        raise _Stop([f"{rel}: external holds {len(blocks)} dataset(s), the entry evaluates {len(want)}"])
    names = [f"{folder}/{external_file(seed, k)}" for k in range(len(want))]
    lines = [f"{f}: unexpected file (the entry has {len(want)} external dataset(s))" for f in present
             if f not in names]
    lines += [f"{f}: missing (the predictions of {rel}'s external[{k}])" for k, f in enumerate(names)
              if f not in files]
    if lines:
        raise _Stop(lines)
    return [_check_one(rel, doc, entry, seed, k, files, cols, limits) for k in range(len(want))]


def _check_one(rel: str, doc: dict[str, Any], entry: Entry, seed: int, k: int, files: dict[str, bytes],
               cols: _Columns, limits: Limits) -> SeedExternal:
    """One external dataset of one result: identity, alignment, test ids, result and shift (see the module)."""
    from fairmedbench.registry.datasets import get_card

    declared, meta, block = entry.externals[k], doc["spec"]["eval_datasets"][k], doc["external"][k]
    request = parse_eval_dataset(declared.dataset)
    where = f"{rel}: external[{k}] ({declared.label})"
    lines = [f"{where}: spec.eval_datasets[{k}].{key} is {meta.get(key)!r}, expected {value!r}"
             for key, value in (("dataset", request.name), ("options", _jsonable(request.options)),
                                ("split", request.split)) if meta.get(key) != value]
    lines += [f"{where}: {key} is {block.get(key)!r} but spec.eval_datasets[{k}] says {meta.get(key)!r}"
              for key in ("label", "dataset", "options", "split", "alignment") if block.get(key) != meta.get(key)]
    if block["predictions"] != external_file(seed, k):
        lines.append(f"{where}: predictions is {block['predictions']!r}, expected {external_file(seed, k)!r}")
    if block["shift_method"] != SHIFT_METHOD:
        lines.append(f"{where}: shift_method is not this engine's (analysis.shift.SHIFT_METHOD)")
    task = get_task(entry.task)
    try:
        aligned = check_alignment(get_card(entry.dataset), get_card(request.name), entry.task, entry.attributes,
                                  doc["spec"].get("train_hparams", {}).get("tasks", "main"), declared.dataset,
                                  task.sample_labels)
    except InputError as err:
        raise _Stop([f"{where}: {err}"]) from None
    if meta.get("alignment") != _jsonable(aligned):
        lines.append(f"{where}: spec.eval_datasets[{k}].alignment is not what the two dataset cards give")
    internal_meta, meta_ext = doc["result"]["meta"], block["result"]["meta"]
    lines += [f"{where}: result.meta.{key} is {meta_ext.get(key)!r}, the run's is {internal_meta.get(key)!r}"
              for key in SETTINGS if key in internal_meta and meta_ext.get(key) != internal_meta[key]]
    tasks = list(dict.fromkeys(r["task"] for r in block["result"]["reports"]))
    if len(tasks) != len(doc["predictions"]["tasks"]):
        lines.append(f"{where}: its result reports {len(tasks)} task column(s), "
                     f"the run {len(doc['predictions']['tasks'])}")
    if lines:
        raise _Stop(lines)
    prel = f"{rel.rsplit('/', 1)[0]}/{block['predictions']}"
    pblock = task.predictions_block(block["predictions"], tasks, list(entry.attributes), entry.classes)
    ecols = _read_predictions(prel, files[prel], entry, pblock, seed)
    if len(ecols.val["sample_id"]):
        raise _Stop([f"{prel}: {len(ecols.val['sample_id'])} validation row(s); an external dataset is only tested "
                     "(the threshold comes from the internal validation rows)"])
    ids = [str(i) for i in ecols.test["sample_id"]]
    fp, n = test_fingerprint(ids), len(ids)
    if meta.get("test_fingerprint") != fp or block["n_test"] != n:
        lines.append(f"{where}: spec.eval_datasets[{k}].test_fingerprint / n_test do not describe the {n} test rows "
                     f"of {prel}")
    if declared.test_fingerprint is not None and (fp, n) != (declared.test_fingerprint, declared.n_test):
        lines.append(f"{prel}: test ids differ from the board's external test set ({n} rows, fingerprint "
                     f"{fp[:12]}...; pinned {declared.n_test} rows, {declared.test_fingerprint[:12]}...)")
    if lines:
        raise _Stop(lines)
    diffs: list[str] = []
    again = recompute(prel, {"result": block["result"], "predictions": pblock}, entry,
                      _Columns(ecols.test, cols.val, dataclasses.replace(ecols.table, val=cols.table.val)), limits)
    _close(block["result"]["reports"], again["reports"], f"external[{k}]/result/reports", diffs)
    for key, value in again["meta"].items():
        _close(meta_ext.get(key), value, f"external[{k}]/result/meta/{key}", diffs)
    n_boot, mgs = int(internal_meta["n_boot"]), int(again["meta"].get("min_group_size", 0))
    itest, etest = cols.table, ecols.table  # read by the task: its left-out rows are out
    stream = f"external:{declared.label}"
    shifts, shared = [], {}
    for a in entry.attributes:
        own = (_draws(task, itest, a, n_boot, seed, "internal"), _draws(task, etest, a, n_boot, seed, stream))
        shifts.append(shift_block(entry.task, a, *own, n_boot, mgs))
        first = entry.seeds[0]
        shared[a] = own if seed == first else (_draws(task, itest, a, n_boot, first, "internal"),
                                               _draws(task, etest, a, n_boot, first, stream))
    _close(block["shift"], _jsonable(shifts), f"external[{k}]/shift", diffs)
    if diffs:
        more = len(diffs) - MAX_LINES_PER_FILE
        raise _Stop([f"{rel}: reported number differs from recomputation: {d}" for d in diffs[:MAX_LINES_PER_FILE]]
                    + ([f"{rel}: ... and {more} more differences"] if more > 0 else []))
    return SeedExternal(declared.label, n, block["result"], shared, n_boot, mgs)


def row_fields(entry: Entry, attribute: str, per_seed: list[list[SeedExternal]]) -> dict[str, Any]:
    """A board row's `external` list (nothing for an entry without external datasets): per external dataset, the
    board columns of its result (mean over seeds, as the row's own) and the shift of the seed mean."""
    if not entry.externals:
        return {}
    out = []
    for k, declared in enumerate(entry.externals):
        seeds = [s[k] for s in per_seed]
        heads = [_headline({"result": s.result}, entry.task).get(attribute, {}) for s in seeds]
        metrics = {c: _mean([math.nan if (v := h.get(c)) is None else v for h in heads]) for c in heads[0]}
        shift = None
        if attribute in seeds[0].draws:  # a crossed attribute (a|b) has metrics but no shift
            shift = seeds_shift_block(entry.task, attribute, [s.draws[attribute][0] for s in seeds],
                                      [s.draws[attribute][1] for s in seeds], seeds[0].n_boot, seeds[0].min_group_size)
        out.append({"label": declared.label, "dataset": declared.name, "n_test": seeds[0].n_test, "metrics": metrics,
                    "shift": _jsonable(shift), "shift_method": BOARD_SHIFT_METHOD})
    return {"external": out}
