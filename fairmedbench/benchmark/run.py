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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from fairmedbench.analysis.sampling import Sampling, describe, draw
from fairmedbench.benchmark.resolve import Resolved, resolve_run
from fairmedbench.engine import store
from fairmedbench.engine.results import RunResult
from fairmedbench.engine.splits import test_fingerprint
from fairmedbench.errors import InputError
from fairmedbench.spec import RunConfig, RunSpec
from fairmedbench.tasks.base import Task, get_task

CONFIG_FILE = "config.json"


@dataclass
class RunOptions:
    """Where data, caches and results live and how to compute: none of it changes a number, so none of it is
    in the run's identity (data_root changes the data read, which is: through the data fingerprint)."""

    data_root: str | None = None
    out_root: str = "results"
    cache_dir: str | None = ".fmb-cache"
    device: str = "auto"
    batch_size: int = 16
    num_workers: int | None = None
    channels_last: bool = False
    force: bool = False
    verify_weights: bool = True
    progress: Callable[[str, int, int], None] | None = None
    log: Callable[[str], None] | None = None

    def say(self, message: str) -> None:
        """Tell the user (stderr by default)."""
        (self.log or (lambda m: print(m, file=sys.stderr)))(message)


@dataclass
class RunOutcome:
    """A finished run: its config, folder, the per-seed documents, the summary, whether it was reused."""

    config: RunConfig
    out_dir: Path
    seed_docs: list[dict[str, Any]]
    summary: dict[str, Any]
    reused: bool
    results: list[Any] = field(default_factory=list)
    reused_seeds: list[int] = field(default_factory=list)

    @property
    def seeds(self) -> list[RunResult]:
        """The per-seed results, typed."""
        return [RunResult(d, self.out_dir) for d in self.seed_docs]


class SplitView:
    """One split of a dataset as the feature extractor sees it: ids, images, a fingerprint."""

    def __init__(self, dataset: Any, positions: np.ndarray, fingerprint: str) -> None:
        self.dataset, self.positions, self.fingerprint = dataset, np.asarray(positions), fingerprint
        self.sample_ids = [str(dataset.samples["sample_id"].iloc[int(i)]) for i in self.positions]

    def __len__(self) -> int:
        return len(self.positions)

    def load_image(self, k: int) -> np.ndarray:
        return self.dataset.load_image(int(self.positions[k]))


def split_views(ds: Any, split: Any) -> dict[str, SplitView]:
    """The train/val/test views features are extracted from (their fingerprint keys the feature cache): the
    unsampled split, so every run of one (model, dataset, split) shares one encode."""
    fp = f"{ds.fingerprint}:{split.fingerprint}"
    return {k: SplitView(ds, p, fp) for k, p in (("train", split.train), ("val", split.val), ("test", split.test))}


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
    reused unless forced, finished seeds are resumed, and everything is saved atomically under a lock."""
    resolved = resolve_run(spec, data_root=opts.data_root, device=opts.device, verify_weights=opts.verify_weights)
    config = resolved.config
    out_dir = run_dir(config, opts.out_root)
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


def _forced(opts: RunOptions) -> RunOptions:
    from dataclasses import replace

    return replace(opts, force=True)


def _compute(resolved: Resolved, opts: RunOptions, out_dir: Path) -> RunOutcome:
    """Load the model, apply the usage, run the task's runner per seed, write the summary last."""
    from fairmedbench.adapters import RunContext
    from fairmedbench.registry.models import load_model, seen_in_pretraining

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
    }
    t_load = time.perf_counter() - t0
    ctx = RunContext(device=resolved.device, precision=config.precision, cache_dir=opts.cache_dir,
                     batch_size=opts.batch_size, num_workers=opts.num_workers, channels_last=opts.channels_last,
                     dataset_card=checked.dataset_card, hparams=config.hparams, progress=opts.progress)
    runner = checked.task.run()
    docs, results, reused = runner(config, checked.usage, model, ds, split, ctx, opts, out_dir, info, t_load)
    for s in reused:
        opts.say(f"seed {s}: reused its finished result from an earlier, interrupted run")
    summary = _summary(config, checked.task, docs, info, time.perf_counter() - t0)
    store.write_json(out_dir / "summary.json", summary)
    return RunOutcome(config, out_dir, docs, summary, reused=False, results=results, reused_seeds=reused)


def _reuse(path: Path, opts: RunOptions, docs: list[dict[str, Any]], reused: list[int], seed: int) -> bool:
    """Append a seed's finished result (from an interrupted earlier run of this config) unless forced."""
    if path.exists() and not opts.force:
        docs.append(store.read_json(path))
        reused.append(seed)
        return True
    return False


def _finite(v: float) -> float | None:
    return float(v) if np.isfinite(v) else None


def _attr_columns(ds: Any, spec: RunConfig, positions: np.ndarray) -> dict[str, np.ndarray]:
    return {a: ds.samples[f"attr:{a}"].to_numpy()[positions] for a in spec.attributes}


def _training_groups(spec: RunConfig, ds: Any) -> tuple[np.ndarray | None, int]:
    """Group codes of every sample for the attribute mitigations train with (the run's first; -1 = missing)."""
    if not spec.attributes:
        return None, 0
    values = ds.samples[f"attr:{spec.attributes[0]}"].to_numpy()
    names = sorted({v for v in values if isinstance(v, str)})
    lookup = {n: i for i, n in enumerate(names)}
    return np.array([lookup.get(v, -1) for v in values]), len(names)


def _seed_doc(kind: str, spec: RunConfig, seed: int, result: Any, info: dict[str, Any], pred_name: str,
              tasks: list[str], extra: dict[str, Any], timings: dict[str, float]) -> dict[str, Any]:
    doc = store.result_document(kind, {**spec.identity(), "seed": seed}, result.to_dict(), info, timings)
    doc["predictions"] = get_task(spec.task).predictions_block(pred_name, tasks, list(spec.attributes))
    doc.update(extra)
    return doc


def run_classification_task(spec: RunConfig, adapter: Any, model: Any, ds: Any, split: Any, ctx: Any, opts: RunOptions,
                            out_dir: Path, info: dict[str, Any], t_load: float) -> tuple[list[dict], list[Any], list[int]]:
    """The classification runner (TASKS['classification']): head per seed, threshold on validation, test metrics."""
    import pandas as pd

    from fairmedbench.analysis.uncertainty import mc_columns, run_uncertainty
    from fairmedbench.metrics import evaluate_classification
    from fairmedbench.metrics.profiles import get_profile
    from fairmedbench.mitigation import make_mitigation
    from fairmedbench.tasks.classification import SplitArrays, describe_config, run_classification

    t0 = time.perf_counter()
    card = ds.card
    tasks = spec.train_hparams["tasks"]
    label_cols = [card.label_column, *(card.extra_label_columns if tasks == "all" else ())]
    pos = {"train": split.train, "val": split.val, "test": split.test}
    views = split_views(ds, split)
    from fairmedbench.adapters.volumes import prepare_classification

    prepared = prepare_classification(adapter, model, views, ctx)  # 3D datasets: per slice, one row per volume
    t_prep = time.perf_counter() - t0
    y = ds.samples[label_cols].to_numpy().astype(np.int64)
    codes, n_groups = _training_groups(spec, ds)
    sampling = Sampling(**spec.sampling)
    groups = (ds.samples[f"attr:{spec.attributes[0]}"].to_numpy() if spec.attributes
              else np.full(len(ds.samples), None, dtype=object))
    task = get_task(spec.task)
    cfg = task.make_config(spec.train_hparams)
    mit_h = spec.mitigation_hparams
    mc_t = int(spec.usage_hparams.get("mc_samples", 0))  # MC dropout (analysis.uncertainty)
    docs, results, reused = [], [], []
    for seed in spec.seeds:
        path = out_dir / f"seed{seed}.json"
        if _reuse(path, opts, docs, reused, seed):
            continue
        keep = draw(sampling, pos, groups, y[:, 0], spec.split_seed, seed)  # all of each split unless sampled
        ps = {k: p[keep[k]] for k, p in pos.items()}
        arrays = {k: SplitArrays(_rows(prepared.inputs[k], keep[k]), y[p], None if codes is None else codes[p],
                                 n_groups) for k, p in ps.items()}
        t1 = time.perf_counter()
        factory = lambda: make_mitigation(spec.mitigation, **mit_h)  # noqa: E731
        [sr] = run_classification(arrays["train"], arrays["val"], arrays["test"].x, prepared.make_head, factory,
                                  [seed], cfg, spec.threshold, test_groups=arrays["test"].groups, mc_samples=mc_t)
        # a profile that fixes its own threshold (fairmedfm) takes none; a plugin may fix the operating point
        policy = (factory().threshold_policy or spec.threshold) if get_profile(spec.profile).accepts_threshold else None
        t_train = time.perf_counter() - t1
        res = evaluate_classification(
            y[ps["test"]], sr.test_scores, _attr_columns(ds, spec, ps["test"]), task_names=label_cols,
            threshold=policy, val_y_true=y[ps["val"]], val_y_score=sr.val_scores, profile=spec.profile,
            n_boot=spec.n_boot, seed=seed)
        rows = []
        for name, p, scores in (("val", ps["val"], sr.val_scores), ("test", ps["test"], sr.test_scores)):
            frame = pd.DataFrame({"sample_id": ds.samples["sample_id"].to_numpy()[p].astype(str), "split": name,
                                  "seed": seed})
            for j, t in enumerate(label_cols):
                frame[f"label:{t}"] = y[p, j]
                frame[f"score:{t}"] = scores[:, j]
            for a, v in _attr_columns(ds, spec, p).items():
                frame[f"attr:{a}"] = pd.Series(v, dtype=object).where(pd.notna(v), None)
            if sr.mc is not None:
                frame = frame.assign(**mc_columns(sr.mc[name], label_cols))
                if "patient_id" in ds.samples:
                    frame["patient_id"] = ds.samples["patient_id"].to_numpy()[p].astype(str)
            rows.append(frame)
        pred_name = f"seed{seed}.predictions.parquet"
        store.write_parquet(out_dir / pred_name, pd.concat(rows, ignore_index=True))
        extra = {"training": {"config": describe_config(cfg), "mitigation": factory().describe(),
                              "best_epoch": sr.fit.best_epoch, "best_val_loss": _finite(sr.fit.best_val_loss),
                              "select": sr.fit.select, "best_select_score": _finite(sr.fit.best_score),
                              "val_losses": sr.fit.val_losses, "threshold_policy": policy},
                 "usage": {"name": adapter.name, **prepared.notes}}
        if sr.mc is not None:
            pid = ds.samples["patient_id"].to_numpy()[ps["test"]] if "patient_id" in ds.samples else None
            extra["uncertainty"] = run_uncertainty(y[ps["test"]], sr.mc["test"], label_cols,
                                                   _attr_columns(ds, spec, ps["test"]), patient_ids=pid)
        if sampling.active:
            extra["sampling"] = {**sampling.identity(), "seed": [spec.split_seed, seed],
                                 "splits": describe(keep, pos, groups, y[:, 0])}
        if sampling.test_resample:
            extra["test_resample"] = _resampled_test(spec, ds, ps["test"], y, sr.test_scores, label_cols, policy,
                                                     (y[ps["val"]], sr.val_scores), seed)
        doc = _seed_doc(task.run_kind, spec, seed, res, info, pred_name, label_cols, extra,
                        {"load": t_load, "prepare": t_prep, "train": t_train,
                         "metrics": time.perf_counter() - t1 - t_train})
        store.write_json(path, doc)
        docs.append(doc)
        results.append(res)
    return docs, results, reused


def _resampled_test(spec: RunConfig, ds: Any, test: np.ndarray, y: np.ndarray, scores: np.ndarray,
                    label_cols: list[str], policy: str | None, val: tuple[np.ndarray, np.ndarray],
                    seed: int) -> dict[str, Any]:
    """The run's test set resampled as --test-resample asks (seeded by the run seed) and evaluated like the
    original: the drawn ids, their counts and the result, stored beside the original's."""
    from fairmedbench.analysis.resample import parse_test_resample, resample_test_set
    from fairmedbench.benchmark.resolve import test_resample_age_column
    from fairmedbench.metrics import evaluate_classification

    rs = parse_test_resample(str(spec.sampling["test_resample"]))
    age_col = test_resample_age_column(str(rs), ds.card, spec.attributes, get_task(spec.task))
    ages = None if age_col is None else _numeric(ds.samples[age_col].to_numpy()[test])
    group_col = f"attr:{rs.attribute}"
    sample = resample_test_set(rs, ds.samples[group_col].to_numpy()[test], y[test, 0],
                               ds.samples["sample_id"].to_numpy()[test], seed, ages=ages,
                               columns={"group_col": group_col, "label_col": label_cols[0],
                                        **({"age_col": age_col} if age_col else {})})
    p = sample.positions
    res = evaluate_classification(y[test][p], scores[p], {a: v[p] for a, v in _attr_columns(ds, spec, test).items()},
                                  task_names=label_cols, threshold=policy, val_y_true=val[0], val_y_score=val[1],
                                  profile=spec.profile, n_boot=spec.n_boot, seed=seed)
    return {**sample.to_dict(), "result": res.to_dict()}


def _numeric(values: np.ndarray) -> np.ndarray:
    """Numbers as float (unparseable cells NaN: left out by the age bins)."""
    import pandas as pd

    return pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=float)


def _rows(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """`x[keep]`, or `x` itself when every row is kept (a memory-mapped feature array is not copied)."""
    return x if len(keep) == len(x) else x[keep]


def _stage(ctx: Any, name: str) -> Callable[[int, int], None] | None:
    return (lambda done, total: ctx.progress(name, done, total)) if ctx.progress else None


def _decoder_trainer(spec: RunConfig, adapter: Any, model: Any, ds: Any, split: Any, ctx: Any,
                     jitter: float) -> tuple[Callable[[int], tuple[Any, dict[str, Any]]], dict[str, Any]]:
    """For a usage that trains: encoder maps of every split computed once, and a function seed -> (predictor,
    the result's training block); plus the usage notes."""
    from fairmedbench.mitigation import make_mitigation
    from fairmedbench.tasks.segmentation import (check_decoder_config, describe_decoder_config, fit_decoder,
                                                 prepare_split)

    cfg = check_decoder_config(get_task(spec.task).make_config(spec.train_hparams))
    mit_h = spec.mitigation_hparams
    codes, n_groups = _training_groups(spec, ds)
    problem = adapter.trainable(model, ctx)
    train, val, test = (prepare_split(problem, ds.load_image, ds.load_mask, p, keep=name == "val",
                                      progress=_stage(ctx, f"encoder maps ({name})"))
                        for name, p in (("train", split.train), ("val", split.val), ("test", split.test)))

    def fit(seed: int) -> tuple[Any, dict[str, Any]]:
        mitigation = make_mitigation(spec.mitigation, **mit_h)
        decoder, outcome = fit_decoder(problem, train, val, codes, n_groups, cfg, mitigation, seed, jitter,
                                       progress=_stage(ctx, f"training the decoder (seed {seed})"))
        return problem.predictor(decoder), {
            "config": describe_decoder_config(cfg), "mitigation": mitigation.describe(), **outcome.to_dict(),
            "n_train_units": len(train.keys), "n_val_samples": len(val.prompted),
            "sampler_labels": "zeros: a segmentation sample has no class label"}

    notes = {**problem.notes(), "units": {"train": len(train.keys), "val": len(val.keys), "test": len(test.keys)}}
    return fit, notes


def run_segmentation_task(spec: RunConfig, adapter: Any, model: Any, ds: Any, split: Any, ctx: Any,
                          opts: RunOptions, out_dir: Path, info: dict[str, Any],
                          t_load: float) -> tuple[list[dict], list[Any], list[int]]:
    """The segmentation runner (TASKS['segmentation']): prompted masks per seed (a decoder trained per seed
    when the usage learns), DSC per test sample, metrics by group over the prompted samples (an empty ground
    truth gives no prompt: its row has empty_gt=True and no score, and usage.skipped says why)."""
    from fairmedbench.metrics.seg_fairness import evaluate_segmentation
    from fairmedbench.tasks.segmentation import run_segmentation

    jitter = float(spec.usage_hparams["box_jitter"])
    t0 = time.perf_counter()
    if adapter.learns:
        fit, notes = _decoder_trainer(spec, adapter, model, ds, split, ctx, jitter)
    else:
        zero_shot = adapter.predictor(model, ctx)
        fit, notes = (lambda seed: (zero_shot, None)), {}
    t_prep = time.perf_counter() - t0
    docs, results, reused = [], [], []
    for seed in spec.seeds:
        path = out_dir / f"seed{seed}.json"
        if _reuse(path, opts, docs, reused, seed):
            continue
        t1 = time.perf_counter()
        predict, training = fit(seed)
        t_train = time.perf_counter() - t1
        step = (lambda d, n: opts.progress("segmenting", d, n)) if opts.progress else None
        out = run_segmentation(predict, ds.load_image, ds.load_mask, split.test, spec.prompt, seed,
                               jitter=jitter, progress=step, spacing_of=ds.spacing if ds.card.dim == 3 else None)
        if not out.positions:
            raise InputError(f"no test sample of {spec.dataset!r} has a non-empty mask to prompt from")
        p = np.asarray(out.positions)
        t_seg = time.perf_counter() - t1 - t_train
        res = evaluate_segmentation(out.dsc, _attr_columns(ds, spec, p), iou=out.iou, hd95=out.hd95 or None,
                                    profile=spec.profile,
                                    n_boot=spec.n_boot, seed=seed)
        pred_name = f"seed{seed}.predictions.parquet"
        frame = _segmentation_frame(ds, spec, seed, out, split.test)
        store.write_parquet(out_dir / pred_name, frame)
        ids = ds.samples["sample_id"].to_numpy().astype(str)
        extra: dict[str, Any] = {"usage": {"name": adapter.name, "prompt": spec.prompt, "mask_threshold": "logit > 0",
                                           "prompted_slices": int(sum(out.prompted_slices)),
                                           "n_skipped": len(out.skipped),
                                           "skipped": {ids[k]: v for k, v in out.skipped.items()}, **notes}}
        timings = {"load": t_load, "segment": t_seg, "metrics": time.perf_counter() - t1 - t_train - t_seg}
        if training is not None:
            extra["training"] = training
            timings.update(prepare=t_prep, train=t_train)
        doc = _seed_doc(get_task(spec.task).run_kind, spec, seed, res, info, pred_name, ["segmentation"], extra,
                        timings)
        store.write_json(path, doc)
        docs.append(doc)
        results.append(res)
    return docs, results, reused


def _segmentation_frame(ds: Any, spec: RunConfig, seed: int, out: Any, test: Any) -> Any:
    """One predictions row per test sample in split order: DSC/IoU (HD95 for 3D) of the prompted ones; an
    unprompted one (empty ground truth) has empty_gt=True and null scores, so the test ids stay complete while
    the metrics, computed on prompted rows only, ignore it."""
    import pandas as pd

    pos = np.asarray(test, dtype=np.int64)
    at = {int(i): k for k, i in enumerate(out.positions)}
    missing = [int(i) for i in pos if int(i) not in at and int(i) not in out.skipped]
    if missing:  # the runner scores or skips every test sample; anything else is a bug, not a row to drop
        raise RuntimeError(f"segmentation returned no outcome for {len(missing)} test sample(s)")
    k = np.array([at.get(int(i), -1) for i in pos])
    scored = k >= 0

    def column(values: list[float]) -> np.ndarray:
        return np.where(scored, np.asarray(values, dtype=np.float64)[np.maximum(k, 0)] if values else np.nan, np.nan)

    frame = pd.DataFrame({"sample_id": ds.samples["sample_id"].to_numpy()[pos].astype(str), "split": "test",
                          "seed": seed, "dsc": column(out.dsc), "iou": column(out.iou), "empty_gt": ~scored})
    if out.hd95:  # 3D datasets: HD95 in mm (voxel spacing)
        frame["hd95"] = column(out.hd95)
    for a, v in _attr_columns(ds, spec, pos).items():
        frame[f"attr:{a}"] = pd.Series(v, dtype=object).where(pd.notna(v), None)
    return frame


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
    return {"schema_version": store.SCHEMA_VERSION, "kind": f"{kind}-summary", "run_id": spec.run_id,
            "spec": spec.identity(), "inputs": info, "seeds": list(spec.seeds),
            "files": [f"seed{s}.json" for s in spec.seeds], "across_seeds": table, "seconds": seconds}
