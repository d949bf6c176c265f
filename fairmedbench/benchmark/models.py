"""Model commands for the CLI: `benchmark list models` and `benchmark describe model NAME`."""

from __future__ import annotations

from typing import Any

from fairmedbench.registry.models import MODELS, get_card


def list_models() -> list[dict[str, Any]]:
    """One row per registered model (instant: reads cards only, imports no model library)."""
    rows = []
    for name in MODELS.names():
        card = MODELS.get(name)
        rows.append({
            "name": card.name,
            "family": card.family,
            "kind": card.kind,
            "capabilities": list(card.capabilities),
            "embedding_dim": card.embedding_dim,
            "input_size": card.preprocessing.size,
            "weights": card.weights.describe(),
            "license": card.license,
            "available": card.available,
        })
    return rows


def describe_model(name: str) -> dict[str, Any]:
    """Everything the card knows about model `name` (InputError with close names when unknown), with the usages its
    capabilities serve."""
    from fairmedbench.adapters import USAGES

    card = get_card(name)
    usages = [u for u in USAGES.names() if set(USAGES.get(u).requires) <= set(card.capabilities)]
    return {**card.to_dict(), "usages": usages}
