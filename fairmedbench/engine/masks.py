"""Reading segmentation mask files (PNG/JPEG/BMP, .npy, NIfTI) into numpy arrays, with clear errors.

Never imports torch. Supported: .png .jpg .jpeg .bmp (Pillow), .npy (numpy, pickles refused),
.nii and .nii.gz (nibabel; these also give the voxel spacing).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fairmedbench.errors import InputError, MissingResourceError
from fairmedbench.metrics.segmentation import binarize

PathLike = str | os.PathLike[str]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
JPEG_SUFFIXES = (".jpg", ".jpeg")
NIFTI_SUFFIXES = (".nii", ".nii.gz")
SUPPORTED = IMAGE_SUFFIXES + (".npy",) + NIFTI_SUFFIXES
NPY_MAGIC = b"\x93NUMPY"
JPEG_CUTOFF = 128  # lossy JPEG masks: foreground iff gray value >= 128 (midpoint of 0..255)


@dataclass(frozen=True)
class Mask:
    """A mask read from a file: the array, and the voxel spacing (NIfTI only; None otherwise)."""

    array: np.ndarray
    spacing: tuple[float, ...] | None


def _kind(path: Path) -> str:
    """The reader for this file name, or an InputError listing the supported extensions."""
    name = path.name.lower()
    for suffix in SUPPORTED:
        if name.endswith(suffix):
            return "nifti" if suffix in NIFTI_SUFFIXES else suffix.lstrip(".")
    raise InputError(f"mask file {path}: unknown extension; supported: {', '.join(SUPPORTED)}")


def _unreadable(path: Path, err: BaseException) -> InputError:
    return InputError(f"mask file {path} could not be read ({type(err).__name__}: {err}); "
                      "the file is corrupt or not of the type its extension says: re-export it")


def _read_image(path: Path) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            img.load()
            mode = img.mode
            arr = np.asarray(img)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
        raise _unreadable(path, err) from None
    if arr.ndim == 2:
        return arr
    if mode not in ("LA", "RGB", "RGBA"):
        raise InputError(f"mask file {path} has image mode {mode}; save masks as grayscale (mode L) 0/255 images")
    if mode in ("LA", "RGBA") and (arr[..., -1] != arr[..., -1].max()).any():
        raise InputError(f"mask file {path} has a non-uniform alpha channel; save the mask as a grayscale "
                         "(mode L) image with 0 = background")
    channels = arr[..., :1] if mode == "LA" else arr[..., :3]
    if (channels != channels[..., :1]).any():
        raise InputError(f"mask file {path} is a colour image (mode {mode}) whose channels differ; save it as a "
                         "grayscale (mode L) 0/255 image or an integer label map")
    return channels[..., 0]


def _read_npy(path: Path) -> np.ndarray:
    with open(path, "rb") as fh:
        if fh.read(len(NPY_MAGIC)) != NPY_MAGIC:
            raise InputError(f"mask file {path} is not a NumPy .npy file (no .npy header); save masks with "
                             "np.save, or use a .png/.nii.gz file")
    try:
        arr: np.ndarray = np.load(path, allow_pickle=False)
        return arr
    except ValueError as err:
        if "allow_pickle" in str(err):
            raise InputError(f"mask file {path} holds Python objects (a pickle); pickles are never loaded: save "
                             "a plain numeric array with np.save(path, mask.astype(np.uint8))") from None
        raise _unreadable(path, err) from None
    except (OSError, EOFError) as err:
        raise _unreadable(path, err) from None


def _read_nifti(path: Path) -> tuple[np.ndarray, tuple[float, ...]]:
    import nibabel
    from nibabel.filebasedimages import ImageFileError

    try:
        img = nibabel.load(str(path))
        if not isinstance(img, nibabel.spatialimages.SpatialImage):
            raise InputError(f"mask file {path}: nibabel reads it as {type(img).__name__}, not an image with voxels")
        arr = np.asanyarray(img.dataobj)
        zooms = tuple(float(z) for z in img.header.get_zooms())
    except (ImageFileError, OSError, EOFError, ValueError, zlib.error) as err:
        raise _unreadable(path, err) from None
    while arr.ndim > 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if arr.ndim > 3:
        raise InputError(f"mask file {path} is a {arr.ndim}D NIfTI of shape {arr.shape}; a mask must be 2D or 3D")
    return arr, zooms[:arr.ndim]


def read_mask_array(path: PathLike) -> Mask:
    """The raw array stored in a mask file (no binarisation), with spacing for NIfTI."""
    path = Path(path)
    kind = _kind(path)
    if not path.is_file():
        raise MissingResourceError(f"mask file not found: {path}; check the path (and the base folder that "
                                   "relative paths are resolved against)")
    if kind == "nifti":
        arr, spacing = _read_nifti(path)
        return Mask(arr, spacing)
    if kind == "npy":
        return Mask(_read_npy(path), None)
    return Mask(_read_image(path), None)


def read_mask(path: PathLike, label: int | None = None, threshold: float = 0.5) -> Mask:
    """A boolean foreground mask from a file, with spacing for NIfTI (None otherwise).

    Values are binarised by `fairmedbench.metrics.segmentation.binarize` (`label=` picks one class of a
    label map). JPEG is lossy, so a JPEG mask without `label` is foreground iff its gray value >= 128.
    """
    path = Path(path)
    raw = read_mask_array(path)
    try:
        if label is None and path.name.lower().endswith(JPEG_SUFFIXES):
            return Mask(raw.array >= JPEG_CUTOFF, raw.spacing)
        return Mask(binarize(raw.array, threshold=threshold, label=label), raw.spacing)
    except InputError as err:
        raise InputError(f"mask file {path}: {err}") from None


@dataclass(frozen=True)
class MaskPairs:
    """Aligned boolean prediction and ground-truth masks, one pair per sample, and spacing per sample."""

    preds: list[np.ndarray]
    gts: list[np.ndarray]
    spacings: list[tuple[float, ...] | None]


def _resolve(value: object, base_dir: Path | None, column: str, index: int) -> Path:
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise InputError(f"{column}[{index}] is {value!r}, not a file path; every sample needs a mask file")
    path = Path(value)
    return path if path.is_absolute() or base_dir is None else base_dir / path


def read_mask_pairs(pred_paths: Sequence[PathLike], gt_paths: Sequence[PathLike],
                    base_dir: PathLike | None = None, pred_label: int | None = None,
                    gt_label: int | None = None, threshold: float = 0.5) -> MaskPairs:
    """Read prediction/ground-truth mask files pairwise (relative paths against `base_dir`), checking shapes.

    Spacing per sample comes from the ground truth (or the prediction when only it has one); NIfTI
    pairs whose spacings disagree are an error.
    """
    pred_paths, gt_paths = list(pred_paths), list(gt_paths)
    if len(pred_paths) != len(gt_paths):
        raise InputError(f"{len(pred_paths)} prediction mask paths but {len(gt_paths)} ground-truth mask paths; "
                         "give one of each per sample")
    base = Path(base_dir) if base_dir is not None else None
    preds, gts, spacings = [], [], []
    for i, (pv, gv) in enumerate(zip(pred_paths, gt_paths)):
        pp, gp = _resolve(pv, base, "pred_paths", i), _resolve(gv, base, "gt_paths", i)
        pred = read_mask(pp, label=pred_label, threshold=threshold)
        gt = read_mask(gp, label=gt_label, threshold=threshold)
        if pred.array.shape != gt.array.shape:
            raise InputError(f"sample {i}: prediction {pp} has shape {pred.array.shape} but ground truth {gp} has "
                             f"shape {gt.array.shape}; they must match pixel for pixel")
        if pred.spacing is not None and gt.spacing is not None and not np.allclose(pred.spacing, gt.spacing,
                                                                                  rtol=1e-4, atol=1e-6):
            raise InputError(f"sample {i}: prediction {pp} has voxel spacing {pred.spacing} but ground truth {gp} "
                             f"has {gt.spacing}; resample the prediction onto the ground-truth grid")
        preds.append(pred.array)
        gts.append(gt.array)
        spacings.append(gt.spacing if gt.spacing is not None else pred.spacing)
    return MaskPairs(preds, gts, spacings)
