"""PAPILA: ClinicalData/patient_data_od.xlsx and patient_data_os.xlsx (one row per patient and eye),
FundusImages/RET<id>OD.jpg / RET<id>OS.jpg."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fairmedbench.registry.datasets.card import DatasetCard, age_attributes, register, sex_attribute

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.dataset import ReadResult

ACCESS = "https://doi.org/10.6084/m9.figshare.14798004 (figshare, CC BY 4.0)"
SUSPECT = ("exclude", "positive", "negative")


def _read_sheet(path: Path):
    """The clinical sheet: find the header row (the one naming Age, Gender and Diagnosis), keep patient rows."""
    from fairmedbench.errors import InputError
    from fairmedbench.registry.datasets.io import read_table

    raw = read_table(path, "PAPILA clinical data", ACCESS, header=None)
    header_row = next((i for i in range(min(len(raw), 10))
                       if {"age", "gender", "diagnosis"} <= {str(v).strip().lower() for v in raw.iloc[i]}), None)
    if header_row is None:
        raise InputError(f"{path}: no header row naming 'Age', 'Gender' and 'Diagnosis' in its first 10 rows")
    cols = [str(v).strip() for v in raw.iloc[header_row]]
    cols[0] = "ID"
    body = raw.iloc[header_row + 1:].copy()
    body.columns = cols
    ids = body["ID"].astype(str).str.extract(r"^#?\s*(\d+)\s*$", expand=False)
    body = body[ids.notna()].copy()
    body["ID"] = ids[ids.notna()].astype(int)
    return body.reset_index(drop=True)


def read_papila(root: Path, suspect: str = "exclude", keep_missing_images: bool = False) -> ReadResult:
    """Read PAPILA clinical sheets for both eyes; label glaucoma (Diagnosis 1); suspects (2) by option."""
    import numpy as np
    import pandas as pd

    from fairmedbench.errors import InputError
    from fairmedbench.registry.datasets.common import keep_rows_with_files
    from fairmedbench.registry.datasets.dataset import ReadResult
    from fairmedbench.registry.datasets.io import first_existing

    if suspect not in SUSPECT:
        raise InputError(f"suspect={suspect!r}: choose one of {SUSPECT}")
    base = (root if (root / "ClinicalData").is_dir()
            else next((p for p in root.glob("*") if (p / "ClinicalData").is_dir()), root))
    frames = []
    for eye in ("od", "os"):
        path = first_existing(base / "ClinicalData", (f"patient_data_{eye}.xlsx", f"patient_data_{eye}.csv"),
                              f"PAPILA ClinicalData/patient_data_{eye}.xlsx", ACCESS)
        frames.append(_read_sheet(path).assign(eye=eye.upper()))
    df = pd.concat(frames, ignore_index=True)
    diag = pd.to_numeric(df["Diagnosis"], errors="coerce")
    bad = sorted(set(df.loc[~diag.isin([0, 1, 2]), "Diagnosis"].astype(str)))
    if bad:
        raise InputError(f"PAPILA ClinicalData: column 'Diagnosis' has value(s) {bad}; expected 0, 1 or 2")
    counts = {"rows_in_metadata": len(df), "suspects": int((diag == 2).sum())}
    notes = []
    if suspect == "exclude":
        df, diag = df[diag != 2].copy(), diag[diag != 2]
        notes.append(f"{counts['suspects']} suspect eyes (Diagnosis 2) left out "
                     "(suspect='positive'/'negative' keeps them)")
    df["label"] = np.where(diag == 2, int(suspect == "positive"), diag == 1).astype(np.int64)
    df["sample_id"] = [f"RET{i:03d}{e}" for i, e in zip(df["ID"], df["eye"])]
    df["patient_id"] = df["ID"].map(lambda i: f"{i:03d}")
    images = base / "FundusImages"
    df["image"] = [str(images / f"{s}.jpg") if (images / f"{s}.jpg").is_file() else None for s in df["sample_id"]]
    df, c, n = keep_rows_with_files(df, "image", "image", keep_missing_images, ACCESS, root)
    counts.update(c)
    return ReadResult(df.reset_index(drop=True), notes + n, counts, source=str(base / "ClinicalData"))


register(DatasetCard(
    name="papila",
    title="PAPILA (fundus images, glaucoma, both eyes of 244 patients)",
    tasks=("classification",),
    modality="colour fundus",
    dim=2,
    label_definition="1 if Diagnosis == 1 (glaucoma), 0 if 0 (healthy); suspects (2) left out by default",
    attributes=(sex_attribute("Gender", "0", "1"), *age_attributes("Age", 60)),
    reader=read_papila,
    classes=("normal", "glaucoma"),
    split_policy="patient",
    prompt_templates=("a fundus image of {}.",),
    class_prompts={"normal": ("a normal eye",), "glaucoma": ("glaucoma",)},
    size="488 fundus images, both eyes of 244 patients",
    license="CC BY 4.0",
    citation="Kovalyk et al., PAPILA, Sci Data 9, 291 (2022)",
    access=ACCESS,
    layout="ClinicalData/patient_data_od.xlsx, patient_data_os.xlsx (ID '#002', Age, Gender 0 = male 1 = female, "
           "Diagnosis 0 healthy 1 glaucoma 2 suspect, refraction, IOP, ...); FundusImages/RET002OD.jpg",
    layout_status="file names and codes confirmed; the sheet's header row is located by its 'Age'/'Gender'/"
                  "'Diagnosis' cells rather than a fixed offset. The ExpertsSegmentations contours are not read",
    notes=("both eyes of a patient stay in one split (patient = ID)",
           "age is the raw Age column: FairMedFM thresholds an already binarised column, putting every eye in one "
           "group"),
))
