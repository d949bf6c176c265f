"""BRSET (Brazilian Multilabel Ophthalmological Dataset): labels.csv and fundus_photos/<image_id>.jpg."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fairmedbench.registry.datasets.card import DatasetCard, age_attributes, register, sex_attribute

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.dataset import ReadResult

ACCESS = "https://physionet.org/content/brazilian-ophthalmological/ (credentialed PhysioNet access)"
COLUMNS = ("image_id", "patient_id", "patient_age", "patient_sex", "DR_ICDR")


def read_brset(root: Path, keep_missing_images: bool = False) -> ReadResult:
    """Read BRSET labels.csv; label = any diabetic retinopathy (DR_ICDR > 0)."""
    import numpy as np

    from fairmedbench.errors import InputError
    from fairmedbench.registry.datasets.common import keep_rows_with_files
    from fairmedbench.registry.datasets.dataset import ReadResult
    from fairmedbench.registry.datasets.io import first_existing, read_table, require_columns

    path = first_existing(root, ("labels.csv", "labels_brset.csv"), "BRSET labels.csv", ACCESS)
    df = read_table(path, "BRSET labels", ACCESS)
    require_columns(df, COLUMNS, path)
    icdr = df["DR_ICDR"]
    if not icdr.isin([0, 1, 2, 3, 4]).all():
        raise InputError(f"{path}: column 'DR_ICDR' has values {sorted(set(icdr.astype(str)) - set('01234'))}; "
                         "expected 0-4")
    df["label"] = (icdr > 0).astype(np.int64)
    df["sample_id"] = df["image_id"].astype(str)
    df["patient_id"] = df["patient_id"].astype(str)
    folder = next((root / d for d in ("fundus_photos", "images") if (root / d).is_dir()), root / "fundus_photos")
    df["image"] = [str(folder / f"{i}.jpg") if (folder / f"{i}.jpg").is_file() else None for i in df["sample_id"]]
    n_meta = len(df)
    df, counts, notes = keep_rows_with_files(df, "image", "image", keep_missing_images, ACCESS, root)
    counts["rows_in_metadata"] = n_meta
    return ReadResult(df.reset_index(drop=True), notes, counts, source=str(path))


register(DatasetCard(
    name="brset",
    title="BRSET (Brazilian fundus photographs)",
    tasks=("classification",),
    modality="colour fundus",
    dim=2,
    label_definition="1 if DR_ICDR > 0 (any diabetic retinopathy), else 0; DR_ICDR kept as the 5-grade label",
    attributes=(sex_attribute("patient_sex", "1", "2"), *age_attributes("patient_age", 60)),
    reader=read_brset,
    classes=("no retinopathy", "diabetic retinopathy"),
    extra_label_columns=("DR_ICDR",),
    split_policy="patient",
    prompt_templates=("a fundus image with {}.",),
    class_prompts={"no retinopathy": ("no diabetic retinopathy",), "diabetic retinopathy": ("diabetic retinopathy",)},
    size="16,266 retinal fundus photos of 8,524 patients",
    license="PhysioNet Credentialed Health Data License 1.5.0",
    citation="Nakayama et al., BRSET, PhysioNet 2023",
    access=ACCESS,
    layout="labels.csv (image_id, patient_id, camera, patient_age, comorbidities, diabetes_time_y, insuline, "
           "patient_sex 1 = male 2 = female, exam_eye, diabetes, nationality, ..., DR_SDRG, DR_ICDR, ..., 13 disease "
           "columns); fundus_photos/img00001.jpg",
    notes=("patient_age has missing values: those images are excluded from age groups, counted",),
))
