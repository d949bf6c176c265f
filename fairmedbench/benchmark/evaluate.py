"""`benchmark evaluate`: the metric engine on a prediction file (or the demo set), saved as a result."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.benchmark.costs import describe_resampling
from fairmedbench.engine import store
from fairmedbench.engine.hparams import check_cost_bounds, cost_values
from fairmedbench.errors import InputError, MissingResourceError
from fairmedbench.metrics import FairnessResult
from fairmedbench.metrics._validate import as_labels, as_scores
from fairmedbench.metrics.defaults import MIN_GROUP_SIZE, N_BOOT, N_PERM, THRESHOLD_WITH_VAL, THRESHOLD_WITHOUT_VAL
from fairmedbench.metrics.groups import Bins, cell_names, crossed_parts, intersect, make_attribute
from fairmedbench.metrics.profiles import check_threshold, get_profile
from fairmedbench.metrics.result import TIDY_COLUMNS, apply_margins, parse_margins
from fairmedbench.spec import ScoreSettings, option
from fairmedbench.tasks.base import PATIENT_COLUMN, PredictionTable, Task, get_task

if TYPE_CHECKING:
    import pandas as pd

    from fairmedbench.analysis.resample import Resampled, ResampleSpec
    from fairmedbench.benchmark.signing import Key
    from fairmedbench.metrics.groups import Attribute
    from fairmedbench.report.audit import AuditData

SPLIT_VAL = ("val", "valid", "validation")
SPLIT_TEST = ("test",)
DEMO_DEFAULTS = {"labels": ["label"], "scores": ["score"], "attributes": ["sex", "age"],
                 "bins": {"age": [0.0, 40.0, 60.0, 200.0]}}


@dataclass
class EvaluateOptions:
    """Everything `benchmark evaluate` takes; also recorded as the result's spec. Field metadata: the options."""

    predictions: str | None = field(default=None, metadata=option(
        "CSV/TSV/Parquet with one row per sample (no extension: sniffed); several files or a quoted glob "
        "('runs/*/preds.csv') are evaluated in one process into one tidy table with a `source` column", nargs="+",
        metavar="FILE"))
    demo: bool = field(default=False, metadata=option("the built-in demo predictions (injected sex disparity)"))
    labels: list[str] = field(default_factory=list, metadata=option(
        "label column(s), 0/1; several = multi-label, reported per column; one with several --score columns = "
        "multi-class (class index or name)", flag="--label", action="append", csv=True, default=None,
        metavar="COLS"))
    scores: list[str] = field(default_factory=list, metadata=option(
        "score column(s) or a pattern ('score:*'): one per label column (same order), or one per class (or one list "
        "column) for a multi-class label", flag="--score", action="append", csv=True, default=None, metavar="COLS"))
    attributes: list[str] = field(default_factory=list, metadata=option(
        "sensitive attribute column(s), e.g. sex,age; sex*age crosses columns into one attribute whose groups are "
        "the cells (F|>=60; a part binned by --bins)", flag="--attribute", action="append", csv=True, default=None,
        metavar="COLS"))
    bins: dict[str, list[float]] = field(default_factory=dict, metadata=option(
        "bin a numeric attribute into [E0,E1),[E1,E2),..., e.g. age=0,40,60,200", action="append", default=[],
        metavar="NAME=E0,E1,.."))
    bins_closed: str = field(default="left", metadata=option(
        "which side of each bin is closed: left [a,b) (default) or right (a,b] as pandas.cut",
        choices=["left", "right"]))
    intersect: bool = field(default=False, metadata=option("also report the attributes crossed (F|>=60)"))
    threshold: str | None = field(default=None, metadata=option(
        "fixed:T | val_best_f1 | val_youden | val_fpr:F | val_tpr:X (default: "
        f"{THRESHOLD_WITH_VAL} with validation rows, else {THRESHOLD_WITHOUT_VAL})", metavar="POLICY"))
    profile: str = field(default="default", metadata=option(
        "metric conventions; 'fairmedfm' reproduces that package's numbers (labelled)"))
    n_boot: int = field(default=N_BOOT, metadata=option("bootstrap resamples (0 = no CIs)"))
    n_perm: int = field(default=N_PERM, metadata=option(
        "permutations testing each gap and two-group difference (0 = no tests)"))
    margin: str | None = field(default=None, metadata=option(
        "equivalence margin of the two-group differences: VALUE, or metric=VALUE pairs (auc=0.02,ece=0.01); a "
        "difference within chance is called equivalent when two one-sided tests put it inside ±VALUE, else the "
        "answer gives what the test could have detected", metavar="M"))
    patient_column: str | None = field(default=None, metadata=option(
        "resample and permute whole patients by this column (default: 'patient_id' or 'Patient ID' when present; "
        "'none' resamples rows)", metavar="COL"))
    seed: int = 0
    logits: bool = field(default=False, metadata=option("scores are logits: map them through the sigmoid"))
    min_group_size: int = field(default=MIN_GROUP_SIZE, metadata=option("flag groups smaller than this"))
    split_column: str = field(default="split", metadata=option(metavar="COL"))
    id_column: str | None = field(default=None, metadata=option(
        "sample id column, kept in the per-sample Parquet", metavar="COL"))
    masks: bool = field(default=False, metadata=option("rows list prediction and ground-truth mask files"))
    pred_mask: str = field(default="pred_mask", metadata=option(metavar="COL"))
    gt_mask: str = field(default="gt_mask", metadata=option(metavar="COL"))
    volume: str | None = field(default=None, metadata=option(
        "volume id: slices of a volume are pooled (3D DSC)", metavar="COL"))
    mask_threshold: float = 0.5
    hd95: bool = field(default=False, metadata=option("also compute HD95 (slower)"))
    test_resample: str | None = field(default=None, metadata=option(
        "also evaluate a resampled test set (seeded by --seed; ids stored in the JSON): balanced:ATTR (equal group "
        "sizes, each group's prevalence kept) | prevalence:ATTR (equal positives and negatives per group) | "
        "matched:ATTR:AGE_BINS (balanced, with the pooled age-bin distribution per label, bins [e_i,e_i+1) from "
        "--age-column, e.g. matched:sex:0,40,60,80)", metavar="SPEC"))
    age_column: str = field(default="age", metadata=option(
        "numeric age column used by --test-resample matched:... (default: age)", metavar="COL"))
    out: str | None = field(default=None, metadata=option(
        "result JSON (default results/evaluate/<name>-<id>/)", metavar="FILE.json"))
    out_table: str | None = field(default=None, metadata=option("tidy table, .csv or .parquet", metavar="FILE"))
    report: str | None = field(default=None, metadata=option(
        "also write a self-contained audit page: disparities with CIs first, then ROC/PR, calibration, rates at the "
        "global FPR-0.2 threshold, KS tests, resampled test set", metavar="FILE.html"))
    command: list[str] = field(default_factory=list)
    i_know: bool = field(default=False, metadata=option(  # engine.hparams.COST_BOUNDS
        "evaluate with --n-boot or --n-perm above its documented bound (10,000; the estimated time is printed), or a "
        "table the data checks refuse (a degenerate patient column, duplicated sample ids; the result and the page "
        "say so)"))
    evidence: str | None = field(default=None, metadata=option(  # an evidence pack folder (benchmark/evidence.py)
        "write an evidence pack: audit page, result JSON, tidy table, per-sample predictions, command, environment, "
        "summary.md and MANIFEST.sha256 (sha256sum -c); DIR must be new, empty or hold an earlier pack (--force)",
        metavar="DIR"))
    force: bool = field(default=False, metadata=option(
        "with --evidence: replace the earlier pack in DIR (only the files its MANIFEST.sha256 lists)"))
    sign_key: str | None = field(default=None, metadata=option(  # benchmark/signing.py
        "with --evidence: sign MANIFEST.sha256 into MANIFEST.sig with hmac:FILE (a secret) or ed25519:FILE (a PEM "
        "private key); default: $FMB_SIGN_KEY; check with benchmark evidence verify DIR --key ...", metavar="KEY"))
    json: bool = field(default=False, metadata=option("print the result JSON instead of tables"))


#: options that say where results go (or how they were asked for), not what is computed: out of the run id
OUTPUT_ONLY = ("out", "out_table", "report", "command", "i_know", "evidence", "force", "sign_key", "json")


#: seconds the scoring of a file runs before progress lines start where stderr is not a terminal
QUIET_FOR_S = 3.0


@dataclass
class EvaluateOutcome:
    """The saved result document, the engine's result (and the resampled test set's) and where files went."""

    document: dict[str, Any]
    result: FairnessResult
    paths: dict[str, str]
    notes: list[str]
    resampled: FairnessResult | None = None


def _sniff(path: Path) -> str:
    """How to read a file without an extension: 'parquet' (magic bytes PAR1) or the delimiter of a text table."""
    import csv

    with path.open("rb") as fh:
        head = fh.read(64 * 1024)
    if head[:4] == b"PAR1":
        return "parquet"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: no extension and neither Parquet nor UTF-8 text; give it a .csv/.tsv/.parquet "
                         "name") from None
    lines = text.splitlines()
    sample = "\n".join(lines[:-1] if len(lines) > 1 and len(head) == 64 * 1024 else lines)  # drop a cut-off line
    try:
        return csv.Sniffer().sniff(sample, delimiters=",\t;|").delimiter
    except csv.Error:
        return ","  # one column: any delimiter reads it the same


class Columns:
    """A table as named numpy columns (engine.columns reads it without pandas, whose import costs more
    start-up time than all the metrics of a small file)."""

    def __init__(self, data: dict[str, np.ndarray]) -> None:
        self.data = data
        self.columns = list(data)

    def __len__(self) -> int:
        return len(next(iter(self.data.values()))) if self.data else 0

    def __getitem__(self, name: str) -> np.ndarray:
        return self.data[name]

    def rows(self, mask: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
        """The named columns restricted to the rows of `mask`."""
        return {c: self.data[c][mask] for c in names}

    def to_pandas(self) -> pd.DataFrame:
        """The same table as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.data, columns=self.columns)

    @classmethod
    def from_pandas(cls, df: pd.DataFrame) -> Columns:
        """Columns of a pandas DataFrame."""
        return cls({str(c): df[c].to_numpy() for c in df.columns})


def read_table(path: Path, what: str = "predictions") -> Columns:
    """Read a CSV/TSV/Parquet file (pyarrow) with errors that name the file; a file without an extension
    is sniffed (Parquet magic bytes, else the delimiter of a text table)."""
    if not path.exists():
        raise MissingResourceError(f"{what} file {path} not found")
    if path.is_dir():
        raise InputError(f"{path} is a folder; give the {what} file (.csv or .parquet)")
    name = path.name.lower()
    if name.endswith((".parquet", ".pq")):
        kind = "parquet"
    elif name.endswith((".csv", ".csv.gz", ".tsv", ".txt")):
        kind = "\t" if name.endswith(".tsv") else ","
    elif not path.suffix:
        kind = _sniff(path)
    else:
        raise InputError(f"{path}: unknown file type; use .csv, .csv.gz, .tsv or .parquet (or no extension)")
    import pyarrow as pa

    from fairmedbench.engine.columns import read_columns

    try:
        data = read_columns(path, kind)
    except pa.ArrowInvalid as exc:
        if "Empty CSV file" in str(exc):
            raise InputError(f"{path} is empty") from None
        raise InputError(f"cannot read {path} as a table: {exc}") from None
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:  # not a readable table
        raise InputError(f"cannot read {path} as a table: {type(exc).__name__}: {exc}") from None
    table = Columns(data)
    if len(table) == 0:
        raise InputError(f"{path} has no rows")
    return table


def read_predictions(path: Path, what: str = "predictions") -> pd.DataFrame:
    """`read_table` as a pandas DataFrame."""
    return read_table(path, what).to_pandas()


def source_columns(attributes: list[str]) -> list[str]:
    """The file's columns the attributes read: each plain one, and each part of a crossed one (sex*age)."""
    return list(dict.fromkeys(c for a in attributes for c in (crossed_parts(a) or (a,))))


def attribute_columns(column: Callable[[str], np.ndarray], opts: EvaluateOptions) -> dict[str, np.ndarray]:
    """Each --attribute's values on the evaluated rows (`column` reads a file column there): a plain attribute's
    own, a crossed one's cell of its parts' groups ('F|>=60', a part binned by --bins; None where a part is
    missing)."""
    out: dict[str, np.ndarray] = {}
    for a in opts.attributes:
        parts = crossed_parts(a)
        out[a] = column(a) if not parts else cell_names(intersect(
            [make_attribute(p, column(p), Bins(opts.bins[p], opts.bins_closed) if p in opts.bins else None)
             for p in parts], a))
    return out


def _columns(df: Columns | pd.DataFrame, wanted: list[str], what: str, source: str) -> None:
    missing = [c for c in wanted if c not in df.columns]
    if missing:
        cols = ", ".join(map(str, df.columns[:30]))
        raise InputError(f"{what} column(s) {missing} not in {source}; its columns are: {cols}")


def _split_rows(df: Columns, col: str, notes: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks of validation rows and evaluated rows."""
    if col not in df.columns:
        notes.append(f"no '{col}' column: every row is evaluated")
        return np.zeros(len(df), dtype=bool), np.ones(len(df), dtype=bool)
    split = np.char.lower(np.char.strip(np.asarray(df[col]).astype(str)))
    val, test = np.isin(split, SPLIT_VAL), np.isin(split, SPLIT_TEST)
    if not test.any():
        raise InputError(f"column '{col}' has no 'test' rows (values: {sorted(set(split))[:10]}); "
                         "mark the rows to evaluate as test")
    return val, test


#: patient columns found by name when --patient-column is not given (the package's own, NIH's)
PATIENT_COLUMNS = ("patient_id", "Patient ID")
#: sample id columns found by name when --id-column is not given (the package's own, NIH's): checked for duplicates
ID_COLUMNS = ("sample_id", "Image Index")


def resolve_patient_column(columns: list[str], opts: EvaluateOptions, source: str, notes: list[str]) -> str | None:
    """The column whose patients are resampled together (said in `notes`), or None for rows."""
    asked = opts.patient_column
    if asked is not None and asked.strip().lower() == "none":
        notes.append("resampling unit: row (--patient-column none); if a patient has several rows, the intervals "
                     "are too narrow and the tests too eager")
        return None
    if asked:
        if asked not in columns:
            raise InputError(f"--patient-column {asked!r} is not a column of {source}; name the patient id column, "
                             "or give --patient-column none to resample rows")
        notes.append(f"resampling unit: patient (column {asked!r})")
        return asked
    found = next((c for c in PATIENT_COLUMNS if c in columns), None)
    notes.append(f"resampling unit: patient (column {found!r}, found by name; --patient-column none resamples rows)"
                 if found else "resampling unit: row (no 'patient_id' or 'Patient ID' column; name one with "
                               "--patient-column COL)")
    return found


def _load(opts: EvaluateOptions) -> tuple[Columns, dict[str, Any], str]:
    if opts.demo:
        from fairmedbench.benchmark.demo import demo_predictions

        df = Columns.from_pandas(demo_predictions(seed=opts.seed))
        return df, {"demo": {"generator": "fairmedbench.benchmark.demo.demo_predictions", "seed": opts.seed,
                             "rows": len(df)}}, "demo"
    if not opts.predictions:
        raise InputError("give --predictions FILE (or --demo)")
    path = Path(opts.predictions)
    df = read_table(path)
    return df, {"predictions": {"path": str(path), "sha256": store.sha256_file(path), "rows": len(df)}}, str(path)


def _checked_options(opts: EvaluateOptions) -> tuple[EvaluateOptions, dict[str, float], Key | None, Path | None]:
    """The options with the demo's defaults filled in and their outputs moved into an --evidence pack, the margins,
    the signing key and the pack folder: everything refused here is refused before any file is read."""
    if opts.demo:
        for k, v in DEMO_DEFAULTS.items():
            if not getattr(opts, k):
                setattr(opts, k, v)
    check_threshold(opts.profile, opts.threshold)  # before reading anything
    margins = parse_margins(opts.margin)
    from fairmedbench.benchmark.signing import pack_key

    sign = pack_key(opts.evidence, opts.sign_key)  # the key read (or refused) before any work
    pack = None
    if opts.evidence:  # refuse a folder holding anything but an earlier pack before any work; the pack holds the
        from fairmedbench.benchmark import evidence  # outputs not sent elsewhere

        pack = evidence.check(opts.evidence, opts.force)
        for flag, given in (("--out", opts.out), ("--out-table", opts.out_table), ("--report", opts.report)):
            if given and pack.resolve() in Path(given).resolve().parents[1:]:  # in a subfolder of the pack
                raise InputError(f"{flag} {given}: is inside a subfolder of --evidence {pack}; write it directly in "
                                 "the pack folder or outside it")
        opts = replace(opts, out=opts.out or str(pack / "result.json"),
                       out_table=opts.out_table or str(pack / "table.csv"))
    return opts, margins, sign, pack


def _read_checked(opts: EvaluateOptions, notes: list[str]) -> tuple[Columns, dict[str, Any], str, np.ndarray,
                                                                     np.ndarray, str | None, str | None, ScoreSettings]:
    """The predictions file read and its columns checked against the options: the frame, its inputs' record, its
    name, the validation and test rows, the patient and sample-id columns, and the score settings."""
    df, inputs, source = _load(opts)
    if not opts.attributes:
        raise InputError("give at least one sensitive attribute column, e.g. --attribute sex")
    _columns(df, source_columns(opts.attributes), "attribute", source)
    _columns(df, list(opts.bins), "binned attribute", source)
    unused = sorted(set(opts.bins) - set(opts.attributes) - set(source_columns(opts.attributes)))
    if unused:
        raise InputError(f"bins given for {unused}, which are not among the attributes {opts.attributes}")
    val, test = _split_rows(df, opts.split_column, notes)
    check_cost_bounds(cost_values(opts), opts.i_know,
                      lambda: describe_resampling(1, len(opts.attributes) * max(len(opts.labels), 1), int(test.sum()),
                                                  opts.n_boot, opts.n_perm)[1], lambda m: print(m, file=sys.stderr))
    patient = resolve_patient_column(df.columns, opts, source, notes)
    id_col = opts.id_column or next((c for c in ID_COLUMNS if c in df.columns), None)
    if opts.id_column:
        _columns(df, [opts.id_column], "sample id (--id-column)", source)
    return df, inputs, source, val, test, patient, id_col, score_settings(opts, patient)


def run_evaluate(opts: EvaluateOptions, progress: Callable[[int, int, str], None] | None = None) -> EvaluateOutcome:
    """Validate the inputs, compute every metric with CIs, and save result JSON, Parquet and tidy table."""
    t0 = time.perf_counter()
    notes: list[str] = []
    opts, margins, sign, pack = _checked_options(opts)
    df, inputs, source, val, test, patient, id_col, settings = _read_checked(opts, notes)
    t_read = time.perf_counter() - t0
    resampled: Resampling | None = None
    audit = None
    per_sample: dict[str, np.ndarray] | pd.DataFrame  # columns of the file's rows, or a frame of per-volume rows
    # which task a file holds is read from its columns; each reader lays the rows out as that task's table and
    # scores it through the task's scorer
    if opts.masks:
        if opts.test_resample or opts.report:
            raise InputError("--test-resample and --report work on classification predictions, not on --masks")
        get_task("segmentation").check(settings)  # before any mask is read
        result, per_sample = _segmentation(df.to_pandas(), test, opts, source, settings, patient, id_col)
        if left_out := int(np.asarray(per_sample["empty_gt"]).sum()):
            notes.append(f"{left_out} row(s) with an empty ground truth left out of every metric (the segmentation "
                         "task's rule, as in runs and submissions)")
        kind = "evaluate-segmentation"
    elif multiclass_scores(df, opts, source):
        if opts.test_resample or opts.report:
            raise InputError("--test-resample and --report work on binary classification predictions, not on "
                             "multi-class ones")
        result, per_sample = _multiclass(df, val, test, opts, source, notes, progress, settings, (patient, id_col))
        kind = "evaluate-multiclass"
    else:
        if pack is not None and not opts.report:  # the audit page (binary classification only)
            opts = replace(opts, report=str(pack / "audit.html"))
        result, per_sample, resampled, audit = _classification(df, val, test, opts, source, notes, progress,
                                                               settings, (patient, id_col))
        kind = "evaluate-classification"
    apply_margins(result.reports, margins)
    t_metrics = time.perf_counter() - t0 - t_read
    from fairmedbench.analysis.data_checks import sentences

    notes += [f"data check: {s}" for s in sentences(result.meta["data_checks"])]
    spec = {"command": "evaluate", **{k: v for k, v in asdict(opts).items() if k not in OUTPUT_ONLY}}
    doc = store.result_document(kind, spec, result.to_dict(), inputs, {"read": t_read, "metrics": t_metrics})
    doc["notes"] = notes
    if resampled is not None:
        doc["test_resample"] = {**resampled.sample.to_dict(), "result": resampled.result.to_dict()}
    if pack is None:
        return _save(opts, doc, result, per_sample, resampled, audit, notes, source)
    from fairmedbench.benchmark import evidence

    # checked again, written into a staging folder beside the earlier pack, then swapped in: its files only
    with evidence.staged(pack, opts.force) as stage:
        inside: dict[str, Any] = {k: str(stage / Path(v).name) for k in ("out", "out_table", "report")
                                  if (v := getattr(opts, k)) and Path(v).resolve().parent == pack.resolve()}
        outcome = _save(replace(opts, **inside), doc, result, per_sample, resampled, audit, notes, source)
        evidence.evaluate_pack(stage, outcome, opts.command or ["benchmark", "evaluate"], sign)
    outcome.paths = {k: str(pack / Path(v).name) if Path(v).parent == stage else v for k, v in outcome.paths.items()}
    outcome.paths["evidence"] = str(pack)
    return outcome


def _save(opts: EvaluateOptions, doc: dict[str, Any], result: FairnessResult,
          per_sample: dict[str, np.ndarray] | pd.DataFrame, resampled: Resampling | None, audit: AuditData | None,
          notes: list[str], source: str) -> EvaluateOutcome:
    """Write the result JSON, the per-sample predictions, the tidy table and the audit page where `opts` says."""
    out = Path(opts.out) if opts.out else Path("results") / "evaluate" / f"{Path(source).stem}-{doc['run_id']}" / \
        "result.json"
    paths = {"result": str(out)}
    pred_path = out.with_name(out.stem + ".predictions.parquet") if opts.out else out.with_name("predictions.parquet")
    if isinstance(per_sample, dict):
        store.write_columns(pred_path, per_sample)
    else:
        store.write_parquet(pred_path, per_sample)
    paths["predictions"] = str(pred_path)
    if opts.out_table:
        tidy = _tidy(result, resampled.result if resampled else None, doc)
        store.write_table(opts.out_table, tidy)
        paths["table"] = opts.out_table
        if note := store.csv_note(opts.out_table, tidy):
            notes.append(note)
    doc["files"] = {"predictions": pred_path.name}
    store.write_json(out, doc)
    if opts.report:
        from fairmedbench.report.audit import write_audit_report

        assert audit is not None, "--report reaches here with binary classification only, which builds the audit"
        paths["report"] = str(write_audit_report(Path(opts.report), doc, audit, command=opts.command))
    return EvaluateOutcome(doc, result, paths, notes, resampled.result if resampled else None)


def score_settings(opts: EvaluateOptions, patient: str | None) -> ScoreSettings:
    """What of the options changes a number, as a task's scorer takes it (whole patients resampled when a patient
    column is used, rows otherwise)."""
    return ScoreSettings(profile=opts.profile, threshold=opts.threshold, resampling_unit="row" if patient is None
                         else "patient", n_boot=opts.n_boot, n_perm=opts.n_perm, seed=opts.seed,
                         min_group_size=opts.min_group_size, bins={k: Bins(v, opts.bins_closed)
                                                                  for k, v in opts.bins.items()
                                                                  if k in opts.attributes},
                         intersect=opts.intersect, logits=opts.logits,
                         data_checks="override" if opts.i_know else "refuse")


#: the file's patient and sample id columns (None: not known), as the data checks and the resampling read them
Ids = tuple[str | None, str | None]


def _read_as(task: Task, df: Columns | pd.DataFrame, rows: np.ndarray, val: np.ndarray, layout: dict[str, np.ndarray],
             tasks: list[str], opts: EvaluateOptions, source: str, ids: Ids, classes: list[str] | None = None
             ) -> PredictionTable:
    """The file's `rows` laid out as `task`'s predictions frame (`layout`: its label, score and value columns on
    those rows; split val where `val`, else test; attributes, patients and sample ids from the file) and read by
    the task (Task.table): the table it scores, as a run's or a bundle's."""
    from fairmedbench.tasks.table import SAMPLE_ID

    cols = {**layout, "split": np.where(val[rows], "val", "test")}
    for key, name in zip((PATIENT_COLUMN, SAMPLE_ID), ids):
        if name is not None:
            cols[key] = np.asarray(df[name], dtype=object)[rows]
    cols.update({f"attr:{a}": v for a, v in attribute_columns(lambda c: np.asarray(df[c])[rows], opts).items()})
    return task.table(cols, tasks, opts.attributes, classes or (), where=f"{source}: ")


def _tidy(result: FairnessResult, resampled: FairnessResult | None, doc: dict[str, Any]) -> Any:
    """The tidy table; with a resampled test set, both sets' rows and a `test_set` column."""
    if resampled is None:
        return result.to_frame()
    import pandas as pd

    spec = doc["test_resample"]["params"]["spec"]
    return pd.concat([result.to_frame().assign(test_set="original"),
                      resampled.to_frame().assign(test_set=f"resampled {spec}")], ignore_index=True)


@dataclass
class Resampling:
    """The resampled test set (ids, counts, how it was drawn) and the metrics on it."""

    sample: Resampled
    result: FairnessResult


def _classification(df: Columns, val: np.ndarray, test: np.ndarray, opts: EvaluateOptions, source: str,
                    notes: list[str], progress: Callable[[int, int, str], None] | None,
                    settings: ScoreSettings, ids: Ids = (None, None)
                    ) -> tuple[FairnessResult, dict[str, np.ndarray], Resampling | None, AuditData | None]:
    """Binary (multi-label) classification: labels and scores per task column, the threshold chosen on
    validation rows when the file has any."""
    spec = None
    if opts.test_resample:
        from fairmedbench.analysis.resample import parse_test_resample

        spec = parse_test_resample(opts.test_resample)  # a bad spec fails before any metric
        if spec.attribute not in opts.attributes:
            raise InputError(f"--test-resample {spec}: {spec.attribute!r} is not among the attributes "
                             f"{opts.attributes}; add --attribute {spec.attribute}")
        if spec.method == "matched":
            _columns(df, [opts.age_column], "age (--age-column, for matched resampling)", source)
    if not opts.labels or not opts.scores:
        raise InputError("give --label and --score columns (several, comma-separated, for a multi-label task)")
    if len(opts.labels) != len(opts.scores):
        raise InputError(f"{len(opts.labels)} label column(s) but {len(opts.scores)} score column(s); "
                         "give one score column per label column, in the same order")
    if len(set(opts.labels)) != len(opts.labels):
        raise InputError(f"label columns {opts.labels} repeat: give each label column once")
    _columns(df, opts.labels, "label", source)
    _columns(df, opts.scores, "score", source)
    y = np.column_stack([as_labels(df[c], f"label column {c!r} in {source}") for c in opts.labels])
    s = np.column_stack([as_scores(df[c], f"score column {c!r} in {source}", logits=opts.logits)
                         for c in opts.scores])
    policy = opts.threshold
    if policy is None and get_profile(opts.profile).accepts_threshold:
        policy = "val_youden" if val.any() else "fixed:0.5"
        if not val.any():
            notes.append("no validation rows: operating threshold fixed:0.5 (give split=val rows to use val_youden)")
    task_names = list(opts.labels)
    task = get_task("classification")
    rows = val | test
    layout = {c: a[rows, k] for k, t in enumerate(task_names)
              for c, a in ((task.label_column.format(task=t), y), (task.score_column.format(task=t), s))}
    table = _read_as(task, df, rows, val, layout, task_names, opts, source, ids)
    # the scores are probabilities already (as_scores applied the sigmoid to logits)
    settings = replace(settings, threshold=policy, logits=False)
    result = task.score(table, settings, progress)
    resampling = audit = None
    if spec is not None or opts.report:
        from fairmedbench.metrics.classification import resolve_attributes

        attrs = {a: table.test[f"attr:{a}"] for a in opts.attributes}
        resolved = resolve_attributes(attrs, int(test.sum()), settings.bins, opts.intersect)
    if opts.report:
        from fairmedbench.report.audit import AuditData

        audit = AuditData(task_names, y[test], s[test], {a.name: a for a in resolved})
    if spec is not None:
        sample = _resample(df, test, y[test, 0], spec, resolved, opts)
        pos = sample.positions
        if len(opts.labels) > 1:
            notes.append(f"test set resampled on the first label column {opts.labels[0]!r}")
        resampling = Resampling(sample, task.score(table.take(pos), settings))
    keep = [c for c in dict.fromkeys([opts.id_column, opts.split_column, opts.patient_column, *PATIENT_COLUMNS,
                                      *opts.labels, *opts.scores, *source_columns(opts.attributes)])
            if c and c in df.columns]
    per_sample = df.rows(test, keep)
    if opts.logits:
        for c, k in zip(opts.scores, range(s.shape[1])):
            per_sample[f"{c}__prob"] = s[test, k]
    return result, per_sample, resampling, audit


def _resample(df: Columns, test: np.ndarray, y: np.ndarray, spec: ResampleSpec, resolved: list[Attribute],
              opts: EvaluateOptions) -> Resampled:
    """Draw the --test-resample set from the test rows: groups as evaluated (binned where --bins says so),
    ids from --id-column (else the row number in the file), ages from --age-column (matched only)."""
    from fairmedbench.analysis.resample import resample_test_set

    attr = next(a for a in resolved if a.name == spec.attribute)
    names = np.array(attr.groups + (None,), dtype=object)
    ids = df[opts.id_column][test] if opts.id_column else np.nonzero(test)[0]
    columns = {"group_col": spec.attribute, "label_col": opts.labels[0]}
    if spec.method == "matched":
        columns["age_col"] = opts.age_column
    return resample_test_set(spec, names[attr.codes], y, ids, opts.seed,
                             df[opts.age_column][test] if spec.method == "matched" else None, columns)


def _expand_scores(df: Columns, patterns: list[str], source: str) -> list[str]:
    """Score columns with glob patterns ('score:*') expanded against the file's columns, in the file's order."""
    from fnmatch import fnmatchcase

    out: list[str] = []
    for pat in patterns:
        if any(ch in pat for ch in "*?[") and pat not in df.columns:
            hits = [c for c in df.columns if fnmatchcase(c, pat)]
            if not hits:
                raise InputError(f"--score {pat!r} matches no column of {source}; its columns are: "
                                 f"{', '.join(df.columns[:30])}")
            out += [c for c in hits if c not in out]
        elif pat not in out:
            out.append(pat)
    return out


def _list_scores(values: np.ndarray, what: str) -> np.ndarray | None:
    """A list column (Parquet lists, or '[p0, p1, ...]' text) as an (n, C) array; None for a plain column."""
    import json

    first = values[0] if len(values) else None
    if isinstance(first, str) and first.lstrip().startswith("["):
        try:
            values = np.array([json.loads(v) for v in values], dtype=object)
        except (TypeError, ValueError):
            raise InputError(f"{what}: text that starts with '[' but is not a JSON list of numbers") from None
        first = values[0]
    if not isinstance(first, (list, tuple, np.ndarray)):
        return None
    lengths = {len(v) if isinstance(v, (list, tuple, np.ndarray)) else -1 for v in values}
    if len(lengths) != 1 or -1 in lengths:
        raise InputError(f"{what}: every row needs a list of the same number of class probabilities")
    try:
        return np.array([list(v) for v in values], dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{what}: class probabilities must be numbers") from None


def multiclass_scores(df: Columns, opts: EvaluateOptions, source: str) -> bool:
    """Whether the scores are one multi-class prediction: one label column and several score columns (or a
    pattern matching several), or one list column. Expands the patterns in `opts.scores` in place."""
    if opts.scores:
        opts.scores = _expand_scores(df, opts.scores, source)
    if len(opts.labels) != 1 or not opts.scores:
        return False
    if len(opts.scores) > 1:
        return True
    _columns(df, opts.scores, "score", source)
    return _list_scores(df[opts.scores[0]][:1], f"score column {opts.scores[0]!r}") is not None


def _class_index(values: np.ndarray, classes: list[str], what: str) -> np.ndarray:
    """Integer class indices; text labels that name the classes are mapped to their position."""
    if values.dtype.kind in "iuf":
        return values
    text = [str(v).strip() for v in values.tolist()]
    if set(text) <= set(classes):
        pos = {c: i for i, c in enumerate(classes)}
        return np.array([pos[v] for v in text], dtype=np.int64)
    try:
        return np.array([float(v) for v in text])
    except ValueError:
        bad = sorted(set(text) - set(classes))[:5]
        raise InputError(f"{what}: labels must be class indices 0..{len(classes) - 1} or the class names "
                         f"{classes}, found {bad}") from None


def _multiclass(df: Columns, val: np.ndarray, test: np.ndarray, opts: EvaluateOptions, source: str,
                notes: list[str], progress: Callable[[int, int, str], None] | None,
                settings: ScoreSettings, ids: Ids = (None, None)
                ) -> tuple[FairnessResult, dict[str, np.ndarray]]:
    """One label column (class index or name) and the class probabilities: per-group multi-class metrics."""
    _columns(df, opts.labels + opts.scores, "label/score", source)
    if len(opts.scores) == 1:
        listed = _list_scores(df[opts.scores[0]], f"score column {opts.scores[0]!r} in {source}")
        assert listed is not None, "multiclass_scores found a list column"
        s = listed
        classes = [str(k) for k in range(s.shape[1])]
    else:
        try:
            s = np.column_stack([np.asarray(df[c], dtype=np.float64) for c in opts.scores])
        except (TypeError, ValueError):
            raise InputError(f"score columns {opts.scores} in {source}: class probabilities must be numbers") from None
        prefix = "score:" if all(c.startswith("score:") for c in opts.scores) else ""
        classes = [c[len(prefix):] for c in opts.scores]
    y = _class_index(df[opts.labels[0]], classes, f"label column {opts.labels[0]!r} in {source}")
    if val.any():
        notes.append(f"{int(val.sum())} validation row(s) not used: a multi-class prediction is the argmax, "
                     "no threshold is chosen")
    task = get_task("multiclass")
    layout = {task.label_column: y[test], **{task.score_column.format(task=c): s[test, k]
                                             for k, c in enumerate(classes)}}
    table = _read_as(task, df, test, val, layout, [opts.labels[0]], opts, source, ids, classes)
    result = task.score(table, settings, progress)
    keep = [c for c in dict.fromkeys([opts.id_column, opts.split_column, opts.patient_column, *PATIENT_COLUMNS,
                                      *opts.labels, *source_columns(opts.attributes)]) if c and c in df.columns]
    per_sample = df.rows(test, keep)
    for k, c in enumerate(classes):
        per_sample[f"score:{c}"] = s[test, k]
    return result, per_sample


def _segmentation(df: pd.DataFrame, test: np.ndarray, opts: EvaluateOptions, source: str,
                  settings: ScoreSettings, patient: str | None = None, id_col: str | None = None
                  ) -> tuple[FairnessResult, pd.DataFrame]:
    """Predicted and ground-truth masks per row: DSC (IoU, HD95) per sample, or per volume with --volume, scored
    by the segmentation task."""
    from fairmedbench.engine.masks import read_mask_pairs
    from fairmedbench.metrics.segmentation import dice_batch, dice_per_volume, hd95_batch

    _columns(df, [opts.pred_mask, opts.gt_mask] + ([opts.volume] if opts.volume else []), "mask", source)
    task = get_task("segmentation")
    rows = df.loc[test].reset_index(drop=True)
    base = Path(opts.predictions).parent if opts.predictions else Path.cwd()
    pairs = read_mask_pairs(rows[opts.pred_mask].astype(str).tolist(), rows[opts.gt_mask].astype(str).tolist(),
                            base_dir=base, threshold=opts.mask_threshold)
    batch = dice_batch(pairs.preds, pairs.gts)
    per = rows.copy()
    per["dsc"], per["iou"], per["empty_gt"] = batch.dsc, batch.iou, batch.empty_gt
    hd = None
    if opts.hd95:
        hd = hd95_batch(pairs.preds, pairs.gts, spacings=pairs.spacings).values
        per["hd95"] = hd
    if opts.volume:
        vol = dice_per_volume(pairs.preds, pairs.gts, rows[opts.volume].tolist())
        first = rows.groupby(opts.volume, sort=True).first()
        varying = [a for a in source_columns(opts.attributes)
                   if (rows.groupby(opts.volume)[a].nunique(dropna=False) > 1).any()]
        if varying:
            raise InputError(f"attribute(s) {varying} change within a volume ({opts.volume!r}); "
                             "a volume must belong to one group")
        attrs = attribute_columns(lambda c: first.loc[list(vol.volume_ids), c].to_numpy(), opts)
        volumes = {"dsc": _unscored_null(vol.dsc, vol.empty_gt), "empty_gt": vol.empty_gt,
                   **{f"attr:{a}": v for a, v in attrs.items()},
                   **({} if patient is None else {PATIENT_COLUMN: first.loc[list(vol.volume_ids), patient].to_numpy()})}
        result = task.score(task.table(volumes, ["segmentation"], opts.attributes, where=f"{source}: "), settings)
        import pandas as pd

        per = pd.DataFrame({opts.volume: list(vol.volume_ids), "dsc": vol.dsc, "n_slices": vol.n_slices,
                            "empty_gt": vol.empty_gt, **attrs})
        return result, per
    layout = {"dsc": batch.dsc, "iou": batch.iou, **({"hd95": hd} if hd is not None else {}),
              "empty_gt": batch.empty_gt}
    layout = {k: v if k == "empty_gt" else _unscored_null(v, batch.empty_gt) for k, v in layout.items()}
    every = np.ones(len(rows), dtype=bool)
    result = task.score(_read_as(task, rows, every, ~every, layout, ["segmentation"], opts, source, (patient, id_col)),
                        settings)
    return result, per


def _unscored_null(values: np.ndarray, empty_gt: np.ndarray) -> np.ndarray:
    """`values` with NaN where the ground truth is empty: the segmentation task leaves those rows out of every
    metric, so a value there is none it scores."""
    return np.where(np.asarray(empty_gt, dtype=bool), np.nan, np.asarray(values, dtype=np.float64))


def expand_sources(items: list[str]) -> list[str]:
    """Prediction files from paths and glob patterns (sorted matches), each once, in the order given."""
    import glob

    out: list[str] = []
    for item in items:
        if Path(item).exists() or not glob.has_magic(item):
            found = [item]
        else:
            found = sorted(glob.glob(item, recursive=True))
            if not found:
                raise MissingResourceError(f"--predictions {item!r}: no file matches this pattern")
        out += [f for f in found if f not in out]
    return out


@dataclass
class BatchOutcome:
    """Every file's outcome and the combined tidy table (one row per metric cell, with a `source` column)."""

    outcomes: list[EvaluateOutcome]
    table: str
    out_dir: str

    @property
    def document(self) -> list[dict[str, Any]]:
        """Every file's result document, in order (what --json prints)."""
        return [o.document for o in self.outcomes]


def run_evaluate_batch(sources: list[str], opts: EvaluateOptions,
                       progress: Callable[[int, int, str], None] | None = None) -> BatchOutcome:
    """Evaluate several prediction files in one process with the same options: one result folder per file
    under the output folder, and one tidy table of all of them with a `source` column."""
    from dataclasses import replace

    if opts.demo:
        raise InputError("--demo takes no --predictions files")
    if opts.report:
        raise InputError("--report writes one page for one predictions file; give one file (or drop --report)")
    for s in sources:  # every file is checked before any is evaluated
        p = Path(s)
        if not p.is_file():
            raise MissingResourceError(f"predictions file {p} not found" if not p.exists() else f"{p} is a folder")
    batch_id = store.run_id({"kind": "evaluate-batch", "sources": sources,
                             "spec": {k: v for k, v in asdict(opts).items() if k not in OUTPUT_ONLY}})
    out_dir = Path(opts.out) if opts.out else Path("results") / "evaluate" / f"batch-{batch_id}"
    stems = [Path(s).stem for s in sources]
    names = stems if len(set(stems)) == len(stems) else [f"{i:04d}-{st}" for i, st in enumerate(stems)]
    outcomes, rows = [], []
    for i, (src, name) in enumerate(zip(sources, names)):
        one = replace(opts, predictions=src, out=str(out_dir / name / "result.json"), out_table=None,
                      labels=list(opts.labels), scores=list(opts.scores), attributes=list(opts.attributes))
        outcome = run_evaluate(one)
        outcomes.append(outcome)
        rows += [{"source": src, **r} for r in _tidy(outcome.result, outcome.resampled, outcome.document)
                 .to_dict("records")]
        if progress:
            progress(i + 1, len(sources), f"evaluated {name}")
    import pandas as pd

    table = opts.out_table or str(out_dir / "table.csv")
    store.write_table(table, pd.DataFrame(rows, columns=["source", *TIDY_COLUMNS]
                                          + (["test_set"] if opts.test_resample else [])))
    return BatchOutcome(outcomes, table, str(out_dir))


def evaluate_with(patterns: list[str], opts: EvaluateOptions) -> EvaluateOutcome | BatchOutcome:
    """`benchmark evaluate`: the files named by `patterns` (paths or globs; none with --demo) checked, then one
    evaluated (`run_evaluate`) or several in one process (`run_evaluate_batch`), with a progress bar on a terminal."""
    from fairmedbench.benchmark.arguments import check_evaluate
    from fairmedbench.engine.progress import StageProgress

    sources = expand_sources(patterns)
    check_evaluate(opts, len(sources))
    # a bar on a terminal; elsewhere (logs, pipes, --json) plain lines once the scoring has run QUIET_FOR_S seconds
    with StageProgress(after_s=0.0 if sys.stderr.isatty() else QUIET_FOR_S) as progress:
        bar = progress.labelled("metrics + bootstrap")
        if len(sources) > 1:
            return run_evaluate_batch(sources, opts, progress=bar)
        return run_evaluate(replace(opts, predictions=sources[0] if sources else None), progress=bar)
