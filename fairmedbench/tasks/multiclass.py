"""The multi-class task (TASKS['multiclass']): one softmax head over the dataset card's classes, trained with
cross-entropy on train, its checkpoint chosen on validation, test predicted; per-group multi-class metrics.

The usages' heads are reused as they are (lp: a linear layer on cached features, lora: LoRA encoder + linear
layer) with one output per class; the runner turns their logits into softmax probabilities. The prediction is
the argmax (no threshold to choose). Test labels reach only the metric engine.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.engine.device import head_threads
from fairmedbench.errors import InputError
from fairmedbench.spec import RunConfig
from fairmedbench.tasks.base import get_task
from fairmedbench.tasks.classification import TrainConfig
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
    from fairmedbench.metrics.result import FairnessResult
    from fairmedbench.mitigation.base import Mitigation
    from fairmedbench.registry.datasets.dataset import Dataset
    from fairmedbench.tasks.base import Task


class MulticlassConfig(TrainConfig):
    """Softmax-head training hyperparameters: the classification head's (class_balanced weights the
    cross-entropy by n / (C · n_c) from the train split); `select` takes one of the task's select_rules."""


@dataclass
class MulticlassFit:
    """What training chose on validation: the best epoch, its validation loss and selection score, the curve."""

    best_epoch: int
    best_val_loss: float
    best_score: float
    select: str
    val_losses: list[float] = field(default_factory=list)


def macro_auc(y: np.ndarray, p: np.ndarray) -> float:
    """Mean one-vs-rest AUC (ties 1/2) over the classes with positives and negatives in `y`; NaN if none."""
    from fairmedbench.metrics.auc import weighted_auc

    ones = np.ones((1, len(y)))
    aucs = [weighted_auc(y == c, p[:, c], ones)[0] for c in range(p.shape[1]) if 0 < (y == c).sum() < len(y)]
    return float(np.mean(aucs)) if aucs else float("nan")


def selection_score(rule: str, y: np.ndarray, p: np.ndarray, groups: np.ndarray | None, val_loss: float) -> float:
    """Validation score to minimise: the loss, -macro AUC, or -the worst group's macro AUC."""
    if rule == "val_loss":
        return val_loss
    if rule == "macro_auc":
        return -macro_auc(y, p)
    assert groups is not None, f"selection rule {rule!r} needs groups (fit_softmax_head refuses it without them)"
    per = [macro_auc(y[groups == g], p[groups == g]) for g in np.unique(groups[groups >= 0])]
    per = [a for a in per if np.isfinite(a)]
    return -min(per) if per else float("inf")


def fit_softmax_head(head: torch.nn.Module, x: dict[str, np.ndarray], y: dict[str, np.ndarray],
                     groups: dict[str, np.ndarray | None], n_groups: int, n_classes: int, cfg: MulticlassConfig,
                     mitigation: Mitigation, seed: int) -> tuple[torch.nn.Module, MulticlassFit]:
    """Train `head` (logits (n, C)) with cross-entropy through the mitigation's hooks; keep the weights of the
    epoch best by `cfg.select` on validation."""
    import torch
    import torch.nn.functional as F

    if len(y["val"]) == 0:
        raise InputError("the validation split is empty: checkpoint selection needs one")
    rules = get_task("multiclass").select_rules
    if cfg.select not in rules:
        raise InputError(f"selection rule {cfg.select!r}: choose one of {', '.join(rules)}")
    if cfg.select == "worst_group_macro_auc" and groups["val"] is None:
        raise InputError("selection rule 'worst_group_macro_auc' needs the sensitive attribute on validation")
    if mitigation.needs_attribute_at_training and groups["train"] is None:
        raise InputError(f"mitigation {mitigation.name!r} needs the sensitive attribute at training; "
                         "give --attribute for a dataset that has one")
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    mitigation.check_task(get_task("multiclass"))  # its rules for a class-index label, for callers that skip resolve
    mitigation.softmax_classes(n_classes)  # the hooks below see class indices and a softmax head
    model = mitigation.wrap_head(head, n_groups)
    xt = torch.as_tensor(x["train"], dtype=torch.float32)
    yt = torch.as_tensor(y["train"], dtype=torch.long)
    gt = None if groups["train"] is None else torch.as_tensor(groups["train"], dtype=torch.long)
    xv = torch.as_tensor(x["val"], dtype=torch.float32)
    yv = torch.as_tensor(y["val"], dtype=torch.long)
    weight = None
    if cfg.class_balanced:
        counts = torch.bincount(yt, minlength=n_classes).float()
        weight = len(yt) / (n_classes * counts.clamp(min=1))
    params = list(model.parameters()) + list(mitigation.extra_parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)

    def validate(m: torch.nn.Module) -> tuple[float, float]:
        logits_v = m(xv)
        loss_v = float(F.cross_entropy(logits_v, yv, weight=weight))
        return selection_score(cfg.select, y["val"], torch.softmax(logits_v, 1).numpy(), groups["val"], loss_v), loss_v

    fit = fit_epochs(model, mitigation, opt, (xt, yt, gt), (y["train"], groups["train"]), cfg.epochs, cfg.batch_size,
                     cfg.patience, rng, lambda logits, yb: F.cross_entropy(logits, yb, weight=weight, reduction="none"),
                     validate)
    return model, MulticlassFit(fit.best_epoch, fit.best_val_loss, fit.best_score, cfg.select, fit.val_losses)


def predict_proba(head: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    """Softmax class probabilities (n, C) of a trained head (float64, rows sum to 1)."""
    import torch

    head.eval()
    with torch.no_grad():
        logits = head(torch.as_tensor(x, dtype=torch.float32)).double()
        return torch.softmax(logits, dim=1).numpy()


def class_labels(ds: Dataset) -> tuple[np.ndarray, list[str]]:
    """Every sample's class index from the card's label column, and the card's class names (the index order)."""
    card = ds.card
    classes = [str(c) for c in card.classes]
    col = card.label_column
    if not col or col not in ds.samples:
        raise InputError(f"dataset {card.name!r} has no label column {col!r}: the multiclass task needs one")
    y = ds.samples[col].to_numpy()
    if len(classes) < 2:
        raise InputError(f"dataset {card.name!r} names {len(classes)} class(es); the multiclass task needs >= 2")
    try:
        yi = y.astype(np.int64)
        ok = bool((yi == y).all() and (yi >= 0).all() and (yi < len(classes)).all())
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise InputError(f"dataset {card.name!r}: column {col!r} must hold class indices 0..{len(classes) - 1} "
                         f"(the card's classes {classes}), found {sorted(set(map(str, y)))[:8]}")
    return yi, classes


@dataclass
class _Run:
    """What every seed of one multiclass run shares: its inputs, the class indices and names, the split positions,
    each external dataset's test labels, the prepared features, the training groups (codes), the task and its
    training settings, and the seconds preparing took."""

    inputs: RunInputs
    y: np.ndarray
    classes: list[str]
    pos: dict[str, np.ndarray]
    ext_y: list[np.ndarray]
    prepared: Prepared
    codes: np.ndarray | None
    n_groups: int
    task: Task
    cfg: MulticlassConfig
    label_col: str
    t_prep: float


def _prepare_run(inputs: RunInputs) -> _Run:
    """The settings and labels checked, then the features of every split (the expensive step: cached by the usage)
    and what each seed reads."""
    spec, ds, split, externals = inputs.spec, inputs.dataset, inputs.split, inputs.externals
    t0 = time.perf_counter()
    # checked before any feature is extracted
    if spec.threshold != "val_youden" or spec.profile != "default":
        raise InputError(f"the multiclass task decides by the argmax and uses the default metric profile: drop "
                         f"--threshold {spec.threshold} / --profile {spec.profile}")
    if spec.sampling:
        raise InputError("sampling options (--train-group-share, --prevalence, --test-resample) apply to binary "
                         "classification runs, not to the multiclass task")
    y, classes = class_labels(ds)
    pos = {"train": split.train, "val": split.val, "test": split.test}
    missing = [c for c in range(len(classes)) if not (y[split.train] == c).any()]
    if missing:
        raise InputError(f"dataset {ds.card.name!r}: class(es) {[classes[c] for c in missing]} have no train "
                         "sample; the softmax head cannot learn them (use more data or another split)")
    ext_y = [class_labels(e.dataset)[0][e.split.test] for e in externals]
    prepared = prepare_inputs(inputs.usage, inputs.model, ds, split, inputs.ctx, externals)  # 3D: one row per volume
    t_prep = time.perf_counter() - t0
    codes, n_groups = training_groups(spec, ds)
    task = get_task(spec.task)
    cfg = task.make_config(spec.train_hparams)
    label_col = ds.card.label_column
    assert label_col is not None, "class_labels checked the card's label column"
    return _Run(inputs, y, classes, pos, ext_y, prepared, codes, n_groups, task, cfg, label_col, t_prep)


def _predictions(run: _Run, model_fit: torch.nn.Module, mitigation: Mitigation, g: dict[str, np.ndarray | None],
                 seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
    """Class probabilities of val, test and each external set, post-processed by the mitigation (fitted on val);
    with MC dropout also every pass (each post-processed as a single prediction would be; probs = their means)."""
    from fairmedbench.tasks.classification import mc_predict

    spec, y, inputs = run.inputs.spec, run.y, run.prepared.inputs
    mc_t = int(spec.usage_hparams.get("mc_samples", 0))  # MC dropout (analysis.uncertainty)
    at_inference = mitigation.needs_attribute_at_inference
    names = ("val", "test", *(f"external{k}" for k in range(len(run.inputs.externals))))
    if not mc_t:
        probs = {k: predict_proba(model_fit, inputs[k]) for k in names}
        mitigation.fit_postprocess(probs["val"], y[run.inputs.split.val], g["val"])
        return {k: mitigation.adjust_scores(v, g[k] if at_inference else None) for k, v in probs.items()}, None
    mc = {k: mc_predict(model_fit, inputs[k], mc_t, seed, softmax=True) for k in names}
    mitigation.fit_postprocess(mc["val"].mean(axis=0), y[run.inputs.split.val], g["val"])
    mc = {k: np.stack([mitigation.adjust_scores(p, g[k] if at_inference else None) for p in v])
          for k, v in mc.items()}
    return {k: v.mean(axis=0) for k, v in mc.items()}, mc


def _seed_extra(run: _Run, seed: int, fit: MulticlassFit, mitigation: Mitigation, probs: dict[str, np.ndarray],
                mc: dict[str, np.ndarray] | None) -> dict[str, Any]:
    """A seed document's runner sections: training, usage, and where they apply external datasets and
    uncertainty."""
    from fairmedbench.analysis.uncertainty import uncertainty_block

    spec, ds, test, y = run.inputs.spec, run.inputs.dataset, run.inputs.split.test, run.y
    extra: dict[str, Any]
    extra = {"training": {"config": asdict(run.cfg), "mitigation": mitigation.describe(), "loss": "cross-entropy",
                          "best_epoch": fit.best_epoch, "best_val_loss": finite(fit.best_val_loss),
                          "select": fit.select, "best_select_score": finite(fit.best_score),
                          "val_losses": fit.val_losses, "decision": "argmax"},
             "usage": {"name": run.inputs.usage.name, "head": f"softmax over {len(run.classes)} classes",
                       **run.prepared.notes}}
    if run.inputs.externals:
        extra["external"] = _external_results(spec, run.inputs.externals, run.ext_y, probs, run.inputs.out_dir, seed,
                                              run.classes, (y[test], attr_columns(ds, spec, test),
                                                            patient_ids(ds, test), test))
    if mc is not None:
        extra["uncertainty"] = {run.label_col: uncertainty_block(
            y[test], mc["test"], attr_columns(ds, spec, test), patient_ids=patient_ids(ds, test))}
    return extra


def _run_seed(run: _Run, seed: int) -> tuple[dict[str, Any], FairnessResult]:
    """One seed: train the softmax head, predict, score and write its predictions; its document and metrics."""
    import torch

    from fairmedbench.analysis.uncertainty import mc_class_columns
    from fairmedbench.mitigation import make_mitigation

    spec, adapter, ds, pos, y, classes = (run.inputs.spec, run.inputs.usage, run.inputs.dataset, run.pos, run.y,
                                          run.classes)
    t1 = time.perf_counter()
    with head_threads(adapter.caches_features):  # the same head on any launcher or core count
        mitigation = make_mitigation(spec.mitigation, **spec.mitigation_hparams)
        torch.manual_seed(seed)  # the head's initial weights depend on the seed only
        head = run.prepared.make_head(run.prepared.inputs["train"], len(classes))
        g = {k: None if run.codes is None else run.codes[p] for k, p in pos.items()}
        model_fit, fit = fit_softmax_head(head, run.prepared.inputs, {k: y[p] for k, p in pos.items()}, g,
                                          run.n_groups, len(classes), run.cfg, mitigation, seed)
        g.update({f"external{k}": e.codes(spec, ds) for k, e in enumerate(run.inputs.externals)})
        probs, mc = _predictions(run, model_fit, mitigation, g, seed)
    t_train = time.perf_counter() - t1
    parts = [SplitPredictions(name, ds.samples["sample_id"].to_numpy()[pos[name]], patient_ids(ds, pos[name]),
                              attr_columns(ds, spec, pos[name]), y[pos[name]], probs[name],
                              extra=mc_class_columns(mc[name], classes) if mc is not None else {})
             for name in ("val", "test")]
    pred_name = f"seed{seed}.predictions.parquet"
    res, _ = score_and_write(run.task, run.inputs.out_dir / pred_name, parts, seed, [run.label_col], spec.attributes,
                             score_settings(spec, seed), classes)  # the table the run writes
    extra = _seed_extra(run, seed, fit, mitigation, probs, mc)
    doc = seed_document(run.task.run_kind, spec, seed, res, run.inputs.info, pred_name, [run.label_col], extra,
                        {"load": run.inputs.t_load, "prepare": run.t_prep, "train": t_train,
                         "metrics": time.perf_counter() - t1 - t_train}, run.inputs.ctx.device, classes,
                        heads_pinned=adapter.caches_features)
    return doc, res


def run(inputs: RunInputs) -> RunnerOutput:
    """The multiclass runner (TASKS['multiclass']): a softmax head per seed, checkpoint on validation, test
    metrics by group; the same head on each external dataset's test split, with its shift."""
    return run_seeds(inputs, partial(_run_seed, _prepare_run(inputs)))


def _external_results(spec: RunConfig, externals: Sequence[ExternalSet], ext_y: list[np.ndarray],
                      probs: dict[str, np.ndarray], out_dir: Path, seed: int, classes: list[str],
                      internal: tuple[np.ndarray, dict[str, np.ndarray], np.ndarray, np.ndarray]
                      ) -> list[dict[str, Any]]:
    """Each external test set through the multiclass metric engine as the internal one, its predictions Parquet,
    and the shift of the group macro AUC."""
    from fairmedbench.analysis.shift import SiteScores, site_shifts

    task = get_task(spec.task)
    out = []
    for k, ext in enumerate(externals):
        p, ye, attrs = probs[f"external{k}"], ext_y[k], ext.attributes(spec)
        ext_pids = patient_ids(ext.dataset, ext.split.test)
        ext_label = ext.dataset.card.label_column
        assert ext_label is not None, "class_labels checked the external card's label column"
        part = SplitPredictions("test", ext.dataset.samples["sample_id"].to_numpy()[ext.split.test], ext_pids,
                                attrs, ye, p)
        res, _ = score_and_write(task, out_dir / external_file(seed, k), [part], seed, [ext_label], spec.attributes,
                                 score_settings(spec, seed), classes)
        shifts = site_shifts("multiclass",
                             SiteScores(internal[0], probs["test"], internal[1], internal[2], internal[3]),
                             SiteScores(ye, p, attrs, ext_pids, ext.split.test), spec.n_boot, seed, ext.label,
                             min_group_size(res), ext.pairs)
        out.append(external_entry(spec, k, ext, seed, res, shifts, len(ext.split.test)))
    return out
