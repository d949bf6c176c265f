"""Decoding of images, masks and volumes (PNG/JPEG/TIFF, .npz, NIfTI via nibabel, MetaImage),
and small helpers readers share (reading a CSV, checking columns, indexing image folders)."""

from __future__ import annotations

import contextlib
import contextvars
import os
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.errors import InputError, MissingResourceError

if TYPE_CHECKING:
    import pandas as pd
    from nibabel.spatialimages import SpatialImage

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".gif")

_READS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("fmb_metadata_reads", default=None)


def note_read(path: str | os.PathLike) -> None:
    """Record a metadata file a reader read (tables, split lists, clinical notes): the data fingerprint hashes it."""
    reads = _READS.get()
    if reads is not None:
        reads.append(str(path))


@contextlib.contextmanager
def recording_reads() -> Iterator[list[str]]:
    """Collect, in order, the metadata files `note_read` records while a reader runs."""
    reads: list[str] = []
    token = _READS.set(reads)
    try:
        yield reads
    finally:
        _READS.reset(token)


def to_uint8(arr: np.ndarray) -> np.ndarray:
    """uint8 image: uint8 kept, other integer/float ranges min-max scaled to 0..255."""
    a = np.asarray(arr)
    if a.dtype == np.uint8:
        return a
    if a.dtype == bool:
        return a.astype(np.uint8) * 255
    a = a.astype(np.float32)
    finite = np.isfinite(a)
    if not finite.any():
        return np.zeros(a.shape, np.uint8)
    lo, hi = float(a[finite].min()), float(a[finite].max())
    if hi <= lo:
        return np.zeros(a.shape, np.uint8)
    out = (np.where(finite, a, lo) - lo) * (255.0 / (hi - lo))
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)


def _decode_pil(path: Path) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im.load()
            if im.mode in ("RGB", "L"):
                arr = np.asarray(im)
            elif im.mode in ("RGBA", "P", "CMYK", "YCbCr", "LA"):
                arr = np.asarray(im.convert("L" if im.mode == "LA" else "RGB"))
            else:  # I;16, I, F: wide grayscale
                arr = to_uint8(np.asarray(im))
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise InputError(f"image {path} could not be decoded ({exc}); replace the file or pass skip_bad=True") from None
    return arr


def _npz_array(path: Path, key: str | None) -> np.ndarray:
    try:
        with np.load(path, allow_pickle=False) as z:
            if key is None:
                if len(z.files) != 1:
                    raise InputError(f"{path}: holds arrays {z.files}; the reader must name which one")
                key = z.files[0]
            if key not in z.files:
                raise InputError(f"{path}: no array {key!r} (has {', '.join(z.files)})")
            return np.asarray(z[key])
    except InputError:
        raise
    except (OSError, ValueError, zlib.error, EOFError) as exc:
        raise InputError(f"{path} could not be read as .npz ({exc}); replace the file or pass skip_bad=True") from None


def _check_exists(path: Path, what: str) -> None:
    if not path.is_file():
        raise MissingResourceError(f"{what} {path} not found")


def decode_image(path: str | os.PathLike, key: str | None = None) -> np.ndarray:
    """Decode a 2D image to uint8 (H, W) or (H, W, 3)."""
    p = Path(path)
    _check_exists(p, "image")
    if p.suffix.lower() == ".npz":
        arr = _npz_array(p, key)
        if arr.ndim == 3 and arr.shape[0] in (1, 3) and arr.shape[-1] not in (1, 3):
            arr = np.moveaxis(arr, 0, -1)
        if arr.ndim == 3 and arr.shape[-1] == 1:
            arr = arr[..., 0]
        if arr.ndim not in (2, 3):
            raise InputError(f"{p}: array {key!r} has shape {arr.shape}; expected a 2D image")
        return to_uint8(arr)
    if p.suffix.lower() == ".npy":
        return to_uint8(np.load(p, allow_pickle=False))
    return _decode_pil(p)


def decode_label_map(path: str | os.PathLike, key: str | None = None) -> np.ndarray:
    """Decode a mask file to its raw integer label map (H, W) (RGB masks reduced to channel max)."""
    p = Path(path)
    _check_exists(p, "mask")
    if p.suffix.lower() == ".npz":
        arr = _npz_array(p, key)
    elif p.suffix.lower() in (".nii", ".gz", ".mha", ".mhd"):
        arr = read_volume(p)[0]
    else:
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(p) as im:
                arr = np.asarray(im)
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
            raise InputError(f"mask {p} could not be decoded ({exc}); replace the file or pass skip_bad=True") from None
        if arr.ndim == 3:
            arr = arr[..., :3].max(axis=-1)
    return arr


def _metaimage_header(path: Path) -> tuple[dict[str, str], int]:
    """Parse a MetaImage header line by line: (fields, byte offset where local data starts)."""
    header: dict[str, str] = {}
    with path.open("rb") as fh:
        for line in iter(fh.readline, b""):
            text = line.decode("latin-1").strip()
            if "=" in text:
                k, v = (part.strip() for part in text.split("=", 1))
                header[k] = v
                if k == "ElementDataFile":
                    return header, fh.tell()
    raise InputError(f"{path}: MetaImage header has no ElementDataFile line")


def _metaimage_spacing(header: dict[str, str], ndim: int) -> tuple[float, ...]:
    return tuple(float(x) for x in header.get("ElementSpacing", " ".join(["1"] * ndim)).split())


def read_metaimage(path: Path) -> tuple[np.ndarray, tuple[float, ...]]:
    """Read a MetaImage (.mha with local data, or .mhd + raw file); returns (array z-y-x, spacing x-y-z)."""
    types = {
        "MET_UCHAR": np.uint8, "MET_CHAR": np.int8, "MET_USHORT": np.uint16, "MET_SHORT": np.int16,
        "MET_UINT": np.uint32, "MET_INT": np.int32, "MET_FLOAT": np.float32, "MET_DOUBLE": np.float64,
    }
    header, pos = _metaimage_header(path)
    try:
        dims = [int(x) for x in header["DimSize"].split()]
        dtype = np.dtype(types[header["ElementType"]])
    except KeyError as exc:
        raise InputError(f"{path}: MetaImage header lacks or has an unknown {exc}") from None
    if header.get("BinaryDataByteOrderMSB", "False").lower() == "true":
        dtype = dtype.newbyteorder(">")
    if header["ElementDataFile"] == "LOCAL":
        with path.open("rb") as fh:
            fh.seek(pos)
            data = fh.read()
    else:
        data = (path.parent / header["ElementDataFile"]).read_bytes()
    if header.get("CompressedData", "False").lower() == "true":
        data = zlib.decompress(data)
    n = int(np.prod(dims)) * dtype.itemsize
    if len(data) < n:
        raise InputError(f"{path}: MetaImage data has {len(data)} bytes, header needs {n}")
    arr = np.frombuffer(data[:n], dtype=dtype).reshape(dims[::-1])
    return arr, _metaimage_spacing(header, len(dims))


def _load_spatial(p: Path) -> SpatialImage:
    """nibabel's image of a volume file (its header has the voxel spacing); a non-spatial file is an error."""
    import nibabel as nib

    img = nib.load(str(p))
    if not isinstance(img, nib.spatialimages.SpatialImage):
        raise InputError(f"volume {p}: nibabel reads it as {type(img).__name__}, not a spatial image")
    return img


def read_spacing_dhw(path: str | os.PathLike) -> tuple[float, ...]:
    """Voxel spacing (mm) of a volume in (D, H, W) order, from its header only."""
    p = Path(path)
    _check_exists(p, "volume")
    if p.name.lower().endswith((".mha", ".mhd")):
        header = _metaimage_header(p)[0]
        return tuple(reversed(_metaimage_spacing(header, 3)[:3]))
    try:
        zooms = _load_spatial(p).header.get_zooms()
    except Exception as exc:  # nibabel raises many types for corrupt files
        raise InputError(f"volume {p} could not be read ({type(exc).__name__}: {exc})") from None
    return tuple(float(z) for z in reversed(zooms[:3]))


def read_volume(path: str | os.PathLike) -> tuple[np.ndarray, tuple[float, ...]]:
    """Read a 3D volume (NIfTI via nibabel, or MetaImage); returns (array, voxel spacing in mm).

    NIfTI arrays keep nibabel's axis order (x, y, z); MetaImage arrays are (z, y, x)."""
    p = Path(path)
    _check_exists(p, "volume")
    name = p.name.lower()
    if name.endswith((".mha", ".mhd")):
        return read_metaimage(p)
    try:
        img = _load_spatial(p)
        arr = np.asarray(img.dataobj)
        spacing = tuple(float(z) for z in img.header.get_zooms()[: arr.ndim])
    except Exception as exc:  # nibabel raises many types for corrupt files
        raise InputError(f"volume {p} could not be read ({type(exc).__name__}: {exc}); replace the file or pass "
                         "skip_bad=True") from None
    return arr, spacing


def read_volume_dhw(path: str | os.PathLike) -> tuple[np.ndarray, tuple[float, ...]]:
    """A 3D volume as (depth, height, width) with its spacing in the same order (mm)."""
    p = Path(path)
    arr, spacing = read_volume(p)
    if arr.ndim != 3:
        raise InputError(f"volume {p} has {arr.ndim} dimensions (shape {arr.shape}); expected 3")
    if p.name.lower().endswith((".mha", ".mhd")):
        return arr, tuple(reversed(spacing[:3]))
    return np.ascontiguousarray(arr.transpose(2, 1, 0)), tuple(reversed(spacing[:3]))


def volume_to_uint8(arr: np.ndarray, window: tuple[float, float] | None = None) -> np.ndarray:
    """uint8 volume: clipped to an intensity window (e.g. CT HU), else to the 0.5-99.5 percentiles."""
    a = np.asarray(arr, dtype=np.float32)
    lo, hi = window if window is not None else tuple(np.percentile(a, [0.5, 99.5]))
    if hi <= lo:
        return np.zeros(a.shape, np.uint8)
    return np.clip((a - lo) * (255.0 / (hi - lo)) + 0.5, 0, 255).astype(np.uint8)


def sample_slices(volume: np.ndarray, n: int) -> np.ndarray:
    """`n` evenly spaced slices along the first axis (2.5D sampling), centred in each interval."""
    depth = volume.shape[0]
    if n <= 0:
        raise InputError(f"number of slices must be positive, got {n}")
    idx = np.minimum(((np.arange(n) + 0.5) * depth / n).astype(int), depth - 1)
    return volume[idx]


def read_table(path: Path, what: str, access: str = "", **kwargs: Any) -> pd.DataFrame:
    """Read a CSV/TSV/XLSX metadata file, or MissingResourceError naming it and where to get it."""
    import pandas as pd

    if not path.is_file():
        where = f" Request access: {access}" if access else ""
        raise MissingResourceError(f"{what} {path} not found.{where}")
    note_read(path)
    try:
        if path.suffix.lower() in (".xlsx", ".xls"):
            return pd.read_excel(path, **kwargs)
        return pd.read_csv(path, **kwargs)
    except ImportError as exc:
        raise MissingResourceError(f"reading {path} needs an extra package: {exc}") from None
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise InputError(f"{what} {path} could not be parsed: {exc}") from None


def require_columns(df, columns: Iterable[str], source: str | os.PathLike) -> None:
    """InputError naming the file and every missing column."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise InputError(
            f"{source}: missing column(s) {missing}; found {list(df.columns)[:20]}. "
            "Is this the provider's original file?"
        )


def first_existing(root: Path, names: Sequence[str], what: str, access: str = "") -> Path:
    """The first of root/name that exists, or MissingResourceError listing all tried."""
    for n in names:
        if (root / n).exists():
            return root / n
    where = f" Request access: {access}" if access else ""
    tried = ", ".join(str(root / n) for n in names)
    raise MissingResourceError(f"{what} not found (looked for {tried}).{where}")


def index_files(folders: Iterable[Path], suffixes: Sequence[str] = IMAGE_SUFFIXES) -> dict[str, Path]:
    """Map file name -> path for all files with `suffixes` under `folders` (recursive)."""
    out: dict[str, Path] = {}
    for folder in folders:
        if not folder.is_dir():
            continue
        for dirpath, _, files in os.walk(folder):
            for f in files:
                if f.lower().endswith(tuple(suffixes)):
                    out.setdefault(f, Path(dirpath) / f)
    return out
