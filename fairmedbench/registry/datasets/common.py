"""Helpers shared by the readers of official layouts (imported lazily, inside reader functions)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairmedbench.errors import MissingResourceError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


def keep_rows_with_files(
    df: pd.DataFrame, path_col: str, what: str, keep_missing: bool, access: str, root: Path
) -> tuple[pd.DataFrame, dict[str, int], list[str]]:
    """Drop rows whose file (path column, NA when absent) is missing (a partial release), recording how many; none
    present is an error.

    Returns (table, counts, notes)."""
    present = df[path_col].notna().to_numpy(dtype=bool)
    n_missing = int((~present).sum())
    counts = {f"rows_without_{what}": n_missing}
    notes: list[str] = []
    if n_missing and keep_missing:
        notes.append(f"{n_missing} of {len(df)} metadata rows have no {what} file under {root}; kept (metadata only)")
        return df, counts, notes
    if n_missing:
        if not present.any():
            raise MissingResourceError(
                f"none of the {len(df)} {what} files named in the metadata was found under {root}. "
                f"Download them (request access: {access}), or pass keep_missing_images=True for metadata only"
            )
        notes.append(
            f"partial release: {int(present.sum())} of {len(df)} metadata rows have their {what} file under "
            f"{root}; the {n_missing} others are left out"
        )
    return df.loc[present].copy(), counts, notes


def find_in(index: dict[str, Path], names: Iterable[str]) -> list[str | None]:
    """Paths (as str) of `names` in a file index, None where absent."""
    return [str(index[n]) if n in index else None for n in names]


SPLIT_DIRS = {"train": ("Training", "training", "train"), "val": ("Validation", "validation", "val"),
              "test": ("Test", "Testing", "testing", "test")}


def npz_files(root: Path, flat_dirs: Iterable[str] = ("data",)) -> list[tuple[str | None, Path]]:
    """(official split or None, file) for every .npz under the provider's split folders (Training/,
    Validation/, Test/), or else under a flat folder (data/) or the root itself."""
    found: list[tuple[str | None, Path]] = []
    for split, names in SPLIT_DIRS.items():
        for n in names:
            if (root / n).is_dir():
                found += [(split, p) for p in sorted((root / n).glob("*.npz"))]
                break
    if found:
        return found
    for d in (*flat_dirs, "."):
        files = sorted((root / d).glob("*.npz"))
        if files:
            return [(None, p) for p in files]
    return []


def read_npz_table(files, fields: dict[str, tuple[str, ...]], required: Iterable[str], image_keys: tuple[str, ...],
                   mask_keys: tuple[str, ...] = (), skip_bad: bool = False) -> tuple[pd.DataFrame, dict[str, int]]:
    """One row per .npz: scalar fields (column -> candidate keys), the image key present, the mask key.

    A file lacking a required field or image is an InputError naming it, or skipped and counted."""
    import numpy as np
    import pandas as pd

    from fairmedbench.errors import InputError

    rows, skipped = [], 0
    required = set(required)
    for split, path in files:
        try:
            with np.load(path, allow_pickle=False) as z:
                keys = set(z.files)
                row = {"image": str(path), "split": split, "file": path.name}
                img_key = next((k for k in image_keys if k in keys), None)
                if img_key is None:
                    raise InputError(f"{path}: no image array (looked for {list(image_keys)}; has {sorted(keys)})")
                row["image_key"] = img_key
                if mask_keys:
                    row["mask_key"] = next((k for k in mask_keys if k in keys), None)
                    row["mask"] = str(path) if row["mask_key"] else None
                for col, cands in fields.items():
                    key = next((k for k in cands if k in keys), None)
                    if key is None:
                        if col in required:
                            raise InputError(f"{path}: missing field {cands[0]!r} (has {sorted(keys)})")
                        row[col] = None
                        continue
                    val = z[key]
                    row[col] = val.item() if val.size == 1 else None
                    if isinstance(row[col], bytes):
                        row[col] = row[col].decode("utf-8", "replace")
        except InputError:
            if not skip_bad:
                raise
            skipped += 1
            continue
        except (OSError, ValueError, EOFError) as exc:
            if not skip_bad:
                raise InputError(f"{path} could not be read as .npz ({exc}); replace it or pass "
                                 "skip_bad=True") from None
            skipped += 1
            continue
        rows.append(row)
    return pd.DataFrame(rows), {"skipped_bad_npz": skipped} if skipped else {}


def age_in_years(values: Iterable, name: str = "age") -> tuple[pd.Series, list[str]]:
    """Numeric ages in years; a column whose median exceeds 150 is taken to be in days (converted,
    with a note). Returns (series, notes)."""
    import pandas as pd

    ages = pd.to_numeric(pd.Series(values).astype(str).str.extract(r"(-?\d+(?:\.\d+)?)", expand=False), errors="coerce")
    ages.index = getattr(values, "index", ages.index)
    notes = []
    med = ages.median()
    if pd.notna(med) and med > 150:
        ages = ages / 365.25
        notes.append(f"{name} values look like days (median {med:.0f}); converted to years")
    return ages, notes


def volume_image_fn(window: tuple[float, float] | None = None) -> Callable[[Mapping[str, Any]], np.ndarray]:
    """Image decoder for 3D rows: the `image` volume as uint8 (D, H, W) (CT window, or percentiles)."""
    def load(row: Mapping[str, Any]) -> np.ndarray:
        from fairmedbench.registry.datasets.io import read_volume_dhw, volume_to_uint8

        return volume_to_uint8(read_volume_dhw(row["image"])[0], window)
    return load


def label_mask_fn(
    classes: dict[str, tuple[int, ...]], default: str, loader: Callable[[Mapping[str, Any]], np.ndarray] | None = None
) -> Callable[[Mapping[str, Any], str | None], np.ndarray]:
    """Mask decoder for label maps: target class -> the label values it covers; `loader(row)` gives
    the label map (default: the row's `mask` file as a 3D volume (D, H, W))."""
    def load(row: Mapping[str, Any], target: str | None) -> np.ndarray:
        import numpy as np

        if loader is not None:
            labels = loader(row)
        else:
            from fairmedbench.registry.datasets.io import read_volume_dhw

            if row.get("mask") is None:
                raise MissingResourceError(f"sample {row['sample_id']} has no mask file")
            labels = read_volume_dhw(row["mask"])[0]
        return np.isin(labels, classes[target or default])
    return load
