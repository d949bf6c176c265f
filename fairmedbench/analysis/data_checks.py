"""What the patient ids and sample ids of a scored table hide, with one rule each: checked by `Task.score` on every
table a run, `evaluate` or `submit` scores (and by `run` on its test split before training).

Refused (InputError, exit 2) unless overridden (`evaluate --i-know`; a bundle or a run has no override; the result's
`data_checks` block and the page then say the check was overridden):
- one patient: two or more rows, every one naming the same patient: nothing is left to resample.
- a patient column that coincides with an attribute or a label: the rows' partition by patient equals their
  partition by the attribute's groups (or by a label column's values) while some patient has two or more rows. The
  resampling unit is then the group (or the label) itself, one or two units per group: the bootstrap cannot vary,
  the permutation test cannot move a unit, and a real gap reads "within chance". A column where every row is its own
  patient is row resampling and passes, whatever its size.
- too few patients: a group large enough to get an interval (at least `min_group_size` rows) with fewer than
  MIN_PATIENTS (10) patients, and fewer patients than rows (a small group of one row per patient is what row
  resampling gives: the patient column takes nothing away there). The patient-level 95% interval of a group's AUC
  held the true AUC in 51% of simulated data sets with 2 patients a group, 87% with 5, 89% with 10 and 94% with 40
  (benchmarks/few_patients_coverage.py): it collapses below about 5 patients; 10 leaves a margin.
- duplicated sample ids: rows whose sample id repeats an earlier row's. Each copy counts as one more sample (100
  copies make n 900 of 800 samples) and narrows every interval. With the override the copies are kept and counted.

Counted and reported, never refused (they change no number; the counts let a reader judge):
- missing patient ids (empty, NA): each such row is its own resampling unit, as if it were its own patient.
- patients in several groups of an attribute: each (patient, group) pair is one unit, so every group keeps the rows
  the data gives it. For an attribute that changes over follow-ups (age bins) this is expected; for a fixed one (sex)
  it is a record error the benchmark cannot resolve (which group is right?), so it is counted per attribute and shown
  rather than refused: refusing would block a registry with one inconsistent record among thousands.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.errors import InputError
from fairmedbench.metrics.bootstrap import missing_id

if TYPE_CHECKING:
    import pandas as pd

    from fairmedbench.metrics.groups import Attribute
    from fairmedbench.spec import ScoreSettings
    from fairmedbench.tasks.base import PredictionTable

#: the fewest patients a group large enough for an interval may hold (see the module docstring)
MIN_PATIENTS = 10
#: the optional sample id column of a predictions table (evaluate passes the file's ids, submit the bundle's)
SAMPLE_ID_COLUMN = "sample_id"
#: what Task.score does with a refused table: refuse it, score it and say so (--i-know), or score it and record the
#: counts only (a caller that enforced the rules on the data itself, before any expensive work: `run`)
MODES = ("refuse", "override", "record")
#: the rules, as the result's data_checks block records them
RULES = {
    "missing_patient_ids": "each row without a patient id is its own resampling unit",
    "patients_in_several_groups": "each (patient, group) pair is one resampling unit; counted per attribute",
    "duplicated_sample_ids": "refused unless overridden; then every copy is kept as a sample and counted",
    "refused": f"one patient for every row; a patient column whose partition equals an attribute's or a label's; a "
               f"group with an interval (>= min_group_size rows) holding fewer than {MIN_PATIENTS} patients",
}


@dataclass
class DataChecks:
    """The counts of one scored table, the problems that refuse it, and what was decided."""

    n_rows: int
    unit: str  # 'patient' (patient ids given) or 'row'
    n_patients: int | None = None  # distinct patient ids, rows without one counted one each
    missing_patient_ids: int = 0
    several_groups: dict[str, dict[str, Any]] = field(default_factory=dict)  # attribute -> patients, rows, example
    duplicated_rows: int = 0  # rows repeating an earlier row's sample id
    duplicated_ids: int = 0  # sample ids on two or more rows
    duplicate_example: str | None = None
    problems: list[str] = field(default_factory=list)
    decision: str = "passed"  # passed | overridden | recorded

    def to_dict(self) -> dict[str, Any]:
        """The result's data_checks block."""
        return {"decision": self.decision, "unit": self.unit, "n_rows": self.n_rows, "n_patients": self.n_patients,
                "missing_patient_ids": self.missing_patient_ids, "patients_in_several_groups": self.several_groups,
                "duplicated_sample_ids": {"rows": self.duplicated_rows, "ids": self.duplicated_ids,
                                          "example": self.duplicate_example},
                "problems": list(self.problems), "rules": dict(RULES)}


def sentences(block: Mapping[str, Any]) -> list[str]:
    """What a data_checks block says, one sentence per finding (none when the data hides nothing)."""
    out = []
    dup = block.get("duplicated_sample_ids") or {}
    if block.get("decision") == "overridden":  # the duplicates' own sentence follows
        out += [f"check overridden (--i-know): {p}" for p in block.get("problems", [])
                if not (dup.get("rows") and p.startswith(f"{dup['rows']} row(s) repeat"))]
    if dup.get("rows"):
        out.append(f"{dup['rows']} row(s) repeat the sample id of an earlier row ({dup['ids']} id(s), e.g. "
                   f"{dup['example']!r}): each copy is counted as a sample, n {block['n_rows'] - dup['rows']} -> "
                   f"{block['n_rows']}" + (" (kept by --i-know)" if block.get("decision") == "overridden" else ""))
    if block.get("missing_patient_ids"):
        out.append(f"{block['missing_patient_ids']} row(s) without a patient id: each is its own resampling unit")
    for attr, c in (block.get("patients_in_several_groups") or {}).items():
        out.append(f"{c['patients']} patient(s) recorded in two or more {attr} groups ({c['rows']} rows, e.g. "
                   f"{c['example']!r}): each (patient, group) pair is one resampling unit")
    return out


def _codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, missing): each present id's index among the distinct ids; each missing one a code of its own."""
    items = np.asarray(values, dtype=object).tolist()
    missing = np.fromiter((missing_id(v) for v in items), dtype=bool, count=len(items))
    text = np.array(["" if m else str(v) for v, m in zip(items, missing)], dtype=object)
    codes = np.empty(len(items), dtype=np.int64)
    if (~missing).any():
        _, inv = np.unique(text[~missing].astype(str), return_inverse=True)
        codes[~missing] = inv.ravel()
    start = int(codes[~missing].max()) + 1 if (~missing).any() else 0
    codes[missing] = start + np.arange(int(missing.sum()))
    return codes, missing


def _n_distinct(*codes: np.ndarray) -> int:
    return int(np.unique(np.column_stack(codes), axis=0).shape[0]) if len(codes[0]) else 0


def _coincides(pid: np.ndarray, part: np.ndarray) -> bool:
    """Whether the rows' partition by patient equals their partition by `part` (codes, rows with a value only),
    with some patient on two or more rows (all rows their own patients is row resampling, never coinciding)."""
    n_p = len(np.unique(pid))
    return n_p < len(pid) and n_p == len(np.unique(part)) == _n_distinct(pid, part)


def check(patient_ids: np.ndarray | None, attributes: Sequence[Attribute], labels: Mapping[str, np.ndarray],
          min_group_size: int, sample_ids: np.ndarray | None = None) -> DataChecks:
    """The checks of the module docstring on one table's rows: its patient ids (None: rows are the unit), its
    attributes encoded as groups, its label columns by name and its sample ids (None: not known)."""
    n = len(patient_ids) if patient_ids is not None else len(attributes[0].codes) if attributes else 0
    out = DataChecks(n_rows=n, unit="row" if patient_ids is None else "patient")
    if sample_ids is not None:
        sid, _ = _codes(sample_ids)
        counts = np.bincount(sid) if n else np.zeros(0, dtype=np.int64)
        out.duplicated_rows, out.duplicated_ids = int(n - len(counts)), int((counts > 1).sum())
        if out.duplicated_rows:
            first = int(np.nonzero(counts[sid] > 1)[0][0])
            out.duplicate_example = str(np.asarray(sample_ids, dtype=object)[first])
            out.problems.append(f"{out.duplicated_rows} row(s) repeat the sample id of an earlier row "
                                f"({out.duplicated_ids} id(s), e.g. {out.duplicate_example!r}), which would count "
                                f"each copy as a sample (n {n} instead of {n - out.duplicated_rows})")
    if patient_ids is None or n == 0:
        return out
    pid, missing = _codes(patient_ids)
    out.n_patients, out.missing_patient_ids = int(len(np.unique(pid))), int(missing.sum())
    refusals, few_patients = [], []
    if out.n_patients == 1 and n > 1:
        refusals.append(f"every one of the {n} rows names the same patient, so there is nothing to resample")
    for a in attributes:
        has = a.codes >= 0
        if _coincides(pid[has], a.codes[has]):
            refusals.append(f"the patient ids coincide with attribute {a.name!r} (each of its groups is one "
                            "patient), so intervals and tests cannot see a gap")
        pairs = np.unique(np.column_stack([pid[has], a.codes[has]]), axis=0)
        per_patient = np.bincount(pairs[:, 0], minlength=int(pid.max()) + 1) if len(pairs) else np.zeros(0, int)
        several = np.nonzero(per_patient > 1)[0]
        if len(several):
            rows = np.isin(pid, several) & has
            example = str(np.asarray(patient_ids, dtype=object)[np.nonzero(rows)[0][0]])
            out.several_groups[a.name] = {"patients": int(len(several)), "rows": int(rows.sum()), "example": example}
        units = np.bincount(pairs[:, 1], minlength=len(a.groups)) if len(pairs) else np.zeros(len(a.groups), int)
        sizes = np.bincount(a.codes[has], minlength=len(a.groups))
        few = [f"{g} ({int(units[k])} patients, {int(sizes[k])} rows)" for k, g in enumerate(a.groups)
               if sizes[k] >= min_group_size and units[k] < min(MIN_PATIENTS, sizes[k])]
        if few:
            few_patients.append(f"{a.name} group(s) {', '.join(few)} hold fewer than {MIN_PATIENTS} patients, too few "
                            "for an interval or a test")
    for name, y in labels.items():
        values, missing_label = _codes(y)
        has = ~missing_label
        if has.any() and _coincides(pid[has], values[has]):
            refusals.append(f"the patient ids coincide with label {name!r} (each label value is one patient), so "
                            "intervals and tests cannot see a gap")
    out.problems += refusals + few_patients
    return out


def check_table(table: PredictionTable, settings: ScoreSettings, label_columns: Mapping[str, str]) -> DataChecks:
    """`check` on a task's predictions table: its test rows, the attributes encoded as the scorer encodes them
    (binned where the settings bin them), its labels (task name -> column), the patient ids when the settings
    resample patients."""
    return check_columns(table.test, table.attributes, settings, label_columns)


def check_columns(test: Mapping[str, np.ndarray], attributes: Sequence[str], settings: ScoreSettings,
                  label_columns: Mapping[str, str]) -> DataChecks:
    """`check_table` on a table's test columns (attr:<name>, labels, patient_id, sample_id) and attributes."""
    from fairmedbench.metrics.groups import Attribute, make_attribute

    attrs = []
    for name in attributes:
        values = test[f"attr:{name}"]
        groups = settings.groups.get(name)
        if groups is not None:
            index = {g: i for i, g in enumerate(groups)}
            attrs.append(Attribute(name, np.array([index.get(v, -1) for v in values], dtype=np.int64),
                                   tuple(groups)))
        else:
            attrs.append(make_attribute(name, values, settings.bins.get(name)))
    pids = test.get("patient_id") if settings.resampling_unit == "patient" else None
    labels = {name: test[c] for name, c in label_columns.items() if c in test}
    return check(pids, attrs, labels, settings.min_group_size, test.get(SAMPLE_ID_COLUMN))


def enforce(checks: DataChecks, mode: str) -> DataChecks:
    """The checks with their decision: InputError (one line: what is wrong, what to do) when something is refused
    and `mode` is 'refuse'; else 'overridden', 'recorded' or 'passed'."""
    if not checks.problems:
        return checks
    if mode == "refuse":
        raise InputError(f"{checks.problems[0]}" + (f" (and {len(checks.problems) - 1} more problem(s))"
                                                     if len(checks.problems) > 1 else "")
                         + "; give each row its own patient's id and each sample once (with evaluate: name the "
                           "patient column with --patient-column COL, or 'none' to resample rows, or pass --i-know to "
                           "score anyway, which the result then says)")
    return replace(checks, decision="overridden" if mode == "override" else "recorded")


def check_split(samples: pd.DataFrame, positions: np.ndarray, attributes: Sequence[str],
                labels: Sequence[str]) -> DataChecks:
    """The checks of a dataset's split (sample_id, patient_id, attr:<name> and label columns of the rows at
    `positions`), as Task.score will check the table scored on it: what `run` checks before training."""
    from fairmedbench.spec import ScoreSettings

    test = {f"attr:{a}": samples[f"attr:{a}"].to_numpy()[positions] for a in attributes}
    test.update({f"label:{c}": samples[c].to_numpy()[positions] for c in labels})
    test.update({"patient_id": samples["patient_id"].to_numpy()[positions],
                 SAMPLE_ID_COLUMN: samples["sample_id"].to_numpy()[positions]})
    return check_columns(test, attributes, ScoreSettings(), {c: f"label:{c}" for c in labels})
