"""NIH ChestX-ray14: Data_Entry_2017(_v2020).csv, official train_val_list.txt / test_list.txt, images/."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fairmedbench.registry.datasets.card import DatasetCard, age_attributes, register, sex_attribute

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.dataset import ReadResult

FINDINGS = (
    "Atelectasis", "Cardiomegaly", "Effusion", "Infiltration", "Mass", "Nodule", "Pneumonia",
    "Pneumothorax", "Consolidation", "Edema", "Emphysema", "Fibrosis", "Pleural_Thickening", "Hernia",
)
METADATA_NAMES = ("Data_Entry_2017_v2020.csv", "Data_Entry_2017.csv", "Data_Entry_2017_v2020.csv.gz",
                  "Data_Entry_2017.csv.gz")
ACCESS = "https://nihcc.app.box.com/v/ChestXray-NIHCC (public, no registration)"
COLUMNS = ("Image Index", "Finding Labels", "Patient ID", "Patient Age", "Patient Gender", "View Position")


def read_nih(root: Path, metadata: str | None = None, keep_missing_images: bool = False, max_age: float = 120.0,
             view: str | None = None) -> ReadResult:
    """Read the official NIH release: one row per image whose file exists (a partial copy is allowed).

    `view` (AP or PA) keeps the images of one `View Position`: a second "site" of the same release for external
    evaluation (`--dataset-option view=PA --eval-dataset nih-cxr14:view=AP`)."""
    import numpy as np
    import pandas as pd

    from fairmedbench.registry.datasets.common import find_in, keep_rows_with_files
    from fairmedbench.registry.datasets.dataset import ReadResult
    from fairmedbench.registry.datasets.io import first_existing, index_files, note_read, read_table, require_columns

    meta_path = ((root / metadata) if metadata
                 else first_existing(root, METADATA_NAMES, "NIH metadata Data_Entry_2017*.csv", ACCESS))
    df = read_table(meta_path, "NIH metadata", ACCESS)
    require_columns(df, COLUMNS, meta_path)
    n_meta = len(df)
    if view is not None:
        from fairmedbench.errors import InputError

        views = sorted(df["View Position"].astype(str).str.strip().unique())
        if str(view) not in views:
            raise InputError(f"nih-cxr14 option view={view!r}: the metadata's View Position values are "
                             f"{', '.join(views)}")
        df = df[df["View Position"].astype(str).str.strip() == str(view)].copy()
    ages = pd.to_numeric(df["Patient Age"].astype(str).str.extract(r"^\s*(\d+(?:\.\d+)?)", expand=False),
                         errors="coerce")
    implausible = int((ages > max_age).sum())
    df["age_years"] = ages.where(ages <= max_age)
    dummies = df["Finding Labels"].astype(str).str.get_dummies(sep="|")
    for f in FINDINGS:
        df[f] = dummies[f].astype(np.int64) if f in dummies else 0
    df["label"] = (df["Finding Labels"].astype(str) != "No Finding").astype(np.int64)
    df["sample_id"] = df["Image Index"].astype(str)
    df["patient_id"] = df["Patient ID"].astype(str)
    index = index_files([root / "images", *sorted(root.glob("images_*"))])
    df["image"] = find_in(index, df["Image Index"])
    df, counts, notes = keep_rows_with_files(df, "image", "image", keep_missing_images, ACCESS, root)
    counts["rows_in_metadata"] = n_meta
    if view is not None:
        notes.append(f"View Position {view} only (the option view={view})")
    if implausible:
        counts["implausible_age"] = implausible
        notes.append(f"{implausible} rows with Patient Age > {max_age:g} treated as unknown age")
    tv, te = root / "train_val_list.txt", root / "test_list.txt"
    if tv.is_file() and te.is_file():
        note_read(tv)
        note_read(te)
        train = set(tv.read_text().split())
        test = set(te.read_text().split())
        df["split"] = df["Image Index"].map(lambda s: "test" if s in test else ("train" if s in train else None))
        unlisted = int(df["split"].isna().sum())
        if unlisted:
            notes.append(f"{unlisted} images are in neither official list; left out")
            counts["rows_not_in_official_lists"] = unlisted
            df = df[df["split"].notna()]
    else:
        notes.append("official split lists train_val_list.txt/test_list.txt absent: use split policy 'patient'")
    return ReadResult(df.reset_index(drop=True), notes, counts, source=str(meta_path))


register(DatasetCard(
    name="nih-cxr14",
    title="NIH ChestX-ray14",
    tasks=("classification",),
    modality="chest X-ray",
    dim=2,
    label_definition="1 if Finding Labels is not 'No Finding' (any of the 14 findings); the 14 findings as extra "
                     "0/1 columns",
    attributes=(sex_attribute("Patient Gender", "M", "F"), *age_attributes("age_years", 60)),
    reader=read_nih,
    classes=("no finding", "finding"),
    extra_label_columns=FINDINGS,
    split_policy="official",
    prompt_templates=("a chest X-ray {}.",),
    class_prompts={"no finding": ("with no finding",), "finding": ("with an abnormal finding",)},
    size="112,120 frontal chest X-rays of 30,805 patients (official test list: 25,596 images)",
    license="public (NIH Clinical Center); cite Wang et al. CVPR 2017",
    citation="Wang et al., ChestX-ray8, CVPR 2017",
    access=ACCESS,
    layout="Data_Entry_2017_v2020.csv (or Data_Entry_2017.csv; .gz accepted) with Image Index, Finding Labels, "
           "Follow-up #, Patient ID, Patient Age, Patient Gender (M/F), View Position; train_val_list.txt, "
           "test_list.txt; images/ (or images_001..images_012/images/)",
    notes=("official split: train_val_list / test_list; val carved from train_val at patient level",
           "option view=AP|PA keeps one View Position (a second site for --eval-dataset nih-cxr14:view=AP)",
           "rows whose image file is absent are left out and counted (partial copies are allowed)"),
))
