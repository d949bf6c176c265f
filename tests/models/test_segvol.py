"""SegVol: the release's checkpoint layout loads by name; a small random SegVol segments an ellipsoid from point,
box and text prompts to a mask of the volume's shape.

tests/models/data/segvol_official_keys.json holds the key names and shapes of BAAI-DCAI/SegVol 5768c97
(build_sam.py build_sam_vit_3d with MONAI 0.9.0 as its README pins, plus network/model.py's TextEncoder); the
source is recorded in the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fairmedbench.adapters.prompts import make_prompt_3d
from fairmedbench.errors import InputError
from fairmedbench.registry.models import get_card, load_model

DATA = Path(__file__).parent / "data"


@pytest.mark.slow  # the full-size model (ViT-B on 32x256x256 and the CLIP text tower)
def test_segvol_release_layout_loads_by_name(tmp_path: Path) -> None:
    doc = json.loads((DATA / "segvol_official_keys.json").read_text())
    assert doc["source"]["repo"] == "BAAI-DCAI/SegVol" and doc["source"]["commit"]
    keys = doc["keys"]
    # the DataParallel prefix and the {'model': ...} container of the release; key i holds the constant i
    state = {f"module.{k}": torch.full((1,), float(i)).expand(*shape) for i, (k, shape) in enumerate(keys.items())}
    torch.save({"model": state}, tmp_path / "segvol.pth")
    model = load_model("segvol", str(tmp_path / "segvol.pth"), verify=False)
    own = model.module.state_dict()
    legacy = {"text_encoder.clip_text_model.text_model.embeddings.position_ids"}
    assert set(own) == set(keys) - legacy
    for i, k in enumerate(keys):
        if k not in legacy:
            assert tuple(own[k].shape) == tuple(keys[k]) and float(own[k].reshape(-1)[0]) == float(i), k
    dim = get_card("segvol").embedding_dim
    assert keys["image_encoder.patch_embedding.position_embeddings"] == [1, 8 * 16 * 16, dim]


@pytest.fixture(scope="module")
def small_segvol():
    return load_model("segvol", "random", spatial_size=(8, 32, 32))


def test_small_segvol_segments_an_ellipsoid_from_points_box_and_text(small_segvol) -> None:
    z, y, x = np.ogrid[:20, :28, :24]
    mask = ((z - 10) / 5) ** 2 + ((y - 14) / 7) ** 2 + ((x - 11) / 6) ** 2 <= 1
    vol = np.clip(40 + 150 * mask + np.random.default_rng(0).normal(0, 10, mask.shape), 0, 255).astype(np.uint8)
    outs = {}
    for mode in ("rand", "rands", "bbox"):
        prompt = make_prompt_3d(mask, mode, np.random.default_rng(0))
        outs[mode] = small_segvol.segment_volume(vol, prompt, text="lesion")
        assert outs[mode].shape == vol.shape and outs[mode].dtype == bool
    no_text = small_segvol.segment_volume(vol, make_prompt_3d(mask, "rand", np.random.default_rng(0)))
    assert no_text.shape == vol.shape
    assert small_segvol.segment_volume(np.zeros((4, 8, 8), np.uint8),
                                       make_prompt_3d(np.ones((4, 8, 8), bool), "rand",
                                                      np.random.default_rng(0))).sum() == 0
    with pytest.raises(InputError, match="segments 3D volumes"):
        small_segvol.segment(vol[0], box=(1, 1, 5, 5))


def test_segvol_sizes_are_checked() -> None:
    with pytest.raises(InputError, match="multiple of the patch"):
        load_model("segvol", "random", spatial_size=(6, 32, 32))
