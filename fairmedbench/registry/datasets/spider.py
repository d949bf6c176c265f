"""SPIDER lumbar spine MRI: images/<n>_<sequence>.mha, masks/<n>_<sequence>.mha (vertebrae 1-25,
spinal canal 100, discs 201-225) and overview.csv with patient sex and age."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fairmedbench.registry.datasets.card import DatasetCard, age_attributes, register, sex_attribute

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.dataset import ReadResult

ACCESS = "https://doi.org/10.5281/zenodo.10159290 (Zenodo, CC BY 4.0)"
CLASSES = {"vertebrae": tuple(range(1, 26)), "canal": (100,), "discs": tuple(range(201, 226))}
NAME_COLS = ("new_file_name", "file_name", "filename")


def read_spider(root: Path, sequence: str | None = None, keep_missing_images: bool = False) -> ReadResult:
    """Read SPIDER volumes (MetaImage) with overview.csv; `sequence` keeps one of t1, t2, t2_SPACE."""
    from fairmedbench.errors import InputError, MissingResourceError
    from fairmedbench.registry.datasets.common import age_in_years, keep_rows_with_files, label_mask_fn, volume_image_fn
    from fairmedbench.registry.datasets.dataset import ReadResult
    from fairmedbench.registry.datasets.io import read_table

    meta = root / "overview.csv"
    if not meta.is_file():
        raise MissingResourceError(f"SPIDER overview.csv not found in {root}. Get it: {ACCESS}")
    df = read_table(meta, "SPIDER overview", ACCESS)
    name_col = next((c for c in NAME_COLS if c in df.columns), None)
    sex_col = next((c for c in ("sex", "Sex") if c in df.columns), None)
    age_col = next((c for c in ("age", "Age") if c in df.columns), None)
    if name_col is None or sex_col is None or age_col is None:
        raise InputError(f"{meta}: needs a file-name column ({'/'.join(NAME_COLS)}), 'sex' and 'age'; "
                         f"has {list(df.columns)}")
    df["sample_id"] = df[name_col].astype(str).str.replace(".mha", "", regex=False)
    df["patient_id"] = df["sample_id"].str.extract(r"^(\d+)_", expand=False).fillna(df["sample_id"])
    df["sequence"] = df["sample_id"].str.replace(r"^\d+_", "", regex=True)
    if sequence is not None:
        df = df[df["sequence"].str.lower() == sequence.lower()].copy()
    df["sex"] = df[sex_col]
    df["age_years"], notes = age_in_years(df[age_col])
    df["image"] = [str(root / "images" / f"{s}.mha") if (root / "images" / f"{s}.mha").is_file() else None
                   for s in df["sample_id"]]
    df["mask"] = [str(root / "masks" / f"{s}.mha") if (root / "masks" / f"{s}.mha").is_file() else None
                  for s in df["sample_id"]]
    n_meta = len(df)
    df, counts, n = keep_rows_with_files(df, "image", "volume", keep_missing_images, ACCESS, root)
    counts["rows_in_metadata"] = n_meta
    return ReadResult(df.reset_index(drop=True), notes + n, counts, image_fn=volume_image_fn(),
                      mask_fn=label_mask_fn(CLASSES, "vertebrae"), source=str(meta))


register(DatasetCard(
    name="spider",
    title="SPIDER lumbar spine MRI (vertebrae, discs, spinal canal)",
    tasks=("segmentation",),
    modality="lumbar spine MRI",
    dim=3,
    label_definition="segmentation only: vertebrae = labels 1-25, canal = 100, discs = 201-225",
    attributes=(sex_attribute("sex", "M", "F"), *age_attributes("age_years", 60)),
    reader=read_spider,
    classes=(),
    label_column=None,
    mask_classes=("vertebrae", "canal", "discs"),
    split_policy="patient",
    license="CC BY 4.0",
    citation="van der Graaf et al., Sci Data 11, 264 (2024)",
    access=ACCESS,
    layout="images/<patient>_<t1|t2|t2_SPACE>.mha, masks/ (same names), overview.csv (file name, sex, age, ...)",
    layout_status="image/mask layout and label codes confirmed; the overview.csv column names are not verifiable "
                  "here: a file-name column (new_file_name), sex (M/F) and age are required, else a clear error",
    notes=("MetaImage read without SimpleITK; several sequences of one patient stay in one split",),
))
