"""`benchmark run`: one RunSpec end to end — dataset split, model, usage, task runner, metrics, results.

Results go to <out>/runs/<model>/<dataset>/<usage>/<run_id>/: one result JSON + predictions Parquet per
seed, then summary.json (written last, so its presence means the run is complete). A complete run is
reused unless forced; seeds already written are reused when an interrupted run is resumed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from fairmedbench.errors import InputError, MissingResourceError
from fairmedbench.engine import store
from fairmedbench.engine.splits import test_fingerprint
from fairmedbench.spec import RunSpec

USAGE_PREFERENCE = {"classification": ("lp", "clip-zs", "clip-adapt", "lora"), "segmentation": ("sam-prompt",)}


@dataclass
class RunOptions:
    """Where data, caches and results live and how to compute (none of it changes the numbers)."""

    data_root: str | None = None
    out_root: str = "results"
    cache_dir: str | None = ".fmb-cache"
    device: str = "auto"
    batch_size: int = 16
    num_workers: int | None = None
    channels_last: bool = False
    force: bool = False
    split_file: str | None = None
    skip_bad: bool = False
    prompt: str = "bbox"
    progress: Callable[[str, int, int], None] | None = None


@dataclass
class RunOutcome:
    """A finished run: its folder, the per-seed documents, the summary, whether it was reused."""

    spec: RunSpec
    out_dir: Path
    seed_docs: list[dict[str, Any]]
    summary: dict[str, Any]
    reused: bool
    results: list[Any] = field(default_factory=list)


def choose_usage(spec: RunSpec, model_card: Any, dataset_card: Any) -> str:
    """The usage to run: the one asked for if the model and dataset allow it, else a sensible default."""
    from fairmedbench.adapters import USAGES, compatible_usages

    possible = compatible_usages(model_card.capabilities, dataset_card.tasks)
    if spec.usage:
        usage = USAGES.get(spec.usage)
        if spec.usage not in possible:
            why = (f"dataset {dataset_card.name!r} offers {', '.join(dataset_card.tasks)}, not {usage.task}"
                   if usage.task not in dataset_card.tasks else
                   f"model {model_card.name!r} can {', '.join(model_card.capabilities)}; {spec.usage!r} needs "
                   f"{', '.join(usage.requires)}")
            raise InputError(f"usage {spec.usage!r} cannot run here: {why}. Possible usages for this model "
                             f"and dataset: {', '.join(possible) or 'none'}")
        return spec.usage
    for task in dataset_card.tasks:
        for name in USAGE_PREFERENCE.get(task, ()):
            if name in possible:
                return name
    raise InputError(f"model {model_card.name!r} ({', '.join(model_card.capabilities)}) has no usage for dataset "
                     f"{dataset_card.name!r} ({', '.join(dataset_card.tasks)})")


class SplitView:
    """One split of a dataset as the feature extractor sees it: ids, images, a fingerprint."""

    def __init__(self, dataset: Any, positions: np.ndarray, fingerprint: str) -> None:
        self.dataset, self.positions, self.fingerprint = dataset, np.asarray(positions), fingerprint
        self.sample_ids = [str(dataset.samples["sample_id"].iloc[int(i)]) for i in self.positions]

    def __len__(self) -> int:
        return len(self.positions)

    def load_image(self, k: int) -> np.ndarray:
        return self.dataset.load_image(int(self.positions[k]))


def _out_dir(spec: RunSpec, usage: str, opts: RunOptions) -> Path:
    return Path(opts.out_root) / "runs" / spec.model / spec.dataset / usage / spec.run_id


def run(spec: RunSpec, opts: RunOptions) -> RunOutcome:
    """Run `spec`: reuse a complete result unless forced, resume finished seeds, save everything atomically."""
    from fairmedbench.benchmark.datasets import load_with_split
    from fairmedbench.registry.datasets import get_card as dataset_card
    from fairmedbench.registry.models import get_card as model_card

    mcard, dcard = model_card(spec.model), dataset_card(spec.dataset)
    usage = choose_usage(spec, mcard, dcard)
    spec = RunSpec(**{**spec.identity(), "usage": usage, "attributes": tuple(spec.attributes) or tuple(
        a.name for a in dcard.attributes if not a.name.endswith("_bins")), "seeds": tuple(spec.seeds)})
    for a in spec.attributes:
        dcard.attribute(a)
    if opts.split_file:  # an imported split changes the numbers, so it is part of the run's identity
        if not Path(opts.split_file).is_file():
            raise MissingResourceError(f"split file {opts.split_file} not found")
        spec = RunSpec(**{**spec.identity(), "attributes": tuple(spec.attributes), "seeds": tuple(spec.seeds),
                          "split_sha256": store.sha256_file(opts.split_file)})
    out_dir = _out_dir(spec, usage, opts)
    summary_path = out_dir / "summary.json"
    if summary_path.exists() and not opts.force:
        summary = store.read_json(summary_path)
        docs = [store.read_json(out_dir / f"seed{s}.json") for s in spec.seeds]
        return RunOutcome(spec, out_dir, docs, summary, reused=True)
    t0 = time.perf_counter()
    ds, split = load_with_split(spec.dataset, opts.data_root, seed=spec.split_seed, split_file=opts.split_file,
                                skip_bad=opts.skip_bad, **spec.dataset_options)
    from fairmedbench.engine.device import select_device
    from fairmedbench.registry.models import load_model

    device = select_device(opts.device)
    model = load_model(spec.model, spec.weights, device=device)
    info = {
        "dataset": {"name": dcard.name, "version": dcard.version, "fingerprint": ds.fingerprint,
                    "split_fingerprint": split.fingerprint, "split_policy": split.policy,
                    "test_fingerprint": test_fingerprint(split.ids["test"]), "n_test": len(split.test),
                    "load_report": store.jsonable(ds.report)},
        "model": {"name": mcard.name, "weights": model.weights.identity, "weights_source": model.weights.source,
                  "seen_in_pretraining": mcard.has_seen(dcard.name)},
    }
    t_load = time.perf_counter() - t0
    from fairmedbench.adapters import USAGES, RunContext

    ctx = RunContext(device=device, precision=spec.precision, cache_dir=opts.cache_dir, batch_size=opts.batch_size,
                     num_workers=opts.num_workers, channels_last=opts.channels_last, dataset_card=dcard,
                     hparams=dict(spec.hparams),
                     progress=opts.progress)
    adapter = USAGES.get(usage)
    runner = _run_classification if adapter.task == "classification" else _run_segmentation
    docs, results = runner(spec, adapter, model, ds, split, ctx, opts, out_dir, info, t_load)
    summary = _summary(spec, docs, info, time.perf_counter() - t0)
    store.write_json(summary_path, summary)
    return RunOutcome(spec, out_dir, docs, summary, reused=False, results=results)


def _reuse(path: Path, opts: RunOptions, docs: list[dict[str, Any]]) -> bool:
    """Append a seed's finished result (from an interrupted or earlier run) unless forced."""
    if path.exists() and not opts.force:
        docs.append(store.read_json(path))
        return True
    return False


def _finite(v: float) -> float | None:
    return float(v) if np.isfinite(v) else None


def _attr_columns(ds: Any, spec: RunSpec, positions: np.ndarray) -> dict[str, np.ndarray]:
    return {a: ds.samples[f"attr:{a}"].to_numpy()[positions] for a in spec.attributes}


def _training_groups(spec: RunSpec, ds: Any) -> tuple[np.ndarray | None, int]:
    """Group codes of every sample for the attribute mitigations train with (the run's first; -1 = missing)."""
    if not spec.attributes:
        return None, 0
    values = ds.samples[f"attr:{spec.attributes[0]}"].to_numpy()
    names = sorted({v for v in values if isinstance(v, str)})
    lookup = {n: i for i, n in enumerate(names)}
    return np.array([lookup.get(v, -1) for v in values]), len(names)


def _seed_doc(kind: str, spec: RunSpec, seed: int, result: Any, info: dict[str, Any], pred_name: str,
              tasks: list[str], extra: dict[str, Any], timings: dict[str, float]) -> dict[str, Any]:
    doc = store.result_document(kind, {**spec.identity(), "seed": seed}, result.to_dict(), info, timings)
    doc["predictions"] = store.predictions_block(pred_name, kind.split("-")[1], tasks, list(spec.attributes))
    doc.update(extra)
    return doc


def _run_classification(spec: RunSpec, adapter: Any, model: Any, ds: Any, split: Any, ctx: Any, opts: RunOptions,
                        out_dir: Path, info: dict[str, Any], t_load: float) -> tuple[list[dict], list[Any]]:
    import pandas as pd

    from fairmedbench.metrics import evaluate_classification
    from fairmedbench.mitigation import make_mitigation
    from fairmedbench.tasks.classification import SplitArrays, TrainConfig, describe_config, run_classification

    t0 = time.perf_counter()
    card = ds.card
    tasks = spec.hparams.get("tasks", "main")
    if tasks not in ("main", "all"):
        raise InputError(f"hparam tasks={tasks!r}: 'main' (the card's label) or 'all' (plus {card.extra_label_columns})")
    label_cols = [card.label_column, *(card.extra_label_columns if tasks == "all" else ())]
    pos = {"train": split.train, "val": split.val, "test": split.test}
    views = {k: SplitView(ds, p, f"{ds.fingerprint}:{split.fingerprint}") for k, p in pos.items()}
    from fairmedbench.adapters.volumes import prepare_classification

    prepared = prepare_classification(adapter, model, views, ctx)  # 3D datasets: per slice, one row per volume
    t_prep = time.perf_counter() - t0
    y = ds.samples[label_cols].to_numpy().astype(np.int64)
    codes, n_groups = _training_groups(spec, ds)
    arrays = {k: SplitArrays(prepared.inputs[k], y[p], None if codes is None else codes[p], n_groups)
              for k, p in pos.items()}
    cfg_keys = set(TrainConfig.__dataclass_fields__)
    cfg = TrainConfig(**{**adapter.train_defaults, **{k: v for k, v in spec.hparams.items() if k in cfg_keys}})
    mit_h = {k: v for k, v in spec.hparams.items()
             if k not in cfg_keys and k != "tasks" and k not in adapter.hparam_names}
    make_mitigation(spec.mitigation, **mit_h).check_task("classification")
    docs, results = [], []
    for seed in spec.seeds:
        path = out_dir / f"seed{seed}.json"
        if _reuse(path, opts, docs):
            continue
        t1 = time.perf_counter()
        factory = lambda: make_mitigation(spec.mitigation, **mit_h)  # noqa: E731
        [sr] = run_classification(arrays["train"], arrays["val"], arrays["test"].x, prepared.make_head, factory,
                                  [seed], cfg, spec.threshold, test_groups=arrays["test"].groups)
        policy = factory().threshold_policy or spec.threshold
        t_train = time.perf_counter() - t1
        res = evaluate_classification(
            y[split.test], sr.test_scores, _attr_columns(ds, spec, split.test), task_names=label_cols,
            threshold=policy, val_y_true=y[split.val], val_y_score=sr.val_scores, profile=spec.profile,
            n_boot=spec.n_boot, seed=seed)
        rows = []
        for name, p, scores in (("val", split.val, sr.val_scores), ("test", split.test, sr.test_scores)):
            frame = pd.DataFrame({"sample_id": ds.samples["sample_id"].to_numpy()[p].astype(str), "split": name,
                                  "seed": seed})
            for j, t in enumerate(label_cols):
                frame[f"label:{t}"] = y[p, j]
                frame[f"score:{t}"] = scores[:, j]
            for a, v in _attr_columns(ds, spec, p).items():
                frame[f"attr:{a}"] = pd.Series(v, dtype=object).where(pd.notna(v), None)
            rows.append(frame)
        pred_name = f"seed{seed}.predictions.parquet"
        store.write_parquet(out_dir / pred_name, pd.concat(rows, ignore_index=True))
        extra = {"training": {"config": describe_config(cfg), "mitigation": factory().describe(),
                              "best_epoch": sr.fit.best_epoch, "best_val_loss": _finite(sr.fit.best_val_loss),
                              "select": sr.fit.select, "best_select_score": _finite(sr.fit.best_score),
                              "val_losses": sr.fit.val_losses, "threshold_policy": policy},
                 "usage": {"name": adapter.name, **prepared.notes}}
        doc = _seed_doc("run-classification", spec, seed, res, info, pred_name, label_cols, extra,
                        {"load": t_load, "prepare": t_prep, "train": t_train,
                         "metrics": time.perf_counter() - t1 - t_train})
        store.write_json(path, doc)
        docs.append(doc)
        results.append(res)
    return docs, results


def _check_segmentation(spec: RunSpec, adapter: Any, opts: RunOptions) -> None:
    """InputError for a prompt the usage does not take, or a mitigation a zero-shot usage cannot apply."""
    from fairmedbench.adapters import USAGES

    if opts.prompt not in adapter.prompt_modes:
        raise InputError(f"usage {adapter.name!r} prompts with {', '.join(adapter.prompt_modes)}, not "
                         f"{opts.prompt!r}; give --prompt {adapter.prompt_modes[0]}")
    if spec.mitigation != "erm" and not adapter.trains:
        trained = [n for n in USAGES.names() if USAGES.get(n).task == "segmentation" and USAGES.get(n).trains]
        raise InputError(f"mitigation {spec.mitigation!r} needs a trained usage: {adapter.name!r} is zero-shot and "
                         f"learns nothing from the train split; use --usage {' or '.join(trained)}")


def _stage(ctx: Any, name: str) -> Callable[[int, int], None] | None:
    return (lambda done, total: ctx.progress(name, done, total)) if ctx.progress else None


def _decoder_trainer(spec: RunSpec, adapter: Any, model: Any, ds: Any, split: Any, ctx: Any,
                     jitter: float) -> tuple[Callable[[int], tuple[Any, dict[str, Any]]], dict[str, Any]]:
    """For a usage that trains: encoder maps of every split computed once, and a function seed -> (predictor,
    the result's training block); plus the usage notes."""
    from fairmedbench.mitigation import make_mitigation
    from fairmedbench.tasks.segmentation import (DecoderConfig, check_decoder_config, describe_decoder_config,
                                                 fit_decoder, prepare_split)

    cfg_keys = set(DecoderConfig.__dataclass_fields__)
    cfg = check_decoder_config(DecoderConfig(**{k: v for k, v in spec.hparams.items() if k in cfg_keys}))
    mit_h = {k: v for k, v in spec.hparams.items() if k not in cfg_keys and k not in adapter.hparam_names}
    make_mitigation(spec.mitigation, **mit_h).check_task("segmentation")
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


def _run_segmentation(spec: RunSpec, adapter: Any, model: Any, ds: Any, split: Any, ctx: Any, opts: RunOptions,
                      out_dir: Path, info: dict[str, Any], t_load: float) -> tuple[list[dict], list[Any]]:
    import pandas as pd

    from fairmedbench.metrics.seg_fairness import evaluate_segmentation
    from fairmedbench.tasks.segmentation import run_segmentation

    _check_segmentation(spec, adapter, opts)
    jitter = float(spec.hparams.get("box_jitter", 0.0))
    t0 = time.perf_counter()
    if adapter.trains:
        fit, notes = _decoder_trainer(spec, adapter, model, ds, split, ctx, jitter)
    else:
        zero_shot = adapter.predictor(model, ctx)
        fit, notes = (lambda seed: (zero_shot, None)), {}
    t_prep = time.perf_counter() - t0
    docs, results = [], []
    for seed in spec.seeds:
        path = out_dir / f"seed{seed}.json"
        if _reuse(path, opts, docs):
            continue
        t1 = time.perf_counter()
        predict, training = fit(seed)
        t_train = time.perf_counter() - t1
        step = (lambda d, n: opts.progress("segmenting", d, n)) if opts.progress else None
        out = run_segmentation(predict, ds.load_image, ds.load_mask, split.test, opts.prompt, seed,
                               jitter=jitter, progress=step, spacing_of=ds.spacing if ds.card.dim == 3 else None)
        if not out.positions:
            raise InputError(f"no test sample of {spec.dataset!r} has a non-empty mask to prompt from")
        p = np.asarray(out.positions)
        t_seg = time.perf_counter() - t1 - t_train
        res = evaluate_segmentation(out.dsc, _attr_columns(ds, spec, p), iou=out.iou, hd95=out.hd95 or None,
                                    profile=spec.profile,
                                    n_boot=spec.n_boot, seed=seed)
        frame = pd.DataFrame({"sample_id": ds.samples["sample_id"].to_numpy()[p].astype(str), "split": "test",
                              "seed": seed, "dsc": out.dsc, "iou": out.iou, "empty_gt": False})
        if out.hd95:  # 3D datasets: HD95 in mm (voxel spacing)
            frame["hd95"] = out.hd95
        for a, v in _attr_columns(ds, spec, p).items():
            frame[f"attr:{a}"] = pd.Series(v, dtype=object).where(pd.notna(v), None)
        pred_name = f"seed{seed}.predictions.parquet"
        store.write_parquet(out_dir / pred_name, frame)
        extra: dict[str, Any] = {"usage": {"name": adapter.name, "prompt": opts.prompt, "mask_threshold": "logit > 0",
                                           "prompted_slices": int(sum(out.prompted_slices)),
                                           "skipped": {str(k): v for k, v in out.skipped.items()}, **notes}}
        timings = {"load": t_load, "segment": t_seg, "metrics": time.perf_counter() - t1 - t_train - t_seg}
        if training is not None:
            extra["training"] = training
            timings.update(prepare=t_prep, train=t_train)
        doc = _seed_doc("run-segmentation", spec, seed, res, info, pred_name, ["segmentation"], extra, timings)
        store.write_json(path, doc)
        docs.append(doc)
        results.append(res)
    return docs, results


SUMMARY_METRICS = {"run-classification": ("auc", "worst_group_auc", "auc_gap", "auc_es", "eqodds_diff", "ece_gap"),
                   "run-segmentation": ("dsc", "worst_group_dsc", "dsc_gap", "dsc_es", "dsc_skew_ratio")}


def _summary(spec: RunSpec, docs: list[dict[str, Any]], info: dict[str, Any], seconds: float) -> dict[str, Any]:
    """Across seeds: mean, std and normal 95% CI of the headline metrics per (task, attribute)."""
    from fairmedbench.metrics.stats import seed_summary

    kind = docs[0]["kind"]
    table: dict[str, Any] = {}
    for rep0 in docs[0]["result"]["reports"]:
        key = f"{rep0['task']}/{rep0['attribute']}"
        table[key] = {}
        for m in SUMMARY_METRICS[kind]:
            vals = []
            for d in docs:
                rep = next(r for r in d["result"]["reports"]
                           if r["task"] == rep0["task"] and r["attribute"] == rep0["attribute"])
                cells = rep["metrics"].get(m, {})
                cell = cells.get("__overall__") or cells.get("__gap__") or {}
                if cell.get("value") is not None:
                    vals.append(cell["value"])
            if len(vals) == len(docs):
                s = seed_summary(vals)
                table[key][m] = {"mean": s.mean, "std": s.std if len(vals) > 1 else None,
                                 "ci_low": s.ci_low if len(vals) > 1 else None,
                                 "ci_high": s.ci_high if len(vals) > 1 else None, "n_seeds": s.n}
    return {"schema_version": store.SCHEMA_VERSION, "kind": f"{kind}-summary", "run_id": spec.run_id,
            "spec": spec.identity(), "inputs": info, "seeds": list(spec.seeds),
            "files": [f"seed{s}.json" for s in spec.seeds], "across_seeds": table, "seconds": seconds}
