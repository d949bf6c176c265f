"""The classification task (TASKS['classification']): its runner `run` and the training loop it drives: train a
head on train, select the checkpoint and threshold on validation, predict test. Test labels are never passed to
training or selection: only to the metric engine."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.engine.device import head_threads
from fairmedbench.errors import InputError
from fairmedbench.metrics.auc import auc
from fairmedbench.mitigation.base import Mitigation
from fairmedbench.spec import RunConfig
from fairmedbench.tasks.base import PredictionTable, get_task
from fairmedbench.tasks.common import (
    ExternalSet,
    RunInputs,
    RunnerOutput,
    attr_columns,
    external_entry,
    external_file,
    finite,
    fit_epochs,
    min_group_size,
    patient_ids,
    prepare_inputs,
    run_seeds,
    score_and_write,
    score_settings,
    seed_document,
    training_groups,
)
from fairmedbench.tasks.table import SplitPredictions

if TYPE_CHECKING:
    import torch

    from fairmedbench.adapters.base import Prepared
    from fairmedbench.analysis.sampling import Sampling
    from fairmedbench.metrics.result import FairnessResult
    from fairmedbench.registry.datasets.dataset import Dataset
    from fairmedbench.tasks.base import Task


@dataclass
class TrainConfig:
    """Head training hyperparameters (recorded in the result)."""

    # AdamW at 1e-2 on standardised features overshoots: validation loss rose for the first ~30 epochs,
    # so early stopping (patience 20) kept the epoch-0 head; at 3e-3 it falls from the start
    lr: float = 3e-3
    weight_decay: float = 1e-4
    epochs: int = 200
    patience: int = 20
    batch_size: int = 256
    class_balanced: bool = False
    select: str = "val_loss"


def selection_score(rule: str, y: np.ndarray, p: np.ndarray, groups: np.ndarray | None, val_loss: float) -> float:
    """Validation score to minimise: loss, -AUC, -worst-group AUC, or the distance to the ideal point
    (AUC 1, ΔAUC 0): sqrt((1 - AUC)^2 + ΔAUC^2); AUCs are means over tasks."""
    if rule == "val_loss":
        return val_loss
    overall = float(np.nanmean([auc(y[:, j], p[:, j]) for j in range(y.shape[1])]))
    if rule == "overall_auc":
        return -overall
    assert groups is not None, f"selection rule {rule!r} needs groups (train_head refuses it without them)"
    per_group = [float(np.nanmean([auc(y[groups == g, j], p[groups == g, j]) for j in range(y.shape[1])]))
                 for g in np.unique(groups[groups >= 0])]
    per_group = [a for a in per_group if np.isfinite(a)]
    if not per_group:
        return float("inf")
    if rule == "worst_group_auc":
        return -min(per_group)
    return float(np.hypot(1.0 - overall, max(per_group) - min(per_group)))


@dataclass
class SplitArrays:
    """One split's inputs: features (n, d), labels (n, K) and the training attribute's group codes."""

    x: np.ndarray
    y: np.ndarray
    groups: np.ndarray | None = None
    n_groups: int = 0


@dataclass
class FitOutcome:
    """What training chose on validation: the best epoch, its validation loss and selection score, the curve."""

    best_epoch: int
    best_val_loss: float
    val_losses: list[float] = field(default_factory=list)
    select: str = "val_loss"
    best_score: float = float("nan")


def _as2d(y: np.ndarray) -> np.ndarray:
    return y[:, None] if y.ndim == 1 else y


def fit_head(head: Any, train: SplitArrays, val: SplitArrays, cfg: TrainConfig, mitigation: Mitigation,
             seed: int) -> tuple[torch.nn.Module, FitOutcome]:
    """Train with the mitigation's hooks; keep the weights of the epoch best by `cfg.select` on validation.

    Returns the trained module (the mitigation may wrap the head) and what was selected.
    """
    import torch

    if len(val.y) == 0:
        raise InputError("the validation split is empty: checkpoint and threshold selection need one")
    if not (np.isin(train.y, (0, 1)).all() and np.isin(val.y, (0, 1)).all()):
        raise InputError("classification heads train on 0/1 labels; these hold other values (a multi-class label "
                         "needs the multiclass task: a dataset card that declares it)")
    rules = get_task("classification").select_rules
    if cfg.select not in rules:
        raise InputError(f"selection rule {cfg.select!r}: choose one of {', '.join(rules)}")
    if cfg.select in ("worst_group_auc", "dto") and val.groups is None:
        raise InputError(f"selection rule {cfg.select!r} needs the sensitive attribute on the validation split")
    if mitigation.needs_attribute_at_training and train.groups is None:
        raise InputError(f"mitigation {mitigation.name!r} needs the sensitive attribute at training; "
                         "give --attribute for a dataset that has one")
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    if hasattr(head, "fit_normal"):  # an unsupervised scorer (adapters.anomaly) fits itself, without gradient steps
        with torch.no_grad():
            head.fit_normal(train.x, _as2d(train.y), val.x, _as2d(val.y))
    model = mitigation.wrap_head(head, train.n_groups)
    xt = torch.as_tensor(train.x, dtype=torch.float32)
    yt = torch.as_tensor(_as2d(train.y), dtype=torch.float32)
    gt = None if train.groups is None else torch.as_tensor(train.groups, dtype=torch.long)
    xv = torch.as_tensor(val.x, dtype=torch.float32)
    yv = torch.as_tensor(_as2d(val.y), dtype=torch.float32)
    pos = yt.sum(0)
    pos_weight = (len(yt) - pos) / pos.clamp(min=1) if cfg.class_balanced else None
    params = list(model.parameters()) + list(mitigation.extra_parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    bce = torch.nn.BCEWithLogitsLoss(reduction="none", pos_weight=pos_weight)
    yv_np = _as2d(val.y)
    trainable = any(p.requires_grad for p in params)

    def validate(m: torch.nn.Module) -> tuple[float, float]:
        logits_v = m(xv)
        loss_v = float(torch.nn.functional.binary_cross_entropy_with_logits(logits_v, yv))
        return selection_score(cfg.select, yv_np, torch.sigmoid(logits_v).numpy(), val.groups, loss_v), loss_v

    fit = fit_epochs(model, mitigation, opt, (xt, yt, gt), (train.y, train.groups), cfg.epochs if trainable else 0,
                     cfg.batch_size, cfg.patience, rng, lambda logits, yb: bce(logits, yb).mean(dim=1), validate)
    best = fit.best_score
    if not trainable:  # a fixed head (e.g. zero-shot) is used as is; its validation loss is still recorded
        model.eval()
        with torch.no_grad():
            best = float(torch.nn.functional.binary_cross_entropy_with_logits(model(xv), yv))
    return model, FitOutcome(fit.best_epoch, fit.best_val_loss, fit.val_losses, cfg.select, float(best))


def predict(head: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    """Probabilities (n, K) from a trained head."""
    import torch

    head.eval()
    with torch.no_grad():
        return torch.sigmoid(head(torch.as_tensor(x, dtype=torch.float32))).numpy().astype(np.float64)


def mc_predict(head: Any, x: np.ndarray, samples: int, seed: int, softmax: bool = False) -> np.ndarray:
    """MC dropout (Gal & Ghahramani 2016): (T, n, K) sigmoid (or, with `softmax`, softmax) outputs of `samples`
    passes with the head's `mc_dropout` layers sampling and everything else in eval mode (a LoRA encoder's own
    dropout stays off, so it runs once per input through its `encoder_memo`). Seeded by `seed` without touching
    the global torch RNG."""
    import contextlib

    import torch

    drops = [m for name, m in head.named_modules()
             if name.split(".")[-1] == "mc_dropout" and isinstance(m, torch.nn.Dropout) and m.p > 0]
    if not drops:
        raise InputError("MC dropout: this head has no dropout to sample; give --hparam dropout=RATE (lp or lora)")
    if samples < 2:
        raise InputError(f"MC dropout needs at least 2 samples, got {samples}")
    xt = torch.as_tensor(x, dtype=torch.float32)
    head.eval()
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad(), contextlib.ExitStack() as memos:
            for m in head.modules():  # deterministic encoders before the dropout: computed once, not T times
                if hasattr(m, "encoder_memo"):
                    memos.enter_context(m.encoder_memo())
            torch.manual_seed(seed)
            for m in drops:
                m.train()
            act = (lambda z: torch.softmax(z.double(), dim=1)) if softmax else torch.sigmoid
            out = [act(head(xt)).numpy().astype(np.float64) for _ in range(samples)]
    finally:
        head.eval()
    return np.stack(out)


@dataclass
class SeedRun:
    """One seed's outcome: test and validation scores, the selected epoch; with MC dropout the (T, n, K) samples
    of val and test (the scores are then their means). The scorer chooses the threshold on the validation scores."""

    seed: int
    test_scores: np.ndarray
    val_scores: np.ndarray
    fit: FitOutcome
    mc: dict[str, np.ndarray] | None = None
    extra_scores: dict[str, np.ndarray] = field(default_factory=dict)


def run_classification(train: SplitArrays, val: SplitArrays, test_x: np.ndarray,
                       make_head: Callable[[np.ndarray, int], torch.nn.Module],
                       mitigation_factory: Callable[[], Mitigation],
                       seeds: list[int], cfg: TrainConfig, test_groups: np.ndarray | None = None, mc_samples: int = 0,
                       extra: dict[str, tuple[np.ndarray, np.ndarray | None]] | None = None) -> list[SeedRun]:
    """Train one head per seed and predict test inputs; nothing here sees a test label.

    `test_groups` are passed only to post-processing mitigations that declare they need the attribute
    at inference. With `mc_samples` T > 0 the val and test scores are the means of T MC-dropout passes (the
    predictive distribution, kept in SeedRun.mc), each pass adjusted by a post-processing mitigation. `extra`
    (name -> inputs, group codes) are further test sets (external evaluation) scored exactly as the test set.
    """
    import torch

    k = _as2d(train.y).shape[1]
    runs = []
    for seed in seeds:
        mitigation = mitigation_factory()
        torch.manual_seed(seed)  # the head's initial weights depend on the seed only
        model, fit = fit_head(make_head(train.x, k), train, val, cfg, mitigation, seed)
        at_inference = mitigation.needs_attribute_at_inference
        groups = {"val": val.groups if at_inference else None, "test": test_groups if at_inference else None}
        inputs = {"val": val.x, "test": test_x}
        for name, (x, g) in (extra or {}).items():
            inputs[name], groups[name] = x, (g if at_inference else None)
        mc = None
        if mc_samples:  # each pass post-processed as a single prediction would be; the scores are their means
            mc = {k: mc_predict(model, x, mc_samples, seed) for k, x in inputs.items()}
            mitigation.fit_postprocess(mc["val"].mean(axis=0), _as2d(val.y), val.groups)
            mc = {s: np.stack([mitigation.adjust_scores(p, groups[s]) for p in v]) for s, v in mc.items()}
            scores = {k: v.mean(axis=0) for k, v in mc.items()}
        else:
            scores = {k: predict(model, x) for k, x in inputs.items()}
            mitigation.fit_postprocess(scores["val"], _as2d(val.y), val.groups)
            scores = {k: mitigation.adjust_scores(v, groups[k]) for k, v in scores.items()}
        pv, pt = scores.pop("val"), scores.pop("test")
        if mc is not None:
            mc = {"val": mc["val"], "test": mc["test"]}
        runs.append(SeedRun(seed, pt, pv, fit, mc, scores))
    return runs


def describe_config(cfg: TrainConfig) -> dict[str, Any]:
    """The training configuration as recorded in results."""
    return asdict(cfg)


@dataclass
class _Run:
    """What every seed of one classification run shares: its inputs, the prepared features, the label columns and
    labels, the split positions, the training groups (codes) and the sampling groups, the task and its training
    settings, and the seconds preparing took."""

    inputs: RunInputs
    prepared: Prepared
    label_cols: list[str]
    pos: dict[str, np.ndarray]
    y: np.ndarray
    codes: np.ndarray | None
    n_groups: int
    sampling: Sampling
    groups: np.ndarray
    task: Task
    cfg: TrainConfig
    t_prep: float


def _prepare_run(inputs: RunInputs) -> _Run:
    """The features of every split (the expensive step: cached by the usage) and what each seed reads."""
    from fairmedbench.analysis.sampling import Sampling

    spec, ds, split = inputs.spec, inputs.dataset, inputs.split
    t0 = time.perf_counter()
    card = ds.card
    tasks = spec.train_hparams["tasks"]
    assert card.label_column is not None, f"dataset {card.name!r}: a classification dataset names its label column"
    label_cols = [card.label_column, *(card.extra_label_columns if tasks == "all" else ())]
    pos = {"train": split.train, "val": split.val, "test": split.test}
    prepared = prepare_inputs(inputs.usage, inputs.model, ds, split, inputs.ctx, inputs.externals)  # 3D: per volume
    t_prep = time.perf_counter() - t0
    y = ds.samples[label_cols].to_numpy().astype(np.int64)
    codes, n_groups = training_groups(spec, ds)
    sampling = Sampling(**spec.sampling)
    groups = (ds.samples[f"attr:{spec.attributes[0]}"].to_numpy() if spec.attributes
              else np.full(len(ds.samples), None, dtype=object))
    task = get_task(spec.task)
    return _Run(inputs, prepared, label_cols, pos, y, codes, n_groups, sampling, groups, task,
                task.make_config(spec.train_hparams), t_prep)


def _seed_extra(run: _Run, seed: int, sr: SeedRun, policy: str | None, keep: dict[str, np.ndarray],
                ps: dict[str, np.ndarray], table: PredictionTable, mitigation: Mitigation) -> dict[str, Any]:
    """A seed document's runner sections: training, usage, and where they apply uncertainty, sampling, external
    datasets and the resampled test set."""
    from fairmedbench.analysis.sampling import describe
    from fairmedbench.analysis.uncertainty import run_uncertainty

    spec, ds, y, label_cols = run.inputs.spec, run.inputs.dataset, run.y, run.label_cols
    extra: dict[str, Any]
    extra = {"training": {"config": describe_config(run.cfg), "mitigation": mitigation.describe(),
                          "best_epoch": sr.fit.best_epoch, "best_val_loss": finite(sr.fit.best_val_loss),
                          "select": sr.fit.select, "best_select_score": finite(sr.fit.best_score),
                          "val_losses": sr.fit.val_losses, "threshold_policy": policy},
             "usage": {"name": run.inputs.usage.name, **run.prepared.notes}}
    if sr.mc is not None:
        extra["uncertainty"] = run_uncertainty(y[ps["test"]], sr.mc["test"], label_cols,
                                               attr_columns(ds, spec, ps["test"]),
                                               patient_ids=patient_ids(ds, ps["test"]))
    if run.sampling.active:
        extra["sampling"] = {**run.sampling.identity(), "seed": [spec.split_seed, seed],
                             "splits": describe(keep, run.pos, run.groups, y[:, 0])}
    if run.inputs.externals:
        extra["external"] = _external_results(spec, run.inputs.externals, run.inputs.out_dir, seed, label_cols, sr,
                                              policy, (y[ps["test"]], attr_columns(ds, spec, ps["test"]),
                                                       patient_ids(ds, ps["test"]), ps["test"]), table)
    if run.sampling.test_resample:
        extra["test_resample"] = _resampled_test(spec, ds, ps["test"], y, label_cols, policy, table, seed)
    return extra


def _run_seed(run: _Run, seed: int) -> tuple[dict[str, Any], FairnessResult]:
    """One seed: draw its splits, train the head, score and write its predictions; its document and metrics."""
    from fairmedbench.analysis.sampling import draw
    from fairmedbench.analysis.uncertainty import mc_columns
    from fairmedbench.metrics.profiles import get_profile
    from fairmedbench.mitigation import make_mitigation

    spec, adapter, ds, prepared, y = run.inputs.spec, run.inputs.usage, run.inputs.dataset, run.prepared, run.y
    keep = draw(run.sampling, run.pos, run.groups, y[:, 0], spec.split_seed, seed)  # all of each split unless sampled
    ps = {k: p[keep[k]] for k, p in run.pos.items()}
    arrays = {k: SplitArrays(_rows(prepared.inputs[k], keep[k]), y[p], None if run.codes is None else run.codes[p],
                             run.n_groups) for k, p in ps.items()}
    t1 = time.perf_counter()
    factory = partial(make_mitigation, spec.mitigation, **spec.mitigation_hparams)
    extra_x = {f"external{k}": (prepared.inputs[f"external{k}"], e.codes(spec, ds))
               for k, e in enumerate(run.inputs.externals)}
    with head_threads(adapter.caches_features):  # the same head on any launcher or core count
        [sr] = run_classification(arrays["train"], arrays["val"], arrays["test"].x, prepared.make_head, factory,
                                  [seed], run.cfg, test_groups=arrays["test"].groups,
                                  mc_samples=int(spec.usage_hparams.get("mc_samples", 0)), extra=extra_x)
    # a profile that fixes its own threshold (fairmedfm) takes none; a plugin may fix the operating point
    policy = (factory().threshold_policy or spec.threshold) if get_profile(spec.profile).accepts_threshold else None
    t_train = time.perf_counter() - t1
    parts = [SplitPredictions(name, ds.samples["sample_id"].to_numpy()[p], patient_ids(ds, p),
                              attr_columns(ds, spec, p), y[p], scores,
                              extra=mc_columns(sr.mc[name], run.label_cols) if sr.mc is not None else {})
             for name, p, scores in (("val", ps["val"], sr.val_scores), ("test", ps["test"], sr.test_scores))]
    pred_name = f"seed{seed}.predictions.parquet"
    res, table = score_and_write(run.task, run.inputs.out_dir / pred_name, parts, seed, run.label_cols,
                                 spec.attributes, score_settings(spec, seed, policy))  # the table the run writes
    extra = _seed_extra(run, seed, sr, policy, keep, ps, table, factory())
    doc = seed_document(run.task.run_kind, spec, seed, res, run.inputs.info, pred_name, run.label_cols, extra,
                        {"load": run.inputs.t_load, "prepare": run.t_prep, "train": t_train,
                         "metrics": time.perf_counter() - t1 - t_train}, run.inputs.ctx.device,
                        heads_pinned=adapter.caches_features)
    return doc, res


def run(inputs: RunInputs) -> RunnerOutput:
    """The classification runner (TASKS['classification']): head per seed, threshold on validation, test metrics;
    the same head, scores and threshold on each external dataset's test split, with its shift."""
    return run_seeds(inputs, partial(_run_seed, _prepare_run(inputs)))


def _external_results(spec: RunConfig, externals: Sequence[ExternalSet], out_dir: Path, seed: int,
                      label_cols: list[str], sr: SeedRun, policy: str | None,
                      internal: tuple[np.ndarray, dict[str, np.ndarray], np.ndarray, np.ndarray],
                      table: PredictionTable) -> list[dict[str, Any]]:
    """Each external test set's predictions Parquet, scored as written exactly as the internal `table` (the
    threshold chosen on its validation rows), and the shift of the first label's group AUC."""
    from fairmedbench.analysis.shift import SiteScores, site_shifts

    task = get_task(spec.task)
    out = []
    for k, ext in enumerate(externals):
        card = ext.dataset.card
        cols = [card.label_column, *(card.extra_label_columns if len(label_cols) > 1 else ())]
        test = ext.split.test
        ye = ext.dataset.samples[cols].to_numpy().astype(np.int64)[test]
        scores = sr.extra_scores[f"external{k}"]
        attrs = ext.attributes(spec)
        part = SplitPredictions("test", ext.dataset.samples["sample_id"].to_numpy()[test],
                                patient_ids(ext.dataset, test), attrs, ye, scores)
        res, _ = score_and_write(task, out_dir / external_file(seed, k), [part], seed, label_cols, spec.attributes,
                                 score_settings(spec, seed, policy), val=table.val)
        shifts = site_shifts("classification",
                             SiteScores(internal[0][:, 0], sr.test_scores[:, 0], internal[1], internal[2],
                                        internal[3]),
                             SiteScores(ye[:, 0], scores[:, 0], attrs, patient_ids(ext.dataset, test), test),
                             spec.n_boot, seed, ext.label, min_group_size(res), ext.pairs)
        out.append(external_entry(spec, k, ext, seed, res, shifts, len(test)))
    return out


def _resampled_test(spec: RunConfig, ds: Dataset, test: np.ndarray, y: np.ndarray, label_cols: list[str],
                    policy: str | None, table: PredictionTable, seed: int) -> dict[str, Any]:
    """The run's test set (the test rows of `table`, the written one) resampled as --test-resample asks (seeded by
    the run seed) and evaluated like the original: the drawn ids, their counts and the result, stored beside the
    original's."""
    from fairmedbench.analysis.resample import matched_age_column, parse_test_resample, resample_test_set

    rs = parse_test_resample(str(spec.sampling["test_resample"]))
    age_col = matched_age_column(rs, ds.card)
    ages = None if age_col is None else _numeric(ds.samples[age_col].to_numpy()[test])
    group_col = f"attr:{rs.attribute}"
    sample = resample_test_set(rs, ds.samples[group_col].to_numpy()[test], y[test, 0],
                               ds.samples["sample_id"].to_numpy()[test], seed, ages=ages,
                               columns={"group_col": group_col, "label_col": label_cols[0],
                                        **({"age_col": age_col} if age_col else {})})
    p = sample.positions
    res = get_task(spec.task).score(table.take(p), score_settings(spec, seed, policy))
    return {**sample.to_dict(), "result": res.to_dict()}


def _numeric(values: np.ndarray) -> np.ndarray:
    """Numbers as float (unparseable cells NaN: left out by the age bins)."""
    import pandas as pd

    out: np.ndarray = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=float)
    return out


def _rows(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """`x[keep]`, or `x` itself when every row is kept (a memory-mapped feature array is not copied)."""
    return x if len(keep) == len(x) else x[keep]
