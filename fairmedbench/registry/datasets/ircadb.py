"""3D-IRCADb-01 (liver CT with organ and tumour masks, 20 patients)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fairmedbench.registry.datasets.card import DatasetCard, age_attributes, register, sex_attribute

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.dataset import ReadResult

ACCESS = "https://www.ircad.fr/research/data-sets/liver-segmentation-3d-ircadb-01/ (IRCAD, research use)"
WINDOW = (-200.0, 300.0)


def read_ircadb(root: Path, keep_missing_images: bool = False) -> ReadResult:
    """Read 3Dircadb1.<k>/ folders (image.nii.gz + liver.nii.gz) with patients.csv (patient, sex, age)."""
    from fairmedbench.errors import MissingResourceError
    from fairmedbench.registry.datasets.common import keep_rows_with_files, label_mask_fn, volume_image_fn
    from fairmedbench.registry.datasets.dataset import ReadResult
    from fairmedbench.registry.datasets.io import read_table, require_columns

    meta = root / "patients.csv"
    if not meta.is_file():
        raise MissingResourceError(
            f"{meta} not found: 3D-IRCADb publishes sex and age per patient on its web page only; write them to "
            f"patients.csv (patient, sex, age). Data: {ACCESS}")
    df = read_table(meta, "3D-IRCADb patients", ACCESS)
    require_columns(df, ("patient", "sex", "age"), meta)
    df["sample_id"] = [f"3Dircadb1.{int(p)}" for p in df["patient"]]
    df["patient_id"] = df["sample_id"]
    df["image"] = [str(root / s / "image.nii.gz") if (root / s / "image.nii.gz").is_file() else None
                   for s in df["sample_id"]]
    df["mask"] = [str(root / s / "liver.nii.gz") if (root / s / "liver.nii.gz").is_file() else None
                  for s in df["sample_id"]]
    n_meta = len(df)
    df, counts, notes = keep_rows_with_files(df, "image", "volume", keep_missing_images, ACCESS, root)
    counts["rows_in_metadata"] = n_meta
    return ReadResult(df.reset_index(drop=True), notes, counts, image_fn=volume_image_fn(WINDOW),
                      mask_fn=label_mask_fn({"liver": tuple(range(1, 256))}, "liver"), source=str(meta))


register(DatasetCard(
    name="ircadb",
    title="3D-IRCADb-01 (liver CT segmentation)",
    tasks=("segmentation",),
    modality="abdominal CT",
    dim=3,
    label_definition="segmentation only: liver mask",
    attributes=(sex_attribute("sex", "M", "F"), *age_attributes("age", 60)),
    reader=read_ircadb,
    classes=(),
    label_column=None,
    mask_classes=("liver",),
    split_policy="patient",
    license="IRCAD research use",
    citation="Soler et al., 3D-IRCADb-01, IRCAD 2010",
    access=ACCESS,
    layout="3Dircadb1.<k>/image.nii.gz and liver.nii.gz (converted from PATIENT_DICOM/ and MASKS_DICOM/liver/); "
           "patients.csv with patient, sex (M/F), age transcribed from the provider's page",
    layout_status="unconfirmed: the release is DICOM and its demographics are on a web page; the reader expects the "
                  "NIfTI conversion and patients.csv described here",
))
