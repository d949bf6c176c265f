"""What every task runner shares: its inputs, the split views features are extracted from, a sample's attribute
values, the group codes mitigations train with, the scoring settings of a run, resuming a finished seed, and the
per-seed result document.

A runner is called by `benchmark.run` (and `benchmark verify`) as `run(inputs)` with one `RunInputs` and returns
(seed documents, metric results, reused seeds); it scores every test set through its task's `Task.score`.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from fairmedbench.engine import store
from fairmedbench.engine.device import compute_settings, describe_device
from fairmedbench.mitigation.base import Batch, Mitigation
from fairmedbench.spec import RunConfig, ScoreSettings
from fairmedbench.tasks.base import get_task

if TYPE_CHECKING:
    import torch

    from fairmedbench.adapters.base import Prepared, RunContext, Usage
    from fairmedbench.engine.splits import Split
    from fairmedbench.metrics.result import FairnessResult
    from fairmedbench.registry.datasets.dataset import Dataset
    from fairmedbench.registry.models.runtime import FoundationModel
    from fairmedbench.tasks.base import PredictionTable, Task
    from fairmedbench.tasks.table import SplitPredictions


class RunFlags(Protocol):
    """What a runner reads of the run's options: whether finished seeds are recomputed, where progress goes."""

    force: bool
    progress: Callable[[str, int, int], None] | None


@dataclass(frozen=True)
class ExternalSet:
    """A dataset the run's trained head or decoder is also evaluated on (external evaluation): its label (card name
    with options), the loaded dataset and its split (its test split is evaluated)."""

    label: str
    dataset: Dataset
    split: Split
    pairs: np.ndarray | None = None  # overlap=paired: (internal test, external) dataset positions of shared items

    def view(self) -> SplitView:
        """Its test split as the feature extractor sees it."""
        return SplitView(self.dataset, self.split.test, f"{self.dataset.fingerprint}:{self.split.fingerprint}")

    def attributes(self, spec: RunConfig) -> dict[str, np.ndarray]:
        """The run's attributes on its test split (group names mapped by its own card)."""
        return attr_columns(self.dataset, spec, self.split.test)

    def codes(self, spec: RunConfig, internal: Dataset) -> np.ndarray | None:
        """Test-split group codes of the run's first attribute in the internal dataset's coding (-1: missing or a
        group the internal dataset does not have), for mitigations that need the attribute at inference."""
        if not spec.attributes:
            return None
        col = f"attr:{spec.attributes[0]}"
        names = sorted({v for v in internal.samples[col].to_numpy() if isinstance(v, str)})
        lookup = {n: i for i, n in enumerate(names)}
        return np.array([lookup.get(v, -1) for v in self.dataset.samples[col].to_numpy()[self.split.test]])


@dataclass(frozen=True)
class RunInputs:
    """What `benchmark.run` hands a task's runner: the resolved config, the usage and the loaded model, the dataset
    and its split, the run context and options, the run folder, the run's inputs as every seed document records
    them (`info`) with the seconds loading took, and the external datasets (external evaluation)."""

    spec: RunConfig
    usage: Usage
    model: FoundationModel
    dataset: Dataset
    split: Split
    ctx: RunContext
    opts: RunFlags
    out_dir: Path
    info: dict[str, Any]
    t_load: float
    externals: Sequence[ExternalSet] = ()


#: what a runner returns: the seed documents, the metric results of the seeds computed now, the reused seeds
RunnerOutput = tuple[list[dict[str, Any]], list["FairnessResult"], list[int]]


def score_settings(spec: RunConfig, seed: int, threshold: str | None = None) -> ScoreSettings:
    """How a run scores a seed's test sets: its profile, resamples and permutations seeded by the training seed,
    whole patients resampled, the operating `threshold` policy (None: the profile's own, or no threshold) and the
    equivalence margins."""
    return ScoreSettings(profile=spec.profile, threshold=threshold, n_boot=spec.n_boot, n_perm=spec.n_perm, seed=seed,
                         margins=spec.margins)


def score_and_write(task: Task, path: Path, parts: Sequence[SplitPredictions], seed: int, tasks: Sequence[str],
                    attributes: Sequence[str], settings: ScoreSettings, classes: Sequence[str] = (),
                    val: Mapping[str, np.ndarray] | None = None) -> tuple[FairnessResult, PredictionTable]:
    """A seed's predictions frame as `task` lays it out (Task.frame), the table the task reads from it (Task.table)
    scored under `settings` (with `val`: another set's validation rows, as an external set is scored at the
    internal threshold), then the frame written to `path` (after the scoring: an interrupted seed leaves no file).
    A run scores exactly what it writes."""
    frame = task.frame(parts, seed, tasks, classes)
    table = task.table({c: frame[c].to_numpy() for c in frame.columns}, tasks, attributes, classes,
                       where=f"{path.name}: ")
    result = task.score(table if val is None else dataclasses.replace(table, val=val), settings)
    store.write_parquet(path, frame)
    return result, table


def min_group_size(result: FairnessResult) -> int:
    """The metric engine's minimum group size for an interval (the profile's), from a result."""
    return int(result.meta.get("min_group_size", 0))


def external_file(seed: int, k: int) -> str:
    """The predictions Parquet of the k-th external dataset of a seed."""
    return f"seed{seed}.external{k}.predictions.parquet"


def external_entry(spec: RunConfig, k: int, ext: ExternalSet, seed: int, result: FairnessResult,
                   shifts: list[dict[str, Any]], n_test: int) -> dict[str, Any]:
    """One external dataset's block in a seed document: what it is, its result and its shift from the internal
    test set."""
    from fairmedbench.analysis.shift import SHIFT_METHOD, SHIFT_METHOD_PAIRED

    meta = spec.eval_datasets[k]
    return {"label": ext.label, "dataset": meta["dataset"], "options": meta["options"], "split": meta["split"],
            "n_test": n_test,
            "predictions": external_file(seed, k), "result": result.to_dict(), "shift": shifts,
            "shift_method": SHIFT_METHOD if ext.pairs is None else SHIFT_METHOD_PAIRED, "alignment": meta["alignment"]}


class SplitView:
    """One split of a dataset as the feature extractor sees it: ids, images, a fingerprint."""

    def __init__(self, dataset: Dataset, positions: np.ndarray, fingerprint: str) -> None:
        self.dataset, self.positions, self.fingerprint = dataset, np.asarray(positions), fingerprint
        self.sample_ids = [str(dataset.samples["sample_id"].iloc[int(i)]) for i in self.positions]

    def __len__(self) -> int:
        return len(self.positions)

    def load_image(self, k: int) -> np.ndarray:
        """The image of the split's k-th sample."""
        return self.dataset.load_image(int(self.positions[k]))

    def content_keys(self) -> list[str]:
        """What each sample's pixels are made of (file bytes or generated pixels): keys the feature cache."""
        return self.dataset.content_keys(self.positions)


def split_views(ds: Dataset, split: Split) -> dict[str, SplitView]:
    """The train/val/test views features are extracted from (their fingerprint keys the feature cache): the
    unsampled split, so every run of one (model, dataset, split) shares one encode."""
    fp = f"{ds.fingerprint}:{split.fingerprint}"
    return {k: SplitView(ds, p, fp) for k, p in (("train", split.train), ("val", split.val), ("test", split.test))}


def prepare_inputs(adapter: Usage, model: FoundationModel, ds: Dataset, split: Split, ctx: RunContext,
                   externals: Sequence[ExternalSet] = ()) -> Prepared:
    """The classification usage's prepared inputs of train/val/test (and `external<k>` for each external set).

    A split whose train/val were re-drawn around a fixed test set (repeated splits, 2D data) is prepared from one
    view of the whole train+val pool (its fingerprint does not depend on the split seed, so every split seed reuses
    one encode) and sliced into train and val; otherwise each split is its own view."""
    from fairmedbench.adapters.volumes import prepare_classification
    from fairmedbench.engine.splits import test_fingerprint

    extra = {f"external{k}": e.view() for k, e in enumerate(externals)}
    if not split.policy.endswith("+redraw") or ds.card.dim != 2:
        return prepare_classification(adapter, model, {**split_views(ds, split), **extra}, ctx)
    pool = np.sort(np.concatenate([split.train, split.val]))
    fp = f"{ds.fingerprint}:pool-around-test:{test_fingerprint(split.ids['test'])}"
    test_fp = f"{ds.fingerprint}:test:{test_fingerprint(split.ids['test'])}"
    prepared = prepare_classification(adapter, model, {"trainval": SplitView(ds, pool, fp),
                                                       "test": SplitView(ds, split.test, test_fp), **extra}, ctx)
    rows = {int(p): k for k, p in enumerate(pool)}
    x = prepared.inputs.pop("trainval")
    for name, positions in (("train", split.train), ("val", split.val)):
        prepared.inputs[name] = np.asarray(x)[[rows[int(p)] for p in positions]]
    return prepared


def attr_columns(ds: Dataset, spec: RunConfig, positions: np.ndarray) -> dict[str, np.ndarray]:
    """Each of the run's sensitive attributes: its group of the samples at `positions`."""
    return {a: ds.samples[f"attr:{a}"].to_numpy()[positions] for a in spec.attributes}


def patient_ids(ds: Dataset, positions: np.ndarray) -> np.ndarray:
    """The patient of each sample at `positions`: the unit every interval and permutation test resamples."""
    ids: np.ndarray = ds.samples["patient_id"].to_numpy()[positions].astype(str)
    return ids


def training_groups(spec: RunConfig, ds: Dataset) -> tuple[np.ndarray | None, int]:
    """Group codes of every sample for the attribute mitigations train with (the run's first; -1 = missing)."""
    if not spec.attributes:
        return None, 0
    values = ds.samples[f"attr:{spec.attributes[0]}"].to_numpy()
    names = sorted({v for v in values if isinstance(v, str)})
    lookup = {n: i for i, n in enumerate(names)}
    return np.array([lookup.get(v, -1) for v in values]), len(names)


def reuse_seed(path: Path, opts: RunFlags, docs: list[dict[str, Any]], reused: list[int], seed: int) -> bool:
    """Append a seed's finished result (from an interrupted earlier run of this config) unless forced."""
    if path.exists() and not opts.force:
        docs.append(store.read_json(path))
        reused.append(seed)
        return True
    return False


def run_seeds(inputs: RunInputs, one_seed: Callable[[int], tuple[dict[str, Any], FairnessResult]]) -> RunnerOutput:
    """A runner's loop: each seed's finished result reused (unless forced), else `one_seed(seed)` run and its
    document written to seed<k>.json."""
    docs: list[dict[str, Any]] = []
    results: list[FairnessResult] = []
    reused: list[int] = []
    for seed in inputs.spec.seeds:
        path = inputs.out_dir / f"seed{seed}.json"
        if reuse_seed(path, inputs.opts, docs, reused, seed):
            continue
        doc, res = one_seed(seed)
        store.write_json(path, doc)
        docs.append(doc)
        results.append(res)
    return docs, results, reused


def seed_document(kind: str, spec: RunConfig, seed: int, result: FairnessResult, info: dict[str, Any], pred_name: str,
                  tasks: list[str], extra: dict[str, Any], timings: dict[str, float], device: str,
                  classes: list[str] | tuple[str, ...] = (), heads_pinned: bool = False) -> dict[str, Any]:
    """One seed's result document: the spec with its seed, the metrics, the run's inputs and timings, the task's
    description of the predictions file (with the card's `classes` for a multi-class task), then the runner's
    `extra` blocks; the environment names the `device` and the threads and kernels the run computed with
    (`heads_pinned`: the head trained on engine.device.head_threads; provenance, not identity)."""
    doc = store.result_document(kind, {**spec.identity(), "seed": seed}, result.to_dict(), info, timings)
    doc["environment"]["device"] = describe_device(device)
    doc["environment"]["compute"] = compute_settings(heads_pinned)
    doc["predictions"] = get_task(spec.task).predictions_block(pred_name, tasks, list(spec.attributes), classes)
    doc.update(extra)
    return doc


def finite(v: float) -> float | None:
    """`v` as a float, or None (JSON null) when it is NaN or infinite."""
    return float(v) if np.isfinite(v) else None


def _batch_closure(model: Any, mitigation: Mitigation, opt: torch.optim.Optimizer, xb: torch.Tensor, yb: torch.Tensor,
                   gb: torch.Tensor | None, per_sample_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
                   ) -> Callable[[], torch.Tensor]:
    """The minibatch's closure for `Mitigation.step`: zero the gradients, forward, the mitigation's loss, backward."""

    def closure() -> torch.Tensor:
        opt.zero_grad()
        rep = model.representation(xb)
        logits = model.classify(rep, gb) if hasattr(model, "classify") else model.linear(rep)
        loss = mitigation.loss(per_sample_loss(logits, yb), Batch(logits, yb, gb, rep))
        loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
        return loss

    return closure


@dataclass
class EpochsFit:
    """What the epoch loop kept: the best epoch (-1: none ran), its selection score and validation loss, the
    validation loss of every epoch, and the best weights (loaded back into the model)."""

    best_epoch: int
    best_score: float
    best_val_loss: float
    val_losses: list[float] = field(default_factory=list)


def fit_epochs(model: Any, mitigation: Mitigation, opt: torch.optim.Optimizer,
               train: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None],
               sampler: tuple[np.ndarray, np.ndarray | None], epochs: int, batch_size: int, patience: int,
               rng: np.random.Generator, per_sample_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
               validate: Callable[[Any], tuple[float, float]]) -> EpochsFit:
    """The head training loop every classifier task shares: per epoch, the mitigation's sample order (from the
    `sampler` labels and groups), minibatches through its loss hook, then `validate(model)` -> (selection score,
    lower is better; validation loss) under no_grad; early stop after `patience` epochs without improvement;
    the best epoch's weights are loaded back. A mitigation that `restarts` runs a first phase (no early stop, no
    selection) until its `end_epoch` asks for the restart, then `epochs` epochs from the initial weights. A
    mitigation that `averages_weights` (SWAD) trains until its `after_validation` ends it, without early stop; its
    `after_fit` then sets the final weights (the last epoch is recorded as the best; score and loss are the final
    weights'). Every mitigation's `after_fit` runs once the weights are chosen (DFR refits the last layer there)."""
    import torch

    x, y, groups = train
    initial = copy.deepcopy(model.state_dict())
    best, best_state, best_epoch, bad, curve, best_loss = np.inf, initial, -1, 0, [], np.nan
    epoch, restarted = 0, False
    while epoch < epochs or (epochs > 0 and mitigation.restarts and not restarted):  # a restarter's phase 1 ends
        model.train()
        order = mitigation.epoch_indices(sampler[0], sampler[1], rng)
        for start in range(0, len(order), batch_size):
            b = torch.as_tensor(order[start:start + batch_size])
            mitigation.step(opt, _batch_closure(model, mitigation, opt, x[b], y[b],
                                                None if groups is None else groups[b], per_sample_loss))
        model.eval()
        with torch.no_grad():
            score, loss_v = validate(model)
        curve.append(loss_v)
        if mitigation.averages_weights:  # its own end rule and final weights: no early stop, no epoch selection
            best_epoch, best, best_loss = epoch, score, loss_v
            if mitigation.after_validation(epoch, loss_v):
                break
            epoch += 1
            continue
        if mitigation.restarts and not restarted and mitigation.end_epoch(epoch, model, train):
            # retrain once from the initial weights: the first phase's epochs are no candidates for selection
            model.load_state_dict(initial)
            opt.state.clear()
            best, best_state, best_epoch, bad, curve, best_loss = np.inf, initial, -1, 0, [], np.nan
            epoch, restarted = 0, True
            continue
        if score < best - 1e-7:
            best, best_state, best_epoch, bad, best_loss = score, copy.deepcopy(model.state_dict()), epoch, 0, loss_v
        else:
            bad += 1
            if bad >= patience and (restarted or not mitigation.restarts):
                break
        epoch += 1
    if not mitigation.averages_weights:
        model.load_state_dict(best_state)
    if curve:  # at least one epoch trained
        mitigation.after_fit(model, train)
    if mitigation.averages_weights and curve:  # the averaged weights' own validation score and loss
        model.eval()
        with torch.no_grad():
            best, best_loss = validate(model)
    return EpochsFit(best_epoch, float(best), float(best_loss), curve)
