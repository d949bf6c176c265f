"""The 2D zoo cards: SAM-Med2D's adapters sit where SAM-Med2D puts them, the segmenters segment an ellipse to a
mask of the image's shape with random weights, MedSigLIP's config is the published one."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from fairmedbench.registry.models import MODELS, load_model


@pytest.fixture(autouse=True)
def _threads() -> None:
    torch.set_num_threads(2)


def test_sam_med2d_adapter_is_added_after_the_mlp_on_norm2() -> None:
    """With the adapter's output LayerNorm set to weight 0, bias b, each block's output is SAM's block output
    plus b: the adapter is the only change and is added (x + mlp(norm2 x) + Adapter(norm2 x))."""
    from segment_anything.modeling.image_encoder import Block

    model = load_model("sam-med2d", "random", image_size=64)
    enc = model.module.image_encoder
    x = torch.randn(1, 4, 4, 768)
    for i in (0, 2):  # a windowed block and a global-attention block
        blk = enc.blocks[i]
        with torch.no_grad():
            blk.Adapter.norm.weight.zero_()
            blk.Adapter.norm.bias.fill_(0.25)
            plain = Block.forward(blk, x)
            adapted = enc._block(blk, x)
        assert torch.allclose(adapted - plain, torch.full_like(plain, 0.25), atol=1e-5)


def _ellipse(h: int = 72, w: int = 88) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    yy, xx = np.mgrid[:h, :w]
    inside = ((yy - 36) / 20) ** 2 + ((xx - 44) / 28) ** 2 <= 1
    img = np.where(inside, 200, 30).astype(np.uint8)
    ys, xs = np.nonzero(inside)
    return img, (int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1)


SLOW = [pytest.mark.slow, pytest.mark.skipif(not os.environ.get("FMB_RUN_SLOW"),
                                             reason="271M parameters (~25 s); FMB_RUN_SLOW=1 runs it")]


@pytest.mark.parametrize("name", [pytest.param("sam-med2d", marks=SLOW), "ft-sam", "medsam2"])
def test_segmenter_segments_an_ellipse_to_a_mask_of_the_image_shape(name: str) -> None:
    model = load_model(name, "random", image_size=64)
    img, box = _ellipse()
    mask = model.segment(img, box)
    assert mask.shape == img.shape and mask.dtype == bool
    points = model.segment(img, points=[[44, 36]], point_labels=[1])
    assert points.shape == img.shape


def test_new_cards_are_listed_as_runnable() -> None:
    for name in ("sam-med2d", "ft-sam", "medsam2", "medsiglip"):
        assert MODELS.get(name).available, name


def test_medsiglip_architecture_is_the_published_config() -> None:
    """google/medsiglip-448 config.json: SigLIP So400m/14 towers (1152-d, 27 layers, 16 heads, MLP 4304),
    448 px vision input, 64-token text, 32000-word vocabulary; built on the meta device (no memory)."""
    from transformers import SiglipConfig, SiglipModel

    from fairmedbench.registry.models.hf import SIGLIP_CONFIGS

    config = SiglipConfig(**SIGLIP_CONFIGS["so400m-448"])
    published = {"hidden_size": 1152, "intermediate_size": 4304, "num_attention_heads": 16, "num_hidden_layers": 27}
    for tower in (config.vision_config, config.text_config):
        assert {k: getattr(tower, k) for k in published} == published
    assert (config.vision_config.image_size, config.vision_config.patch_size) == (448, 14)
    assert (config.text_config.max_position_embeddings, config.text_config.vocab_size) == (64, 32000)
    with torch.device("meta"):
        model = SiglipModel(config)
    state = model.state_dict()
    assert state["vision_model.embeddings.position_embedding.weight"].shape == (32 * 32, 1152)
    assert state["text_model.head.weight"].shape == (1152, 1152)
    assert MODELS.get("medsiglip").embedding_dim == 1152
    assert MODELS.get("medsiglip").preprocessing.size == 448
