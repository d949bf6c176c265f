"""Every available card builds offline with random weights and yields embeddings of its declared size."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from fairmedbench.errors import MissingResourceError
from fairmedbench.registry.models import MODELS, load_model

# Large random models: minutes of CPU and GBs of RAM to initialise; run with FMB_RUN_SLOW=1.
SLOW = {"sam-vit-l", "sam-vit-h", "blip2", "medsiglip", "siglip2", "aimv2-large", "retfound-mae", "retfound-dinov2",
        "uni2-h", "virchow2", "prov-gigapath", "medgemma-vision", "dinov3-vitl16", "sam2.1-hiera-b+", "sam2.1-hiera-l"}
# Smallest input each architecture accepts cheaply (Swin-T needs its 224 window grid).
SIZES = {"medclip": 224, "blip2": 56}
# Volumetric (3D) cards segment whole volumes and have no 2D path: tests/models/test_sam3d.py, test_segvol.py
AVAILABLE = [n for n in MODELS.names() if MODELS.get(n).available and not MODELS.get(n).preprocessing.depth]


def _params() -> list:
    out = []
    for name in AVAILABLE:
        marks = [pytest.mark.skipif(name in SLOW and not os.environ.get("FMB_RUN_SLOW"),
                                    reason=f"{name}: large random init; set FMB_RUN_SLOW=1 to run")]
        out.append(pytest.param(name, marks=marks))
    return out


@pytest.mark.parametrize("name", _params())
def test_card_builds_with_random_weights_and_embeds(name: str) -> None:
    torch.set_num_threads(2)
    model = load_model(name, "random", image_size=SIZES.get(name, 64))
    card = model.card
    img = np.random.default_rng(0).integers(0, 256, (72, 88), dtype=np.uint8)
    pixels = torch.from_numpy(np.stack([model.preprocess(img), model.preprocess(img[:, ::-1].copy())]))
    assert pixels.shape[1:] == (card.preprocessing.channels, card.preprocessing.size, card.preprocessing.size)
    emb = model.encode_image(pixels)
    assert emb.shape == (2, card.embedding_dim) and torch.isfinite(emb).all()
    if card.can("segment"):
        mask = model.segment(img, (10, 12, 60, 50))
        assert mask.shape == img.shape and mask.dtype == bool
    if card.can("encode_text"):
        try:
            text = model.encode_text(["a chest x-ray", "no finding"])
        except MissingResourceError as exc:
            pytest.skip(f"image embedding checked; text skipped: {exc}")
        assert text.shape == (2, card.embedding_dim) and torch.isfinite(text).all()


def test_open_clip_tokenizer_ships_offline_and_text_differs() -> None:
    model = load_model("clip-vit-b32", "random", image_size=64)
    a, b = model.encode_text(["pleural effusion", "no finding"])
    assert not torch.allclose(a, b)
