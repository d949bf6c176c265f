"""The mitigation interface: hook points the training loop calls; plugins know nothing of models.

Hooks, in the order a runner calls them:
  `wrap_head(head, n_groups)`        model wrapper (e.g. one head per group), default unchanged;
  `extra_parameters()`               auxiliary modules to optimise (e.g. an adversary);
  `epoch_indices(y, groups, rng)`    the training sampler for one epoch;
  `loss(per_sample, batch)`          the training objective from per-sample losses and the batch;
  `fit_postprocess(scores, y, groups)` then `adjust_scores(scores, groups)`: post-processing learnt on
                                     validation and applied to validation and test scores;
  `step(opt, closure)`               one optimiser update from closure() (zero grads, loss, backward; returns
                                     the loss); default one call and opt.step() (SAM evaluates it twice);
  `end_epoch(epoch, model, train)`   after each epoch of a classifier loop; True asks the loop to retrain
                                     once from the initial weights (JTT), allowed only when `restarts`;
  `after_validation(epoch, loss)`    a classifier loop's validation loss after each epoch, for a plugin that
                                     `averages_weights` (SWAD): True ends training; no early stop or epoch
                                     selection then;
  `after_fit(model, train)`          once a classifier loop has its final weights: a plugin may replace them
                                     (SWAD's average, DFR's refitted last layer);
  `threshold_policy`                 set by a plugin that fixes the operating point itself (per-group
                                     thresholds mapped to 0.5): it replaces the runner's policy.

A plugin declares what it needs of a task as Task traits and their values (`needs`, e.g. {"head": "classifier"}:
it reads a classifier head's logits; {"thresholded": True}: it moves a decision threshold), with `other_tasks` saying
why a task without them is refused, and, through `label_need`, whether its hyperparameters need a class label per
sample; `check_task` reads the registered Task's traits and refuses what the plugin cannot serve.

The segmentation loop (a SAM mask decoder, with or without a LoRA image encoder)
calls `wrap_head(mask_decoder, n_groups)`, `extra_parameters`, `epoch_indices(zeros, groups, rng)` (a
segmentation sample has no class label) and `loss(per_sample, Batch(logits, targets, groups, None))` with the
decoder's low-resolution mask logits and 0/1 targets (b, L, L). A wrapped mask decoder that exposes
`group_heads` (one module per group) is trained with each sample through its own group's head and predicts
through its own forward, without the attribute.

The multi-class loop (one softmax head over K classes) first calls `softmax_classes(K)`, then the hooks exactly as
the binary loop does, with y the class index (n,) in `epoch_indices` and in `Batch.y` ((b,) long), per-sample
cross-entropy in `loss`, and softmax probabilities (n, K) in `fit_postprocess` / `adjust_scores`. A plugin reads
`n_classes` (0: sigmoid heads with 0/1 labels per column; K: one softmax head, y the class index).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np

from fairmedbench.engine.hparams import TRAINING_SPACE, SearchRange
from fairmedbench.errors import InputError
from fairmedbench.registry.base import Registry
from fairmedbench.spec import BASELINE_MITIGATION

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fairmedbench.tasks.base import Task

MITIGATIONS: Registry[type[Mitigation]] = Registry("mitigation", plugins=True)


@dataclass
class Batch:
    """What the loss hook may look at: logits (b, K), labels (b, K), group codes (b,), representation (b, d).

    Segmentation passes mask logits (b, L, L), 0/1 mask targets (b, L, L) and group codes (representation None).
    """

    logits: torch.Tensor
    y: torch.Tensor
    groups: torch.Tensor | None
    representation: torch.Tensor | None


@dataclass
class Mitigation:
    """Base plugin = ERM: uniform sampling, mean loss, no extra modules, scores unchanged."""

    name: ClassVar[str] = BASELINE_MITIGATION  # the registry key (register_mitigation reads it)
    needs_attribute_at_training: bool = False
    needs_attribute_at_inference: bool = False
    hparams: dict[str, Any] = field(default_factory=dict)
    threshold_policy: str | None = None
    n_classes: int = 0  # 0: sigmoid outputs with 0/1 labels per column; K >= 2: one softmax head, y = class index
    needs: ClassVar[Mapping[str, object]] = {}  # Task traits (fields of tasks.base.Task) and the values it needs
    other_tasks: ClassVar[str] = ""  # why a task without them is refused (default: names the tasks it serves)
    needs_trainable_representation: ClassVar[str] = ""  # why frozen cached features are refused ("": they are not)
    restarts: ClassVar[bool] = False  # end_epoch may ask the classifier loop for one restart (no early stop before)
    averages_weights: ClassVar[bool] = False  # after_validation ends training and after_fit sets the weights (SWAD)
    # the declared hyperparameter search (--hparam-search): key -> LogUniform or a tuple of choices; a class that does
    # not declare its own in its body has none (benchmark/search.py reads the class body, not the base's)
    SEARCH_SPACE: ClassVar[Mapping[str, SearchRange]] = TRAINING_SPACE

    def label_need(self) -> str | None:
        """Why this method, with its hyperparameters, needs a class label per sample; None when it does not."""
        return None

    def serves(self, task: Task) -> bool:
        """Whether `task` has every trait value this method needs (its hyperparameters aside)."""
        for trait, value in self.needs.items():
            if not hasattr(task, trait):
                raise InputError(f"mitigation {self.name!r} needs the task trait {trait!r}, which a Task does not have "
                                 f"(its fields: {', '.join(f.name for f in fields(task))})")
            if getattr(task, trait) != value:
                return False
        return True

    def served_tasks(self) -> list[str]:
        """The registered tasks it serves, in registration order (recorded in results and the catalogue)."""
        from fairmedbench.tasks.base import TASKS  # the task registry (torch-free), read for its tasks' traits

        return [t.name for t in TASKS.values() if self.serves(t)]

    def unsupported(self, task: Task) -> str | None:
        """Why this method, with its hyperparameters, cannot train a model of `task`; None when it can."""
        if not self.serves(task):
            return self.other_tasks or f"it applies to {' and '.join(self.served_tasks())} only"
        if task.class_index_labels and self.hparams.get("label_column", 0) != 0:  # one label: the class index
            return (f"label_column={self.hparams['label_column']} but a multi-class label is one column (the class "
                    "index); leave label_column at 0")
        return None if task.sample_labels else self.label_need()

    def check_task(self, task: Task) -> None:
        """InputError when this method (with its hyperparameters) does not apply to `task`."""
        why = self.unsupported(task)
        if why:
            raise InputError(f"mitigation {self.name!r} does not apply to {task.name}: {why}")

    def softmax_classes(self, n_classes: int) -> None:
        """Declare that the head is one softmax over `n_classes` classes and labels are class indices (the runner
        has checked the task's rules with `check_task` first)."""
        if n_classes < 2:
            raise InputError(f"mitigation {self.name!r}: a softmax head needs >= 2 classes, got {n_classes}")
        self.n_classes = int(n_classes)

    def wrap_head(self, head: nn.Module, n_groups: int) -> nn.Module:
        """The module to train (default: the head itself)."""
        return head

    def extra_parameters(self) -> list[nn.Parameter]:
        """Parameters of auxiliary modules the optimiser must also update."""
        return []

    def epoch_indices(self, y: np.ndarray, groups: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        """Training-sample order for one epoch (default: a seeded permutation of all samples)."""
        return rng.permutation(len(y))

    def loss(self, per_sample: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Reduce per-sample losses (a torch tensor) to the training objective."""
        return per_sample.mean()

    def step(self, opt: torch.optim.Optimizer, closure: Callable[[], torch.Tensor]) -> None:
        """One optimiser update: `closure()` zeroes the gradients, computes the loss and back-propagates it."""
        closure()
        opt.step()

    def end_epoch(self, epoch: int, model: nn.Module,
                  train: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]) -> bool:
        """After epoch `epoch` of a classifier loop (model in eval mode, training inputs, labels, groups): True asks
        the loop to restart from the initial weights (only when `restarts`; default False)."""
        return False

    def after_validation(self, epoch: int, val_loss: float) -> bool:
        """After epoch `epoch`'s validation (only when `averages_weights`): True ends training (default False)."""
        return False

    def after_fit(self, model: nn.Module, train: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]) -> None:
        """Once a classifier loop has its final weights (training inputs, labels, groups): default nothing."""

    def fit_postprocess(self, scores: np.ndarray, y: np.ndarray, groups: np.ndarray | None) -> None:
        """Learn post-processing from validation scores (default: nothing)."""

    def adjust_scores(self, scores: np.ndarray, groups: np.ndarray | None) -> np.ndarray:
        """Post-process scores (default: unchanged)."""
        return scores

    def describe(self) -> dict[str, Any]:
        """Name, hyperparameters, tasks and attribute needs, recorded in every result."""
        return {"name": self.name, "hparams": dict(self.hparams),
                "tasks": self.served_tasks(), "needs_class_labels": self.label_need(),
                "needs_attribute_at_training": self.needs_attribute_at_training,
                "needs_attribute_at_inference": self.needs_attribute_at_inference}


M = TypeVar("M", bound=Mitigation)


def register_mitigation(cls: type[M]) -> type[M]:
    """Class decorator: register the plugin class under its `name`, the key's one source."""
    MITIGATIONS.add_named(cls)
    return cls


register_mitigation(Mitigation)
