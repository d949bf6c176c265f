"""Model cards and loaders. Importing this package is cheap: no torch, no model libraries."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fairmedbench.errors import MissingResourceError
from fairmedbench.registry.models import cards as _cards  # noqa: F401  (registers the cards)
from fairmedbench.registry.models import cards_2026 as _cards_2026  # noqa: F401  (registers the 2025-26 cards)
from fairmedbench.registry.models.card import MODELS, ModelCard, Preprocessing, WeightSource, loader_function
from fairmedbench.registry.models.weights import resolve_weights

if TYPE_CHECKING:
    from fairmedbench.registry.models.runtime import FoundationModel

__all__ = ["MODELS", "ModelCard", "Preprocessing", "WeightSource", "get_card", "load_model", "seen_in_pretraining"]


def get_card(name: str) -> ModelCard:
    """The card named `name` (InputError with close names when unknown)."""
    return MODELS.get(name)


def seen_in_pretraining(model: str, dataset: str, training_datasets: Sequence[str] | None = None) -> bool:
    """Whether dataset card `dataset` is in model `model`'s pretraining data: the registered card's
    `training_datasets`, or for a model not in the registry the list given (a submitted card's)."""
    if model in MODELS:
        return dataset in get_card(model).training_datasets
    return dataset in (training_datasets or ())


def load_model(name: str, weights: str | None = None, *, seed: int = 0, device: str = "cpu",
               verify: bool = True, **options: Any) -> FoundationModel:
    """Build model `name` with `weights` (None: the card's default; 'random'; or a path) on `device`.

    Returns a `fairmedbench.registry.models.runtime.FoundationModel`.
    """
    card = get_card(name)
    if not card.available:
        raise MissingResourceError(f"model {name!r} cannot be built in this version: {card.notes}")
    resolved = resolve_weights(card, weights, seed=seed, verify=verify)  # before any heavy import: fails fast
    model = loader_function(card)(card, resolved, **options)
    return model.to(device)
