"""CheXpert: train.csv / valid.csv (Path, Sex, Age, Frontal/Lateral, AP/PA, 14 labels) and the
CHEXPERT DEMO demographics file (PATIENT, GENDER, AGE_AT_CXR, PRIMARY_RACE, ETHNICITY)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fairmedbench.registry.datasets.card import AttributeSpec, DatasetCard, age_attributes, register, sex_attribute

if TYPE_CHECKING:
    import pandas as pd

    from fairmedbench.registry.datasets.dataset import ReadResult

ACCESS = ("https://stanfordaimi.azurewebsites.net/datasets/8cbd9ed4-2eb9-4565-affc-111cf4f7ebe2 "
          "(Stanford AIMI, research use agreement)")
FINDINGS = (
    "No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema",
    "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion", "Pleural Other", "Fracture",
    "Support Devices",
)
COLUMNS = ("Path", "Sex", "Age", "Frontal/Lateral", "AP/PA")
FOLDERS = ("", "CheXpert-v1.0-small", "CheXpert-v1.0")
DEMO_NAMES = ("CHEXPERT DEMO.xlsx", "CHEXPERT DEMO.csv", "CHEXPERT_DEMO.xlsx", "CHEXPERT_DEMO.csv")
# PRIMARY_RACE strings -> group. Values outside this list fail loudly (unmapped), never guessed.
RACE = {
    **{v: "white" for v in ("White", "White, non-Hispanic", "White, Hispanic", "White or Caucasian")},
    **{v: "asian" for v in ("Asian", "Asian, non-Hispanic", "Asian, Hispanic", "Asian - Historical Conv")},
    **{v: "black" for v in ("Black or African American", "Black, non-Hispanic", "Black, Hispanic")},
    **{v: "other" for v in ("Other", "Other, non-Hispanic", "Other, Hispanic",
                            "Native Hawaiian or Other Pacific Islander", "Pacific Islander, non-Hispanic",
                            "Pacific Islander, Hispanic", "American Indian or Alaska Native",
                            "Native American, non-Hispanic", "Native American, Hispanic")},
}
RACE_UNKNOWN = ("Unknown", "Patient Refused", "Race and Ethnicity Unknown", "Declined to Answer", "Not Recorded")


def finding_label(df: pd.DataFrame, target: str) -> pd.Series:
    """0/1 label: 'any_finding' = not (No Finding == 1); else the named finding == 1 (uncertain -1 and blank -> 0)."""
    import numpy as np

    from fairmedbench.errors import InputError

    if target == "any_finding":
        return (df["No Finding"] != 1).astype(np.int64)
    if target not in df.columns:
        raise InputError(f"target {target!r} is not a label column; use 'any_finding' or one of {list(FINDINGS)}")
    return (df[target] == 1).astype(np.int64)


def _demo_path(root: Path, base: Path) -> Path | None:
    for folder in (root, base, base.parent):
        for n in DEMO_NAMES:
            if (folder / n).is_file():
                return folder / n
    return None


def read_chexpert(root: Path, target: str = "any_finding", frontal_only: bool = True,
                  keep_missing_images: bool = False) -> ReadResult:
    """Read CheXpert train/valid CSVs, join the demographics file by patient, keep frontal views."""
    import pandas as pd

    from fairmedbench.errors import MissingResourceError
    from fairmedbench.registry.datasets.common import keep_rows_with_files
    from fairmedbench.registry.datasets.dataset import ReadResult
    from fairmedbench.registry.datasets.io import read_table, require_columns

    base = next((root / f for f in FOLDERS if (root / f / "train.csv").is_file()), None)
    if base is None:
        raise MissingResourceError(f"CheXpert train.csv not found in {root} or {root}/CheXpert-v1.0(-small)/. "
                                   f"Request access: {ACCESS}")
    frames = []
    for name, split in (("train.csv", "train"), ("valid.csv", "val")):
        path = base / name
        if path.is_file():
            part = read_table(path, "CheXpert labels", ACCESS)
            require_columns(part, COLUMNS + FINDINGS, path)
            frames.append(part.assign(split=split))
    df = pd.concat(frames, ignore_index=True)
    notes, counts = [], {"rows_in_metadata": len(df)}
    if frontal_only:
        keep = df["Frontal/Lateral"] == "Frontal"
        counts["lateral_views_left_out"] = int((~keep).sum())
        df = df[keep].copy()
    df["sample_id"] = df["Path"].astype(str)
    df["patient_id"] = df["Path"].str.extract(r"(patient\d+)", expand=False)
    df["label"] = finding_label(df, target)
    df["image"] = [str(base.parent / p) if (base.parent / p).is_file() else str(base / Path(*Path(p).parts[1:]))
                   for p in df["Path"]]
    df.loc[~df["image"].map(lambda p: Path(p).is_file()), "image"] = None
    df, c, n = keep_rows_with_files(df, "image", "image", keep_missing_images, ACCESS, root)
    counts.update(c)
    notes += n
    demo = _demo_path(root, base)
    if demo is None:
        df["PRIMARY_RACE"] = None
        notes.append("CHEXPERT DEMO demographics file absent: race not available (request it from Stanford AIMI)")
    else:
        d = read_table(demo, "CheXpert demographics", ACCESS)
        require_columns(d, ("PATIENT", "PRIMARY_RACE"), demo)
        d = d.drop_duplicates("PATIENT").set_index("PATIENT")
        df["PRIMARY_RACE"] = df["patient_id"].map(d["PRIMARY_RACE"])
        missing = int(df["PRIMARY_RACE"].isna().sum())
        if missing:
            notes.append(f"{missing} images' patients are not in {demo.name}: race unknown for them")
    notes.append("the official valid.csv is used as 'val'; CheXpert has no public test labels: split policy 'patient'")
    return ReadResult(df.reset_index(drop=True), notes, counts, source=str(base))


register(DatasetCard(
    name="chexpert",
    title="CheXpert (Stanford chest X-rays) with CHEXPERT DEMO race",
    tasks=("classification",),
    modality="chest X-ray",
    dim=2,
    label_definition="'any_finding' (default): 1 unless No Finding == 1; option target=<finding> gives that "
                     "finding == 1 "
                     "(uncertain -1 and blank count as 0). FairMedFM uses No Finding itself as the positive class",
    attributes=(sex_attribute("Sex", "Male", "Female", unknown=("Unknown",)), *age_attributes("Age", 60),
                AttributeSpec("race", "PRIMARY_RACE", ("white", "asian", "black", "other"), mapping=RACE,
                              unknown_values=RACE_UNKNOWN, description="CHEXPERT DEMO PRIMARY_RACE strings")),
    reader=read_chexpert,
    classes=("no finding", "finding"),
    extra_label_columns=FINDINGS,
    split_policy="patient",
    prompt_templates=("a chest X-ray {}.",),
    class_prompts={"no finding": ("with no finding",), "finding": ("with an abnormal finding",)},
    size="224,316 chest radiographs of 65,240 patients",
    license="Stanford University School of Medicine CheXpert Dataset Research Use Agreement",
    citation="Irvin et al., CheXpert, AAAI 2019",
    access=ACCESS,
    layout="CheXpert-v1.0(-small)/train.csv, valid.csv (Path, Sex, Age, Frontal/Lateral, AP/PA, 14 labels: 1, 0, -1, "
           "blank); images at the Path relative to the folder above; CHEXPERT DEMO.xlsx (or .csv) with PATIENT, "
           "GENDER, AGE_AT_CXR, PRIMARY_RACE, ETHNICITY",
    layout_status="columns confirmed; the PRIMARY_RACE value list is from the public demographics file as used in the "
                  "literature and may be incomplete: any other value fails loudly as unmapped",
    notes=("frontal views only by default (frontal_only=False keeps laterals)",),
))
