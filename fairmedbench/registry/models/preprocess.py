"""Per-model image preprocessing in numpy + PIL (cheap in DataLoader workers; no torch)."""

from __future__ import annotations

import numpy as np

from fairmedbench.errors import InputError
from fairmedbench.registry.models.card import Preprocessing

_PIL_FILTERS = {"bicubic": 3, "bilinear": 2, "area": 4}  # PIL.Image.Resampling: BICUBIC, BILINEAR, BOX


def _as_channels(image: np.ndarray, channels: int) -> np.ndarray:
    """(H, W, C) with C = `channels`, or one plane for a grayscale image of a 3-channel model (the planes would be
    equal: it is resized and scaled once, and normalising by the three channels' mean and std makes the three)."""
    if image.ndim == 2:
        image = image[:, :, None]
    if image.ndim != 3 or image.shape[2] not in (1, 3, 4):
        raise InputError(f"image of shape {image.shape}: expected (H, W) or (H, W, 3) uint8")
    image = image[:, :, :3]
    if channels == 1 and image.shape[2] == 3:
        image = image.mean(axis=2, keepdims=True).round().astype(image.dtype)
    return image


def _resize(image: np.ndarray, hw: tuple[int, int], interpolation: str) -> np.ndarray:
    from PIL import Image

    if image.shape[:2] == hw:
        return image
    planes = [
        np.asarray(Image.fromarray(image[:, :, c]).resize((hw[1], hw[0]), _PIL_FILTERS[interpolation]))
        for c in range(image.shape[2])
    ]
    return np.stack(planes, axis=2)


def resized_shape(h: int, w: int, spec: Preprocessing) -> tuple[int, int]:
    """(h, w) of the image content after resizing, before crop/pad."""
    s = spec.size
    if spec.resize == "squash":
        return s, s
    if spec.resize == "shortest_crop":
        s = max(spec.resize_size, s)
    scale = s / (max(h, w) if spec.resize == "longest_pad" else min(h, w))
    return max(1, int(h * scale + 0.5)), max(1, int(w * scale + 0.5))


def preprocess_image(image: np.ndarray, spec: Preprocessing) -> np.ndarray:
    """uint8 (H, W) or (H, W, 3) -> float32 (C, size, size) as the model expects it."""
    image = np.asarray(image)
    if image.dtype != np.uint8:
        raise InputError(f"image dtype {image.dtype}: expected uint8 (0..255) pixels")
    image = _as_channels(image, spec.channels)
    h, w = image.shape[:2]
    nh, nw = resized_shape(h, w, spec)
    image = _resize(image, (nh, nw), spec.interpolation)
    s = spec.size
    if spec.resize == "shortest_crop":
        top, left = (nh - s) // 2, (nw - s) // 2
        image = image[top:top + s, left:left + s]
    x = image.astype(np.float32)
    if spec.intensity == "minmax":
        lo, hi = float(x.min()), float(x.max())
        x = (x - lo) / max(hi - lo, 1e-8)
    else:
        x /= 255.0
    planes = spec.channels if spec.channels == 3 else x.shape[2]  # a gray plane broadcasts to the model's three
    mean = np.asarray(spec.mean[:planes], dtype=np.float32)
    std = np.asarray(spec.std[:planes], dtype=np.float32)
    x = (x - mean) / std
    if spec.resize == "longest_pad":
        x = np.pad(x, ((0, s - nh), (0, s - nw), (0, 0)))
    out = x.transpose(2, 0, 1)
    if out.shape[0] != spec.channels:  # a gray plane of a 3-channel model normalised by one mean and std
        out = np.broadcast_to(out, (spec.channels, *out.shape[1:]))
    return np.ascontiguousarray(out)
