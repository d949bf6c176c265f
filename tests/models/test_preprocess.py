"""Per-model preprocessing geometry and intensity handling (numpy only, fast)."""

from __future__ import annotations

import numpy as np
import pytest

from fairmedbench.errors import InputError
from fairmedbench.registry.models import get_card
from fairmedbench.registry.models.card import Preprocessing
from fairmedbench.registry.models.preprocess import preprocess_image, resized_shape


def test_longest_pad_keeps_aspect_and_pads_with_zeros() -> None:
    spec = Preprocessing(size=64, resize="longest_pad", intensity="minmax")
    img = np.full((30, 60), 200, np.uint8)
    img[:, :30] = 100
    out = preprocess_image(img, spec)
    assert out.shape == (3, 64, 64) and resized_shape(30, 60, spec) == (32, 64)
    assert out[:, :32].min() == 0.0 and out[:, :32].max() == 1.0
    assert np.all(out[:, 32:] == 0)


def test_shortest_crop_resizes_then_centre_crops() -> None:
    spec = Preprocessing(size=32, resize_size=40, mean=(0.5,) * 3, std=(0.5,) * 3)
    img = np.zeros((50, 100, 3), np.uint8)
    img[:, 45:55] = 255  # a bright vertical band in the middle survives the centre crop
    out = preprocess_image(img, spec)
    assert resized_shape(50, 100, spec) == (40, 80) and out.shape == (3, 32, 32)
    assert out.min() == pytest.approx(-1.0) and out[:, :, 16].mean() > 0.9


def test_grayscale_channel_handling_and_bad_dtype() -> None:
    rgb = np.random.default_rng(0).integers(0, 256, (20, 20, 3), dtype=np.uint8)
    assert preprocess_image(rgb, Preprocessing(size=16, channels=1, resize="squash")).shape == (1, 16, 16)
    with pytest.raises(InputError, match="uint8"):
        preprocess_image(rgb.astype(np.float32), Preprocessing(size=16))
    with pytest.raises(InputError, match="shape"):
        preprocess_image(np.zeros((2, 3, 4, 5), np.uint8), Preprocessing(size=16))


def test_card_preprocessing_descriptions_differ_between_models() -> None:
    descs = {get_card(n).preprocessing.describe() for n in ("litemedsam", "sam-vit-b", "medsam", "clip-vit-b32")}
    assert len(descs) == 4


@pytest.mark.parametrize("spec", [
    Preprocessing(size=24, resize_size=28, interpolation="bilinear"),  # ImageNet mean/std per channel
    Preprocessing(size=24, resize="longest_pad", intensity="minmax", mean=(0.5,), std=(0.25,)),  # one mean/std
])
def test_gray_image_is_resized_once_yet_equals_its_three_plane_copy(spec: Preprocessing) -> None:
    gray = np.random.default_rng(1).integers(0, 256, (16, 20), dtype=np.uint8)
    out = preprocess_image(gray, spec)
    assert out.shape == (3, 24, 24) and out.flags.c_contiguous
    assert np.array_equal(out, preprocess_image(np.repeat(gray[:, :, None], 3, axis=2), spec))
    # by hand: a uniform gray 100 is (100 / 255 - mean[c]) / std[c] in channel c (minmax: 0 at every pixel)
    flat = preprocess_image(np.full((16, 20), 100, np.uint8), spec)
    for c in range(3):
        level = 0.0 if spec.intensity == "minmax" else 100 / 255
        expected = (level - spec.mean[c % len(spec.mean)]) / spec.std[c % len(spec.std)]
        assert flat[c, 12, 12] == pytest.approx(expected, abs=1e-6)
