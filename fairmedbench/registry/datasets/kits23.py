"""KiTS23: dataset/case_XXXXX/imaging.nii.gz and segmentation.nii.gz (1 kidney, 2 tumor, 3 cyst) with
clinical data in dataset/kits23.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from fairmedbench.registry.datasets.card import DatasetCard, age_attributes, register, sex_attribute

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.dataset import ReadResult

ACCESS = "https://github.com/neheller/kits23 (images via its download script; CC BY-NC-SA 4.0)"
CLASSES = {"kidney": (1, 2, 3), "masses": (2, 3), "tumor": (2,)}
WINDOW = (-200.0, 300.0)


def read_kits23(root: Path, keep_missing_images: bool = False) -> ReadResult:
    """Read KiTS23 cases with their clinical sex and age; masks are the provider's label maps."""
    import pandas as pd

    from fairmedbench.errors import InputError, MissingResourceError
    from fairmedbench.registry.datasets.common import keep_rows_with_files, label_mask_fn, volume_image_fn
    from fairmedbench.registry.datasets.dataset import ReadResult
    from fairmedbench.registry.datasets.io import note_read, require_columns

    base = root / "dataset" if (root / "dataset").is_dir() else root
    meta = base / "kits23.json"
    if not meta.is_file():
        raise MissingResourceError(f"KiTS23 clinical data {meta} not found. Get it: {ACCESS}")
    note_read(meta)
    try:
        df = pd.DataFrame(json.loads(meta.read_text()))
    except (ValueError, TypeError) as exc:
        raise InputError(f"{meta} is not a JSON list of cases: {exc}") from None
    require_columns(df, ("case_id", "gender", "age_at_nephrectomy"), meta)
    df["sample_id"] = df["case_id"].astype(str)
    df["patient_id"] = df["sample_id"]
    img = [base / c / "imaging.nii.gz" for c in df["sample_id"]]
    seg = [base / c / "segmentation.nii.gz" for c in df["sample_id"]]
    df["image"] = [str(p) if p.is_file() else None for p in img]
    df["mask"] = [str(p) if p.is_file() else None for p in seg]
    n_meta = len(df)
    df, counts, notes = keep_rows_with_files(df, "image", "volume", keep_missing_images, ACCESS, root)
    counts["rows_in_metadata"] = n_meta
    return ReadResult(df.reset_index(drop=True), notes, counts, image_fn=volume_image_fn(WINDOW),
                      mask_fn=label_mask_fn(CLASSES, "kidney"), source=str(meta))


register(DatasetCard(
    name="kits23",
    title="KiTS23 (kidney and kidney tumour CT segmentation)",
    tasks=("segmentation",),
    modality="abdominal CT",
    dim=3,
    label_definition="segmentation only: kidney = labels 1-3, masses = 2-3, tumor = 2",
    attributes=(sex_attribute("gender", "male", "female"), *age_attributes("age_at_nephrectomy", 60)),
    reader=read_kits23,
    classes=(),
    label_column=None,
    mask_classes=("kidney", "masses", "tumor"),
    split_policy="patient",
    license="CC BY-NC-SA 4.0",
    citation="Heller et al., KiTS23 challenge, 2023",
    access=ACCESS,
    layout="dataset/case_00000/imaging.nii.gz, segmentation.nii.gz; dataset/kits23.json (list of cases with case_id, "
           "gender, age_at_nephrectomy, ...)",
    layout_status="confirmed (image/mask layout; kits23.json keys case_id, gender, age_at_nephrectomy, "
                  "body_mass_index, ...); race is not in the clinical file, so only sex and age are offered",
    notes=("intensities windowed to (-200, 300) HU; spacing recorded per volume, no resampling",),
))
