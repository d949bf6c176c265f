"""ADNI structural MRI: the IDA image-collection CSV (Image Data ID, Subject, Group, Sex, Age, ...) and
the downloaded NIfTI volumes (ADNI/<Subject>/<Description>/<date>/<Image Data ID>/*.nii or <ID>.nii.gz)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from fairmedbench.registry.datasets.card import DatasetCard, age_attributes, register, sex_attribute

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.dataset import ReadResult

ACCESS = "https://ida.loni.usc.edu (ADNI data use agreement; download an image collection with its CSV)"
COLUMNS = ("Image Data ID", "Subject", "Group", "Sex", "Age")
GROUPS = ("CN", "MCI", "EMCI", "LMCI", "SMC", "AD")


def _volume_index(root: Path) -> dict[str, str]:
    """Image Data ID -> NIfTI path: from a folder named I<digits>, a file <ID>.nii(.gz) or *_I<digits>.nii."""
    from fairmedbench.registry.datasets.io import index_files

    out: dict[str, str] = {}
    for name, path in index_files([root], (".nii", ".nii.gz")).items():
        m = re.search(r"(?:^|_)(I\d+)(?:\.nii(?:\.gz)?)$", name) or re.search(r"/(I\d+)/", str(path))
        if m:
            out.setdefault(m.group(1), str(path))
    return out


def read_adni(root: Path, metadata: str | None = None, positive: tuple[str, ...] = ("MCI", "EMCI", "LMCI", "AD"),
              keep_missing_images: bool = False) -> ReadResult:
    """Read an ADNI IDA collection: label = Group in `positive` (default: not cognitively normal)."""
    import numpy as np

    from fairmedbench.errors import InputError, MissingResourceError
    from fairmedbench.registry.datasets.common import keep_rows_with_files, volume_image_fn
    from fairmedbench.registry.datasets.dataset import ReadResult
    from fairmedbench.registry.datasets.io import read_table, require_columns

    candidates = [root / metadata] if metadata else sorted(root.glob("*.csv"))
    path = None
    for c in candidates:
        head = read_table(c, "ADNI collection CSV", ACCESS, nrows=1)
        if all(col in head.columns for col in COLUMNS):
            path = c
            break
    if path is None:
        raise MissingResourceError(f"no ADNI image-collection CSV with columns {list(COLUMNS)} in {root}. "
                                   f"Get it: {ACCESS}")
    df = read_table(path, "ADNI collection CSV", ACCESS)
    require_columns(df, COLUMNS, path)
    bad = sorted(set(df["Group"].astype(str)) - set(GROUPS))
    if bad:
        raise InputError(f"{path}: column 'Group' has value(s) {bad}; expected {list(GROUPS)}")
    df["label"] = df["Group"].isin(positive).astype(np.int64)
    df["sample_id"] = df["Image Data ID"].astype(str)
    df["patient_id"] = df["Subject"].astype(str)
    df["image"] = df["sample_id"].map(_volume_index(root))
    n_meta = len(df)
    df, counts, notes = keep_rows_with_files(df, "image", "volume", keep_missing_images, ACCESS, root)
    counts["rows_in_metadata"] = n_meta
    notes.append("volumes keep their acquisition spacing (recorded by .spacing(i)); no resampling is applied")
    return ReadResult(df.reset_index(drop=True), notes, counts, image_fn=volume_image_fn(), source=str(path))


register(DatasetCard(
    name="adni",
    title="ADNI structural brain MRI (cognitive status)",
    tasks=("classification",),
    modality="brain MRI (T1)",
    dim=3,
    label_definition="1 if Group is MCI/EMCI/LMCI/AD (not cognitively normal), 0 if CN; option positive=(...)",
    attributes=(sex_attribute("Sex", "M", "F"), *age_attributes("Age", 60)),
    reader=read_adni,
    classes=("cognitively normal", "impaired"),
    split_policy="patient",
    prompt_templates=("a brain MRI of a {} subject.",),
    class_prompts={"cognitively normal": ("cognitively normal",), "impaired": ("cognitively impaired",)},
    license="ADNI Data Use Agreement (no redistribution)",
    citation="Alzheimer's Disease Neuroimaging Initiative (adni.loni.usc.edu)",
    access=ACCESS,
    layout="<collection>.csv from IDA (Image Data ID, Subject, Group, Sex, Age, Visit, Modality, Description, Type, "
           "Acq Date, Format, Downloaded); NIfTI under ADNI/<Subject>/<Description>/<date>/<Image Data ID>/ or named "
           "<Image Data ID>.nii.gz",
    layout_status="collection CSV columns as exported by IDA (not verifiable here); DICOM downloads must be converted "
                  "to NIfTI first. 2.5D: Dataset.load_slices(i, n)",
    notes=("several scans of one subject stay in one split (patient = Subject)",),
))
