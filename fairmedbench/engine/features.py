"""Frozen-encoder feature extraction with a DataLoader, and an on-disk, memory-mapped feature cache.

Cache key = (model name, weights identity, preprocessing, pooling, precision) and what is encoded: the content
key of each sample (the BLAKE2b of its image file's bytes, or of its generated pixels; see
`Dataset.content_keys`) where the split offers them, else the dataset fingerprint and split name. Two levels:
one memory-mapped array per split (the fast path of a rerun) and one file per content key (`items/`), so a
changed image is the only one encoded again, a dataset copied to another folder reuses every feature, and
pixel-identical images are encoded once. Entries are written into a unique staging folder (or a temporary file)
and renamed into place, so two processes extracting the same features at once both finish correctly (the first
rename wins, the other reads it); staging folders left by a killed process are removed by the next extraction
into the same cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from fairmedbench.engine.device import autocast, resolve_precision, select_device
from fairmedbench.engine.store import remove_stale_staging, staging_dir
from fairmedbench.errors import InputError

if TYPE_CHECKING:
    import torch

CACHE_FORMAT = 2


class ImageSplit(Protocol):
    """What extraction needs from a dataset split."""

    fingerprint: str

    def __len__(self) -> int: ...

    def load_image(self, i: int) -> np.ndarray: ...


class Encoder(Protocol):
    """What extraction needs from a loaded model (registry.models.runtime.FoundationModel)."""

    @property
    def module(self) -> torch.nn.Module: ...

    def cache_identity(self) -> dict[str, str]: ...

    def preprocess(self, image: np.ndarray) -> np.ndarray: ...

    def to(self, device: str) -> object: ...

    def encode_image(self, pixels: torch.Tensor) -> torch.Tensor: ...

    def encoder_path(self, device: str, precision: str) -> str: ...


@dataclass
class Features:
    """Extracted features: `array` (N, D) float32 (memory-mapped when read from the cache), row ids."""

    sample_ids: list[str]
    array: np.ndarray
    key: str
    path: Path
    from_cache: bool
    seconds: float
    encoded: int = 0  # images run through the encoder by this call (0 when every feature came from the cache)
    stages: dict[str, float] = field(default_factory=dict)  # seconds per stage of this call (none from the cache)


def sample_ids_of(split: Any) -> list[str]:
    """A split's sample ids: `split.sample_ids`, or `sample_id` of each sample."""
    ids = getattr(split, "sample_ids", None)
    if ids is None:
        ids = [s.sample_id for s in split]
    ids = [str(i) for i in ids]
    if len(ids) != len(split):
        raise InputError(f"split has {len(split)} samples but {len(ids)} sample ids")
    return ids


def _model_parts(model: Encoder, encoder_path: str) -> dict[str, str | int]:
    """The model side of a cache key: its identity, and the encoder path where it is not the torch module itself
    (another path agrees to float rounding only; entries of the torch path keep the keys they had)."""
    parts: dict[str, str | int] = dict(model.cache_identity())
    if encoder_path != "torch":
        parts.update(encoder_path=encoder_path)
    return parts


def cache_key(model: Encoder, split: object, split_name: str, precision: str,
              content: list[str] | None = None, encoder_path: str = "torch") -> tuple[str, dict[str, Any]]:
    """Hash of every part that changes the features, and the parts themselves: the samples' `content` keys when
    given (the data's identity is what it holds), else the split's fingerprint and name."""
    parts = _model_parts(model, encoder_path)
    if content is not None:
        parts.update(content=hashlib.sha256("\n".join(content).encode()).hexdigest())
    else:
        fingerprint = getattr(split, "fingerprint", None)
        if not fingerprint:
            raise InputError("the dataset split has no `fingerprint`: cannot key the feature cache")
        parts.update(dataset=str(fingerprint), split=split_name)
    parts.update(precision=precision, format=CACHE_FORMAT)
    blob = json.dumps(parts, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest(), parts


def _item_dir(cache_dir: Path, model: Encoder, precision: str, encoder_path: str) -> Path:
    """Folder of the per-content features of one (model, weights, preprocessing, pooling, encoder path, precision)."""
    parts = {**_model_parts(model, encoder_path), "precision": precision, "format": CACHE_FORMAT}
    key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]
    return cache_dir / str(parts["model"]) / "items" / key


def _read_item(folder: Path, content: str) -> np.ndarray | None:
    try:
        row: np.ndarray = np.load(folder / content[:2] / f"{content}.npy")
        return row
    except (OSError, ValueError):  # absent, or a torn file from a killed writer: encode again
        return None


def _write_item(folder: Path, content: str, row: np.ndarray) -> None:
    sub = folder / content[:2]
    sub.mkdir(parents=True, exist_ok=True)
    tmp = sub / f".{content}.{os.getpid()}.tmp.npy"
    np.save(tmp, row)
    os.replace(tmp, sub / f"{content}.npy")


class _Pixels:
    """torch Dataset view of the split's samples at `rows`: loads and preprocesses one image per item (runs in
    workers); `seconds` sums the time of each step in this process (a worker's own copy stays in the worker)."""

    def __init__(self, split: ImageSplit, preprocess: Callable[[np.ndarray], np.ndarray], rows: list[int]) -> None:
        self.split, self.preprocess, self.rows = split, preprocess, rows
        self.seconds = {"read": 0.0, "preprocess": 0.0}

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> np.ndarray:
        t0 = time.perf_counter()
        image = self.split.load_image(self.rows[i])
        t1 = time.perf_counter()
        pixels = self.preprocess(image)
        self.seconds["read"] += t1 - t0
        self.seconds["preprocess"] += time.perf_counter() - t1
        return pixels


def _entry_dir(cache_dir: Path, model_name: str, key: str) -> Path:
    return cache_dir / model_name / key[:24]


def read_cached(cache_dir: Path, model_name: str, key: str) -> tuple[np.ndarray, dict[str, Any]] | None:
    """A complete cache entry for `key` (memory-mapped), or None."""
    d = _entry_dir(cache_dir, model_name, key)
    meta_path = d / "meta.json"
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text())
    if meta.get("key") != key:
        return None
    return np.load(d / "features.npy", mmap_mode="r"), meta


def default_workers(device: str) -> int:
    """Loader processes: none on CPU, else up to 4. On a CPU the encoder already uses every core, and loading is
    too small to overlap with it: 2 ms CPU (5 ms wall) to read and preprocess a real NIH PNG for LiteMedSAM vs
    1.3 CPU-s to encode it, so a prefetching thread or process could save under 0.5% of the stage."""
    if not device.startswith("cuda"):
        return 0
    return max(0, min(4, (os.cpu_count() or 1) - 1))


@dataclass
class _Pending:
    """What one extraction still has to encode: `todo` rows (each distinct uncached content once), the features
    `known` per content key (read from `items`, the per-content cache, or encoded by this call)."""

    todo: list[int]
    known: dict[str, np.ndarray]
    items: Path | None


def _pending(model: Encoder, content: list[str] | None, n: int, cache_dir: Path | None, precision: str,
             encoder_path: str) -> _Pending:
    """Rows to encode: every row without content keys; else the first row of each content with no cached
    feature."""
    if content is None:
        return _Pending(list(range(n)), {}, None)
    items = _item_dir(cache_dir, model, precision, encoder_path) if cache_dir is not None else None
    first: dict[str, int] = {}
    for r, c in enumerate(content):
        first.setdefault(c, r)
    known: dict[str, np.ndarray] = {}
    if items is not None:
        for c in first:
            row = _read_item(items, c)
            if row is not None:
                known[c] = row
    return _Pending([r for c, r in first.items() if c not in known], known, items)


def _encode_rows(model: Encoder, split: ImageSplit, pending: _Pending, content: list[str] | None,
                 allocate: Callable[[int], np.ndarray], settings: dict[str, Any],
                 progress: Callable[[int, int], None] | None) -> tuple[np.ndarray | None, dict[str, float]]:
    """Encode `pending.todo` in batches into rows of `allocate(dim)` (and `pending.known` per content); returns
    the array (None when nothing was encoded) and the seconds spent per stage: read, preprocess and collate (where
    the loader runs in this process; else `loader`, the wait for its workers), encode and store."""
    import torch

    todo, device, precision = pending.todo, settings["device"], settings["precision"]
    stages = {"encode": 0.0, "store": 0.0}
    if progress is not None:
        progress(0, len(todo))  # starts the stage's clock and says what is running before the first batch
    if not todo:
        return None, stages
    model.to(device)
    if settings["channels_last"]:
        model.module.to(memory_format=torch.channels_last)
    pixels = _Pixels(split, model.preprocess, todo)
    workers = settings["num_workers"]
    loader = torch.utils.data.DataLoader(
        cast("torch.utils.data.Dataset[np.ndarray]", pixels), batch_size=settings["batch_size"], shuffle=False,
        num_workers=workers, pin_memory=device.startswith("cuda"), persistent_workers=False,
        prefetch_factor=4 if workers > 0 else None)
    out: np.ndarray | None = None
    done, t_load, t = 0, 0.0, time.perf_counter()
    for batch in loader:
        t_load += time.perf_counter() - t
        t = time.perf_counter()
        batch = batch.to(device, non_blocking=True)
        if settings["channels_last"]:
            batch = batch.contiguous(memory_format=torch.channels_last)
        with autocast(device, precision):
            emb = model.encode_image(batch).float().cpu().numpy()
        stages["encode"] += time.perf_counter() - t
        t = time.perf_counter()
        out = allocate(emb.shape[1]) if out is None else out
        for j, r in enumerate(todo[done:done + len(emb)]):
            out[r] = emb[j]
            if content is not None:
                pending.known[content[r]] = emb[j]
                if pending.items is not None:
                    _write_item(pending.items, content[r], emb[j])
        done += len(emb)
        stages["store"] += time.perf_counter() - t
        if progress is not None:
            progress(done, len(todo))
        t = time.perf_counter()
    # in this process: the loader's time is reading, preprocessing and collating the batch; else the workers' wait
    stages.update({**pixels.seconds, "collate": t_load - sum(pixels.seconds.values())} if workers == 0
                  else {"loader": t_load})
    return out, stages


def _publish(cache_dir: Path, name: str, key: str, tmp: Path, meta: dict[str, Any]) -> tuple[np.ndarray, Path]:
    """Rename the finished staging folder `tmp` into the cache entry of `key` (another process may have finished
    the same entry first: theirs is kept) and return the entry's memory-mapped features and folder."""
    (tmp / "meta.json").write_text(json.dumps(meta))
    final = _entry_dir(cache_dir, name, key)
    try:
        os.replace(tmp, final)
    except OSError:  # another process finished the same entry first: keep theirs (ours is removed by the caller)
        if not (final / "meta.json").is_file():
            raise
    hit = read_cached(cache_dir, name, key)
    assert hit is not None
    return hit[0], final


def extract_features(model: Encoder, split: ImageSplit, *, split_name: str, cache_dir: str | Path | None,
                     batch_size: int = 32, num_workers: int | None = None, device: str = "auto",
                     precision: str = "fp32", channels_last: bool = False,
                     progress: Callable[[int, int], None] | None = None) -> Features:
    """Features of every image of `split` from `model.encode_image`, read from / written to the cache.

    A split with `content_keys()` is keyed per sample content: only images whose content has no cached feature
    are encoded, each distinct content once. num_workers=None picks `default_workers(device)`; precision "bf16"
    autocasts, "auto" is resolved for the device (see engine.device) and the resolved one keys the cache, as does
    the model's `encoder_path(device, precision)` (how its encoder runs: see registry.models.encoder_path);
    `progress(done, total)` after each batch. `Features.stages`: the seconds of each stage (see _encode_rows).
    """
    t0 = time.perf_counter()
    device = select_device(device)
    precision = resolve_precision(precision, device)
    ids = sample_ids_of(split)
    content = list(split.content_keys()) if hasattr(split, "content_keys") else None
    if content is not None and len(content) != len(ids):
        raise InputError(f"split has {len(ids)} samples but {len(content)} content keys")
    encoder_path = model.encoder_path(device, precision)
    key, parts = cache_key(model, split, split_name, precision, content, encoder_path)
    name, cache = str(parts["model"]), Path(cache_dir) if cache_dir is not None else None
    hit = read_cached(cache, name, key) if cache is not None else None
    if cache is not None and hit is not None:
        return Features(hit[1]["sample_ids"], hit[0], key, _entry_dir(cache, name, key), True,
                        time.perf_counter() - t0)
    num_workers = default_workers(device) if num_workers is None else num_workers
    if batch_size < 1 or num_workers < 0:
        raise InputError(f"batch_size must be >= 1 and num_workers >= 0 (got {batch_size}, {num_workers})")
    if not ids:
        raise InputError(f"split {split_name!r} is empty: nothing to extract")
    pending = _pending(model, content, len(ids), cache, precision, encoder_path)
    tmp = None
    if cache is not None:
        remove_stale_staging(cache / name)
        tmp = staging_dir(cache / name, key[:12])
    try:
        def allocate(dim: int) -> np.ndarray:
            return (np.lib.format.open_memmap(tmp / "features.npy", mode="w+", dtype=np.float32, shape=(len(ids), dim))
                    if tmp is not None else np.empty((len(ids), dim), np.float32))

        settings = {"device": device, "precision": precision, "batch_size": batch_size, "num_workers": num_workers,
                    "channels_last": channels_last}
        out, stages = _encode_rows(model, split, pending, content, allocate, settings, progress)
        if content is not None:  # every row from its content's feature (cached, or encoded above for its first row)
            out = allocate(len(next(iter(pending.known.values())))) if out is None else out
            for r, c in enumerate(content):
                out[r] = pending.known[c]
        assert out is not None
        if cache is None or tmp is None:
            return Features(ids, out, key, Path(), False, time.perf_counter() - t0, len(pending.todo), stages)
        assert isinstance(out, np.memmap)
        out.flush()
        del out
        array, final = _publish(cache, name, key, tmp, {"key": key, "parts": parts, "sample_ids": ids,
                                                        "created": time.time()})
        tmp = None if not tmp.exists() else tmp
        return Features(ids, array, key, final, False, time.perf_counter() - t0, len(pending.todo), stages)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
