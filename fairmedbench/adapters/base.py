"""Usage adapters: how a foundation model is used for a task. Registered by name; know nothing of fairness."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

from fairmedbench.registry.base import Registry


@dataclass
class RunContext:
    """Run-wide settings an adapter may use: device, precision, feature cache, dataset card, progress."""

    device: str = "cpu"
    precision: str = "fp32"
    cache_dir: str | None = None
    batch_size: int = 16
    num_workers: int | None = None
    channels_last: bool = False
    dataset_card: Any = None
    hparams: dict[str, Any] | None = None
    progress: Callable[[str, int, int], None] | None = None


def features_progress(ctx: RunContext, model: Any, split: str) -> Callable[[int, int], None] | None:
    """`ctx.progress` as feature extraction's (done, total) callback, staged "features <model>/<dataset> <split>"."""
    if ctx.progress is None:
        return None
    dataset = getattr(ctx.dataset_card, "name", None)
    stage = f"features {model.card.name}{'/' + dataset if dataset else ''} {split}"
    report = ctx.progress
    return lambda done, total: report(stage, done, total)


@dataclass
class Prepared:
    """A classification usage's trainable problem: inputs per split and a head factory."""

    inputs: dict[str, np.ndarray]
    make_head: Callable[[np.ndarray, int], Any]
    notes: dict[str, Any]


class Usage:
    """Base of usage adapters: a name, the tasks it serves and the model capabilities it needs."""

    name = ""
    task = "classification"  # the task it serves first
    also_tasks: tuple[str, ...] = ()  # further tasks the same head serves (lp, lora: multiclass with a softmax)
    requires: tuple[str, ...] = ()
    about = ""
    # this usage's own hyperparameters with their defaults (typed by engine.hparams; read from ctx.hparams)
    hparams: Mapping[str, Any] = MappingProxyType({})
    train_defaults: Mapping[str, Any] = MappingProxyType({})  # TrainConfig defaults for this usage's head
    prompt_modes: tuple[str, ...] = ()  # segmentation: the prompts (adapters.prompts modes) it accepts
    learns = False  # whether it learns from the train split (a mitigation other than erm needs one that does)
    volumes = False  # classification: whether it runs on 3D volumes slice by slice (2.5D, adapters.volumes)
    caches_features = False  # classification: whether `prepare` reads frozen image features from the feature cache

    @property
    def tasks(self) -> tuple[str, ...]:
        """Every task this usage serves, its first task first."""
        return (self.task, *self.also_tasks)

    def task_for(self, dataset_tasks: tuple[str, ...] | list[str]) -> str:
        """The task a run of this usage on a dataset offering `dataset_tasks` is: the first of the dataset's
        tasks this usage serves (the dataset card's order decides)."""
        for t in dataset_tasks:
            if t in self.tasks:
                return t
        return self.task

    def prepare(self, model: Any, views: dict[str, Any], ctx: RunContext) -> Prepared:
        """Classification: turn each split view into model inputs (e.g. cached features) and a head."""
        raise NotImplementedError(f"usage {self.name!r} is not a classification usage")

    def predictor(self, model: Any, ctx: RunContext) -> Callable[..., np.ndarray]:
        """Segmentation: a function (image, prompt) -> boolean mask."""
        raise NotImplementedError(f"usage {self.name!r} is not a segmentation usage")

    def trainable(self, model: Any, ctx: RunContext) -> Any:
        """Segmentation that trains: the problem `tasks.segmentation.fit_decoder` trains (a TrainableSegmenter)."""
        raise NotImplementedError(f"usage {self.name!r} does not train a segmenter")

    def describe(self) -> dict[str, Any]:
        """Name, task, required capabilities."""
        return {"name": self.name, "task": self.task, "tasks": list(self.tasks), "requires": list(self.requires), "learns": self.learns,
                "hparams": dict(self.hparams), "about": self.about}


USAGES: Registry[Usage] = Registry("usage", plugins=True)


def compatible_usages(capabilities: tuple[str, ...] | list[str], tasks: tuple[str, ...] | list[str]) -> list[str]:
    """Usages serving a task the dataset offers and whose needs the model's capabilities cover."""
    return [n for n in USAGES.names()
            if set(USAGES.get(n).tasks) & set(tasks) and set(USAGES.get(n).requires) <= set(capabilities)]
