"""COVID-CT-MD: chest CT volumes of COVID-19, community-acquired pneumonia (CAP) and normal cases, with
a metadata table (Folder, Diagnosis, Patient Gender, Patient Age)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fairmedbench.registry.datasets.card import DatasetCard, age_attributes, register, sex_attribute

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.dataset import ReadResult

ACCESS = "https://doi.org/10.6084/m9.figshare.12991592 (figshare, CC BY 4.0)"
FOLDERS = {"COVID-19": "COVID-19 Cases", "CAP": "Cap Cases", "Normal": "Normal Cases"}
LUNG_WINDOW = (-1250.0, 250.0)


def read_covid_ct_md(root: Path, metadata: str | None = None, keep_missing_images: bool = False) -> ReadResult:
    """Read COVID-CT-MD volumes (NIfTI, one per case folder); label = not Normal."""
    import numpy as np

    from fairmedbench.errors import InputError, MissingResourceError
    from fairmedbench.registry.datasets.common import age_in_years, keep_rows_with_files, volume_image_fn
    from fairmedbench.registry.datasets.dataset import ReadResult
    from fairmedbench.registry.datasets.io import read_table, require_columns

    names = (metadata,) if metadata else ("Clinical-data.csv", "metadata.csv", "Index.csv")
    path = next((root / n for n in names if (root / n).is_file()), None)
    if path is None:
        raise MissingResourceError(f"COVID-CT-MD metadata ({', '.join(names)}) not found in {root}. Get it: {ACCESS}")
    df = read_table(path, "COVID-CT-MD metadata", ACCESS)
    require_columns(df, ("Folder", "Diagnosis", "Patient Gender", "Patient Age"), path)
    bad = sorted(set(df["Diagnosis"].astype(str)) - set(FOLDERS))
    if bad:
        raise InputError(f"{path}: column 'Diagnosis' has value(s) {bad}; expected {list(FOLDERS)}")
    df["label"] = (df["Diagnosis"] != "Normal").astype(np.int64)
    df["sample_id"] = df["Folder"].astype(str)
    df["patient_id"] = df["sample_id"]
    df["age_years"], notes = age_in_years(df["Patient Age"], "Patient Age")
    vols = []
    for d, f in zip(df["Diagnosis"], df["sample_id"]):
        cands = [root / FOLDERS[d] / f"{f}{s}" for s in (".nii.gz", ".nii")]
        vols.append(next((str(c) for c in cands if c.is_file()), None))
    df["image"] = vols
    n_meta = len(df)
    df, counts, n = keep_rows_with_files(df, "image", "volume", keep_missing_images, ACCESS, root)
    counts["rows_in_metadata"] = n_meta
    return ReadResult(df.reset_index(drop=True), notes + n, counts, image_fn=volume_image_fn(LUNG_WINDOW),
                      source=str(path))


register(DatasetCard(
    name="covid-ct-md",
    title="COVID-CT-MD (chest CT: COVID-19, CAP, normal)",
    tasks=("classification",),
    modality="chest CT",
    dim=3,
    label_definition="1 if Diagnosis is COVID-19 or CAP, 0 if Normal (volume-level label)",
    attributes=(sex_attribute("Patient Gender", "M", "F"), *age_attributes("age_years", 60)),
    reader=read_covid_ct_md,
    classes=("normal", "pneumonia"),
    split_policy="patient",
    prompt_templates=("a chest CT scan {}.",),
    class_prompts={"normal": ("of normal lungs",), "pneumonia": ("with pneumonia",)},
    license="CC BY 4.0",
    citation="Afshar et al., COVID-CT-MD, Sci Data 8, 121 (2021)",
    access=ACCESS,
    layout="'COVID-19 Cases'/, 'Cap Cases'/, 'Normal Cases'/ with one volume per case folder, converted to "
           "<Folder>.nii.gz; metadata table with Folder, Diagnosis, Patient Gender, Patient Age",
    layout_status="unconfirmed: the release ships DICOM series; this reader expects them converted to NIfTI and named "
                  "by case folder (as FairMedFM does), with a metadata CSV holding the listed columns",
    notes=("intensities are windowed to the lung window (-1250, 250) HU; 2.5D: Dataset.load_slices(i, n)",),
))
