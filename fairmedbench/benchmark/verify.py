"""`benchmark verify BUNDLE`: re-run a submitted model from its declared weights on a seeded sample of the board's
test items and check that it gives the submitted per-sample scores; only then is a board row `verified`.

How each result is re-run: its RunConfig is rebuilt from the result document's spec (model, dataset, attributes,
usage, hyperparameters, mitigation, split, threshold, profile) and resolved here, so the data fingerprint, split
fingerprint and weights identity must come out equal to the submitted ones; then the task's own runner (the
function `benchmark run` uses) runs on the same split with its test part replaced by the sample. Zero-shot
usages (sam-prompt on LiteMedSAM, clip-zs) score the sampled items directly. A learned head (lp, ...) is
re-trained with the declared seed on the declared train and validation splits, so the training items are encoded
again; we chose re-training over shipping the head's weights because it also proves the head was fit on the
train split (a head fit to the test labels would otherwise verify). Every validation score (free: re-training
computes them) and every sampled test score must match; so must every score of an entry's external datasets
(`--eval-dataset`), whose test splits the re-run scores whole.

The re-run is in the precision the submitted run recorded (fp32, or bf16 autocast), on the chosen device: a bf16
run re-run in fp32 differs by more than rounding wherever a learned head amplifies feature differences (a bf16
run-suite bundle of random-weight ResNet-50 differed from its fp32 re-run by up to 0.284; see
`leaderboards.suites.DEFAULT_TOLERANCES`). A CPU without native bf16 emulates it, several times slower. Tolerance
(absolute, on probabilities or per-sample DSC): the board's, which its suite declares per precision of the submitted
run (`leaderboards.suites.Suite.tolerances`, defaults `DEFAULT_TOLERANCES` with their reasons: 1e-4 for an fp32 run,
0.05 for a bf16 run); `--tolerance` may only tighten it, and a looser value is refused before anything runs. A
forged score vector (scores ~ labels) differs from a real model's by far more (0.3 and above in the tests).

A stored submission is verified only when its seal checks under the board's key (`leaderboards.seal`); the record
is then MACed under that key and bound to the submission's content hash (`tiers.write_verification`).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import tempfile
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench import __version__
from fairmedbench.errors import InputError, MissingResourceError
from fairmedbench.spec import option

if TYPE_CHECKING:
    import pandas as pd

    from fairmedbench.leaderboards.seal import BoardKey
    from fairmedbench.leaderboards.suites import Entry, Suite
    from fairmedbench.spec import RunOptions, RunSpec

DEFAULT_SAMPLE = 64
# identity fields the verifier sets itself: the precision (the recorded one), no bootstrap, the one seed, its version
OWN_FIELDS = ("precision", "n_boot", "n_perm", "seeds", "seed", "engine")


@dataclasses.dataclass(frozen=True)
class VerifyOptions:
    """`benchmark verify`'s options."""

    bundle: str = field(metadata=option(
        "a stored submission (leaderboards/<board>/submissions/<model>/<revision>) or a bundle folder (checked, not "
        "recorded)", flag="bundle"))
    board: str | None = field(default=None, metadata=option("the board suite (default: the bundle's suite.json)"))
    sample: int = field(default=DEFAULT_SAMPLE, metadata=option(
        f"test items re-run per entry and seed (default {DEFAULT_SAMPLE})"))
    seed: int = field(default=0, metadata=option("seed of the sample"))
    tolerance: float | None = field(default=None, metadata=option(
        "absolute tolerance on per-sample scores, at most the board's (default: the board's, which its suite declares "
        "per precision of the submitted run; `benchmark describe suite NAME` shows it)", type=float))
    weights: str | None = field(default=None, metadata=option(
        "the weights file when the card's default source is not available here"))


@dataclasses.dataclass
class Verification:
    """The outcome: passed or not, one record per entry, and the lines the CLI prints."""

    passed: bool
    record: dict[str, Any]
    recorded_at: Path | None = None

    def lines(self) -> list[str]:
        """One line per entry and a closing verdict."""
        out = []
        for key, e in self.record["entries"].items():
            diff = "n/a" if e["max_abs_diff"] is None else f"{e['max_abs_diff']:.3g}"
            out.append(f"{key}: {'passed' if e['passed'] else 'FAILED'} ({e['n_compared']} scores compared, max |diff| "
                       f"{diff}, tolerance {e['tolerance']:g}, re-run in {e.get('precision') or 'fp32'})"
                       + "".join(f"; {r}" for r in e["reasons"]))
        out.append(("verified" if self.passed else "not verified") + (f"; recorded in {self.recorded_at}"
                                                                       if self.recorded_at else "; not recorded "
                                                                       "(not a stored submission: submit it first)"))
        return out


def _read(path: Path) -> Any:
    return json.loads(path.read_text())


def sample_ids(test_ids: list[str], n: int, seed: int) -> list[str]:
    """A seeded random sample of n test ids (all when there are fewer), drawn from the sorted ids, sorted."""
    ids = sorted(test_ids)
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(ids), size=min(n, len(ids)), replace=False)
    return sorted(ids[i] for i in pick)


def spec_from_document(doc_spec: dict[str, Any], weights: str | None, split_file: str | None = None) -> RunSpec:
    """The RunSpec that resolves to the document's RunConfig, in its recorded precision (`rerun_precision`) without
    bootstrap, for its one seed; a run
    on an imported split (a real board's) is re-run on `split_file`, the board's split rebuilt from the data."""
    from fairmedbench.metrics.profiles import get_profile
    from fairmedbench.spec import RunSpec

    if doc_spec.get("split_seed") == -1 and split_file is None:
        raise InputError("the run used an imported split file that is not a board's pinned test set; verification "
                         "re-draws the dataset's own split or rebuilds a real board's")
    if doc_spec.get("sampling"):
        raise InputError(f"the run sampled its splits ({doc_spec['sampling']}); verification replaces the test split "
                         "by a sample of it, which a sampled run would draw differently (board runs are unsampled)")
    names = {f.name for f in dataclasses.fields(RunSpec)} - {"weights", "precision", "n_boot", "n_perm", "seeds",
                                                               "hparams", "split_file"}
    kw = {k: doc_spec[k] for k in names if k in doc_spec and doc_spec[k] is not None}
    kw["attributes"] = tuple(kw.get("attributes", ()))
    # external datasets by their labels (name and reader options, as --eval-dataset takes them)
    kw["eval_datasets"] = tuple(e["label"] for e in doc_spec.get("eval_datasets", ()))
    # val_youden is what a run without --threshold resolves to (the only value of a segmentation, multi-class or
    # group_thresholds run, which refuse --threshold)
    profile = get_profile(doc_spec.get("profile", "default"))
    if doc_spec.get("threshold") == "val_youden" or not profile.accepts_threshold:
        kw.pop("threshold", None)
    hparams = {**doc_spec.get("train_hparams", {}), **doc_spec.get("usage_hparams", {}),
               **doc_spec.get("mitigation_hparams", {})}
    # verify compares per-sample scores: no intervals or tests are computed
    return RunSpec(**kw, weights=weights, precision=rerun_precision(doc_spec), n_boot=0, n_perm=0,
                   seeds=(int(doc_spec["seed"]),),
                   hparams=hparams, split_file=split_file if doc_spec.get("split_seed") == -1 else None)


def rerun_precision(doc_spec: dict[str, Any]) -> str:
    """The precision a result is re-run in: the one its run recorded (fp32 or bf16); fp32 for a run recording none."""
    precision = doc_spec.get("precision")
    return precision if precision in ("fp32", "bf16") else "fp32"


def _weights_arg(doc_spec: dict[str, Any], weights: str | None) -> str | None:
    """--weights for the re-run: the seeded random init the run recorded, else what the verifier gave (None: the
    card's default source: package, hub cache or URL download)."""
    w = str(doc_spec.get("weights", ""))
    if w.startswith("random:seed="):
        return f"random:{w.split('=', 1)[1]}"
    return weights


def _declared_weights(bundle: Path, model: dict[str, Any]) -> str:
    """The weights a submission declares (model.json's sha256, or the seeded random init its runs name); refuses
    a submission whose weights are not provided: it can never be verified."""
    from fairmedbench.leaderboards.submit import weights_identity

    runs = {str(_read(p)["spec"].get("weights")) for p in sorted((bundle / "results").glob("*/seed*.json"))}
    declared = weights_identity(model.get("weights_sha256"), next(iter(runs)) if len(runs) == 1 else None)
    if declared is None:
        raise InputError(f"{bundle}: weights not provided (model.json gives no weights sha256 and the runs are not a "
                         "seeded random init), so this submission can never be verified; resubmit it under a new "
                         "revision with the sha256 of its weights")
    return declared


def _rerun(doc: dict[str, Any], ids: list[str], weights: str | None, opts: RunOptions,
           split_file: str | None = None, declared: str | None = None
           ) -> tuple[pd.DataFrame | None, list[pd.DataFrame], list[str]]:
    """Re-run one result document's config on the sampled test ids; (predictions frame, the predictions frame of
    each external dataset, whose whole test split is re-run, problems). The weights read for the re-run must hash to
    the `declared` identity (model.json's sha256, or the seeded random init)."""
    import pandas as pd

    from fairmedbench.adapters import RunContext
    from fairmedbench.benchmark.resolve import resolve_run
    from fairmedbench.engine.device import encoder_batch_size
    from fairmedbench.engine.splits import Split
    from fairmedbench.registry.models import load_model
    from fairmedbench.tasks.common import RunInputs

    spec = spec_from_document(doc["spec"], _weights_arg(doc["spec"], weights), split_file)
    resolved = resolve_run(spec, data_root=opts.data_root, device=opts.device, verify_weights=True)
    mine, theirs = resolved.config.identity(), doc["spec"]
    if declared is not None and mine.get("weights") != declared:
        return None, [], [f"the weights read for the re-run are {str(mine.get('weights'))[:24]}, not the declared "
                      f"{declared[:24]} (give the declared file with --weights)"]
    differ = sorted(k for k in set(mine) | set(theirs) if k not in OWN_FIELDS and mine.get(k) != theirs.get(k))
    if differ:
        return None, [], [f"the re-run resolves differently from the submitted run in {', '.join(differ)} (submitted "
                      + "; ".join(f"{k}={str(theirs.get(k))[:40]}" for k in differ[:3]) + ")"]
    split, ds = resolved.split, resolved.dataset
    assert split.positions is not None, "resolve_run binds the split to its dataset"
    test_ids = set(split.ids["test"])
    absent = [i for i in ids if i not in test_ids]
    if absent:
        return None, [], [f"{len(absent)} sampled id(s) are not in the resolved test split, e.g. {absent[0]!r}"]
    index = {str(s): i for i, s in enumerate(ds.samples["sample_id"].astype(str))}
    sample = Split({**split.ids, "test": tuple(ids)}, split.policy, split.seed, split.dataset,
                   split.dataset_fingerprint, {**split.positions,
                                                "test": np.array([index[i] for i in ids], dtype=np.int64)})
    config = resolved.config
    model = load_model(config.model, spec.weights, device=resolved.device, verify=True)
    checked = resolved.checked
    info = {"dataset": {"name": config.dataset}, "model": {"name": config.model, "weights": model.weights.identity},
            "precision": config.precision}
    # the feature cache is keyed by the content of every image encoded (engine.features), so reading it is as
    # trustworthy as re-encoding: features of the sampled test items and of what the head trains on are reused
    ctx = RunContext(device=resolved.device, precision=config.precision, cache_dir=opts.cache_dir,
                     batch_size=encoder_batch_size(opts.batch_size, resolved.device), num_workers=opts.num_workers,
                     dataset_card=checked.dataset_card,
                     hparams=config.hparams, progress=opts.progress)
    with tempfile.TemporaryDirectory(prefix="fmb-verify-") as tmp:
        forced = dataclasses.replace(opts, force=True)
        checked.task.run()(RunInputs(config, checked.usage, model, ds, sample, ctx, forced, Path(tmp), info, 0.0,
                                     resolved.externals))  # as benchmark.run passes them
        frame = pd.read_parquet(Path(tmp) / f"seed{config.seeds[0]}.predictions.parquet")
        externals = [pd.read_parquet(Path(tmp) / e["predictions"]) for e in doc.get("external", [])]
    return frame, externals, []


def _compare(sub: pd.DataFrame, again: pd.DataFrame, ids: list[str], block: dict[str, Any]
             ) -> tuple[int, float | None, list[str]]:
    """(values compared, max |diff|, problems) between submitted and re-run scores: sampled test ids and all val.
    The task's value columns (ValueColumn roles) say what else is compared: its other 'score' columns, where its
    'unscored' markers and the nulls of its 'distance' columns fall."""
    from fairmedbench.tasks.base import get_task

    cols, task = block["columns"], get_task(block["format"])
    score_cols = list(cols["scores"]) + [c for c in task.columns_of("score") if c not in cols["scores"]]
    key = [cols["split"], cols["id"]]
    want = sub[(sub[cols["split"]] == "val") | sub[cols["id"]].astype(str).isin(ids)]
    got = again.set_index(key)
    missing = [i for i in want.set_index(key).index if i not in got.index]
    if missing:
        return 0, None, [f"the re-run has no score for {len(missing)} submitted item(s), e.g. {missing[0]}"]
    index = want.set_index(key).index
    scored, problems = np.ones(len(index), dtype=bool), []
    for mark in (c for c in task.columns_of("unscored") if c in want.columns):  # covered, not scored: must agree
        claimed = want[mark].to_numpy(dtype=bool)
        found = got.loc[index, mark].to_numpy(dtype=bool)
        if (claimed != found).any():
            problems.append(f"{int((claimed != found).sum())} sampled item(s) disagree with the data on {mark} "
                            f"(covered but not scored), e.g. {index[np.argmax(claimed != found)]}")
        scored &= ~(claimed | found)
    for dist in (c for c in task.columns_of("distance") if c in want.columns and c in got.columns):
        null_sub = want[dist].isna().to_numpy() & scored  # e.g. a null HD95 (empty prediction) must be one here too
        null_run = got.loc[index, dist].isna().to_numpy() & scored
        if (null_sub != null_run).any():
            problems.append(f"{int((null_sub != null_run).sum())} sampled item(s) have a null {dist} where the "
                            f"re-run has a value, or the reverse, e.g. {index[np.argmax(null_sub != null_run)]}")
    a = want.set_index(key)[score_cols].to_numpy(dtype=np.float64)[scored]
    b = got.loc[index, score_cols].to_numpy(dtype=np.float64)[scored]
    return int(a.size), float(np.max(np.abs(a - b))) if a.size else None, problems


@dataclasses.dataclass(frozen=True)
class _Rerun:
    """What every re-run of one bundle shares: the sample size and its seed, the --tolerance asked, the weights given
    and the declared identity, the run options."""

    sample: int
    seed: int
    tolerance: float | None
    weights: str | None
    declared: str
    opts: RunOptions


def _check_arguments(bundle: Path, sample: int, tolerance: float | None) -> None:
    """`bundle` is a bundle folder; --sample and --tolerance are in range."""
    if not (bundle / "model.json").is_file() or not (bundle / "suite.json").is_file():
        raise MissingResourceError(f"{bundle}: not a bundle (no model.json and suite.json); give a bundle folder "
                                   "or a stored submission (leaderboards/<board>/submissions/<model>/<revision>)")
    if sample < 1:
        raise InputError(f"--sample must be at least 1, got {sample}")
    if tolerance is not None and not (0 <= tolerance < 1):
        raise InputError(f"--tolerance is an absolute difference of scores in [0, 1), got {tolerance}")


def _trusted_key(bundle: Path, suite: Suite) -> BoardKey | None:
    """The board's key of a stored submission whose seal checks (None for a bundle folder, which must be valid for
    `suite`); a submission that cannot be trusted is refused."""
    from fairmedbench.leaderboards import seal
    from fairmedbench.leaderboards.submit import SUBMISSION_FILE, validate_bundle

    if not (bundle / SUBMISSION_FILE).is_file():
        reasons, _, _ = validate_bundle(bundle, suite)
        if reasons:
            raise InputError(f"{bundle}: not a valid bundle for board {suite.name!r} ({reasons[0]}); "
                             "`benchmark submit` lists every problem")
        return None
    # a stored submission passed these checks when it was accepted, if its seal says it is unchanged
    board_dir = bundle.resolve().parent.parent.parent
    key = seal.board_key(board_dir)
    if key is None:
        raise InputError(f"{bundle}: its board has no key ({seal.KEY_ENV} is unset and {board_dir / seal.KEY_FILE} "
                         "is absent), so neither its seal nor a verification record can be checked; set "
                         f"{seal.KEY_ENV} to the board's key")
    _, why = seal.check(bundle, key)
    if why is not None:
        raise InputError(f"{bundle}: {why}; it cannot be verified")
    return key


def _sampled_ids(sub: pd.DataFrame, block: dict[str, Any], sample: int, seed: int) -> list[str]:
    """The test ids re-run: a sample of the scored ids and one of the unscored (e.g. empty ground truth) ids, so
    rows wrongly marked unscored (left out of every metric) are caught."""
    from fairmedbench.tasks.base import unscored_mask

    test = sub[sub[block["columns"]["split"]] == "test"]
    empty = unscored_mask(test, len(test))
    return sorted(sample_ids(test.loc[~empty, block["columns"]["id"]].astype(str).tolist(), sample, seed)
                  + sample_ids(test.loc[empty, block["columns"]["id"]].astype(str).tolist(), sample, seed))


def _check_seed(plan: _Rerun, doc: dict[str, Any], sub: pd.DataFrame, folder: Path, ids: list[str], k: int,
                split_file: str | None) -> tuple[list[str], int, float | None]:
    """Re-run seed `k`'s result on `ids` and compare it, and every external dataset's test rows, with the submitted
    scores: (problems, values compared, max |diff|)."""
    import pandas as pd

    if doc["spec"].get("weights") != plan.declared:
        return [f"seed {k}: the run's weights {str(doc['spec'].get('weights'))[:24]} are not "
                f"the declared {plan.declared[:24]}"], 0, None
    block = doc["predictions"]
    frame, externals, problems = _rerun(doc, ids, plan.weights, plan.opts, split_file, plan.declared)
    n, diff, more = (0, None, []) if frame is None else _compare(sub, frame, ids, block)
    for ext, again in zip(doc.get("external", []), externals):  # every external test row
        theirs = pd.read_parquet(folder / ext["predictions"])
        m, d, p = _compare(theirs, again, theirs[block["columns"]["id"]].astype(str).tolist(), block)
        n, diff = n + m, d if diff is None else max(diff, d if d is not None else diff)
        more += [f"external {ext['label']}: {x}" for x in p]
    return [f"seed {k}: {p}" for p in problems + more], n, diff


def _check_entry(plan: _Rerun, entry: Entry, folder: Path, board_tol: dict[tuple[str, int], float],
                 split_file: str | None) -> dict[str, Any]:
    """The verification record of one entry: every seed's result re-run on its sample and compared."""
    import pandas as pd

    rec: dict[str, Any] = {"passed": False, "reasons": [], "n_compared": 0, "max_abs_diff": None, "seeds": {}}
    for k in entry.seeds:
        doc = _read(folder / f"seed{k}.json")
        block = doc["predictions"]
        sub = pd.read_parquet(folder / block["file"])
        ids = _sampled_ids(sub, block, plan.sample, plan.seed)
        tol = board_tol[(entry.key, k)] if plan.tolerance is None else plan.tolerance
        rec["tolerance"] = max(tol, rec.get("tolerance", 0.0))
        rec["board_tolerance"] = max(board_tol[(entry.key, k)], rec.get("board_tolerance", 0.0))
        problems, n, diff = _check_seed(plan, doc, sub, folder, ids, k, split_file)
        if diff is not None and diff > tol:
            problems.append(f"seed {k}: scores differ by up to {diff:.3g} (tolerance {tol:g})")
        rec["seeds"][str(k)] = {"sample_ids": ids, "n_compared": n, "max_abs_diff": diff,
                                "precision": rerun_precision(doc["spec"])}
        rec["reasons"] += problems
        rec["n_compared"] += n
        if diff is not None:
            rec["max_abs_diff"] = max(diff, rec["max_abs_diff"] or 0.0)
    rec["passed"] = not rec["reasons"] and rec["n_compared"] > 0
    rec["precision"] = ", ".join(sorted({s["precision"] for s in rec["seeds"].values()}))  # of the re-run
    return rec


def verify_bundle(bundle: Path | str, board: str | None = None, sample: int = DEFAULT_SAMPLE, seed: int = 0,
                  tolerance: float | None = None, weights: str | None = None,
                  opts: RunOptions | None = None) -> Verification:
    """Re-run every result of `bundle` (a stored submission or a bundle folder) on a seeded sample of its test ids;
    record the outcome beside submission.json when the bundle is a stored submission."""
    from fairmedbench.benchmark.suite import board_split_file
    from fairmedbench.leaderboards.suites import get_suite
    from fairmedbench.leaderboards.tiers import write_verification
    from fairmedbench.registry.models import MODELS
    from fairmedbench.spec import RunOptions

    bundle = Path(bundle)
    _check_arguments(bundle, sample, tolerance)
    model, suite_doc = _read(bundle / "model.json"), _read(bundle / "suite.json")
    suite = get_suite(board or suite_doc["name"])
    board_tol = _board_tolerances(bundle, suite, tolerance)  # a looser --tolerance is refused before any work
    if model["name"] not in MODELS:
        raise InputError(f"model {model['name']!r} has no registered card, so it cannot be re-run here; its rows "
                         "stay self-reported (register the card and its loader to make it verifiable)")
    key = _trusted_key(bundle, suite)
    declared = _declared_weights(bundle, model)
    plan = _Rerun(sample, seed, tolerance, weights, declared, opts or RunOptions())
    entries: dict[str, Any] = {}
    for entry in suite.entries:
        folder = bundle / "results" / entry.key
        if folder.is_dir():  # real boards: the pinned test set on this copy is the split file
            entries[entry.key] = _check_entry(plan, entry, folder, board_tol, board_split_file(entry, plan.opts, suite))
    if not entries:
        raise InputError(f"{bundle}: answers no entry of suite {suite.name!r}; nothing to verify")
    precisions = sorted({p for e in entries.values() for p in e["precision"].split(", ") if p})
    record: dict[str, Any] = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "engine": f"fairmedbench {__version__}", "weights": declared, "sample": sample, "seed": seed,
              "precision": ", ".join(precisions),
              "device": plan.opts.device, "tolerance": tolerance,
              "passed": all(e["passed"] for e in entries.values()), "entries": entries}
    path = write_verification(bundle, record, key) if key is not None else None
    return Verification(record["passed"], record, path)


def _board_tolerances(bundle: Path, suite: Suite, tolerance: float | None) -> dict[tuple[str, int], float]:
    """The board's tolerance per (entry, seed) of the bundle, by the precision each run recorded; a `tolerance`
    looser than any of them is refused (a verifier may only tighten the board's)."""
    out = {}
    for entry in suite.entries:
        for k in entry.seeds:
            path = bundle / "results" / entry.key / f"seed{k}.json"
            try:
                precision = _read(path)["spec"].get("precision")
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                continue  # `submit`'s checks name what is wrong with the document
            out[(entry.key, k)] = board = suite.tolerance(str(precision))
            if tolerance is not None and tolerance > board:
                run = f"a {precision} run" if precision else "a run that records no precision"
                raise InputError(f"--tolerance {tolerance:g} is looser than board {suite.name}'s {board:g} for {run} "
                                 f"({entry.key}, seed {k}); a verifier may only tighten the board's tolerance: give at "
                                 f"most {board:g}, or leave --tolerance out")
    return out
