"""Encoder FLOPs per image of a model card, counted once per machine and remembered with the other cost
measurements (benchmark.costs) in ~/.cache/fairmedbench/costs.json: the model built with random weights on PyTorch's
meta device and one image of its input size counted by `torch.utils.flop_counter.FlopCounterMode` (else 2 x
parameters x 16-pixel patches). Used by the dry run's estimate and by the 2.5D slice batch."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from fairmedbench.registry.models.card import ModelCard

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fairmedbench" / "costs.json"
PATCH = 16


def cached() -> dict[str, Any]:
    """Every measurement remembered on this machine (empty when the file is absent or unreadable)."""
    try:
        data: dict[str, Any] = json.loads(CACHE.read_text())
    except (OSError, ValueError):
        return {}
    return data


def remember(key: str, value: dict[str, Any]) -> dict[str, Any]:
    """Store one measurement under `key` (atomically; a read-only home only skips it) and return it."""
    from fairmedbench.engine.store import write_json

    data = cached()
    data[key] = value
    try:
        write_json(CACHE, data)
    except OSError:  # a read-only home: the estimate still prints, it is just not remembered
        pass
    return value


def image(card: ModelCard, device: str) -> torch.Tensor:
    """One zero image (or volume) of the card's input shape on `device`."""
    import torch

    pre = card.preprocessing
    shape = (1, pre.channels, pre.depth, pre.size, pre.size) if pre.depth else (1, pre.channels, pre.size, pre.size)
    return torch.zeros(shape, device=device)


def model_flops(name: str) -> dict[str, Any]:
    """{"gflops": per image or None, "how": "counted" | "2 x params x patches" | why unknown}."""
    from fairmedbench.registry.models import get_card

    card = get_card(name)
    key = f"flops|{name}|{card.preprocessing.describe()}"
    hit: dict[str, Any] | None = cached().get(key)
    if hit is not None:
        return hit
    import warnings

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from fairmedbench.registry.models import load_model

    device = "meta"
    try:
        with warnings.catch_warnings(), torch.device("meta"):
            warnings.simplefilter("ignore")
            model = load_model(name, "random", device="meta")
    except Exception:  # noqa: BLE001  (a loader that copies tensors: built for real on the CPU, random weights)
        device = "cpu"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = load_model(name, "random", device="cpu")
        except Exception as exc:  # noqa: BLE001  (any build failure only makes this model's cost unknown)
            return {"gflops": None, "how": f"unknown (the model cannot be built: {type(exc).__name__})"}
    params = sum(p.numel() for p in model.module.parameters())
    try:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model.encode_image(image(card, device))
        out = {"gflops": counter.get_total_flops() / 1e9, "how": "counted" + (" (built on the CPU)" if device == "cpu"
                                                                               else "")}
    except Exception:  # noqa: BLE001  (forward not traceable on meta: the parameter rule)
        pre = card.preprocessing
        patches = (pre.size // PATCH) ** 2 * max(1, pre.depth // PATCH)
        out = {"gflops": 2 * params * patches / 1e9, "how": "2 x params x patches"}
    out["params"] = params
    return remember(key, out)
