"""HAM10000: HAM10000_metadata.csv (sex male/female/unknown), image folders, and the lesion masks of
the HAM10000 segmentation release (HAM10000_segmentations_lesion_tschandl/<image_id>_segmentation.png).

Two cards read these files: `ham10000` (binary malignant label; segmentation) and `ham10000-7class` (the 7
diagnosis classes, a multi-class task). The 7-class view is its own registered name, not a dataset option,
because a run's task is chosen from the card's declared tasks before any data is read, and the class names
(the prediction's score columns) are card facts that a reader option could not change."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fairmedbench.registry.datasets.card import DatasetCard, age_attributes, register, sex_attribute

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.dataset import ReadResult

ACCESS = "https://doi.org/10.7910/DVN/DBW86T (Harvard Dataverse; masks: HAM10000_segmentations_lesion_tschandl.zip)"
METADATA_NAMES = ("HAM10000_metadata.csv", "HAM10000_metadata.tab", "HAM10000_metadata")
COLUMNS = ("lesion_id", "image_id", "dx", "dx_type", "age", "sex", "localization")
DX = ("akiec", "bcc", "bkl", "df", "mel", "nv", "vasc")
POSITIVE_DX = ("akiec", "mel")
IMAGE_DIRS = ("HAM10000_images_part_1", "HAM10000_images_part_2", "HAM10000_images", "images")
MASK_DIRS = ("HAM10000_segmentations_lesion_tschandl", "HAM10000_segmentations", "masks")


def _read_metadata(root: Path, metadata: str | None, split_dir: str | None):
    import pandas as pd

    from fairmedbench.errors import MissingResourceError
    from fairmedbench.registry.datasets.io import read_table, require_columns

    if split_dir is None and metadata is None and not any((root / n).is_file() for n in METADATA_NAMES) \
            and all((root / "splits" / f"{s}.csv").is_file() for s in ("train", "val", "test")):
        split_dir = "splits"
    if split_dir is not None:
        frames = []
        for s in ("train", "val", "test"):
            path = root / split_dir / f"{s}.csv"
            if not path.is_file():
                raise MissingResourceError(f"split file {path} not found (split_dir needs train.csv, val.csv, "
                                           "test.csv)")
            part = read_table(path, "HAM10000 split metadata", ACCESS)
            require_columns(part, COLUMNS, path)
            frames.append(part.assign(split=s))
        note = (f"metadata from split files {root / split_dir}/{{train,val,test}}.csv (official columns; their "
                "split is used as 'official')")
        return pd.concat(frames, ignore_index=True), note, str(root / split_dir)
    names = (metadata,) if metadata else METADATA_NAMES
    for n in names:
        path = root / n
        if path.is_file():
            sep = "\t" if path.suffix == ".tab" else ","
            df = read_table(path, "HAM10000 metadata", ACCESS, sep=sep)
            require_columns(df, COLUMNS, path)
            return df, f"metadata from {path}", str(path)
    raise MissingResourceError(
        f"HAM10000 metadata not found in {root} (looked for {', '.join(names)} and splits/train.csv...). "
        f"Get it from {ACCESS}"
    )


def read_ham10000(root: Path, metadata: str | None = None, split_dir: str | None = None,
                  keep_missing_images: bool = False, positive_dx: tuple[str, ...] = POSITIVE_DX) -> ReadResult:
    """Read HAM10000 as released (or a split of its metadata with the official columns)."""
    import numpy as np

    from fairmedbench.errors import InputError
    from fairmedbench.registry.datasets.common import find_in, keep_rows_with_files
    from fairmedbench.registry.datasets.dataset import ReadResult
    from fairmedbench.registry.datasets.io import index_files

    df, note, source = _read_metadata(root, metadata, split_dir)
    bad_dx = sorted(set(df["dx"].astype(str)) - set(DX))
    if bad_dx:
        raise InputError(f"{source}: column 'dx' has value(s) {bad_dx}; HAM10000 uses {list(DX)}")
    n_meta = len(df)
    df["label"] = df["dx"].isin(positive_dx).astype(np.int64)
    df["dx_index"] = df["dx"].map({d: k for k, d in enumerate(DX)}).astype(np.int64)
    df["sample_id"] = df["image_id"].astype(str)
    df["patient_id"] = df["lesion_id"].astype(str)
    images = index_files([root / d for d in IMAGE_DIRS], (".jpg", ".jpeg", ".png"))
    stems = {Path(k).stem: v for k, v in images.items()}
    df["image"] = find_in(stems, df["image_id"])
    masks = index_files([root / d for d in MASK_DIRS], (".png",))
    mstems = {Path(k).stem.removesuffix("_segmentation"): v for k, v in masks.items()}
    df["mask"] = find_in(mstems, df["image_id"])
    df, counts, notes = keep_rows_with_files(df, "image", "image", keep_missing_images, ACCESS, root)
    counts["rows_in_metadata"] = n_meta
    counts["rows_with_mask"] = int(df["mask"].notna().sum())
    notes.insert(0, note)
    return ReadResult(df.reset_index(drop=True), notes, counts, source=source)


register(DatasetCard(
    name="ham10000",
    title="HAM10000 dermoscopy (classification; lesion masks for segmentation)",
    tasks=("classification", "segmentation"),
    modality="dermoscopy",
    dim=2,
    label_definition="1 if dx is mel or akiec, else 0 (as FairMedFM and the binaryLabel of the subgroup-separability "
                     "split); positive_dx=('akiec', 'bcc', 'mel') counts every malignant class; "
                     "dx_index = 7-class label",
    attributes=(sex_attribute("sex", "male", "female", unknown=("unknown",)), *age_attributes("age", 60)),
    reader=read_ham10000,
    classes=("benign", "malignant"),
    extra_label_columns=("dx_index",),
    mask_classes=("lesion",),
    split_policy="patient",
    prompt_templates=("a dermoscopy image of a {} skin lesion.",),
    class_prompts={"benign": ("benign",), "malignant": ("malignant",)},
    size="10,015 dermoscopic images",
    license="CC BY-NC-SA 4.0",
    citation="Tschandl, Rosendahl & Kittler, Sci Data 5, 180161 (2018)",
    access=ACCESS,
    layout="HAM10000_metadata.csv (lesion_id, image_id, dx, dx_type, age, sex = male/female/unknown, localization "
           "[, dataset]); HAM10000_images_part_1/, HAM10000_images_part_2/ (ISIC_xxxxxxx.jpg); masks in "
           "HAM10000_segmentations_lesion_tschandl/ISIC_xxxxxxx_segmentation.png (masks/ISIC_xxxxxxx.png accepted); "
           "or splits/{train,val,test}.csv with the official columns",
    notes=("patient = lesion_id: HAM10000 gives no patient id; images of one lesion stay in one split",
           "sex 'unknown' and missing age are 'not recorded': excluded from that attribute's groups by default "
           "(unknown='group' keeps them as their own group), never folded into another group"),
))


def read_ham10000_7class(root: Path, metadata: str | None = None, split_dir: str | None = None,
                         keep_missing_images: bool = False) -> ReadResult:
    """HAM10000 with the diagnosis as the label: its index in DX (akiec, bcc, bkl, df, mel, nv, vasc)."""
    result = read_ham10000(root, metadata, split_dir, keep_missing_images)
    result.samples["label"] = result.samples["dx_index"]
    return result


register(DatasetCard(
    name="ham10000-7class",
    title="HAM10000 dermoscopy, 7 diagnosis classes (multi-class)",
    tasks=("multiclass",),
    modality="dermoscopy",
    dim=2,
    label_definition="index of dx in (akiec, bcc, bkl, df, mel, nv, vasc): the 7 HAM10000 diagnosis classes",
    attributes=(sex_attribute("sex", "male", "female", unknown=("unknown",)), *age_attributes("age", 60)),
    reader=read_ham10000_7class,
    classes=DX,
    split_policy="patient",
    license="CC BY-NC-SA 4.0",
    citation="Tschandl, Rosendahl & Kittler, Sci Data 5, 180161 (2018)",
    access=ACCESS,
    layout="the ham10000 files (same folder: FMB_DATA_HAM10000 or FMB_DATA_ROOT/ham10000)",
    notes=("patient = lesion_id, as for ham10000", "nv is about two thirds of the images and df, vasc about 1% "
           "each: small groups often lack a rare class (its tpr is then undefined and reported as such)"),
    data_name="ham10000",
))
