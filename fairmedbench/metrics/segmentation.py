"""Per-sample segmentation metrics: binarisation, Dice (DSC), IoU, HD95 and per-volume pooled Dice.

Pure numpy/scipy. Conventions (definitions: fairmedbench/metrics/specs.py, segmentation):
DSC = 2|P∩G| / (|P| + |G|); both masks empty -> `empty_score` (default 1.0); empty G with a
non-empty P -> 0.0. Group statistics (means, gaps, equity scaling, CIs) live elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike as Counts
from scipy import ndimage

from fairmedbench.errors import InputError

ArrayLike = np.ndarray | Sequence[Any]

Spacing = float | Sequence[float] | None

HD95_PERCENTILE = 95.0


def binarize(mask: ArrayLike, threshold: float = 0.5, label: int | None = None) -> np.ndarray:
    """Boolean foreground of one mask (or a stack of masks), by an explicit rule.

    - `label` given: foreground iff value == label (for label maps with several classes).
    - bool: as is.
    - integers (or integral floats > 1): values must lie in {0, 1} or in {0, 255}; foreground is 1 or 255.
      Any other value set (e.g. {0, 1, 2}) is a label map and needs `label=`.
    - floats in [0, 1] (probabilities): foreground iff value >= threshold.
    """
    arr = np.asarray(mask)
    if not (0.0 < float(threshold) <= 1.0):
        raise InputError(f"threshold must be in (0, 1] (a mask value >= threshold is foreground), got {threshold}")
    if arr.dtype == bool:
        return arr if label is None else np.equal(arr, bool(label))
    if arr.dtype.kind not in "iuf":
        raise InputError(f"a mask must hold numbers or booleans, got dtype {arr.dtype}; "
                         "pass a numeric 0/1, 0/255 or probability array")
    if arr.dtype.kind == "f" and np.isnan(arr).any():
        raise InputError(f"mask has {int(np.isnan(arr).sum())} NaN values; a mask must be finite")
    if arr.size == 0:
        return np.zeros(arr.shape, dtype=bool)
    if label is not None:
        if isinstance(label, bool) or not float(label).is_integer():
            raise InputError(f"label must be an integer class value, got {label!r}")
        if arr.dtype.kind == "f" and not np.all(arr == np.round(arr)):
            raise InputError("label= selects a class in an integer label map, but this mask has fractional "
                             "values (probabilities?); leave label unset and use threshold=")
        foreground: np.ndarray = np.equal(arr, label)
        return foreground
    lo, hi = arr.min(), arr.max()
    if arr.dtype.kind == "f" and lo >= 0 and hi <= 1:
        return arr >= threshold
    if arr.dtype.kind == "f" and not np.all(arr == np.round(arr)):
        raise InputError(f"float mask has values in [{lo:g}, {hi:g}], outside [0, 1]; probabilities must be in "
                         "[0, 1] (divide 0-255 images by 255, apply a sigmoid to logits)")
    values = np.unique(arr)
    if np.isin(values, (0, 1)).all():
        foreground = np.equal(arr, 1)
        return foreground
    if np.isin(values, (0, 255)).all():
        foreground = np.equal(arr, 255)
        return foreground
    shown = ", ".join(f"{v:g}" for v in values[:8]) + (", ..." if len(values) > 8 else "")
    raise InputError(f"mask values {{{shown}}} are neither binary (0/1 or 0/255) nor probabilities in [0, 1]; "
                     "if this is a label map with several classes, choose one with label=<class value>")


def _pair(pred: ArrayLike, gt: ArrayLike, threshold: float, label: int | None,
          where: str = "") -> tuple[np.ndarray, np.ndarray]:
    """Binarised (pred, gt) with equal shapes, or an InputError naming both shapes."""
    p, g = np.asarray(pred), np.asarray(gt)
    if p.shape != g.shape:
        raise InputError(f"{where}prediction mask has shape {p.shape} but ground-truth mask has shape {g.shape}; "
                         "they must match pixel for pixel (resize the prediction to the ground truth)")
    return binarize(p, threshold, label), binarize(g, threshold, label)


@dataclass(frozen=True)
class OverlapCounts:
    """Per-sample pixel counts: |P∩G|, |P| and |G| (int64 arrays of equal length)."""

    intersection: np.ndarray
    pred_size: np.ndarray
    gt_size: np.ndarray


def overlap_counts(preds: ArrayLike, gts: ArrayLike, threshold: float = 0.5,
                   label: int | None = None) -> OverlapCounts:
    """Per-sample |P∩G|, |P|, |G| for a stack (n, ...) or for lists of masks of differing sizes."""
    if isinstance(preds, np.ndarray) and isinstance(gts, np.ndarray) and preds.ndim >= 2 and gts.ndim >= 2:
        if len(preds) != len(gts):
            raise InputError(f"{len(preds)} predicted masks but {len(gts)} ground-truth masks")
        p, g = _pair(preds, gts, threshold, label)
        n = len(p)
        p, g = p.reshape(n, -1), g.reshape(n, -1)
        return OverlapCounts(np.count_nonzero(p & g, axis=1).astype(np.int64),
                             np.count_nonzero(p, axis=1).astype(np.int64),
                             np.count_nonzero(g, axis=1).astype(np.int64))
    preds, gts = list(preds), list(gts)
    if len(preds) != len(gts):
        raise InputError(f"{len(preds)} predicted masks but {len(gts)} ground-truth masks")
    counts = np.zeros((3, len(preds)), dtype=np.int64)
    for i, (pred, gt) in enumerate(zip(preds, gts)):
        p, g = _pair(pred, gt, threshold, label, where=f"sample {i}: ")
        counts[:, i] = np.count_nonzero(p & g), np.count_nonzero(p), np.count_nonzero(g)
    return OverlapCounts(*counts)


def _check_empty_score(empty_score: float) -> float:
    value = float(empty_score)
    if not (np.isnan(value) or 0.0 <= value <= 1.0):
        raise InputError(f"empty_score (the score when both masks are empty) must be in [0, 1] or NaN, "
                         f"got {empty_score}")
    return value


def dice_from_counts(intersection: Counts, pred_size: Counts, gt_size: Counts,
                     empty_score: float = 1.0) -> np.ndarray:
    """DSC = 2|P∩G| / (|P| + |G|) per entry; `empty_score` where both are empty."""
    inter, n_p, n_g = (np.asarray(a, dtype=np.float64) for a in (intersection, pred_size, gt_size))
    empty_score = _check_empty_score(empty_score)
    if ((inter < 0) | (inter > np.minimum(n_p, n_g))).any():
        raise InputError("overlap counts are inconsistent: need 0 <= intersection <= min(pred_size, gt_size)")
    total = n_p + n_g
    out = np.full(np.broadcast(inter, total).shape, empty_score, dtype=np.float64)
    np.divide(2.0 * inter, total, out=out, where=total > 0)
    return out


def iou_from_counts(intersection: Counts, pred_size: Counts, gt_size: Counts,
                    empty_score: float = 1.0) -> np.ndarray:
    """IoU = |P∩G| / |P∪G| per entry; `empty_score` where both are empty."""
    inter, n_p, n_g = (np.asarray(a, dtype=np.float64) for a in (intersection, pred_size, gt_size))
    empty_score = _check_empty_score(empty_score)
    union = n_p + n_g - inter
    out = np.full(np.broadcast(inter, union).shape, empty_score, dtype=np.float64)
    np.divide(inter, union, out=out, where=union > 0)
    return out


def dice(pred: ArrayLike, gt: ArrayLike, empty_score: float = 1.0, threshold: float = 0.5,
         label: int | None = None) -> float:
    """Dice (DSC) of one 2D or 3D sample; both empty -> empty_score, empty G with non-empty P -> 0.0."""
    p, g = _pair(pred, gt, threshold, label)
    counts = (np.count_nonzero(p & g), np.count_nonzero(p), np.count_nonzero(g))
    return float(dice_from_counts(*counts, empty_score=empty_score))


def iou(pred: ArrayLike, gt: ArrayLike, empty_score: float = 1.0, threshold: float = 0.5,
        label: int | None = None) -> float:
    """IoU (Jaccard) of one 2D or 3D sample; both empty -> empty_score, empty G with non-empty P -> 0.0."""
    p, g = _pair(pred, gt, threshold, label)
    counts = (np.count_nonzero(p & g), np.count_nonzero(p), np.count_nonzero(g))
    return float(iou_from_counts(*counts, empty_score=empty_score))


@dataclass(frozen=True)
class DiceBatch:
    """Per-sample DSC and IoU, and which samples have an empty ground truth."""

    dsc: np.ndarray
    iou: np.ndarray
    empty_gt: np.ndarray
    empty_score: float

    @property
    def n_empty_gt(self) -> int:
        """Number of samples whose ground truth is empty (to be reported beside the DSC)."""
        return int(self.empty_gt.sum())


def dice_batch(preds: ArrayLike, gts: ArrayLike, empty_score: float = 1.0, threshold: float = 0.5,
               label: int | None = None) -> DiceBatch:
    """Per-sample DSC/IoU over a stack (n, H, W[, D]) or lists of differently sized masks."""
    c = overlap_counts(preds, gts, threshold, label)
    return DiceBatch(dsc=dice_from_counts(c.intersection, c.pred_size, c.gt_size, empty_score),
                     iou=iou_from_counts(c.intersection, c.pred_size, c.gt_size, empty_score),
                     empty_gt=c.gt_size == 0, empty_score=float(empty_score))


@dataclass(frozen=True)
class VolumeDice:
    """Per-volume DSC with all slices of a volume pooled; volumes in sorted id order."""

    volume_ids: np.ndarray
    dsc: np.ndarray
    n_slices: np.ndarray
    empty_gt: np.ndarray

    @property
    def n_empty_gt(self) -> int:
        """Number of volumes whose ground truth is empty in every slice."""
        return int(self.empty_gt.sum())


def dice_per_volume_from_counts(intersection: ArrayLike, pred_size: ArrayLike, gt_size: ArrayLike,
                                volume_ids: ArrayLike, empty_score: float = 1.0) -> VolumeDice:
    """Pool per-slice |P∩G|, |P|, |G| by volume id, then DSC per volume (never an average of slice DSCs)."""
    inter, n_p, n_g = (np.asarray(a, dtype=np.int64).ravel() for a in (intersection, pred_size, gt_size))
    ids = np.asarray(volume_ids)
    if ids.ndim != 1 or not (len(ids) == len(inter) == len(n_p) == len(n_g)):
        raise InputError(f"need one volume id per slice: got {ids.size} volume ids for "
                         f"{len(inter)}/{len(n_p)}/{len(n_g)} intersection/pred/gt counts")
    if ids.dtype.kind == "f" and np.isnan(ids).any():
        raise InputError("volume_ids contains NaN; every slice needs the id of its volume")
    try:
        uniq, inv = np.unique(ids, return_inverse=True)
    except TypeError:
        raise InputError("volume_ids mixes kinds of values (e.g. numbers and strings) that cannot be sorted; "
                         "use one kind of id per volume") from None
    pooled = [np.bincount(inv, weights=a, minlength=len(uniq)) for a in (inter, n_p, n_g)]
    return VolumeDice(volume_ids=uniq, dsc=dice_from_counts(pooled[0], pooled[1], pooled[2], empty_score),
                      n_slices=np.bincount(inv, minlength=len(uniq)), empty_gt=pooled[2] == 0)


def dice_per_volume(preds: ArrayLike, gts: ArrayLike, volume_ids: ArrayLike, empty_score: float = 1.0,
                    threshold: float = 0.5, label: int | None = None) -> VolumeDice:
    """3D DSC per volume from 2D slices: slices sharing a volume id are pooled before dividing."""
    c = overlap_counts(preds, gts, threshold, label)
    return dice_per_volume_from_counts(c.intersection, c.pred_size, c.gt_size, volume_ids, empty_score)


def _spacing(spacing: Spacing, ndim: int) -> tuple[float, ...]:
    """Pixel/voxel size per axis (unity when None)."""
    if spacing is None:
        return (1.0,) * ndim
    values = np.atleast_1d(np.asarray(spacing, dtype=np.float64)).ravel()
    if values.size == 1:
        values = np.repeat(values, ndim)
    if values.size != ndim or not (np.isfinite(values).all() and (values > 0).all()):
        raise InputError(f"spacing must be one positive size per axis ({ndim} for this mask), got {spacing!r}")
    return tuple(float(v) for v in values)


def _surface(mask: np.ndarray) -> np.ndarray:
    """Boundary voxels: foreground voxels with a background face-neighbour (or on the array border)."""
    surface: np.ndarray = mask & ~ndimage.binary_erosion(mask, border_value=0)
    return surface


def hd95_reason(pred: np.ndarray, gt: np.ndarray) -> str | None:
    """Why HD95 is undefined for this (binarised) pair, or None when it is defined."""
    p_empty, g_empty = not pred.any(), not gt.any()
    if p_empty and g_empty:
        return "both prediction and ground truth are empty"
    if g_empty:
        return "ground truth is empty"
    if p_empty:
        return "prediction is empty"
    return None


def _hd95_binary(p: np.ndarray, g: np.ndarray, spacing: tuple[float, ...]) -> float:
    """HD95 of two non-empty boolean masks of equal shape."""
    coords = np.nonzero(p | g)  # crop to the union's bounding box plus one voxel: same surfaces, less work
    box = tuple(slice(max(int(c.min()) - 1, 0), int(c.max()) + 2) for c in coords)
    sp, sg = _surface(p[box]), _surface(g[box])
    d_pg = ndimage.distance_transform_edt(~sg, sampling=spacing)[sp]
    d_gp = ndimage.distance_transform_edt(~sp, sampling=spacing)[sg]
    return float(max(np.percentile(d_pg, HD95_PERCENTILE), np.percentile(d_gp, HD95_PERCENTILE)))


def hd95(pred: ArrayLike, gt: ArrayLike, spacing: Spacing = None, threshold: float = 0.5,
         label: int | None = None) -> float:
    """95th-percentile symmetric Hausdorff distance between the mask surfaces (pixels, or mm with spacing).

    Surfaces are the foreground voxels removed by one binary erosion (face connectivity), as in MONAI.
    Symmetric = max of the two directed 95th percentiles (linear interpolation), as MONAI's
    compute_hausdorff_distance(percentile=95). NaN when either mask is empty (see `hd95_reason`).
    """
    p, g = _pair(pred, gt, threshold, label)
    if hd95_reason(p, g) is not None:
        return float("nan")
    return _hd95_binary(p, g, _spacing(spacing, p.ndim))


@dataclass(frozen=True)
class HD95Batch:
    """Per-sample HD95 (NaN where undefined) and the reason per undefined sample index."""

    values: np.ndarray
    skipped: dict[int, str] = field(default_factory=dict)


def hd95_batch(preds: ArrayLike, gts: ArrayLike, spacing: Spacing = None,
               spacings: Sequence[Spacing] | None = None, threshold: float = 0.5,
               label: int | None = None) -> HD95Batch:
    """HD95 per sample for a stack or lists of masks: one `spacing` for all, or `spacings` per sample."""
    preds, gts = list(preds), list(gts)
    if len(preds) != len(gts):
        raise InputError(f"{len(preds)} predicted masks but {len(gts)} ground-truth masks")
    if spacings is not None and (spacing is not None or len(spacings) != len(preds)):
        raise InputError(f"give either one spacing for all samples or spacings with one entry per sample "
                         f"({len(preds)}), not both")
    values = np.full(len(preds), np.nan)
    skipped: dict[int, str] = {}
    for i, (pred, gt) in enumerate(zip(preds, gts)):
        p, g = _pair(pred, gt, threshold, label, where=f"sample {i}: ")
        reason = hd95_reason(p, g)
        if reason is not None:
            skipped[i] = reason
            continue
        values[i] = _hd95_binary(p, g, _spacing(spacings[i] if spacings is not None else spacing, p.ndim))
    return HD95Batch(values=values, skipped=skipped)
