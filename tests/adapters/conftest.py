"""Fixtures for the usage-adapter tests: a 64-px random-weight CLIP ViT-B/32, a 32-px random-weight LiteMedSAM and
tiny synthetic runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def small_clip() -> str:
    """clip-vit-b32 with its input size set to 64 px (4 patches): the real architecture, tokenizer and logit
    scale with random weights, a few times cheaper per image than at 224 px. Module scope: other test files
    load clip-vit-b32 at its real size."""
    from fairmedbench.registry.models import MODELS, get_card

    card = get_card("clip-vit-b32")
    small = dataclasses.replace(card, preprocessing=dataclasses.replace(card.preprocessing, size=64))
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(MODELS._items, "clip-vit-b32", small)
        yield "clip-vit-b32"


@pytest.fixture(scope="session")
def run_dirs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One results/cache folder for the session, so runs on the same features share the feature cache."""
    return tmp_path_factory.mktemp("usages")


@pytest.fixture(scope="module")
def small_sam() -> str:
    """litemedsam with its input size set to 32 px (an 8 x 8 encoder map, 32 x 32 decoder logits): the real
    TinyViT encoder, prompt encoder and mask decoder with random weights, cheap enough for CPU runs. Module
    scope: tests elsewhere load litemedsam's real weights at 256 px."""
    from fairmedbench.registry.models import MODELS, get_card

    card = get_card("litemedsam")
    small = dataclasses.replace(card, preprocessing=dataclasses.replace(card.preprocessing, size=32))
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(MODELS._items, "litemedsam", small)
        yield "litemedsam"
