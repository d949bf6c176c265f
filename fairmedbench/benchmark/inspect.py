"""`benchmark inspect`: encoding inspection of frozen features (an embeddings file, or a model's cached
linear-probe features on a dataset): SPLIT probe AUC per attribute against random-weight and ImageNet
baselines, a multitask head, PCA / t-SNE figures coloured by group, and KS tests on each mode corrected
over the whole family. Writes inspect.json, a tidy table and figures."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.engine import store
from fairmedbench.errors import InputError, MissingResourceError
from fairmedbench.metrics.bootstrap import N_BOOT
from fairmedbench.spec import option

if TYPE_CHECKING:
    import pandas as pd

    from fairmedbench.analysis.encoding import AUCRecord, KSFamily, Modes, Target
    from fairmedbench.engine.splits import Split
    from fairmedbench.registry.datasets.dataset import Dataset

PROJECTED = re.compile(r"^PCA Mode \d+$")
NUMBERED = re.compile(r"^(emb|embedding|feat|feature)[_ ]?\d+$", re.IGNORECASE)
LIST_COLUMNS = ("embedding", "embeddings", "features", "feature")
TSNE_COLUMNS = ("t-SNE Dimension 1", "t-SNE Dimension 2")
DEFAULT_LABELS = ("label", "disease")
DEFAULT_ATTRIBUTES = ("sex", "gender", "race")
BASELINES = ("random", "imagenet")  # a model's features are compared with the same architecture's random weights


@dataclass
class InspectOptions:
    """Everything `benchmark inspect` takes; recorded as the result's spec. Field metadata: the options."""

    embeddings: str | None = field(default=None, metadata=option(
        "CSV/Parquet (or .npy with --metadata), one row per sample", metavar="FILE"))
    metadata: str | None = field(default=None, metadata=option(
        "label and attribute columns, row by row with --embeddings", metavar="FILE"))
    features: list[str] = field(default_factory=list, metadata=option(
        "embedding columns by name", csv=True, metavar="COLS"))
    feature_prefix: str | None = field(default=None, metadata=option(
        "embedding columns: those starting with PREFIX", metavar="PREFIX"))
    list_column: str | None = field(default=None, metadata=option(
        "embedding as one list per row in COL", metavar="COL"))
    projected: bool = field(default=False, metadata=option(
        "the features are already-projected modes: analysed as given, no PCA (automatic for 'PCA Mode N' columns, "
        "named or not)"))
    refit_pca: bool = field(default=False, metadata=option(  # fit PCA even on columns named as PCA modes
        "fit PCA even on columns named 'PCA Mode N'"))
    model: str | None = field(default=None, metadata=option(
        "a model card; its linear-probe features come from the feature cache"))
    dataset: str | None = field(default=None, metadata=option("a dataset card (with --model)"))
    weights: str | None = field(default=None, metadata=option("PATH, 'random', or default: the card's source"))
    dataset_options: dict[str, Any] = field(default_factory=dict, metadata=option(
        "e.g. n=100", flag="--dataset-option", action="append", default=[], metavar="KEY=VALUE"))
    data_root: str | None = None
    split_seed: int = 0
    baselines: list[str] = field(default_factory=lambda: ["random", "imagenet"], metadata=option(
        "with --model: random (same architecture, --weights random) and/or imagenet, or none", metavar="LIST"))
    imagenet_model: str = field(default="imagenet-resnet50", metadata=option("the ImageNet baseline's model card"))
    label: str | None = field(default=None, metadata=option(
        "disease label column (default: label or disease)", metavar="COL"))
    label_pairs: list[tuple[str, str]] = field(default_factory=list, metadata=option(
        "test only these label classes against each other, e.g. 'Pleural Effusion:No Finding' (default: every "
        "pair)", flag="--label-pair", action="append", default=[], metavar="A:B"))
    attributes: list[str] = field(default_factory=list, metadata=option(
        "attribute column(s) (default: sex, gender, race where present; the card's with --model); sex*age crosses "
        "two into one attribute whose groups are the cells (F|>=60)",
        flag="--attribute", action="append", csv=True, default=None, metavar="COLS"))
    patient_column: str | None = field(default=None, metadata=option(
        "keep a patient's rows on one side of the probe split (default: patient_id when present)", metavar="COL"))
    correction: str = field(default="by", metadata=option("by (Benjamini-Yekutieli) | bh | holm | bonferroni | none"))
    correct_per: str = field(default="family", metadata=option(
        "correct over every test (family) or within each label/attribute", choices=["family", "attribute"]))
    alpha: float = 0.05
    holdout: float = field(default=0.3, metadata=option("held-out share for the probes (embeddings file)"))
    seed: int = 0
    n_boot: int = N_BOOT
    n_modes: int = field(default=4, metadata=option("PCA modes to test and plot", flag="--modes", dest="n_modes",
                                                     metavar="MODES"))
    tsne: bool = field(default=True, metadata=option(
        "skip t-SNE (when the file has none of its own)", flag="--no-tsne", dest="tsne"))
    figure_format: str = field(default="png", metadata=option(choices=["png", "svg"]))
    device: str = "auto"
    precision: str = "fp32"
    batch_size: int = 16
    cache_dir: str | None = ".fmb-cache"
    out: str | None = field(default=None, metadata=option(
        "output folder (default results/inspect/<name>-<id>/)", metavar="DIR"))
    out_table: str | None = field(default=None, metadata=option(
        "also write the tidy table here (.csv or .parquet)", metavar="FILE"))
    json: bool = field(default=False, metadata=option("print the result JSON instead of tables"))
    discover: bool = field(default=False, metadata=option(
        "find hidden subgroups (slices) where the model errs more: Domino-style error-aware mixture, fitted on one "
        "half of the patients, tested on the other; writes discover.html"))
    score: str | None = field(default=None, metadata=option(
        "with --discover: the model's score column (default: a logistic probe fitted on the discovery half)",
        metavar="COL"))
    discover_positive: str | None = field(default=None, metadata=option(
        "with --discover: the label class scored as positive (default: the second of two classes)",
        metavar="CLASS"))
    slices: int = field(default=6, metadata=option("with --discover: mixture components (candidate slices)"))
    n_perm: int = field(default=1000, metadata=option("with --discover: permutations per held-out slice test"))
    text_embeddings: str | None = field(default=None, metadata=option(
        "with --discover: text prompts' embeddings (a 'prompt' column and the image embeddings' columns) to name "
        "each slice by its closest prompts", metavar="FILE"))


@dataclass
class Inputs:
    """Features and variables ready for the analyses, plus where they came from."""

    x: np.ndarray
    feature_names: list[str]
    label: Target
    attributes: list[Target]
    train: np.ndarray
    holdout: np.ndarray
    projected: bool
    tsne: np.ndarray | None
    baselines: dict[str, np.ndarray]
    provenance: dict[str, Any]
    notes: list[str]
    patients: np.ndarray | None = None
    score: np.ndarray | None = None


@dataclass
class InspectOutcome:
    """The saved document, the tidy table and where files went."""

    document: dict[str, Any]
    table: pd.DataFrame
    paths: dict[str, str]
    notes: list[str]


def read_table(path: Path, what: str) -> pd.DataFrame:
    """A CSV/TSV/Parquet (or, for embeddings, .npy) table with errors that name the file."""
    from fairmedbench.benchmark.evaluate import read_predictions

    if path.suffix.lower() == ".npy":
        import pandas as pd

        if not path.is_file():
            raise MissingResourceError(f"{what} file {path} not found")
        try:
            arr = np.load(path, allow_pickle=False)
        except ValueError as exc:
            raise InputError(f"cannot read {path} as a numeric .npy array: {exc}") from None
        if arr.ndim != 2:
            raise InputError(f"{path}: expected a (samples, features) array, got shape {arr.shape}")
        return pd.DataFrame(arr, columns=[f"emb_{j}" for j in range(arr.shape[1])])
    return read_predictions(path, what=what)


def _named_modes(chosen: list[str], opts: InspectOptions, notes: list[str]) -> bool:
    """Whether the chosen columns are analysed as already-projected modes: when --projected says so, or when every
    one is named "PCA Mode N" (unless --refit-pca); a mix of mode and other columns is refused. Notes which."""
    named = [c for c in chosen if PROJECTED.match(c)]
    if named and len(named) < len(chosen) and not (opts.refit_pca or opts.projected):
        other = [c for c in chosen if not PROJECTED.match(c)]
        raise InputError(f"the feature columns mix PCA modes ({', '.join(named[:3])}) with other columns "
                         f"({', '.join(other[:3])}); give only the modes (analysed as given), or --refit-pca to fit "
                         "PCA on all of them")
    if opts.refit_pca:
        notes.append(f"features: PCA fitted on the {len(chosen)} given column(s) (--refit-pca)")
        return False
    if opts.projected or named:
        why = "--projected" if opts.projected else "named as PCA modes"
        notes.append(f"features: the {len(chosen)} given column(s) analysed as already-projected modes ({why}; no PCA "
                     "refit; --refit-pca refits)")
        return True
    notes.append(f"features: PCA fitted on the {len(chosen)} given column(s)")
    return False


def _feature_columns(df: pd.DataFrame, opts: InspectOptions, source: str,
                     notes: list[str]) -> tuple[np.ndarray, list[str], bool]:
    """The feature matrix, its column names and whether they are already-projected modes."""
    from fairmedbench.analysis.encoding import check_features

    cols = [str(c) for c in df.columns]
    if opts.projected and opts.refit_pca:
        raise InputError("--projected (analyse the columns as given) and --refit-pca (fit PCA on them) contradict "
                         "each other; give one")
    if opts.list_column or (not opts.features and not opts.feature_prefix and
                            not any(PROJECTED.match(c) or NUMBERED.match(c) for c in cols)):
        name = opts.list_column or next((c for c in LIST_COLUMNS if c in cols), None)
        if name is None:
            raise InputError(f"{source}: no embedding columns found; name them with --features COLS, "
                             "--feature-prefix PREFIX or --list-column COL (one list per row)")
        if name not in cols:
            raise InputError(f"--list-column {name!r} not in {source}; its columns are: {', '.join(cols[:30])}")
        return _list_column(df[name], name, source) + (opts.projected,)
    if opts.features:
        missing = [c for c in opts.features if c not in cols]
        if missing:
            raise InputError(f"feature column(s) {missing} not in {source}; its columns are: {', '.join(cols[:30])}")
        chosen = list(opts.features)
        projected = _named_modes(chosen, opts, notes)
    elif opts.feature_prefix:
        chosen = [c for c in cols if c.startswith(opts.feature_prefix)]
        if not chosen:
            raise InputError(f"no column of {source} starts with --feature-prefix {opts.feature_prefix!r}")
        projected = _named_modes(chosen, opts, notes)
    else:
        chosen = [c for c in cols if PROJECTED.match(c)]
        projected = (bool(chosen) or opts.projected) and not opts.refit_pca
        if chosen and opts.refit_pca:
            notes.append(f"features: PCA refitted on the file's PCA-mode columns ({', '.join(chosen)}) as "
                         "--refit-pca asks")
        elif chosen:
            notes.append(f"features: the file's already-projected modes ({', '.join(chosen)}), analysed as given "
                         "(no PCA refit; explained variance is not in the file)")
        else:
            chosen = [c for c in cols if NUMBERED.match(c)]
            notes.append(f"features: {len(chosen)} numbered embedding columns ({chosen[0]} ... {chosen[-1]})")
    try:
        x = df[chosen].to_numpy(dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{source}: feature columns must be numeric") from None
    return check_features(x, chosen, f"embeddings in {source}"), chosen, projected


def _list_column(col: pd.Series, name: str, source: str) -> tuple[np.ndarray, list[str]]:
    """Rows of a list column (Parquet lists, or strings like '[0.1, 0.2]') as one matrix."""
    import json

    from fairmedbench.analysis.encoding import check_features

    rows = []
    for i, v in enumerate(col.tolist()):
        if isinstance(v, str):
            try:
                v = json.loads(v)
            except json.JSONDecodeError:
                raise InputError(f"{source}: row {i} of list column {name!r} is not a list of numbers") from None
        if v is None or (isinstance(v, float) and math.isnan(v)):
            raise InputError(f"embeddings in {source}: row {i} of {name!r} has no embedding (missing); drop it")
        rows.append(np.asarray(v, dtype=np.float64).ravel())
    lengths = {r.size for r in rows}
    if len(lengths) > 1:
        first_bad = next(i for i, r in enumerate(rows) if r.size != rows[0].size)
        raise InputError(f"embeddings in {source}: list column {name!r} has rows of different lengths "
                         f"({sorted(lengths)[:5]}; row {first_bad} differs from row 0); every row needs the same size")
    x = np.vstack(rows)
    return check_features(x, [f"{name}[{j}]" for j in range(x.shape[1])], f"embeddings in {source}"), \
        [f"{name}[{j}]" for j in range(x.shape[1])]


def _variables(meta: pd.DataFrame, opts: InspectOptions, source: str, notes: list[str]
               ) -> tuple[Target, list[Target]]:
    from fairmedbench.analysis.encoding import make_target

    cols = [str(c) for c in meta.columns]
    label = opts.label or next((c for c in DEFAULT_LABELS if c in cols), None)
    if label is None:
        raise InputError(f"{source}: give the label column with --label COL (none of {DEFAULT_LABELS} is present)")
    attributes = list(opts.attributes)
    if not attributes:
        attributes = [c for c in DEFAULT_ATTRIBUTES if c in cols and c != label]
        if not attributes:
            raise InputError(f"{source}: give the attribute column(s) with --attribute COLS")
        notes.append(f"attributes: {', '.join(attributes)} (standard column names; choose with --attribute)")
    if label in attributes:
        raise InputError(f"{label!r} is both the label and an attribute; give different columns")
    if not opts.label:
        notes.append(f"label: {label!r} (choose with --label)")
    missing = [c for c in [label, *columns_read(attributes)] if c not in cols]
    if missing:
        raise InputError(f"column(s) {missing} not in {source}; its columns are: {', '.join(cols[:40])}")
    return (make_target(label, meta[label].to_numpy(), what="label"),
            [make_target(a, crossed_values(meta, a)) for a in attributes])


def columns_read(attributes: list[str]) -> list[str]:
    """The columns the attributes read: each plain one, and each part of a crossed one (sex*age)."""
    from fairmedbench.metrics.groups import crossed_parts

    return list(dict.fromkeys(c for a in attributes for c in (crossed_parts(a) or (a,))))


def crossed_values(meta: pd.DataFrame, name: str) -> np.ndarray:
    """A column's values, or a crossed attribute's cell per row ('F|>=60': its parts' values joined by '|'; None
    where any part is missing)."""
    import pandas as pd

    from fairmedbench.metrics.groups import crossed_parts

    parts = crossed_parts(name)
    if not parts:
        return meta[name].to_numpy()
    columns = [meta[p].to_numpy(dtype=object) for p in parts]
    missing = np.zeros(len(meta), dtype=bool)
    for col in columns:
        missing |= pd.isna(col)
    cells = np.array(["|".join(str(v) for v in row) for row in zip(*columns)] + [""], dtype=object)[:-1]
    cells[missing] = None
    return cells


def _check_variables(label: Target, attributes: list[Target], opts: InspectOptions, notes: list[str]) -> None:
    """Before any expensive work: --label-pair names real classes; rows without a value are announced."""
    unknown = sorted({c for pair in opts.label_pairs for c in pair} - set(label.classes))
    if unknown:
        raise InputError(f"--label-pair names unknown class(es) {unknown} of {label.name!r}; its classes are "
                         f"{', '.join(label.classes)}")
    for t in (label, *attributes):
        missing = int((t.codes < 0).sum())
        if missing:
            notes.append(f"{missing} row(s) have no {t.name!r} value: left out of its probe and KS tests")


def discover_label(label: Target, opts: InspectOptions) -> tuple[np.ndarray, np.ndarray, str]:
    """Rows with a label, their 0/1 label for --discover and the positive class (checked before any heavy work)."""
    classes = list(label.classes)
    positive = opts.discover_positive
    if positive is None:
        if len(classes) != 2:
            raise InputError(f"--discover needs a binary label: {label.name!r} has {len(classes)} classes "
                             f"({', '.join(classes)}); give --discover-positive CLASS (that class against the rest)")
        positive = classes[1]
    if positive not in classes:
        raise InputError(f"--discover-positive {positive!r} is not a class of {label.name!r}; its classes are "
                         f"{', '.join(classes)}")
    rows = label.codes >= 0
    return rows, (label.codes[rows] == classes.index(positive)).astype(np.int64), positive


def load_embeddings(opts: InspectOptions) -> Inputs:
    """Features, label and attributes from an embeddings file (and an optional metadata file, row by row)."""
    from fairmedbench.analysis.encoding import check_rows, holdout_split

    notes: list[str] = []
    path = Path(opts.embeddings)  # type: ignore[arg-type]
    df = read_table(path, "embeddings")
    provenance: dict[str, Any] = {"embeddings": {"path": str(path), "sha256": store.sha256_file(path), "rows": len(df)}}
    meta, source = df, str(path)
    if opts.metadata:
        mpath = Path(opts.metadata)
        meta = read_table(mpath, "metadata")
        provenance["metadata"] = {"path": str(mpath), "sha256": store.sha256_file(mpath), "rows": len(meta)}
        source = f"{path} + {mpath}"
        check_rows(len(df), **{f"metadata {mpath.name}": meta.index})
    x, names, projected = _feature_columns(df, opts, str(path), notes)
    label, attributes = _variables(meta, opts, source, notes)
    _check_variables(label, attributes, opts, notes)
    if opts.discover:
        discover_label(label, opts)
    check_rows(len(x), **{label.name: label.codes}, **{a.name: a.codes for a in attributes})
    patient = opts.patient_column or ("patient_id" if "patient_id" in meta.columns else None)
    if patient and patient not in meta.columns:
        raise InputError(f"--patient-column {patient!r} not in {source}")
    held = holdout_split(len(x), label.codes, opts.holdout, opts.seed,
                         None if patient is None else meta[patient].to_numpy())
    notes.append(f"SPLIT probe and multitask head: fitted on {int((~held).sum())} rows, AUC on {int(held.sum())} "
                 f"held-out rows (seeded, stratified by {label.name!r}"
                 + (f", no {patient!r} on both sides)" if patient else ")"))
    tsne = None
    if all(c in meta.columns for c in TSNE_COLUMNS) and projected:
        tsne = meta[list(TSNE_COLUMNS)].to_numpy(dtype=np.float64)
        notes.append("t-SNE: the file's own t-SNE columns (the published embedding), not recomputed")
    notes.append("baselines: none (an embeddings file has no model to re-run with random or ImageNet weights)")
    score = None
    if opts.score:
        if opts.score not in meta.columns:
            raise InputError(f"--score {opts.score!r} not in {source}; its columns are: {', '.join(cols_of(meta))}")
        try:
            score = meta[opts.score].to_numpy(dtype=np.float64)
        except (TypeError, ValueError):
            raise InputError(f"--score {opts.score!r}: the scores must be numbers") from None
        bad = np.flatnonzero(~np.isfinite(score) & (label.codes >= 0))
        if bad.size:
            raise InputError(f"--score {opts.score!r}: {bad.size} labelled row(s) have no finite score (first at row "
                             f"{int(bad[0])}); drop them or fill them in")
    return Inputs(x, names, label, attributes, ~held, held, projected, tsne, {}, provenance, notes,
                  None if patient is None else meta[patient].to_numpy(), score)


def cols_of(df: pd.DataFrame) -> list[str]:
    """The first 40 column names, for messages."""
    return [str(c) for c in df.columns[:40]]


def _lp_features(model_name: str, weights: str | None, ds: Dataset, split: Split, opts: InspectOptions,
                 progress: Callable[[str, int, int], None] | None) -> tuple[np.ndarray, dict[str, Any]]:
    """Frozen features of every split (train, val, test rows in that order) through the linear-probe usage,
    so they come from (and go to) the same feature cache as `benchmark run`."""
    from fairmedbench.adapters import USAGES, RunContext
    from fairmedbench.engine.device import select_device
    from fairmedbench.registry.models import load_model
    from fairmedbench.tasks.common import split_views

    device = select_device(opts.device)
    model = load_model(model_name, weights, device=device)
    views = split_views(ds, split)
    ctx = RunContext(device=device, precision=opts.precision, cache_dir=opts.cache_dir, batch_size=opts.batch_size,
                     dataset_card=ds.card, progress=progress)
    prepared = USAGES.get("lp").prepare(model, views, ctx)
    x = np.vstack([prepared.inputs[k] for k in ("train", "val", "test")]).astype(np.float64)
    return x, {"model": model_name, "weights": model.weights.identity, "weights_source": model.weights.source,
               "features": prepared.notes["features"]}


def load_model_features(opts: InspectOptions, progress: Callable[[str, int, int], None] | None = None) -> Inputs:
    """Features of `opts.model` on `opts.dataset` (train+val fit the probes, test is held out), with the
    random-weight and ImageNet baselines' features on the same samples."""
    from fairmedbench.analysis.encoding import check_features, make_target
    from fairmedbench.benchmark.datasets import load_with_split

    if opts.model is None or opts.dataset is None:
        raise InputError("inspect: give --embeddings, or --model with --dataset")
    notes: list[str] = []
    ds, split = load_with_split(opts.dataset, opts.data_root, seed=opts.split_seed, **opts.dataset_options)
    card = ds.card
    if card.label_column is None:
        raise InputError(f"inspect: dataset {card.name!r} has no label column to probe")
    order = np.concatenate([split.train, split.val, split.test])
    n_fit = len(split.train) + len(split.val)
    names = opts.attributes or [a.name for a in card.attributes if not a.name.endswith("_bins")]
    for a in names:
        card.attribute_parts(a)
    ds.add_crossed(names)  # the cell column attr:sex*age of each crossed attribute
    samples = ds.samples.iloc[order]
    label = make_target(card.label_column, samples[card.label_column].to_numpy(), what="label")
    attributes = [make_target(a, samples[f"attr:{a}"].to_numpy()) for a in names]
    _check_variables(label, attributes, opts, notes)
    if opts.discover:
        discover_label(label, opts)
    x, prov = _lp_features(opts.model, opts.weights, ds, split, opts, progress)
    x = check_features(x, None, f"features of {opts.model}")
    held = np.arange(len(order)) >= n_fit
    provenance = {"dataset": {"name": card.name, "fingerprint": ds.fingerprint, "split_fingerprint": split.fingerprint,
                              "n_fit": n_fit, "n_test": len(split.test), "options": opts.dataset_options},
                  **prov, "baselines": {}}
    notes.append(f"SPLIT probe and multitask head: fitted on train+val ({n_fit}), AUC on test ({len(split.test)}); "
                 "PCA, t-SNE and KS use every sample")
    baselines: dict[str, np.ndarray] = {}
    for b in opts.baselines:
        if b == "random":
            bx, bprov = _lp_features(opts.model, "random", ds, split, opts, progress)
            baselines["random"] = check_features(bx, None, "random-weight features")
            provenance["baselines"]["random"] = bprov
        elif b == "imagenet":
            try:
                bx, bprov = _lp_features(opts.imagenet_model, None, ds, split, opts, progress)
            except MissingResourceError as exc:
                provenance["baselines"]["imagenet"] = {"model": opts.imagenet_model, "computed": False,
                                                       "reason": str(exc)}
                notes.append(f"ImageNet baseline NOT computed: no local ImageNet weights for {opts.imagenet_model!r} "
                             f"({exc})")
                continue
            baselines["imagenet"] = check_features(bx, None, "ImageNet features")
            provenance["baselines"]["imagenet"] = bprov
    return Inputs(x, [f"{opts.model}[{j}]" for j in range(x.shape[1])], label, attributes, ~held, held, False, None,
                  baselines, provenance, notes)


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _check_options(opts: InspectOptions) -> None:
    """The flag combinations and choices, checked before anything is read."""
    from fairmedbench.analysis.encoding import CORRECT_PER
    from fairmedbench.metrics.stats import ADJUST_METHODS
    from fairmedbench.report import figures

    if bool(opts.embeddings) == bool(opts.model or opts.dataset):
        raise InputError("give either --embeddings FILE or --model M --dataset D")
    if opts.model and not opts.dataset or opts.dataset and not opts.model:
        raise InputError("--model and --dataset go together")
    if opts.correction not in ADJUST_METHODS:
        raise InputError(f"--correction {opts.correction!r}: choose one of {', '.join(ADJUST_METHODS)}")
    if opts.correct_per not in CORRECT_PER:
        raise InputError(f"--correct-per {opts.correct_per!r}: choose one of {', '.join(CORRECT_PER)}")
    if opts.figure_format not in figures.FORMATS:
        raise InputError(f"--figure-format {opts.figure_format!r}: choose one of {', '.join(figures.FORMATS)}")
    if opts.n_boot < 0 or opts.n_modes < 1:
        raise InputError("--n-boot must be >= 0 and --modes >= 1")
    if not opts.discover and (opts.score or opts.discover_positive or opts.text_embeddings):
        raise InputError("--score, --discover-positive and --text-embeddings go with --discover")
    if opts.score and not opts.embeddings:
        raise InputError("--score reads a column of --embeddings/--metadata; with --model the discovery uses a "
                         "logistic probe fitted on the discovery half")
    if opts.slices < 2 or opts.n_perm < 1:
        raise InputError("--slices must be >= 2 and --n-perm >= 1")


def _check_baselines(baselines: list[str]) -> None:
    """Every --baselines name is known (checked before any feature extraction)."""
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise InputError(f"--baselines {','.join(unknown)}: choose from {', '.join(BASELINES)} (comma-separated), "
                         "or none")


def _split_probe(inp: Inputs, opts: InspectOptions) -> list[AUCRecord]:
    """SPLIT: each attribute predicted from the frozen features, against the baselines on the same held-out rows."""
    from fairmedbench.analysis.encoding import held_out_aucs, logistic_probe

    records: list[AUCRecord] = []
    feature_sets = {"model" if opts.model else "embeddings": inp.x, **inp.baselines}
    ref = "random" if "random" in inp.baselines else None
    for attr in inp.attributes:
        probs = {name: logistic_probe(x, attr.codes, inp.train, inp.holdout, seed=opts.seed)
                 for name, x in feature_sets.items()}
        # with a random-weight baseline: also every feature set minus it, paired on the same resamples
        records += held_out_aucs(attr.name, attr.codes[inp.holdout], probs, attr.classes, reference=ref,
                                 n_boot=opts.n_boot, seed=opts.seed)
    return records


def _auc_rows(analysis: str, records: list[AUCRecord]) -> list[dict[str, Any]]:
    """Tidy-table rows of held-out AUC records."""
    return [{"analysis": analysis, "features": r.features, "variable": r.target, "group": r.group, "n": r.n,
             "n_pos": r.n_pos, "value": r.value, "ci_low": r.ci_low, "ci_high": r.ci_high} for r in records]


def _modes(inp: Inputs, opts: InspectOptions) -> tuple[Modes, list[dict[str, Any]]]:
    """The modes analysed (the given projected columns, or PCA) and the explained-variance rows of a PCA."""
    from fairmedbench.analysis.encoding import Modes, pca_modes

    if inp.projected:
        k = min(opts.n_modes, inp.x.shape[1])
        return Modes(inp.x[:, :k], tuple(inp.feature_names[:k]), None, True), []
    modes = pca_modes(inp.x, opts.n_modes, seed=opts.seed)
    return modes, [{"analysis": "pca_explained_variance", "features": "model" if opts.model else "embeddings",
                    "mode": name, "value": ev} for name, ev in zip(modes.names, modes.explained_variance_ratio or ())]


def _ks_rows(ks: KSFamily) -> list[dict[str, Any]]:
    """Tidy-table rows of the KS tests on each mode."""
    return [{"analysis": "ks", "features": "modes", "variable": t.variable, "mode": t.feature, "group": t.group_a,
             "group_b": t.group_b, "n": t.n_a, "n_b": t.n_b, "value": t.statistic, "p_value": t.p_value,
             "p_adjusted": t.p_adjusted, "reject": t.reject, "correction": f"{ks.correction} per {ks.per}"}
            for t in ks.rows]


def _tsne(inp: Inputs, opts: InspectOptions) -> np.ndarray | None:
    """The given t-SNE coordinates, else (with --tsne) a t-SNE of the features, noted."""
    from fairmedbench.analysis.encoding import tsne_2d

    if inp.tsne is not None or not opts.tsne:
        return inp.tsne
    tsne = tsne_2d(inp.x, seed=opts.seed)
    inp.notes.append("t-SNE: scikit-learn TSNE on the features" + (" (the given modes)" if inp.projected else ""))
    return tsne


@dataclass
class _Analyses:
    """What `run_inspect` computed, before anything is written; `rows` is the tidy table's rows."""

    split: list[AUCRecord]
    multitask: list[AUCRecord]
    modes: Modes
    ks: KSFamily
    discovery: dict[str, Any] | None
    rows: list[dict[str, Any]]


def _analyse(inp: Inputs, opts: InspectOptions, text: tuple[np.ndarray, list[str]] | None) -> _Analyses:
    """Every analysis: SPLIT probe, multitask head, modes with their KS tests and (with --discover) slices."""
    from fairmedbench.analysis.encoding import ks_family, multitask_head

    split_records = _split_probe(inp, opts)
    mt = multitask_head(inp.x, [inp.label, *inp.attributes], inp.train, inp.holdout, seed=opts.seed,
                        n_boot=opts.n_boot)
    modes, pca_rows = _modes(inp, opts)
    pairs = {inp.label.name: opts.label_pairs} if opts.label_pairs else None
    ks = ks_family(modes.values, modes.names, [inp.label, *inp.attributes], pairs=pairs, correction=opts.correction,
                   per=opts.correct_per, alpha=opts.alpha)
    discovery = _discover(inp, opts, text) if opts.discover else None
    rows = [*_auc_rows("split_auc", split_records), *_auc_rows("multitask_auc", mt), *pca_rows, *_ks_rows(ks),
            *(discovery_rows(discovery) if discovery is not None else [])]
    return _Analyses(split_records, mt, modes, ks, discovery, rows)


def _table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The tidy table, one row per number, in a fixed column order."""
    import pandas as pd

    return pd.DataFrame(rows, columns=["analysis", "features", "variable", "mode", "group", "group_b", "n", "n_b",
                                       "n_pos", "value", "ci_low", "ci_high", "p_value", "p_adjusted", "reject",
                                       "correction"]).astype({"n": "Int64", "n_b": "Int64", "n_pos": "Int64"})


def _ks_doc(ks: KSFamily) -> dict[str, Any]:
    """inspect.json's `ks` section."""
    return {"correction": ks.correction, "per": ks.per, "alpha": ks.alpha, "n_tests": len(ks.rows),
            "skipped": ks.skipped, "tests": [
                {"variable": r.variable, "mode": r.feature, "group_a": r.group_a, "group_b": r.group_b, "n_a": r.n_a,
                 "n_b": r.n_b, "statistic": r.statistic, "p_value": r.p_value, "p_adjusted": r.p_adjusted,
                 "reject": r.reject} for r in ks.rows]}


def _document(spec: dict[str, Any], rid: str, inp: Inputs, an: _Analyses, figure_names: list[str],
              timings: dict[str, float]) -> dict[str, Any]:
    """inspect.json's document."""
    modes = an.modes
    return {
        "schema_version": store.SCHEMA_VERSION, "kind": "inspect", "run_id": rid, "spec": spec,
        "inputs": inp.provenance,
        "split": {"n_fit": int(inp.train.sum()), "n_holdout": int(inp.holdout.sum())},
        "label": {"name": inp.label.name, "classes": list(inp.label.classes)},
        "attributes": {a.name: list(a.classes) for a in inp.attributes},
        "split_probe": [{k: _jsonable(v) for k, v in asdict(r).items()} for r in an.split],
        "multitask": [{k: _jsonable(v) for k, v in asdict(r).items()} for r in an.multitask],
        "modes": {"names": list(modes.names), "projected_in_input": modes.projected_in_input,
                  "explained_variance_ratio": list(modes.explained_variance_ratio)
                  if modes.explained_variance_ratio else None},
        "ks": _ks_doc(an.ks),
        "figures": figure_names,
        **({"discovery": an.discovery} if an.discovery is not None else {}),
        "notes": inp.notes,
        "timings": timings,
    }


def run_inspect(opts: InspectOptions, progress: Callable[[str, int, int], None] | None = None) -> InspectOutcome:
    """Validate, load features, run every analysis, write inspect.json, the tidy table and the figures."""
    t0 = time.perf_counter()
    _check_options(opts)
    text = _text_embeddings(opts.text_embeddings) if opts.text_embeddings else None
    _check_baselines(opts.baselines)
    inp = load_embeddings(opts) if opts.embeddings else load_model_features(opts, progress)
    t_load = time.perf_counter() - t0
    an = _analyse(inp, opts, text)
    t_analysis = time.perf_counter() - t0 - t_load
    tsne = _tsne(inp, opts)
    # Output folder, figures, table, JSON.
    spec = {"command": "inspect", **{k: v for k, v in asdict(opts).items()
                                     if k not in ("out", "out_table", "device", "batch_size", "cache_dir", "json")}}
    rid = store.run_id({"kind": "inspect", "spec": spec, "inputs": inp.provenance})
    stem = Path(opts.embeddings).stem if opts.embeddings else f"{opts.model}-{opts.dataset}"
    out_dir = Path(opts.out) if opts.out else Path("results") / "inspect" / f"{stem}-{rid}"
    fig_paths = _figures(out_dir / "figures", opts.figure_format, an.modes, tsne, inp, an.split)
    table = _table(an.rows)
    paths = {"result": str(out_dir / "inspect.json"), "table": str(out_dir / "table.csv")}
    store.write_table(out_dir / "table.csv", table)
    if opts.out_table:
        store.write_table(opts.out_table, table)
        paths["table"] = opts.out_table
    doc = _document(spec, rid, inp, an, [str(p.relative_to(out_dir)) for p in fig_paths],
                    {"load": t_load, "analysis": t_analysis, "total": time.perf_counter() - t0})
    store.write_json(out_dir / "inspect.json", doc)
    paths["figures"] = str(out_dir / "figures")
    if an.discovery is not None:
        from fairmedbench.report.slices import write_discovery_page

        paths["page"] = str(write_discovery_page(out_dir / "discover.html", doc))
    return InspectOutcome(doc, table, paths, inp.notes)


def _text_embeddings(path_text: str) -> tuple[np.ndarray, list[str]]:
    """Prompt embeddings: a 'prompt' column and numeric embedding columns, one row per prompt."""
    from fairmedbench.analysis.encoding import check_features

    df = read_table(Path(path_text), "text embeddings")
    if "prompt" not in df.columns:
        raise InputError(f"--text-embeddings {path_text}: needs a 'prompt' column and the embedding columns")
    values = df.drop(columns=["prompt"])
    try:
        t = values.to_numpy(dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"--text-embeddings {path_text}: every column but 'prompt' must be numeric") from None
    return check_features(t, [str(c) for c in values.columns], f"text embeddings in {path_text}"), \
        [str(v) for v in df["prompt"]]


def _discover(inp: Inputs, opts: InspectOptions, text: tuple[np.ndarray, list[str]] | None) -> dict[str, Any]:
    """Slice discovery on the rows with a label; the document's `discovery` section."""
    from fairmedbench.analysis.encoding import Target
    from fairmedbench.analysis.slices import discover_slices

    rows, y, positive = discover_label(inp.label, opts)
    if text is not None and text[0].shape[1] != inp.x.shape[1]:
        raise InputError(f"--text-embeddings: {text[0].shape[1]} dimensions, the image embeddings have "
                         f"{inp.x.shape[1]}; both must come from the same model's shared space")
    attrs = [Target(a.name, a.codes[rows], a.classes) for a in inp.attributes]
    found = discover_slices(inp.x[rows], y, None if inp.score is None else inp.score[rows], attributes=attrs,
                            patients=None if inp.patients is None else inp.patients[rows],
                            n_components=opts.slices, n_perm=opts.n_perm, correction=opts.correction,
                            alpha=opts.alpha, seed=opts.seed, text=None if text is None else text[0],
                            prompts=() if text is None else text[1])
    return {"label": inp.label.name, "positive": positive, "score": opts.score or "logistic probe (discovery half)",
            "n_rows": int(rows.sum()), "settings": found.settings, "notes": found.notes,
            "slices": [_clean(asdict(sl)) for sl in found.slices]}


def _clean(v: Any) -> Any:
    """NaN and infinities to None, through lists and dicts (JSON has no NaN)."""
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return _jsonable(v)


def discovery_rows(discovery: dict[str, Any]) -> list[dict[str, Any]]:
    """Tidy-table rows: each slice's held-out gap and each attribute group's share in it."""
    out: list[dict[str, Any]] = []
    alpha = float(discovery["settings"]["alpha"])
    for i, sl in enumerate(discovery["slices"], 1):
        out.append({"analysis": "slice_auc_gap", "features": "embeddings", "variable": discovery["label"],
                    "group": f"slice {i}", "n": sl["n"], "n_pos": sl["n_pos"], "value": sl["gap"],
                    "p_value": sl["p_value"], "p_adjusted": sl["p_adjusted"], "reject": sl["significant"],
                    "correction": discovery["settings"]["correction"]})
        for e in sl["enrichment"]:
            out.append({"analysis": "slice_enrichment", "features": f"slice {i}", "variable": e["attribute"],
                        "group": e["group"], "n": e["n_in_slice"], "value": e["share_slice"],
                        "p_value": e["p_value"], "p_adjusted": e["p_adjusted"],
                        "reject": bool(e["p_adjusted"] is not None and e["p_adjusted"] < alpha),
                        "correction": discovery["settings"]["correction"]})
    return out


def _figures(folder: Path, fmt: str, modes: Modes, tsne: np.ndarray | None, inp: Inputs,
             split_records: list[AUCRecord]) -> list[Path]:
    """Joint scatter + marginal densities of modes 1+2, 3+4 and t-SNE for the label and each attribute,
    the explained variance (when known) and the SPLIT AUCs with CIs."""
    from fairmedbench.report import figures

    out: list[Path] = []
    planes = [(modes.values[:, i], modes.values[:, i + 1], modes.names[i], modes.names[i + 1], f"pca-{i + 1}+{i + 2}")
              for i in range(0, len(modes.names) - 1, 2)]
    if tsne is not None:
        planes.append((tsne[:, 0], tsne[:, 1], "t-SNE 1", "t-SNE 2", "tsne"))
    for var in (inp.label, *inp.attributes):
        slug = re.sub(r"[^A-Za-z0-9_-]+", "_", var.name)
        for x, y, xl, yl, tag in planes:
            out.append(figures.joint_scatter(x, y, var.codes, var.classes, xlabel=xl, ylabel=yl,
                                             title=f"{tag}: {var.name}", path=folder / f"{tag}-{slug}.{fmt}"))
    if modes.explained_variance_ratio:
        out.append(figures.explained_variance(modes.explained_variance_ratio, title="PCA explained variance",
                                              path=folder / f"pca-explained-variance.{fmt}"))
    multi = {r.target for r in split_records if r.group == "__macro__"}
    shown = [r for r in split_records if " - " not in r.features and (r.group == "__macro__" or r.target not in multi)]
    if shown:
        names = [f"{r.target} ({r.features}{', macro' if r.group == '__macro__' else ''})" for r in shown]
        out.append(figures.auc_intervals(names, [r.value for r in shown],
                                         [r.ci_low for r in shown], [r.ci_high for r in shown],
                                         title="SPLIT: attribute predicted from frozen features (held-out AUC)",
                                         path=folder / f"split-auc.{fmt}"))
    return out
