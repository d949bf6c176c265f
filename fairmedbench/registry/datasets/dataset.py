"""The Dataset object every reader produces: a sample table with mapped attribute groups, lazy image
and mask decoding, splits and fingerprints; and `load_dataset`, the one entry point."""

from __future__ import annotations

import hashlib
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fairmedbench.engine.splits import Split, check_nonempty, official_split, patient_split
from fairmedbench.errors import InputError, MissingResourceError
from fairmedbench.registry.datasets.card import DATASETS, DatasetCard
from fairmedbench.registry.datasets.io import (
    decode_image,
    decode_label_map,
    read_spacing_dhw,
    recording_reads,
    sample_slices,
    to_uint8,
)

UNKNOWN_POLICIES = ("exclude", "group", "drop")
#: columns that pick one image inside a file holding several (an .npz key, an HDF5 frame): part of a sample's content
LOCATOR_COLUMNS = ("image_key", "frame_index")


@dataclass
class ReadResult:
    """What a reader returns: the raw sample table and how to decode one sample.

    `samples` has sample_id, patient_id, label column(s), raw attribute columns, `image` (a path) and
    optionally `image_key`, `mask`, `mask_key`, `split` (the provider's split). `image_fn(row)` and
    `mask_fn(row, target)` replace the default decoders where a layout needs it."""

    samples: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    image_fn: Callable[[Mapping[str, Any]], np.ndarray] | None = None
    mask_fn: Callable[[Mapping[str, Any], str | None], np.ndarray] | None = None
    source: str = ""
    # what the pixels are made from when the table does not say it (a generator's settings): fingerprinted
    content: str = ""


def _default_image(row: Mapping[str, Any]) -> np.ndarray:
    return decode_image(row["image"], row.get("image_key"))


def _default_mask(row: Mapping[str, Any], target: str | None) -> np.ndarray:
    value = row.get("mask")
    if value is None or (isinstance(value, float) and np.isnan(value)):
        raise MissingResourceError(f"sample {row['sample_id']} has no mask file")
    return decode_label_map(value, row.get("mask_key")) > 0


class Dataset:
    """A loaded dataset: `.card`, `.samples` (one row per sample), lazy `.load_image(i)`/`.load_mask(i)`,
    `.split(...)`, `.fingerprint`, and `.report` (rows read, skipped and excluded, with reasons)."""

    def __init__(
        self,
        card: DatasetCard,
        result: ReadResult,
        root: Path | None = None,
        unknown: str = "exclude",
        skip_bad: bool = False,
        metadata_files: Sequence[str] = (),
    ) -> None:
        if unknown not in UNKNOWN_POLICIES:
            raise InputError(f"unknown={unknown!r}: choose one of {', '.join(UNKNOWN_POLICIES)}")
        self.card = card
        self.root = root
        self.skip_bad = skip_bad
        self._image_fn = result.image_fn or _default_image
        self._mask_fn = result.mask_fn or _default_mask
        self._content = result.content
        self.metadata_files = list(dict.fromkeys(str(p) for p in metadata_files))  # tables, lists the reader read
        source = result.source or card.name
        self.report: dict[str, Any] = {
            "source": source,
            "rows_read": int(len(result.samples)),
            **{k: int(v) for k, v in result.counts.items()},
            "skipped": {},
            "excluded": {},
            "notes": list(result.notes),
            "unknown_policy": unknown,
        }
        df = result.samples.reset_index(drop=True)
        for col in ("sample_id", "patient_id"):
            if col not in df.columns:
                raise InputError(f"{source}: reader produced no {col!r} column")
        df["sample_id"] = df["sample_id"].astype(str)
        df["patient_id"] = df["patient_id"].astype(str)
        dup = df["sample_id"][df["sample_id"].duplicated()]
        if len(dup):
            times = int((df["sample_id"] == dup.iloc[0]).sum())
            raise InputError(f"{source}: sample id {dup.iloc[0]!r} occurs {times} times")
        df = self._map_attributes(df, source, unknown)
        if len(df) == 0:
            raise InputError(f"{source}: no samples left after reading ({self.report}); check the data root")
        self.samples = df.reset_index(drop=True)
        self._fingerprint: str | None = None

    # -- attributes -----------------------------------------------------------------------------
    def _map_attributes(self, df: pd.DataFrame, source: str, unknown: str) -> pd.DataFrame:
        drop = np.zeros(len(df), dtype=bool)
        for spec in self.card.attributes:
            if spec.column not in df.columns:
                raise InputError(f"{source}: missing attribute column {spec.column!r} (attribute {spec.name!r})")
            raw = df[spec.column]
            codes, uniques = pd.factorize(raw, use_na_sentinel=True)
            kinds, groups = zip(*(spec.map_value(u) for u in uniques)) if len(uniques) else ((), ())
            kinds_arr = np.asarray(list(kinds) + ["unknown"], dtype=object)[codes]  # -1 (NaN) -> unknown
            group_arr = np.asarray(list(groups) + [None], dtype=object)[codes]
            unmapped = kinds_arr == "unmapped"
            if unmapped.any():
                counts = raw[unmapped].astype(str).value_counts()
                desc = ", ".join(f"{v!r} ({n} rows)" for v, n in counts.items())
                if not self.skip_bad:
                    raise InputError(
                        f"{source}: column {spec.column!r} has value(s) {desc} that the {spec.name!r} mapping "
                        f"of dataset {self.card.name!r} does not cover (known: {self._known(spec)}); "
                        "fix the data, or pass skip_bad=True to skip these rows"
                    )
                for v, n in counts.items():  # keyed by column: attributes sharing a column count rows once
                    self.report["skipped"][f"unmapped {spec.column}={v}"] = int(n)
                drop |= unmapped
            unk = kinds_arr == "unknown"
            if unk.any():
                raw_unk = raw[unk].astype(object).where(raw[unk].notna(), "<missing>").astype(str)
                counts = {str(k): int(v) for k, v in raw_unk.value_counts().items()}
                if unknown == "group":
                    group_arr[unk] = "unknown"
                    self.report["notes"].append(f"{spec.name}: {int(unk.sum())} rows with unrecorded value kept as "
                                                f"group 'unknown' {counts}")
                elif unknown == "drop":
                    drop |= unk
                    for v, n in counts.items():
                        self.report["skipped"][f"unknown {spec.column}={v}"] = n
                else:
                    self.report["excluded"][spec.name] = counts
            df[spec.group_column] = pd.Series(group_arr, index=df.index, dtype=object)
        if drop.any():
            df = df.loc[~drop]
        self.report["rows_loaded"] = int(len(df))
        return df

    @staticmethod
    def _known(spec) -> str:
        if spec.mapping is not None:
            unknown = f"; unknown: {list(spec.unknown_values)}" if spec.unknown_values else ""
            return ", ".join(repr(k) for k in spec.mapping) + unknown
        return f"numeric bins {list(spec.bins)}"

    # -- basic access ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.samples)

    def __repr__(self) -> str:
        return f"Dataset({self.card.name!r}, n={len(self)}, root={str(self.root) if self.root else None!r})"

    def row(self, i: int) -> dict[str, Any]:
        """The sample table row at position `i`, as a dict."""
        if not 0 <= int(i) < len(self.samples):
            raise InputError(f"sample position {i} out of range (dataset {self.card.name!r} has {len(self)} samples)")
        return self.samples.iloc[int(i)].to_dict()

    def load_image(self, i: int) -> np.ndarray:
        """Decode sample `i`: uint8 (H, W) or (H, W, 3); for 3D datasets uint8 (D, H, W)."""
        img = self._image_fn(self.row(i))
        return img if img.dtype == np.uint8 else to_uint8(img)

    def load_mask(self, i: int, target: str | None = None) -> np.ndarray:
        """Decode the mask of sample `i` as bool with the image's spatial shape; `target` picks one
        of the card's mask classes (default: the first)."""
        if "segmentation" not in self.card.tasks:
            raise InputError(f"dataset {self.card.name!r} has no segmentation masks")
        if target is not None and self.card.mask_classes and target not in self.card.mask_classes:
            raise InputError(f"mask target {target!r} not in {list(self.card.mask_classes)} for {self.card.name!r}")
        row = self.row(i)
        mask = np.asarray(self._mask_fn(row, target)).astype(bool)
        shape = self.image_shape(i)
        if tuple(mask.shape) != tuple(shape):
            raise InputError(
                f"mask of sample {row['sample_id']} ({row.get('mask', 'mask')}) has shape {mask.shape}, "
                f"its image ({row.get('image')}) {shape}; re-export the mask at the image size or pass skip_bad=True"
            )
        return mask

    def image_shape(self, i: int) -> tuple[int, ...]:
        """Spatial shape of sample `i` (reads the image header only where the format allows)."""
        row = self.row(i)
        path = row.get("image")
        if self._image_fn is _default_image and isinstance(path, (str, os.PathLike)) and Path(path).suffix.lower() in (
            ".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff",
        ):
            from PIL import Image, UnidentifiedImageError

            try:
                with Image.open(path) as im:
                    return (im.size[1], im.size[0])
            except (UnidentifiedImageError, OSError) as exc:
                raise InputError(f"image {path} could not be decoded ({exc}); replace it or pass "
                                 "skip_bad=True") from None
            except FileNotFoundError:
                raise MissingResourceError(f"image {path} not found") from None
        shape = self.load_image(i).shape
        return tuple(shape[:-1]) if (self.card.dim == 2 and len(shape) == 3) else tuple(shape)

    def spacing(self, i: int) -> tuple[float, ...]:
        """Voxel spacing (mm, in (D, H, W) order) of a 3D sample as recorded in its file."""
        if self.card.dim != 3:
            raise InputError(f"dataset {self.card.name!r} is 2D: no voxel spacing")
        row = self.row(i)
        if isinstance(row.get("spacing"), (tuple, list)):
            return tuple(float(v) for v in row["spacing"])
        return read_spacing_dhw(row["image"])

    def load_slices(self, i: int, n: int = 16) -> np.ndarray:
        """2.5D sampling of a 3D sample: `n` evenly spaced slices, uint8 (n, H, W)."""
        if self.card.dim != 3:
            raise InputError(f"dataset {self.card.name!r} is 2D: no slices to sample")
        return sample_slices(self.load_image(i), n)

    def verify(self) -> dict[str, int]:
        """Decode every image (and mask); with skip_bad drop the failures and count them, else raise."""
        bad: list[int] = []
        reasons: dict[str, int] = {}
        files: list[str] = []
        has_masks = "segmentation" in self.card.tasks
        for i in range(len(self)):
            try:
                self.load_image(i)
                if has_masks:
                    self.load_mask(i)
            except (InputError, MissingResourceError) as exc:
                if not self.skip_bad:
                    raise
                bad.append(i)
                row = self.row(i)
                files.append(str(row.get("image") or row["sample_id"]))
                reason = "mask shape != image shape" if "shape" in str(exc) else (
                    "file not found" if isinstance(exc, MissingResourceError) else "decode failure")
                reasons[reason] = reasons.get(reason, 0) + 1
        if bad:
            self.samples = self.samples.drop(index=self.samples.index[bad]).reset_index(drop=True)
            for k, v in reasons.items():
                self.report["skipped"][k] = self.report["skipped"].get(k, 0) + v
            self.report["rows_loaded"] = int(len(self.samples))
            shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
            self.report["notes"].append(f"skipped {len(files)} unreadable sample(s): {shown}")
            self._fingerprint = None
            if len(self.samples) == 0:
                raise InputError(f"{self.card.name}: every sample failed to decode ({reasons})")
        return reasons

    def add_crossed(self, names: Sequence[str]) -> None:
        """Add the group column attr:<name> of each crossed attribute among `names` ('sex*age'): a sample's cell
        joins its parts' groups ('female|>=60'; a binned part by its bins), missing where any part is missing. The
        fingerprint is unchanged: it covers the parts' columns, which determine the cells."""
        for name in names:
            parts = self.card.attribute_parts(name)
            if len(parts) < 2:
                continue
            columns = [self.samples[p.group_column].to_numpy(dtype=object) for p in parts]
            missing = np.zeros(len(self.samples), dtype=bool)
            for col in columns:
                missing |= pd.isna(col)
            cells = np.array(["|".join(str(c) for c in row) for row in zip(*columns)] + [""], dtype=object)[:-1]
            cells[missing] = None
            self.samples[f"attr:{name}"] = pd.Series(cells, index=self.samples.index, dtype=object)

    # -- groups, fingerprint, splits ------------------------------------------------------------
    def group_counts(self, positions: Sequence[int] | None = None) -> dict[str, dict[str, int]]:
        """Samples per group of each attribute (excluded = unknown raw value, not in any group)."""
        df = self.samples if positions is None else self.samples.iloc[np.asarray(positions)]
        out: dict[str, dict[str, int]] = {}
        for spec in self.card.attributes:
            col = df[spec.group_column]
            counts = {g: int((col == g).sum()) for g in spec.groups}
            extra = sorted(set(col.dropna()) - set(spec.groups))
            counts.update({g: int((col == g).sum()) for g in extra})
            n_excl = int(col.isna().sum())
            if n_excl:
                counts["excluded"] = n_excl
            out[spec.name] = counts
        return out

    @property
    def fingerprint(self) -> str:
        """sha256 over card name/version, the reader's `content` identity (if any) and the sorted
        (sample id, patient, labels, groups) rows."""
        if self._fingerprint is None:
            cols = ["sample_id", "patient_id"]
            cols += [c for c in (self.card.label_column, *self.card.extra_label_columns) if c and c in self.samples]
            cols += [s.group_column for s in self.card.attributes]
            table = self.samples[cols].sort_values("sample_id").astype(str)
            h = hashlib.sha256(f"{self.card.name}|{self.card.version}|{'|'.join(cols)}\n".encode())
            if self._content:
                h.update(f"content|{self._content}\n".encode())
            h.update(table.to_csv(index=False, header=False).encode())
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    def data_files(self) -> list[tuple[str, str]]:
        """(kind, path) of every file the samples are read from: metadata the reader read, then each sample's image
        and mask (each path once); empty for generated datasets."""
        out = [("metadata", p) for p in self.metadata_files]
        seen = set(self.metadata_files)
        for col in ("image", "mask"):
            if col not in self.samples.columns:
                continue
            for value in self.samples[col].tolist():
                if isinstance(value, (str, os.PathLike)) and str(value) not in seen:
                    seen.add(str(value))
                    out.append((col, str(value)))
        return out

    def content_keys(self, positions: Sequence[int] | np.ndarray, with_card: bool = True) -> list[str]:
        """What the pixels of each sample at `positions` are made of, as a hex digest: its image file's bytes (with
        the card and the locator inside the file) for file-backed samples, else the decoded pixels themselves
        (generated samples: pixel-identical images share a key). Keys the feature cache; `with_card=False` leaves
        the card out, so one file read through two cards shares a key (overlap checks between datasets)."""
        from fairmedbench.engine.content import file_digests, hash_bytes

        rows = [self.row(int(i)) for i in positions]
        paths = [str(r["image"]) for r in rows if isinstance(r.get("image"), (str, os.PathLike))]
        try:
            digests = file_digests(paths)
        except FileNotFoundError as exc:
            raise MissingResourceError(f"image {exc.filename} not found (dataset {self.card.name!r})") from None
        keys = []
        for i, r in zip(positions, rows):
            path = r.get("image")
            if isinstance(path, (str, os.PathLike)):
                where = "|".join(f"{c}={r[c]}" for c in LOCATOR_COLUMNS if c in r and r[c] is not None)
                card = f"{self.card.name}|{self.card.version}|{self._content}|" if with_card else ""
                text = f"file|{card}{digests[str(path)]}|{where}"
                keys.append(hash_bytes(text.encode()))
            else:
                img = np.ascontiguousarray(self.load_image(int(i)))
                keys.append(hash_bytes(f"pixels|{img.dtype}|{img.shape}|".encode() + img.tobytes()))
        return keys

    def strata(self, attribute: str | None = None) -> np.ndarray:
        """Stratum of each sample: '<label>|<group>' (label only if no attribute, group only if no label)."""
        parts = []
        lab = self.card.label_column
        if lab and lab in self.samples:
            parts.append(self.samples[lab].astype(str).to_numpy())
        attr = (attribute or self.card.stratify_attribute
                or (self.card.attributes[0].name if self.card.attributes else None))
        if attr:
            col = self.samples[self.card.attribute(attr).group_column]
            parts.append(col.astype(object).where(col.notna(), "<excluded>").astype(str).to_numpy())
        if not parts:
            return np.full(len(self.samples), "", dtype=object)
        out = parts[0].astype(object)
        for p in parts[1:]:
            out = out + "|" + p
        return out

    def split(
        self,
        policy: str | None = None,
        seed: int = 0,
        fractions: Sequence[float] | None = None,
        attribute: str | None = None,
        val_fraction: float = 0.1,
    ) -> Split:
        """A train/val/test split: policy 'official' (the provider's, val carved from train when it
        has none) or 'patient' (patient-level, stratified by label x attribute); seeded. Without a
        policy the card's default is used, or 'patient' when the copy at hand lacks the official
        split files (the split's policy name then says 'patient')."""
        if policy is None:
            policy = self.card.split_policy
            if policy == "official" and "split" not in self.samples:
                policy = "patient"
        sids = self.samples["sample_id"].to_numpy()
        pids = self.samples["patient_id"].to_numpy()
        strata = self.strata(attribute)
        if policy == "official":
            if "split" not in self.samples:
                raise InputError(f"dataset {self.card.name!r} has no official split; use policy='patient'")
            split = official_split(sids, pids, self.samples["split"].to_numpy(), strata, val_fraction, seed,
                                   self.card.name, self.fingerprint)
        elif policy == "patient":
            split = patient_split(sids, pids, strata, fractions or self.card.split_fractions, seed,
                                  self.card.name, self.fingerprint)
        else:
            raise InputError(f"split policy {policy!r} unknown; use 'official' or 'patient'")
        check_nonempty(split, self.card.name)
        return split

    def apply_split(self, split: Split) -> Split:
        """Bind an imported split to this dataset (positions); fails if it names absent samples."""
        if split.dataset and split.dataset != self.card.name:
            raise InputError(f"split was made for dataset {split.dataset!r}, not {self.card.name!r}")
        bound = split.bind(self.samples["sample_id"].tolist())
        check_nonempty(bound, self.card.name)
        return bound


def resolve_root(card: DatasetCard, data_root: str | os.PathLike | None = None) -> Path:
    """The dataset's root folder: argument, then FMB_DATA_<NAME>, then FMB_DATA_ROOT/<name>."""
    candidates = card.root_candidates(data_root)
    for _, path in candidates:
        if path.is_dir():
            return path
    tried = "; ".join(f"{src}: {p} (not a folder)" for src, p in candidates) or "no location given"
    raise MissingResourceError(
        f"data for dataset {card.name!r} not found ({tried}). Pass --data-root, or set {card.env_var} "
        f"or FMB_DATA_ROOT (which must contain {card.name}/). Request access: {card.access or 'see the card'}"
    )


def load_dataset(
    name: str,
    data_root: str | os.PathLike | None = None,
    unknown: str = "exclude",
    skip_bad: bool = False,
    verify: bool | None = None,
    **options: Any,
) -> Dataset:
    """Load a registered dataset from its official layout (or generate a built-in synthetic one).

    unknown: what to do with attribute values the provider marks as not recorded — 'exclude' (no
    group, counted in report['excluded']), 'group' (own group 'unknown') or 'drop' (row removed).
    skip_bad: skip rows with unmapped attribute values, missing or undecodable images and mis-shaped masks,
    counting them in report['skipped'] (file names in report['notes']), instead of raising.
    verify: decode every image (and mask) now; default: when skip_bad is set, so that a bad file is skipped
    before any work rather than failing it later (without skip_bad the first bad file's decode is the error)."""
    card = DATASETS.get(name)
    params = inspect.signature(card.reader).parameters
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    allowed = [p for p in params
               if p not in ("root", "skip_bad") and params[p].kind is not inspect.Parameter.VAR_KEYWORD]
    bad = [k for k in options if k not in allowed]
    if bad and not accepts_any:
        raise InputError(f"dataset {name!r} does not take option(s) {bad}; it takes: {', '.join(allowed) or 'none'}")
    if "skip_bad" in params:
        options["skip_bad"] = skip_bad
    with recording_reads() as reads:
        if card.synthetic:  # generated: a data root (e.g. a global --data-root) does not apply
            result = card.reader(None, **options)
            root = None
        else:
            root = resolve_root(card, data_root)
            result = card.reader(root, **options)
    ds = Dataset(card, result, root=root, unknown=unknown, skip_bad=skip_bad, metadata_files=reads)
    if skip_bad if verify is None else verify:
        ds.verify()
    return ds
