"""CANDI Share (Child and Adolescent NeuroDevelopment Initiative): T1 volumes with manual anatomical
label maps, and a demographics table."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fairmedbench.registry.datasets.card import DatasetCard, age_attributes, register, sex_attribute

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.dataset import ReadResult

ACCESS = "https://www.nitrc.org/projects/cs_schizbull08 (NITRC, registration)"


def read_candi(root: Path, demographics: str | None = None, keep_missing_images: bool = False) -> ReadResult:
    """Read CANDI subjects (<subject>_procimg.nii.gz + <subject>_seg.nii.gz) joined with demographics."""
    from fairmedbench.errors import MissingResourceError
    from fairmedbench.registry.datasets.common import keep_rows_with_files, label_mask_fn, volume_image_fn
    from fairmedbench.registry.datasets.dataset import ReadResult
    from fairmedbench.registry.datasets.io import read_table, require_columns

    cands = [root / demographics] if demographics else sorted(
        p for p in root.rglob("*") if "demographic" in p.name.lower() and p.suffix.lower() in (".csv", ".xlsx", ".xls"))
    if not cands:
        raise MissingResourceError(f"no CANDI demographics table (*Demographics*.csv/.xlsx) under {root}. "
                                   f"Get it: {ACCESS}")
    df = read_table(cands[0], "CANDI demographics", ACCESS)
    require_columns(df, ("Subject", "Gender", "Age"), cands[0])
    imgs = {p.name[: -len("_procimg.nii.gz")]: p for p in root.rglob("*_procimg.nii.gz")}
    df["sample_id"] = df["Subject"].astype(str)
    df["patient_id"] = df["sample_id"]
    df["image"] = [str(imgs[s]) if s in imgs else None for s in df["sample_id"]]
    df["mask"] = [str(imgs[s].with_name(f"{s}_seg.nii.gz"))
                  if s in imgs and imgs[s].with_name(f"{s}_seg.nii.gz").is_file()
                  else None for s in df["sample_id"]]
    n_meta = len(df)
    df, counts, notes = keep_rows_with_files(df, "image", "volume", keep_missing_images, ACCESS, root)
    counts["rows_in_metadata"] = n_meta
    classes = {"foreground": tuple(range(1, 256))}
    return ReadResult(df.reset_index(drop=True), notes, counts, image_fn=volume_image_fn(),
                      mask_fn=label_mask_fn(classes, "foreground"), source=str(cands[0]))


register(DatasetCard(
    name="candi",
    title="CANDI Share (child and adolescent brain MRI segmentation)",
    tasks=("segmentation",),
    modality="brain MRI (T1)",
    dim=3,
    label_definition="segmentation only: foreground = any labelled structure of the manual label map",
    attributes=(sex_attribute("Gender", "M", "F"), *age_attributes("Age", 12)),
    reader=read_candi,
    classes=(),
    label_column=None,
    mask_classes=("foreground",),
    split_policy="patient",
    license="CANDI Share terms (NITRC)",
    citation="Kennedy et al., CANDIShare, Neuroinformatics 10 (2012)",
    access=ACCESS,
    layout="SchizBull_2008/<group>/<subject>/<subject>_procimg.nii.gz and <subject>_seg.nii.gz; a demographics table "
           "with Subject, Gender, Age",
    layout_status="unconfirmed: the demographics ship as a spreadsheet whose exact columns could not be checked; "
                  "export it with columns Subject, Gender (M/F), Age. Age is split at 12 (children) since all "
                  "subjects are under 18",
))
