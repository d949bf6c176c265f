"""Prompts generated from ground-truth masks with a seed: center, rand, rands, bbox (SAM-style usage)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fairmedbench.errors import InputError

PROMPT_MODES = ("center", "rand", "rands", "bbox")


@dataclass(frozen=True)
class Prompt:
    """Points (k, 2) as (x, y) with labels (1 = foreground), or a box (x0, y0, x1, y1), in pixels."""

    mode: str
    points: np.ndarray | None = None
    labels: np.ndarray | None = None
    box: np.ndarray | None = None


def tight_box(mask: np.ndarray) -> np.ndarray:
    """(x0, y0, x1, y1) of the foreground, inclusive pixel coordinates."""
    ys, xs = np.nonzero(mask)
    return np.array([xs.min(), ys.min(), xs.max(), ys.max()], dtype=np.float64)


def center_point(mask: np.ndarray) -> np.ndarray:
    """The foreground pixel nearest the centroid: inside the object even when it is not convex."""
    ys, xs = np.nonzero(mask)
    cy, cx = ys.mean(), xs.mean()
    i = int(np.argmin((ys - cy) ** 2 + (xs - cx) ** 2))
    return np.array([[xs[i], ys[i]]], dtype=np.float64)


def make_prompt(mask: np.ndarray, mode: str, rng: np.random.Generator, jitter: float = 0.0) -> Prompt:
    """A prompt of `mode` for a 2D ground-truth mask; `jitter` moves box edges by up to that fraction of its size."""
    if mode not in PROMPT_MODES:
        raise InputError(f"unknown prompt mode {mode!r}; choose one of {', '.join(PROMPT_MODES)}")
    m = np.asarray(mask, dtype=bool)
    if m.ndim != 2:
        raise InputError(f"prompts are made per 2D mask (slice), got shape {m.shape}")
    if not m.any():
        raise InputError("cannot make a prompt from an empty ground-truth mask")
    if mode == "bbox":
        box = tight_box(m)
        if jitter > 0:
            w, h = box[2] - box[0] + 1, box[3] - box[1] + 1
            box = box + rng.uniform(-jitter, jitter, 4) * np.array([w, h, w, h])
            hi = np.array([m.shape[1] - 1, m.shape[0] - 1] * 2, dtype=np.float64)
            box = np.clip(box, 0, hi)
        return Prompt(mode, box=box)
    if mode == "center":
        pts = center_point(m)
    else:
        ys, xs = np.nonzero(m)
        k = 1 if mode == "rand" else 5
        pick = rng.choice(len(ys), size=k, replace=len(ys) < k)
        pts = np.stack([xs[pick], ys[pick]], axis=1).astype(np.float64)
    return Prompt(mode, points=pts, labels=np.ones(len(pts), dtype=np.int64))


def make_prompt_3d(mask: np.ndarray, mode: str, rng: np.random.Generator, jitter: float = 0.0) -> Prompt:
    """A prompt of `mode` for a 3D (D, H, W) ground-truth mask, for models that segment whole volumes.

    Points are (k, 3) as (x, y, z) voxel indices (x along W, z along D), the 2D (x, y) convention extended;
    a box is (x0, y0, z0, x1, y1, z1), inclusive. `jitter` moves each box face by up to that fraction of the
    box's extent on its axis.
    """
    if mode not in PROMPT_MODES:
        raise InputError(f"unknown prompt mode {mode!r}; choose one of {', '.join(PROMPT_MODES)}")
    m = np.asarray(mask, dtype=bool)
    if m.ndim != 3:
        raise InputError(f"3D prompts are made from a volume mask (D, H, W), got shape {m.shape}")
    if not m.any():
        raise InputError("cannot make a prompt from an empty ground-truth mask")
    zs, ys, xs = np.nonzero(m)
    if mode == "bbox":
        box = np.array([xs.min(), ys.min(), zs.min(), xs.max(), ys.max(), zs.max()], dtype=np.float64)
        if jitter > 0:
            ext = box[3:] - box[:3] + 1
            box = box + rng.uniform(-jitter, jitter, 6) * np.concatenate([ext, ext])
            hi = np.array([m.shape[2] - 1, m.shape[1] - 1, m.shape[0] - 1] * 2, dtype=np.float64)
            box = np.clip(box, 0, hi)
        return Prompt(mode, box=box)
    if mode == "center":
        i = int(np.argmin((zs - zs.mean()) ** 2 + (ys - ys.mean()) ** 2 + (xs - xs.mean()) ** 2))
        pick = np.array([i])
    else:
        k = 1 if mode == "rand" else 5
        pick = rng.choice(len(zs), size=k, replace=len(zs) < k)
    pts = np.stack([xs[pick], ys[pick], zs[pick]], axis=1).astype(np.float64)
    return Prompt(mode, points=pts, labels=np.ones(len(pts), dtype=np.int64))
