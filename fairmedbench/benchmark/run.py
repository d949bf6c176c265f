"""`benchmark run`: one RunSpec end to end — dataset split, model, usage, task runner, metrics, results.

Results go to <out>/runs/<model>/<dataset>/<usage>/<run_id>/: one result JSON + predictions Parquet per
seed, then summary.json (written last, so its presence means the run is complete). A complete run is
reused unless forced; seeds already written are reused when an interrupted run is resumed.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.benchmark.resolve import Resolved, resolve_run
from fairmedbench.engine import store
from fairmedbench.engine.hparams import check_cost_bounds, cost_values, over_cost_bounds
from fairmedbench.engine.results import RunResult
from fairmedbench.engine.splits import test_fingerprint
from fairmedbench.errors import InputError
from fairmedbench.spec import RunConfig, RunOptions, RunSpec, option
from fairmedbench.tasks.base import Task

if TYPE_CHECKING:
    from fairmedbench.metrics import FairnessResult

CONFIG_FILE = "config.json"


@dataclass(frozen=True)
class RunOutputs:
    """What `benchmark run` prints or writes beside the result; none of it is a number or in the run's identity."""

    json: bool = field(default=False, metadata=option("print the summary JSON instead of tables"))
    report: bool = field(default=False, metadata=option("also write a self-contained report.html in the run folder"))
    evidence: str | None = field(default=None, metadata=option(
        "write an evidence pack of the run (report page, result JSONs, tidy table, predictions, command, environment, "
        "summary.md, MANIFEST.sha256); DIR must be new, empty or hold an earlier pack (--force replaces that pack's "
        "files only)", metavar="DIR"))
    sign_key: str | None = field(default=None, metadata=option(  # benchmark/signing.py
        "with --evidence: sign MANIFEST.sha256 into MANIFEST.sig with hmac:FILE (a secret) or ed25519:FILE (a PEM "
        "private key); default: $FMB_SIGN_KEY; check with benchmark evidence verify DIR --key ...", metavar="KEY"))


@dataclass
class RunOutcome:
    """A finished run: its config, folder, the per-seed documents, the summary, whether it was reused."""

    config: RunConfig
    out_dir: Path
    seed_docs: list[dict[str, Any]]
    summary: dict[str, Any]
    reused: bool
    results: list[FairnessResult] = field(default_factory=list)  # per seed, when computed here (not reused)
    reused_seeds: list[int] = field(default_factory=list)
    # repeated splits: one outcome per split seed (this outcome shows the first one's seeds) and the folder of the
    # across-split summary
    split_runs: list[RunOutcome] = field(default_factory=list)
    summary_dir: Path | None = None

    @property
    def seeds(self) -> list[RunResult]:
        """The per-seed results, typed."""
        return [RunResult(d, self.out_dir) for d in self.seed_docs]


def is_complete(out_dir: Path, config: RunConfig) -> bool:
    """A finished run of exactly this config: summary.json present and config.json equal to the config."""
    stored = _stored_identity(out_dir)
    return (stored is not None and stored == json.loads(json.dumps(config.identity()))
            and (out_dir / "summary.json").is_file())


def run_dir(config: RunConfig, out_root: str | Path) -> Path:
    """<out_root>/runs/<model>/<dataset>/<usage>/<run id>."""
    return Path(out_root) / "runs" / config.model / config.dataset / config.usage / config.run_id


@contextlib.contextmanager
def run_lock(out_dir: Path, say: Callable[[str], None]) -> Iterator[None]:
    """An exclusive lock on the run folder: a second identical run waits for the first, then reuses it."""
    import fcntl

    out_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(out_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"another process is computing run {out_dir.name}; waiting for it to finish")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock (also when the process is killed)


def _stored_identity(out_dir: Path) -> dict[str, Any] | None:
    path = out_dir / CONFIG_FILE
    try:
        return store.read_json(path) if path.is_file() else None
    except (OSError, ValueError):  # unreadable: treated as another config (recomputed)
        return None


def run(spec: RunSpec, opts: RunOptions) -> RunOutcome:
    """Run `spec`: everything checked and resolved first, then a complete result with the same stored config is
    reused unless forced, finished seeds are resumed, and everything is saved atomically under a lock. With
    several split seeds, one run per split seed and a summary across them (`run_split_seeds`)."""
    if len(spec.split_seeds) > 1:
        return run_split_seeds(spec, opts)
    return _run_one(spec, opts, bounded=False)


def _check_costs(resolved: Resolved, opts: RunOptions) -> None:
    """The cost bounds of a run that is still to compute (a finished one is reused, whatever its cost)."""
    config = resolved.config
    if over_cost_bounds(cost_values(config)) and (opts.force or not is_complete(run_dir(config, opts.out_root),
                                                                               config)):
        check_cost_bounds(cost_values(config), opts.i_know, lambda: estimated_time(resolved, opts.out_root),
                          opts.say)


def _run_one(spec: RunSpec, opts: RunOptions, bounded: bool) -> RunOutcome:
    """One split's run; `bounded`: its costs were already checked as part of a repeated-split run."""
    resolved = resolve_run(spec, data_root=opts.data_root, device=opts.device, verify_weights=opts.verify_weights)
    config = resolved.config
    for line in check_test_split(resolved):
        opts.say(f"data check: {line}")
    out_dir = run_dir(config, opts.out_root)
    if not bounded:
        _check_costs(resolved, opts)
    store.check_writable(opts.out_root, "--out")
    if opts.cache_dir is not None:
        store.check_writable(opts.cache_dir, "--cache-dir")
    created = not out_dir.exists()
    try:
        return _locked_run(resolved, opts, out_dir)
    except OSError:  # e.g. the disk filled up: a run folder this call made and left without a result is removed
        if created and not any(out_dir.glob("seed*.json")):
            _remove_empty_run_dir(out_dir, Path(opts.out_root))
        raise


def run_with_outputs(spec: RunSpec, opts: RunOptions, outputs: RunOutputs,
                     command: Sequence[str]) -> tuple[RunOutcome, Path | None]:
    """`run`, then what `outputs` asks for: the evidence pack (its folder refused before any work unless new, empty
    or holding an earlier pack, replaced with --force) and the report page; the outcome and the page written."""
    from fairmedbench.benchmark import evidence
    from fairmedbench.benchmark.signing import pack_key

    sign = pack_key(outputs.evidence, outputs.sign_key)  # the key read (or refused) before any work
    if outputs.evidence:
        folder = evidence.check(outputs.evidence, opts.force).resolve()
        if folder == Path(opts.out_root).resolve() or folder in Path(opts.out_root).resolve().parents:
            raise InputError(f"--evidence {outputs.evidence}: the run's --out {opts.out_root} is inside it; give the "
                             "evidence pack a folder of its own")
    outcome = run(spec, opts)
    page = None
    if outputs.evidence:  # the pack writes the run's report page first (and copies it in)
        with evidence.staged(outputs.evidence, opts.force) as stage:  # written beside the earlier pack, swapped in
            page = evidence.run_pack(stage, outcome, command, sign)
        print(evidence.describe(Path(outputs.evidence)), file=sys.stderr)
    if not outputs.report:
        return outcome, None
    from fairmedbench.report.html import write_run_report

    return outcome, page or write_run_report(outcome.out_dir, outcome.seed_docs)


def _remove_empty_run_dir(out_dir: Path, out_root: Path) -> None:
    """Delete what this call wrote in a run folder that holds no result (config, lock, partial files), then the
    folder and its parents up to `out_root` that are left empty (anything else found there is kept)."""
    for name in (CONFIG_FILE, ".lock"):
        (out_dir / name).unlink(missing_ok=True)
    store.remove_partial_files(out_dir)
    for parent in (out_dir, *out_dir.parents):
        if parent == out_root or out_root not in parent.parents:
            break
        try:
            parent.rmdir()
        except OSError:
            break


def check_test_split(resolved: Resolved) -> list[str]:
    """Refuse, before any training, a test split whose patient or sample ids the data checks would refuse when the
    run's predictions are scored (analysis.data_checks; the ids come from the dataset card's reader); else what
    they count (patients in two groups, missing patient ids), one sentence each."""
    from fairmedbench.analysis.data_checks import check_split, sentences
    from fairmedbench.errors import InputError

    card, ds = resolved.checked.dataset_card, resolved.dataset
    labels = ([card.label_column, *card.extra_label_columns]
              if card.label_column and resolved.checked.task.sample_labels else [])
    checks = check_split(ds.samples, resolved.split.test, list(resolved.config.attributes),
                         [c for c in labels if c in ds.samples.columns])
    if checks.problems:
        raise InputError(f"dataset {card.name!r}, test split: {checks.problems[0]}; the patient ids come from the "
                         "dataset card's reader (patient_id), which must be fixed: a run has no override")
    return sentences(checks.to_dict())


def _locked_run(resolved: Resolved, opts: RunOptions, out_dir: Path) -> RunOutcome:
    """Under the run folder's lock: reuse a complete result unless forced, else compute."""
    config = resolved.config
    with run_lock(out_dir, opts.say):
        store.remove_partial_files(out_dir)  # what a writer killed mid-write left (we hold the lock)
        stored, identity = _stored_identity(out_dir), json.loads(json.dumps(config.identity()))
        if stored is not None and stored != identity:
            opts.say(f"run folder {out_dir} holds another config under the same id; recomputing it")
            opts = _forced(opts)
        if is_complete(out_dir, config) and not opts.force:
            summary = store.read_json(out_dir / "summary.json")
            docs = [store.read_json(out_dir / f"seed{s}.json") for s in config.seeds]
            opts.say(f"reused the finished run {config.run_id} ({out_dir}); --force recomputes it")
            return RunOutcome(config, out_dir, docs, summary, reused=True, reused_seeds=list(config.seeds))
        store.write_json(out_dir / CONFIG_FILE, config.identity())
        return _compute(resolved, opts, out_dir)


def estimated_time(resolved: Resolved, out_root: str | Path) -> str:
    """The run's time in words: its fits (seeds x split seeds) x the seconds per seed of finished runs of the same
    model, dataset and usage under `out_root` (when there is one), plus its bootstrap and permutation tests
    (`costs.describe_resampling`: a per-row rate measured here x the run's test rows)."""
    import statistics

    from fairmedbench.benchmark.costs import describe_resampling, duration, task_attribute_pairs

    config = resolved.config
    fits = len(config.seeds) * max(len(config.split_seeds), 1)
    boot, boot_words = describe_resampling(fits, task_attribute_pairs(resolved.checked), len(resolved.split.test),
                                           config.n_boot, config.n_perm)
    per_seed = []
    for path in (Path(out_root) / "runs" / config.model / config.dataset / config.usage).glob("*/summary.json"):
        try:
            done = store.read_json(path)
            per_seed.append(float(done["seconds"]) / len(done["seeds"]))
        except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
            continue
    where = f"{config.model}/{config.dataset}/{config.usage}"
    if not per_seed:
        return (f"unknown for the training ({fits} fit(s); no finished run of {where} under {out_root} to time a "
                f"seed from: run one seed first) plus {boot_words}")
    total = fits * statistics.median(per_seed) + boot
    return (f"about {duration(total)} ({fits} fit(s) x {duration(statistics.median(per_seed))} per seed, the "
            f"median of {len(per_seed)} finished run(s) of {where}; plus {boot_words})")


def run_split_seeds(spec: RunSpec, opts: RunOptions) -> RunOutcome:
    """Repeated splits: the test split of `spec.split_seed` stays fixed and train/val are re-drawn per split seed
    (each one an ordinary run, reused when finished); the summary across split seeds (mean, std, t 95% CI of each
    split's seed mean) is written beside each split's bootstrap intervals in this config's own folder."""
    from dataclasses import replace

    resolved = resolve_run(spec, data_root=opts.data_root, device=opts.device,
                           verify_weights=opts.verify_weights)  # everything checked before any split runs
    config = resolved.config
    _check_costs(resolved, opts)  # seeds x split seeds x resamples, before the first split is drawn
    leaves = [_run_one(replace(spec, split_seeds=(s,)), opts, bounded=True) for s in spec.split_seeds]
    tests = {leaf.seeds[0].inputs["dataset"]["test_fingerprint"] for leaf in leaves}
    if len(tests) != 1:  # redraw_train_val keeps the test split: anything else is a bug, not a number to report
        raise RuntimeError(f"split seeds gave {len(tests)} different test sets")
    out_dir = run_dir(config, opts.out_root)
    summary = split_summary(config, leaves)
    with run_lock(out_dir, opts.say):
        store.write_json(out_dir / CONFIG_FILE, config.identity())
        store.write_json(out_dir / "summary.json", summary)
    first = leaves[0]
    return RunOutcome(config, first.out_dir, first.seed_docs, summary, reused=all(x.reused for x in leaves),
                      reused_seeds=first.reused_seeds, split_runs=leaves, summary_dir=out_dir)


def split_summary(config: RunConfig, leaves: list[RunOutcome]) -> dict[str, Any]:
    """Across split seeds, per (task column, attribute) and summary metric: each split's value (mean over its
    training seeds) with the first training seed's bootstrap CI (test-set sampling), and the mean, std and
    Student-t 95% CI across split seeds (train/val sampling, on the one fixed test set)."""
    from fairmedbench.metrics.specs import metric_spec
    from fairmedbench.metrics.stats import seed_summary

    table: dict[str, Any] = {}
    first = leaves[0]
    for key in first.summary["across_seeds"]:
        task, attribute = key.split("/", 1)
        table[key] = {}
        for m in first.summary["across_seeds"][key]:
            per_split: list[dict[str, Any]] = []
            for s, leaf in zip(config.split_seeds, leaves):
                cell = leaf.summary["across_seeds"].get(key, {}).get(m)
                v, lo, hi = leaf.seeds[0].cell(m, attribute, task)
                per_split.append({"split_seed": s, "run_id": leaf.config.run_id,
                                  "value": None if cell is None else cell["mean"],
                                  "bootstrap": {"seed": leaf.seeds[0].seed, "value": _finite(v),
                                                "ci_low": _finite(lo), "ci_high": _finite(hi)}})
            vals = [r["value"] for r in per_split]
            row: dict[str, Any] = {"per_split": per_split}
            if all(v is not None for v in vals):
                ss = seed_summary(vals, bounds=metric_spec(m).bounds)
                row.update(mean=ss.mean, std=ss.std, ci_low=ss.ci_low, ci_high=ss.ci_high, n_splits=ss.n)
            table[key][m] = row
    return {"schema_version": store.SCHEMA_VERSION, "kind": f"{first.summary['kind']}-across-splits",
            "run_id": config.run_id, "spec": config.identity(), "split_seeds": list(config.split_seeds),
            "test_fixed": True, "test_fingerprint": first.seeds[0].inputs["dataset"]["test_fingerprint"],
            "split_runs": [{"split_seed": s, "run_id": leaf.config.run_id, "run_dir": str(leaf.out_dir),
                            "split_fingerprint": leaf.config.split_fingerprint}
                           for s, leaf in zip(config.split_seeds, leaves)],
            "method": "test split of split_seed kept; train/val re-drawn per split seed (patient-level, stratified, "
                      "same sizes); across_splits: mean, std (ddof 1) and t 95% CI of each split's mean over training "
                      "seeds; bootstrap: the test-set bootstrap CI of each split's first training seed",
            "across_splits": table}


def _finite(v: float) -> float | None:
    return float(v) if np.isfinite(v) else None


def _forced(opts: RunOptions) -> RunOptions:
    from dataclasses import replace

    return replace(opts, force=True)


def _compute(resolved: Resolved, opts: RunOptions, out_dir: Path) -> RunOutcome:
    """Load the model, apply the usage, run the task's runner per seed, write the summary last."""
    from fairmedbench.adapters import RunContext
    from fairmedbench.engine.device import encoder_batch_size
    from fairmedbench.registry.models import load_model, seen_in_pretraining
    from fairmedbench.tasks.common import RunInputs

    config, checked, ds, split = resolved.config, resolved.checked, resolved.dataset, resolved.split
    t0 = time.perf_counter()
    model = load_model(config.model, checked.spec.weights, device=resolved.device, verify=opts.verify_weights)
    info = {
        "dataset": {"name": checked.dataset_card.name, "version": checked.dataset_card.version,
                    "fingerprint": ds.fingerprint, "data_fingerprint": config.data_fingerprint,
                    "split_fingerprint": split.fingerprint, "split_policy": split.policy,
                    "test_fingerprint": test_fingerprint(split.ids["test"]), "n_test": len(split.test),
                    "load_report": store.jsonable(ds.report)},
        "model": {"name": checked.model_card.name, "weights": model.weights.identity,
                  "weights_source": model.weights.source,
                  "seen_in_pretraining": seen_in_pretraining(checked.model_card.name, checked.dataset_card.name)},
        "precision": config.precision,
        # how frozen inference ran (torch, or ONNX Runtime where measured faster): features agree to float rounding
        "encoder_path": model.encoder_path(resolved.device, config.precision),
    }
    t_load = time.perf_counter() - t0
    ctx = RunContext(device=resolved.device, precision=config.precision, cache_dir=opts.cache_dir,
                     batch_size=encoder_batch_size(opts.batch_size, resolved.device),
                     num_workers=opts.num_workers, channels_last=opts.channels_last,
                     dataset_card=checked.dataset_card, hparams=config.hparams, progress=opts.progress)
    docs, results, reused = checked.task.run()(RunInputs(config, checked.usage, model, ds, split, ctx, opts, out_dir,
                                                         info, t_load, resolved.externals))
    for s in reused:
        opts.say(f"seed {s}: reused its finished result from an earlier, interrupted run")
    summary = _summary(config, checked.task, docs, info, time.perf_counter() - t0)
    store.write_json(out_dir / "summary.json", summary)
    return RunOutcome(config, out_dir, docs, summary, reused=False, results=results, reused_seeds=reused)


def _summary(spec: RunConfig, task: Task, docs: list[dict[str, Any]], info: dict[str, Any],
             seconds: float) -> dict[str, Any]:
    """Across seeds: mean, std and 95% CI of the task's summary metrics per (task column, attribute)."""
    from fairmedbench.metrics.specs import metric_spec
    from fairmedbench.metrics.stats import seed_summary

    kind = docs[0]["kind"]
    results = [RunResult(d, Path()) for d in docs]
    table: dict[str, Any] = {}
    for rep0 in results[0].fairness().reports:
        key = f"{rep0.task}/{rep0.attribute}"
        table[key] = {}
        for m in task.summary_metrics:
            vals = [res.value(m, rep0.attribute, rep0.task) for res in results]
            if all(np.isfinite(vals)):
                s = seed_summary(vals, bounds=metric_spec(m).bounds)
                table[key][m] = {"mean": s.mean, "std": s.std if len(vals) > 1 else None,
                                 "ci_low": s.ci_low if len(vals) > 1 else None,
                                 "ci_high": s.ci_high if len(vals) > 1 else None, "n_seeds": s.n}
    out = {"schema_version": store.SCHEMA_VERSION, "kind": f"{kind}-summary", "run_id": spec.run_id,
           "spec": spec.identity(), "inputs": info, "seeds": list(spec.seeds),
           "files": [f"seed{s}.json" for s in spec.seeds], "across_seeds": table, "seconds": seconds}
    if docs[0].get("external"):
        from fairmedbench.analysis.shift import external_summary

        out["external"] = external_summary(docs)
    return out
