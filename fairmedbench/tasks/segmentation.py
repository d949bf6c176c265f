"""The segmentation task (TASKS['segmentation']): its runner `run`; prompted masks for the test samples,
per-sample DSC/IoU at a stated mask threshold; and the training loop of a prompted mask decoder, with a trainable
encoder copy where the usage gives one (`fit_decoder`), with a mitigation plugin's hooks.

A 3D sample (D, H, W) is segmented slice by slice by a 2D model: every slice whose ground truth is non-empty
gets its own prompt; the other slices are predicted empty. A volumetric predictor (attribute `volumetric`)
gets one 3D prompt per volume and returns the whole mask. Either way DSC, IoU and HD95 (mm, with the voxel
spacing) are per volume. Samples with an empty ground truth get no prompt: they are neither trained on nor
evaluated.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from fairmedbench.adapters.prompts import Prompt, make_prompt, make_prompt_3d
from fairmedbench.errors import InputError
from fairmedbench.metrics.segmentation import dice_from_counts, hd95, iou_from_counts
from fairmedbench.mitigation.base import Batch, Mitigation
from fairmedbench.spec import RunConfig
from fairmedbench.tasks.base import get_task
from fairmedbench.tasks.common import (
    ExternalSet,
    RunInputs,
    RunnerOutput,
    attr_columns,
    external_entry,
    external_file,
    min_group_size,
    patient_ids,
    run_seeds,
    score_and_write,
    score_settings,
    seed_document,
    training_groups,
)
from fairmedbench.tasks.table import SplitPredictions

if TYPE_CHECKING:
    import torch

    from fairmedbench.adapters.base import RunContext, Usage
    from fairmedbench.engine.splits import Split
    from fairmedbench.metrics.result import FairnessResult
    from fairmedbench.registry.datasets.dataset import Dataset
    from fairmedbench.registry.models.runtime import FoundationModel


@dataclass
class SegOutcome:
    """Per evaluated sample: position in the dataset, DSC, IoU; plus samples that could not be prompted."""

    positions: list[int] = field(default_factory=list)
    dsc: list[float] = field(default_factory=list)
    iou: list[float] = field(default_factory=list)
    skipped: dict[int, str] = field(default_factory=dict)
    prompted_slices: list[int] = field(default_factory=list)
    hd95: list[float] = field(default_factory=list)  # filled when the runner is given voxel spacings


def prompted_slices(image: np.ndarray, gt: np.ndarray) -> Iterator[tuple[int | None, np.ndarray, np.ndarray]]:
    """(slice index, 2D image, 2D mask) of each part that gets a prompt: a 2D sample with a non-empty mask (index
    None), or each slice of a volume whose mask is non-empty."""
    if gt.ndim == 2:
        if gt.any():
            yield None, image, gt
        return
    for z in range(gt.shape[0]):
        if gt[z].any():
            yield z, image[z], gt[z]


def _predict_sample(predict_mask: Callable[..., np.ndarray], image: np.ndarray, gt: np.ndarray,
                    mode: str, rng: np.random.Generator, jitter: float,
                    spacing: Sequence[float] | None = None) -> tuple[np.ndarray, int]:
    """The predicted mask of a 2D image, of a 3D volume slice by slice, or of a whole volume by a volumetric
    predictor (one 3D prompt); and how many prompts were made."""
    if getattr(predict_mask, "volumetric", False):
        if gt.ndim != 3:
            raise InputError(f"a volumetric model needs 3D samples; got a mask of shape {gt.shape}")
        pred = np.asarray(predict_mask(image, make_prompt_3d(gt, mode, rng, jitter), spacing), dtype=bool)
        if pred.shape != gt.shape:
            raise InputError(f"the model returned a mask of shape {pred.shape} for a volume of shape {gt.shape}")
        return pred, 1
    pred = np.zeros_like(gt, dtype=bool)
    prompted = 0
    for z, image2d, gt2d in prompted_slices(image, gt):
        mask = np.asarray(predict_mask(image2d, make_prompt(gt2d, mode, rng, jitter)), dtype=bool)
        if z is None:
            pred = mask
        else:
            pred[z] = mask
        prompted += 1
    return pred, prompted


def run_segmentation(predict_mask: Callable[..., np.ndarray], load_image: Callable[[int], np.ndarray],
                     load_mask: Callable[[int], np.ndarray], positions: Sequence[int] | np.ndarray, mode: str,
                     seed: int,
                     jitter: float = 0.0, progress: Callable[[int, int], None] | None = None,
                     spacing_of: Callable[[int], Sequence[float]] | None = None) -> SegOutcome:
    """Prompt from each ground-truth mask (seeded per sample), predict, score; empty masks are skipped.

    With `spacing_of` (position -> voxel spacing, mm) HD95 is computed per sample in mm as well."""
    out = SegOutcome()
    for k, i in enumerate(positions):
        gt = np.asarray(load_mask(int(i)), dtype=bool)
        if not gt.any():
            out.skipped[int(i)] = "empty ground-truth mask: no prompt can be derived from it"
        else:
            rng = np.random.default_rng([seed, int(i)])
            spacing = None if spacing_of is None else spacing_of(int(i))
            pred, prompted = _predict_sample(predict_mask, load_image(int(i)), gt, mode, rng, jitter, spacing)
            inter, p_size, g_size = (pred & gt).sum(), pred.sum(), gt.sum()
            out.positions.append(int(i))
            out.dsc.append(float(dice_from_counts(np.array([inter]), np.array([p_size]), np.array([g_size]))[0]))
            out.iou.append(float(iou_from_counts(np.array([inter]), np.array([p_size]), np.array([g_size]))[0]))
            out.prompted_slices.append(prompted)
            if spacing_of is not None:
                out.hd95.append(hd95(pred, gt, spacing=spacing))
        if progress is not None:
            progress(k + 1, len(positions))
    return out


# --- training a prompted mask decoder -----------------------------------------------------------------------

@dataclass
class DecoderConfig:
    """Mask-decoder fine-tuning hyperparameters (recorded in the result).

    AdamW at MedSAM's learning rate 1e-4 and weight decay 0.01 (LiteMedSAM fine-tunes at 5e-5, 0.01, batch 4);
    few epochs, since the loaded decoder is already trained and a CPU run must stay short. `select`: the
    validation score that picks the epoch, mean DSC (val_dsc) or the lowest group mean DSC (worst_group_dsc).
    """

    lr: float = 1e-4
    weight_decay: float = 0.01
    epochs: int = 10
    patience: int = 3
    batch_size: int = 4
    select: str = "val_dsc"


def check_decoder_config(cfg: DecoderConfig) -> DecoderConfig:
    """InputError for a setting that cannot train: rule, non-positive sizes, a negative rate."""
    rules = get_task("segmentation").select_rules
    if cfg.select not in rules:
        raise InputError(f"selection rule {cfg.select!r} does not apply to segmentation: a mask decoder is selected "
                         f"by {' or '.join(rules)} (mean or worst-group validation DSC)")
    for name in ("epochs", "patience", "batch_size"):
        v = getattr(cfg, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < (0 if name == "epochs" else 1):
            raise InputError(f"decoder training: {name}={v!r} must be an integer >= {0 if name == 'epochs' else 1}")
    for name in ("lr", "weight_decay"):
        v = getattr(cfg, name)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not np.isfinite(v) or v < 0 or (
                name == "lr" and v == 0):
            raise InputError(f"decoder training: {name}={v!r} must be a number {'> 0' if name == 'lr' else '>= 0'}")
    return cfg


class TrainableSegmenter(Protocol):
    """What segmenter training needs from a usage: inputs kept by key, a trainable encoder copy (None: the
    encoder is frozen and its maps are kept), mask-decoder copies, targets and logits; and what it trains."""

    trained: str  # what training updates, recorded in the result
    frozen: str  # what stays as loaded

    def encode(self, images: Iterable[np.ndarray]) -> list[str]: ...

    def new_encoder(self) -> torch.nn.Module | None: ...

    def new_decoder(self) -> torch.nn.Module: ...

    def target(self, mask: np.ndarray) -> torch.Tensor: ...

    def logits(self, trained: Trained, keys: Sequence[str], boxes: Sequence[np.ndarray],
               shapes: Sequence[tuple[int, int]]) -> torch.Tensor: ...

    def predictor(self, trained: Trained) -> Callable[[np.ndarray, Prompt], np.ndarray]: ...

    def notes(self) -> dict[str, Any]: ...


@dataclass
class Trained:
    """What segmenter training updates: a trainable image-encoder copy (None when the encoder is frozen and its
    maps are kept) and a mask-decoder copy (possibly wrapped by a mitigation, e.g. one decoder per group)."""

    encoder: torch.nn.Module | None
    decoder: torch.nn.Module

    def modules(self) -> list[torch.nn.Module]:
        """The trained torch modules."""
        return [m for m in (self.encoder, self.decoder) if m is not None]

    def train(self, mode: bool = True) -> Trained:
        """Training (or evaluation) mode for every trained module."""
        for m in self.modules():
            m.train(mode)
        return self

    def state(self) -> dict[str, torch.Tensor]:
        """A copy of what training changes: the encoder's trainable parameters, the decoder's whole state."""
        out: dict[str, torch.Tensor] = {}
        if self.encoder is not None:
            out.update({f"encoder.{n}": p.detach().clone() for n, p in self.encoder.named_parameters()
                        if p.requires_grad})
        out.update({f"decoder.{k}": v.detach().clone() for k, v in self.decoder.state_dict().items()})
        return out

    def load(self, state: dict[str, torch.Tensor]) -> None:
        """Restore a `state()` copy."""
        import torch

        if self.encoder is not None:
            params = dict(self.encoder.named_parameters())
            with torch.no_grad():
                for k, v in state.items():
                    if k.startswith("encoder."):
                        params[k[len("encoder."):]].copy_(v)
        self.decoder.load_state_dict({k[len("decoder."):]: v for k, v in state.items() if k.startswith("decoder.")})


@dataclass
class SegSplit:
    """A split's prompted 2D units (a 2D image, or a slice of a volume, with a non-empty mask): per unit its
    encoder-map key, 2D mask and dataset position; the positions of the samples that got a prompt; with `keep`,
    their images and masks by position (validation re-predicts them every epoch)."""

    unit_positions: list[int] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    masks: list[np.ndarray] = field(default_factory=list)
    prompted: list[int] = field(default_factory=list)
    images: dict[int, np.ndarray] = field(default_factory=dict)
    full_masks: dict[int, np.ndarray] = field(default_factory=dict)


def prepare_split(problem: TrainableSegmenter, load_image: Callable[[int], np.ndarray],
                  load_mask: Callable[[int], np.ndarray],
                  positions: Sequence[int] | np.ndarray, keep: bool = False,
                  progress: Callable[[int, int], None] | None = None) -> SegSplit:
    """Collect a split's prompted units and compute their encoder maps (in the problem's batches)."""
    out = SegSplit()

    def images() -> Iterator[np.ndarray]:
        for k, i in enumerate(positions):
            gt = np.asarray(load_mask(int(i)), dtype=bool)
            if gt.any():
                image = np.asarray(load_image(int(i)))
                out.prompted.append(int(i))
                if keep:
                    out.images[int(i)], out.full_masks[int(i)] = image, gt
                for _, image2d, gt2d in prompted_slices(image, gt):
                    out.unit_positions.append(int(i))
                    out.masks.append(gt2d)
                    yield image2d
            if progress is not None:
                progress(k + 1, len(positions))

    out.keys = problem.encode(images())
    return out


def dice_bce_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per sample (b,): soft Dice loss of sigmoid(logits) with squared denominators plus the mean pixel BCE
    with logits, against 0/1 targets (b, H, W): MedSAM's DiceLoss(sigmoid, squared_pred) + BCEWithLogitsLoss."""
    import torch.nn.functional as F

    z, t = logits.flatten(1), target.flatten(1).to(logits.dtype)
    p = z.sigmoid()
    dice = 1.0 - (2.0 * (p * t).sum(1) + 1e-5) / ((p * p).sum(1) + (t * t).sum(1) + 1e-5)
    return dice + F.binary_cross_entropy_with_logits(z, t, reduction="none").mean(1)


def selection_score_seg(rule: str, dsc: np.ndarray, groups: np.ndarray | None) -> float:
    """Validation score to maximise: mean DSC, or the lowest group mean DSC (groups >= 0; NaN without any)."""
    if rule == "val_dsc":
        return float(np.mean(dsc)) if len(dsc) else float("nan")
    if groups is None:
        raise InputError("selection rule 'worst_group_dsc' needs the sensitive attribute on the validation split")
    means = [float(dsc[groups == g].mean()) for g in np.unique(groups[groups >= 0])]
    return min(means) if means else float("nan")


@dataclass
class DecoderFit:
    """What validation chose: the best epoch (-1: no epoch beat the loaded decoder, which is kept), its score,
    and per epoch (from -1, before training) the mean training loss and validation DSC (mean and worst group);
    what training updated and what stayed frozen (the usage's words)."""

    best_epoch: int
    select: str
    best_score: float
    curve: list[dict[str, Any]] = field(default_factory=list)
    trained: str = ""
    frozen: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN as None)."""
        clean = [{k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in row.items()}
                 for row in self.curve]
        return {"best_epoch": self.best_epoch, "select": self.select,
                "best_select_score": self.best_score if np.isfinite(self.best_score) else None, "val_curve": clean,
                "trained": self.trained, "frozen": self.frozen}


def _bbox(mask: np.ndarray, rng: np.random.Generator, jitter: float) -> np.ndarray:
    """The (jittered) box prompt of a training mask."""
    box = make_prompt(mask, "bbox", rng, jitter).box
    assert box is not None, "a bbox prompt carries a box"
    return box


def _batch_logits(problem: TrainableSegmenter, trained: Trained, keys: Sequence[str],
                  boxes: Sequence[np.ndarray], shapes: Sequence[tuple[int, int]],
                  groups: torch.Tensor | None) -> torch.Tensor:
    """Training logits of a batch; a decoder wrapped with `group_heads` (one per group) sees each sample through its
    own group's head (the attribute is needed at training only)."""
    import torch

    heads = getattr(trained.decoder, "group_heads", None)
    if heads is None:
        return problem.logits(trained, keys, boxes, shapes)
    if groups is None:
        raise InputError("a decoder with one head per group needs the sensitive attribute at training")
    g = groups.cpu().numpy()
    if len(g) and (g.min() < 0 or g.max() >= len(heads)):
        raise InputError(f"group codes outside 0..{len(heads) - 1} in a training batch")
    parts, order = [], []
    for code in np.unique(g):
        idx = np.flatnonzero(g == code)
        parts.append(problem.logits(Trained(trained.encoder, heads[int(code)]), [keys[i] for i in idx.tolist()],
                                    [boxes[i] for i in idx.tolist()], [shapes[i] for i in idx.tolist()]))
        order.extend(idx.tolist())
    out = torch.cat(parts)
    return out[torch.as_tensor(np.argsort(order), device=out.device)]


def _check_fit(train: SegSplit, val: SegSplit, codes: np.ndarray | None, cfg: DecoderConfig,
               mitigation: Mitigation) -> None:
    """The settings, the mitigation's task and the splits can train a decoder (checked before any training)."""
    check_decoder_config(cfg)
    mitigation.check_task(get_task("segmentation"))
    if not train.keys:
        raise InputError("the train split has no sample with a non-empty mask: nothing to fine-tune the decoder on")
    if not val.prompted:
        raise InputError("the validation split has no sample with a non-empty mask: checkpoint selection needs one")
    if mitigation.needs_attribute_at_training and codes is None:
        raise InputError(f"mitigation {mitigation.name!r} needs the sensitive attribute at training; "
                         "give --attribute for a dataset that has one")
    if cfg.select == "worst_group_dsc" and codes is None:
        raise InputError("selection rule 'worst_group_dsc' needs the sensitive attribute on the validation split")


class _DecoderTraining:
    """One decoder fine-tuning in progress: the trained copies and their optimiser, the training split as tensors
    with its groups, the seeded prompt generator, and how validation scores a checkpoint."""

    def __init__(self, problem: TrainableSegmenter, train: SegSplit, val: SegSplit, codes: np.ndarray | None,
                 n_groups: int, cfg: DecoderConfig, mitigation: Mitigation, seed: int, jitter: float) -> None:
        import torch

        self.problem, self.train_split, self.val, self.cfg, self.mitigation = problem, train, val, cfg, mitigation
        self.seed, self.jitter = seed, jitter
        self.rng = np.random.default_rng(seed)
        self.trained = Trained(problem.new_encoder(), mitigation.wrap_head(problem.new_decoder(), n_groups))
        params = [p for m in self.trained.modules() for p in m.parameters() if p.requires_grad]
        params += list(mitigation.extra_parameters())
        self.opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.targets = torch.stack([problem.target(m) for m in train.masks])
        self.groups = None if codes is None else np.asarray(codes)[train.unit_positions].astype(np.int64)
        self.groups_t = None if self.groups is None else torch.as_tensor(self.groups)
        self.val_groups = None if codes is None else np.asarray(codes)[val.prompted]
        self.shapes = [m.shape for m in train.masks]
        self.sampler_y = np.zeros(len(train.keys), dtype=np.int64)
        self.device = params[0].device

    def validate(self) -> dict[str, float]:
        """Mean and worst-group DSC of the validation split, predicted as the test procedure does."""
        self.trained.train(False)
        val = self.val
        out = run_segmentation(self.problem.predictor(self.trained), val.images.__getitem__,
                               val.full_masks.__getitem__, val.prompted, "bbox", self.seed, self.jitter)
        dsc = np.asarray(out.dsc)
        worst = (float("nan") if self.val_groups is None
                 else selection_score_seg("worst_group_dsc", dsc, self.val_groups))
        return {"val_dsc": float(dsc.mean()), "val_worst_group_dsc": worst}

    def score(self, row: dict[str, float]) -> float:
        """A curve row's value under the selection rule."""
        return row["val_dsc"] if self.cfg.select == "val_dsc" else row["val_worst_group_dsc"]

    def epoch(self) -> float:
        """One epoch over the mitigation's order of the training units, fresh box prompts per batch; the mean
        per-sample training loss."""
        import torch

        train, mitigation, size = self.train_split, self.mitigation, self.cfg.batch_size
        self.trained.train(True)
        order = mitigation.epoch_indices(self.sampler_y, self.groups, self.rng)
        total = 0.0
        for start in range(0, len(order), size):
            b = np.asarray(order[start:start + size])
            boxes = [_bbox(train.masks[j], self.rng, self.jitter) for j in b]
            gb = None if self.groups_t is None else self.groups_t[torch.as_tensor(b)].to(self.device)
            logits = _batch_logits(self.problem, self.trained, [train.keys[j] for j in b], boxes,
                                   [self.shapes[j] for j in b], gb)
            target = self.targets[torch.as_tensor(b)].to(self.device)
            per = dice_bce_loss(logits, target)
            loss = mitigation.loss(per, Batch(logits, target.to(logits.dtype), gb, None))
            self.opt.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
            self.opt.step()
            total += float(per.detach().sum())
        return total / max(len(order), 1)


def fit_decoder(problem: TrainableSegmenter, train: SegSplit, val: SegSplit, codes: np.ndarray | None,
                n_groups: int, cfg: DecoderConfig, mitigation: Mitigation, seed: int, jitter: float = 0.0,
                progress: Callable[[int, int], None] | None = None) -> tuple[Trained, DecoderFit]:
    """Fine-tune a decoder copy (and, where the usage gives one, a trainable encoder copy, e.g. LoRA) on train with
    the mitigation's hooks; keep the state best on validation.

    Only parameters that require gradients are optimised (a LoRA encoder copy freezes its base weights). `codes`
    are the training attribute's group codes by dataset position (-1 = missing). Each batch gets fresh box prompts
    (seeded, with `jitter`); validation prompts are the test procedure's (`run_segmentation` with the same seed
    and jitter). The mitigation sees `wrap_head(decoder, n_groups)`, `epoch_indices(zeros, groups, rng)` (no
    class label) and `loss(per_sample, Batch(logits, targets, groups, None))` with the decoder's low-resolution
    logits and 0/1 targets (b, L, L).
    """
    import torch

    _check_fit(train, val, codes, cfg, mitigation)
    torch.manual_seed(seed)
    run = _DecoderTraining(problem, train, val, codes, n_groups, cfg, mitigation, seed, jitter)
    row = {"epoch": -1, "train_loss": float("nan"), **run.validate(), "seconds": 0.0}
    curve = [row]
    best, best_state, best_epoch, bad = run.score(row), run.trained.state(), -1, 0
    for epoch in range(cfg.epochs):
        t0 = time.perf_counter()
        row = {"epoch": epoch, "train_loss": run.epoch(), **run.validate(), "seconds": time.perf_counter() - t0}
        curve.append(row)
        if progress is not None:
            progress(epoch + 1, cfg.epochs)
        v = run.score(row)
        if np.isfinite(v) and (not np.isfinite(best) or v > best + 1e-7):
            best, best_state, best_epoch, bad = v, run.trained.state(), epoch, 0
        else:
            bad += 1
            if bad >= cfg.patience:
                break
    run.trained.load(best_state)
    run.trained.train(False)
    return run.trained, DecoderFit(best_epoch, cfg.select, float(best), curve, problem.trained, problem.frozen)


def describe_decoder_config(cfg: DecoderConfig) -> dict[str, Any]:
    """The decoder-training configuration as recorded in results, with the loss and prompt rules."""
    return {**asdict(cfg), "optimizer": "AdamW",
            "loss": "per sample: soft Dice (sigmoid, squared denominators) + mean pixel BCE on the decoder's "
                    "low-resolution logits against the mask resized like the image",
            "prompts": "a box from each ground-truth mask (slice), redrawn every batch with the run's box_jitter"}


def _stage(ctx: Any, name: str) -> Callable[[int, int], None] | None:
    return (lambda done, total: ctx.progress(name, done, total)) if ctx.progress else None


def _decoder_trainer(spec: RunConfig, adapter: Usage, model: FoundationModel, ds: Dataset, split: Split,
                     ctx: RunContext, jitter: float
                     ) -> tuple[Callable[[int], tuple[Callable[..., np.ndarray], dict[str, Any]]], dict[str, Any]]:
    """For a usage that trains: encoder maps of every split computed once, and a function seed -> (predictor,
    the result's training block); plus the usage notes."""
    from fairmedbench.mitigation import make_mitigation

    cfg = check_decoder_config(get_task(spec.task).make_config(spec.train_hparams))
    mit_h = spec.mitigation_hparams
    codes, n_groups = training_groups(spec, ds)
    problem = adapter.trainable(model, ctx)
    train, val, test = (prepare_split(problem, ds.load_image, ds.load_mask, p, keep=name == "val",
                                      progress=_stage(ctx, f"encoder maps ({name})"))
                        for name, p in (("train", split.train), ("val", split.val), ("test", split.test)))

    def fit(seed: int) -> tuple[Callable[..., np.ndarray], dict[str, Any]]:
        mitigation = make_mitigation(spec.mitigation, **mit_h)
        decoder, outcome = fit_decoder(problem, train, val, codes, n_groups, cfg, mitigation, seed, jitter,
                                       progress=_stage(ctx, f"training the decoder (seed {seed})"))
        return problem.predictor(decoder), {
            "config": describe_decoder_config(cfg), "mitigation": mitigation.describe(), **outcome.to_dict(),
            "n_train_units": len(train.keys), "n_val_samples": len(val.prompted),
            "sampler_labels": "zeros: a segmentation sample has no class label"}

    notes = {**problem.notes(), "units": {"train": len(train.keys), "val": len(val.keys), "test": len(test.keys)}}
    return fit, notes


#: a seed's predictor: the mask predictor and, when it trained a decoder, the training record
SeedPredictor = Callable[[int], tuple[Callable[..., np.ndarray], dict[str, Any] | None]]


def run(inputs: RunInputs) -> RunnerOutput:
    """The segmentation runner (TASKS['segmentation']): prompted masks per seed (a decoder trained per seed
    when the usage learns), DSC per test sample, metrics by group over the prompted samples (an empty ground
    truth gives no prompt: its row has empty_gt=True and no score, and usage.skipped says why). The same
    predictor (zero-shot, or the seed's trained decoder) segments each external dataset's test split."""
    spec, adapter, ds, split = inputs.spec, inputs.usage, inputs.dataset, inputs.split
    jitter = float(spec.usage_hparams["box_jitter"])
    t0 = time.perf_counter()
    fit: SeedPredictor
    if adapter.learns:
        fit, notes = _decoder_trainer(spec, adapter, inputs.model, ds, split, inputs.ctx, jitter)
    else:
        zero_shot = adapter.predictor(inputs.model, inputs.ctx)
        fit, notes = (lambda seed: (zero_shot, None)), {}
    t_prep = time.perf_counter() - t0
    assert spec.prompt is not None, "resolve gives a segmentation run its prompt mode"
    return run_seeds(inputs, partial(_run_seed, inputs, fit, notes, jitter, t_prep))


def _run_seed(inputs: RunInputs, fit: SeedPredictor, notes: dict[str, Any], jitter: float, t_prep: float,
              seed: int) -> tuple[dict[str, Any], FairnessResult]:
    """One seed: its predictor (`fit`), the test masks, their metrics and predictions file; its document and
    metrics."""
    spec, adapter, ds, split, out_dir = inputs.spec, inputs.usage, inputs.dataset, inputs.split, inputs.out_dir
    prompt, progress = spec.prompt, inputs.opts.progress
    assert prompt is not None, "resolve gives a segmentation run its prompt mode"
    t1 = time.perf_counter()
    predict, training = fit(seed)
    t_train = time.perf_counter() - t1
    step = (lambda d, n: progress("segmenting", d, n)) if progress else None
    out = run_segmentation(predict, ds.load_image, ds.load_mask, split.test, prompt, seed,
                           jitter=jitter, progress=step, spacing_of=ds.spacing if ds.card.dim == 3 else None)
    if not out.positions:
        raise InputError(f"no test sample of {spec.dataset!r} has a non-empty mask to prompt from")
    p = np.asarray(out.positions)
    t_seg = time.perf_counter() - t1 - t_train
    pred_name = f"seed{seed}.predictions.parquet"
    res = _score_and_write(spec, seed, out_dir / pred_name, ds, out, split.test)  # the table the run wrote
    ids = ds.samples["sample_id"].to_numpy().astype(str)
    extra: dict[str, Any] = {"usage": {"name": adapter.name, "prompt": spec.prompt, "mask_threshold": "logit > 0",
                                       "prompted_slices": int(sum(out.prompted_slices)),
                                       "n_skipped": len(out.skipped),
                                       "skipped": {ids[k]: v for k, v in out.skipped.items()}, **notes}}
    timings = {"load": inputs.t_load, "segment": t_seg, "metrics": time.perf_counter() - t1 - t_train - t_seg}
    if training is not None:
        extra["training"] = training
        timings.update(prepare=t_prep, train=t_train)
    if inputs.externals:
        extra["external"] = _external_results(spec, inputs.externals, predict, out_dir, seed, jitter, out,
                                              attr_columns(ds, spec, p), patient_ids(ds, p))
    doc = seed_document(get_task(spec.task).run_kind, spec, seed, res, inputs.info, pred_name, ["segmentation"],
                        extra, timings, inputs.ctx.device)
    return doc, res


def _external_results(spec: RunConfig, externals: Sequence[ExternalSet], predict: Callable[..., np.ndarray],
                      out_dir: Path, seed: int,
                      jitter: float, internal: SegOutcome, internal_attrs: dict[str, np.ndarray],
                      internal_pids: np.ndarray) -> list[dict[str, Any]]:
    """Each external test split segmented by the same predictor, through the segmentation metric engine as the
    internal one, its predictions Parquet, and the shift of the group mean DSC."""
    from fairmedbench.analysis.shift import SiteScores, site_shifts

    assert spec.prompt is not None, "resolve gives a segmentation run its prompt mode"
    res_out = []
    for k, ext in enumerate(externals):
        eds = ext.dataset
        out = run_segmentation(predict, eds.load_image, eds.load_mask, ext.split.test, spec.prompt, seed,
                               jitter=jitter, spacing_of=eds.spacing if eds.card.dim == 3 else None)
        if not out.positions:
            raise InputError(f"--eval-dataset {ext.label}: no test sample has a non-empty mask to prompt from")
        attrs = attr_columns(eds, spec, np.asarray(out.positions))
        ext_pids = patient_ids(eds, np.asarray(out.positions))
        res = _score_and_write(spec, seed, out_dir / external_file(seed, k), eds, out, ext.split.test)
        shifts = site_shifts("segmentation",
                             SiteScores(None, np.asarray(internal.dsc), internal_attrs, internal_pids,
                                        np.asarray(internal.positions)),
                             SiteScores(None, np.asarray(out.dsc), attrs, ext_pids, np.asarray(out.positions)),
                             spec.n_boot, seed, ext.label, min_group_size(res), ext.pairs)
        res_out.append(external_entry(spec, k, ext, seed, res, shifts, len(ext.split.test)))
    return res_out


def _score_and_write(spec: RunConfig, seed: int, path: Path, ds: Dataset, out: SegOutcome,
                     test: np.ndarray) -> FairnessResult:
    """Score the predictions of a test split (`_test_part`) as the task reads them (its empty-ground-truth rows
    left out by the task's rule), then write their Parquet."""
    return score_and_write(get_task(spec.task), path, [_test_part(ds, spec, out, test)], seed, ["segmentation"],
                           spec.attributes, score_settings(spec, seed))[0]


def _test_part(ds: Dataset, spec: RunConfig, out: SegOutcome, test: np.ndarray) -> SplitPredictions:
    """One predictions row per test sample in split order: DSC/IoU (HD95 for 3D) of the prompted ones; an
    unprompted one (empty ground truth) has empty_gt=True and null scores, so the test ids stay complete while
    the task's rule leaves it out of every metric."""
    pos = np.asarray(test, dtype=np.int64)
    at = {int(i): k for k, i in enumerate(out.positions)}
    missing = [int(i) for i in pos if int(i) not in at and int(i) not in out.skipped]
    if missing:  # the runner scores or skips every test sample; anything else is a bug, not a row to drop
        raise RuntimeError(f"segmentation returned no outcome for {len(missing)} test sample(s)")
    k = np.array([at.get(int(i), -1) for i in pos])
    scored = k >= 0

    def column(values: list[float]) -> np.ndarray:
        return np.where(scored, np.asarray(values, dtype=np.float64)[np.maximum(k, 0)] if values else np.nan, np.nan)

    values = {"dsc": column(out.dsc), "iou": column(out.iou), "empty_gt": ~scored,
              **({"hd95": column(out.hd95)} if out.hd95 else {})}  # 3D datasets: HD95 in mm (voxel spacing)
    return SplitPredictions("test", ds.samples["sample_id"].to_numpy()[pos], patient_ids(ds, pos),
                            attr_columns(ds, spec, pos), values=values)
