"""Usage adapters: how a foundation model is used for a task. Registered by name; know nothing of fairness."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from fairmedbench.registry.base import Registry

if TYPE_CHECKING:
    import torch

    from fairmedbench.engine.features import ImageSplit
    from fairmedbench.registry.datasets.card import DatasetCard
    from fairmedbench.registry.models.runtime import FoundationModel, PromptableSegmenter
    from fairmedbench.tasks.segmentation import TrainableSegmenter


@dataclass
class RunContext:
    """Run-wide settings an adapter may use: device, precision, feature cache, dataset card, progress."""

    device: str = "cpu"
    precision: str = "fp32"
    cache_dir: str | None = None
    batch_size: int = 16
    num_workers: int | None = None
    channels_last: bool = False
    dataset_card: DatasetCard | None = None
    hparams: dict[str, Any] | None = None
    progress: Callable[[str, int, int], None] | None = None


def features_progress(ctx: RunContext, model: FoundationModel, split: str) -> Callable[[int, int], None] | None:
    """`ctx.progress` as feature extraction's (done, total) callback, staged "features <model>/<dataset> <split>"."""
    if ctx.progress is None:
        return None
    dataset = getattr(ctx.dataset_card, "name", None)
    stage = f"features {model.card.name}{'/' + dataset if dataset else ''} {split}"
    report = ctx.progress
    return lambda done, total: report(stage, done, total)


def promptable(model: FoundationModel, usage: str) -> PromptableSegmenter:
    """`model` as the SAM-style segmenter (image encoder, prompt encoder, mask decoder) a usage fine-tunes."""
    from fairmedbench.errors import InputError
    from fairmedbench.registry.models.runtime import PromptableSegmenter

    if getattr(model, "volumetric", False):
        raise InputError(f"usage {usage!r} trains a 2D mask decoder on image slices; model {model.card.name!r} "
                         "segments whole volumes: use --usage sam-prompt")
    if not isinstance(model, PromptableSegmenter):
        raise InputError(f"usage {usage!r} fine-tunes a SAM-style mask decoder; model {model.card.name!r} has none")
    return model


@dataclass
class Prepared:
    """A classification usage's trainable problem: inputs per split and a head factory."""

    inputs: dict[str, np.ndarray]
    make_head: Callable[[np.ndarray, int], torch.nn.Module]
    notes: dict[str, Any]


#: MC dropout (Gal & Ghahramani 2016) for heads that declare these hparams: `dropout` is the rate of the head's
#: dropout on its representation (in training too); `mc_samples` T > 0 keeps it sampling at inference, T passes.
MC_HPARAMS: Mapping[str, Any] = MappingProxyType({"dropout": 0.0, "mc_samples": 0})


def check_mc_hparams(usage: Usage, given: Mapping[str, Any]) -> None:
    """`mc_samples` (--mc-samples) only on a usage with head dropout, T >= 2, dropout rate in (0, 1); cheap, so
    a run refuses it before any work."""
    from fairmedbench.engine.hparams import coerce
    from fairmedbench.errors import InputError

    if "dropout" in given and "dropout" in usage.hparams:
        rate = coerce(f"usage {usage.name!r}", "dropout", given["dropout"], 0.0)
        if not 0 <= rate < 1:
            raise InputError(f"usage {usage.name!r}: dropout={rate!r} must be in [0, 1)")
    if "mc_samples" not in given:
        return
    if "mc_samples" not in usage.hparams:
        with_mc = [n for n in USAGES.names() if "mc_samples" in USAGES.get(n).hparams]
        raise InputError(f"--mc-samples: usage {usage.name!r} has no dropout layer to sample; MC dropout needs "
                         f"--usage {' or '.join(with_mc)} with --hparam dropout=RATE (e.g. 0.2)")
    t = coerce(f"usage {usage.name!r}", "mc_samples", given["mc_samples"], 0)
    if t == 0:
        return
    if t < 2:
        raise InputError(f"--mc-samples {t}: MC dropout needs T >= 2 samples (e.g. 20), or 0 for none")
    if not coerce(f"usage {usage.name!r}", "dropout", given.get("dropout", 0.0), 0.0) > 0:
        raise InputError(f"--mc-samples {t}: usage {usage.name!r} has dropout 0, so every MC sample would be the "
                         "same; give --hparam dropout=RATE (e.g. 0.2; it also applies in training)")


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
    # the order in which it is chosen when a run names no usage (lowest first, among those the model and dataset
    # allow, for the dataset's first task any of them serves); None: only when asked for
    default_rank: int | None = None
    seeded_init = True  # whether the run seed sets the head's initial weights (clip-adapt's are the text prototypes)
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

    def prepare(self, model: FoundationModel, views: Mapping[str, ImageSplit], ctx: RunContext) -> Prepared:
        """Classification: turn each split view into model inputs (e.g. cached features) and a head."""
        raise NotImplementedError(f"usage {self.name!r} is not a classification usage")

    def predictor(self, model: FoundationModel, ctx: RunContext) -> Callable[..., np.ndarray]:
        """Segmentation: a function (image, prompt) -> boolean mask."""
        raise NotImplementedError(f"usage {self.name!r} is not a segmentation usage")

    def trainable(self, model: FoundationModel, ctx: RunContext) -> TrainableSegmenter:
        """Segmentation that trains: the problem `tasks.segmentation.fit_decoder` trains (a TrainableSegmenter)."""
        raise NotImplementedError(f"usage {self.name!r} does not train a segmenter")

    def check_hparams(self, given: Mapping[str, Any]) -> None:
        """Cheap checks of the hparams given for this usage, before any work (MC dropout's here)."""
        check_mc_hparams(self, given)

    def describe(self) -> dict[str, Any]:
        """Name, task, required capabilities."""
        return {"name": self.name, "task": self.task, "tasks": list(self.tasks), "requires": list(self.requires),
                "learns": self.learns, "default_rank": self.default_rank, "hparams": dict(self.hparams),
                "about": self.about}


USAGES: Registry[Usage] = Registry("usage", plugins=True)
U = TypeVar("U", bound=Usage)


def register_usage(cls: type[U]) -> type[U]:
    """Class decorator: register an instance of the usage under the class's `name`, the key's one source."""
    USAGES.add_named(cls())
    return cls


def compatible_usages(capabilities: tuple[str, ...] | list[str], tasks: tuple[str, ...] | list[str]) -> list[str]:
    """Usages serving a task the dataset offers and whose needs the model's capabilities cover."""
    return [n for n in USAGES.names()
            if set(USAGES.get(n).tasks) & set(tasks) and set(USAGES.get(n).requires) <= set(capabilities)]
