"""The feature cache is keyed by content: a changed image (same size, same mtime) is encoded again and the others
are reused; a dataset copied to another folder reuses every feature; pixel-identical images are encoded once; the
digest cache re-hashes a file whose bytes changed behind an unchanged (size, mtime, inode)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from fairmedbench.engine import content
from fairmedbench.engine.features import extract_features
from fairmedbench.registry.datasets import load_dataset
from fairmedbench.tasks.common import SplitView
from tests.datasets.fmb_ds_fixtures import make_nih


@pytest.fixture(autouse=True)
def _private_digest_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FMB_HASH_CACHE", str(tmp_path / "digests.sqlite"))


class ImageCounter:
    """A tiny encoder that counts the images it encodes."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.module = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
        self.images = 0

    def to(self, device: str) -> ImageCounter:
        return self

    def cache_identity(self) -> dict[str, str]:
        return {"model": "counter", "weights": "w", "preprocessing": "x/255", "pooling": "avg"}

    def encoder_path(self, device: str, precision: str) -> str:
        return "torch"

    def preprocess(self, image: np.ndarray) -> np.ndarray:
        return np.repeat(np.asarray(image, np.float32)[None] / 255.0, 3, axis=0)

    def encode_image(self, pixels: torch.Tensor) -> torch.Tensor:
        self.images += pixels.shape[0]
        return self.module(pixels)


def _stored_pngs(root: Path) -> list[Path]:
    """Re-save the fixture's PNGs uncompressed, so that a changed pixel keeps the file's size."""
    paths = sorted((root / "images").glob("*.png"))
    for p in paths:
        Image.fromarray(np.asarray(Image.open(p))).save(p, compress_level=0)
    return paths


def _view(root: Path) -> SplitView:
    ds = load_dataset("nih-cxr14", root)
    return SplitView(ds, np.arange(len(ds)), "unused: content keys key the cache")


def _extract(model: ImageCounter, root: Path, cache: Path):
    return extract_features(model, _view(root), split_name="all", cache_dir=cache, batch_size=4, device="cpu")


def test_changed_image_same_size_and_mtime_is_reencoded_alone(tmp_path: Path) -> None:
    root = make_nih(tmp_path / "nih")
    paths = _stored_pngs(root)
    cache, model = tmp_path / "cache", ImageCounter()
    first = _extract(model, root, cache)
    n = len(first.sample_ids)
    assert model.images == first.encoded == n and not first.from_cache
    again = _extract(model, root, cache)
    assert again.from_cache and model.images == n
    # one image's pixel changed in place; size, mtime and inode kept
    target = paths[2]
    st = target.stat()
    arr = np.asarray(Image.open(target)).copy()
    arr[0, 0] ^= 0xFF
    Image.fromarray(arr).save(target, compress_level=0)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (target.stat().st_size, target.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    changed = _extract(model, root, cache)
    assert not changed.from_cache and changed.encoded == 1 and model.images == n + 1
    row = changed.sample_ids.index(target.stem if target.stem in changed.sample_ids else target.name)
    others = [i for i in range(n) if i != row]
    np.testing.assert_array_equal(np.asarray(changed.array)[others], np.asarray(first.array)[others])
    assert not np.array_equal(np.asarray(changed.array)[row], np.asarray(first.array)[row])


def test_copied_dataset_folder_reuses_every_feature(tmp_path: Path) -> None:
    root = make_nih(tmp_path / "nih")
    cache, model = tmp_path / "cache", ImageCounter()
    first = _extract(model, root, cache)
    copy = tmp_path / "elsewhere" / "nih-copy"
    shutil.copytree(root, copy)  # new paths, inodes and ctimes: every file is hashed again, to the same digests
    second = _extract(model, copy, cache)
    assert second.encoded == 0 and model.images == len(first.sample_ids)
    np.testing.assert_array_equal(np.asarray(second.array), np.asarray(first.array))


def test_pixel_identical_images_are_encoded_once(tmp_path: Path) -> None:
    root = make_nih(tmp_path / "nih", missing=0)
    paths = sorted((root / "images").glob("*.png"))
    for p in paths[1:4]:
        shutil.copyfile(paths[0], p)  # four files, one content
    model = ImageCounter()
    feats = extract_features(model, _view(root), split_name="all", cache_dir=None, batch_size=4, device="cpu")
    assert feats.encoded == model.images == len(paths) - 3
    arr = np.asarray(feats.array)
    rows = [feats.sample_ids.index(i) for i in feats.sample_ids if i.split(".")[0] in {p.stem for p in paths[:4]}]
    assert len(rows) == 4 and all(np.array_equal(arr[r], arr[rows[0]]) for r in rows)


def test_digest_cache_rehashes_an_edit_behind_unchanged_size_and_mtime(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"a" * 100)
    first = content.file_digests([path])[str(path)]
    assert first == content.hash_file(path)
    st = path.stat()
    with open(path, "r+b") as fh:
        fh.write(b"b")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    content._MEMO.clear()  # a fresh process: only the on-disk cache remains
    assert content.file_digests([path])[str(path)] == content.hash_file(path) != first


def test_unwritable_digest_cache_still_hashes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("FMB_HASH_CACHE", str(blocker / "digests.sqlite"))
    path = tmp_path / "g.bin"
    path.write_bytes(b"xyz")
    content._MEMO.clear()
    assert content.file_digests([path])[str(path)] == content.hash_file(path)


def test_map_memo_keeps_maps_on_disk_within_its_budget() -> None:
    """The encoder-map memo returns what it was given (fp32), evicts the least recently used past its budget and
    keeps nothing of the maps in memory but their file names."""
    from fairmedbench.registry.models.runtime import MapMemo

    memo = MapMemo(budget=3 * 4 * 256 * 16 * 16)  # room for three (256, 16, 16) fp32 maps
    maps = [torch.randn(256, 16, 16) for _ in range(4)]
    keys = [("m", "w|fp32", f"k{i}") for i in range(4)]
    for k, m in zip(keys[:3], maps[:3]):
        memo.put(k, m)
    assert torch.equal(memo.get(keys[0]), maps[0])  # keys[0] is now the most recent
    memo.put(keys[3], maps[3].to(torch.bfloat16))
    assert memo.get(keys[1]) is None and memo.get(keys[2]) is not None
    assert torch.equal(memo.get(keys[3]), maps[3].to(torch.bfloat16).float())
    assert all(isinstance(v[0], str) and os.path.isfile(v[0]) for v in memo.index.values())
    memo.clear()
    assert memo.get(keys[0]) is None and memo.bytes == 0
