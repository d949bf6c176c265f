"""MIMIC-CXR-JPG (metadata, CheXpert labels, official split) joined with MIMIC-IV patients (sex,
anchor age) and admissions (race)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fairmedbench.registry.datasets.card import AttributeSpec, DatasetCard, age_attributes, register, sex_attribute
from fairmedbench.registry.datasets.chexpert import FINDINGS, finding_label

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.dataset import ReadResult

ACCESS = ("https://physionet.org/content/mimic-cxr-jpg/ and https://physionet.org/content/mimiciv/ "
          "(credentialed PhysioNet access, DUA)")
MIMIC_RACE = {
    **{v: "white" for v in ("WHITE", "WHITE - OTHER EUROPEAN", "WHITE - RUSSIAN", "WHITE - BRAZILIAN",
                            "WHITE - EASTERN EUROPEAN", "PORTUGUESE")},
    **{v: "black" for v in ("BLACK/AFRICAN AMERICAN", "BLACK/CAPE VERDEAN", "BLACK/CARIBBEAN ISLAND", "BLACK/AFRICAN")},
    **{v: "asian" for v in ("ASIAN", "ASIAN - CHINESE", "ASIAN - SOUTH EAST ASIAN", "ASIAN - ASIAN INDIAN",
                            "ASIAN - KOREAN")},
    **{v: "hispanic" for v in ("HISPANIC/LATINO", "HISPANIC OR LATINO", "HISPANIC/LATINO - PUERTO RICAN",
                               "HISPANIC/LATINO - DOMINICAN", "HISPANIC/LATINO - GUATEMALAN",
                               "HISPANIC/LATINO - SALVADORAN",
                               "HISPANIC/LATINO - MEXICAN", "HISPANIC/LATINO - COLUMBIAN", "HISPANIC/LATINO - HONDURAN",
                               "HISPANIC/LATINO - CUBAN", "HISPANIC/LATINO - CENTRAL AMERICAN", "SOUTH AMERICAN")},
    **{v: "other" for v in ("OTHER", "AMERICAN INDIAN/ALASKA NATIVE", "NATIVE HAWAIIAN OR OTHER PACIFIC ISLANDER",
                            "MULTIPLE RACE/ETHNICITY")},
}
MIMIC_RACE_UNKNOWN = ("UNKNOWN", "UNABLE TO OBTAIN", "PATIENT DECLINED TO ANSWER", "CONFLICTING")


def _find(root: Path, stem: str, dirs=("", "hosp", "core")) -> Path | None:
    for d in dirs:
        for suffix in (".csv.gz", ".csv"):
            if (root / d / f"{stem}{suffix}").is_file():
                return root / d / f"{stem}{suffix}"
    return None


def _subject_race(adm):
    """One race per subject: the single recorded value, 'CONFLICTING' when admissions disagree."""
    col = "race" if "race" in adm.columns else "ethnicity"
    known = adm[~adm[col].isin(MIMIC_RACE_UNKNOWN[:-1]) & adm[col].notna()]
    per = known.groupby("subject_id")[col].agg(lambda v: v.iloc[0] if v.nunique() == 1 else "CONFLICTING")
    rest = adm.groupby("subject_id")[col].first()
    return per.reindex(rest.index).fillna(rest)


def read_mimic_cxr(root: Path, mimic_iv_root: str | None = None, target: str = "any_finding",
                   frontal_only: bool = True, keep_missing_images: bool = False) -> ReadResult:
    """Read MIMIC-CXR-JPG with MIMIC-IV demographics; one row per frontal image with a file present."""
    from fairmedbench.errors import MissingResourceError
    from fairmedbench.registry.datasets.common import keep_rows_with_files
    from fairmedbench.registry.datasets.dataset import ReadResult
    from fairmedbench.registry.datasets.io import read_table, require_columns

    paths = {k: _find(root, f"mimic-cxr-2.0.0-{k}") for k in ("metadata", "chexpert", "split")}
    missing = [f"mimic-cxr-2.0.0-{k}.csv.gz" for k, p in paths.items() if p is None]
    found = {k: p for k, p in paths.items() if p is not None}
    if missing:
        raise MissingResourceError(f"MIMIC-CXR-JPG file(s) {missing} not found in {root}. Request access: {ACCESS}")
    iv = Path(mimic_iv_root) if mimic_iv_root else root
    pat_path, adm_path = _find(iv, "patients"), _find(iv, "admissions")
    if pat_path is None:
        raise MissingResourceError(
            f"MIMIC-IV patients.csv.gz (sex, anchor_age) not found in {iv} (or its hosp/, core/); pass mimic_iv_root. "
            f"Request access: {ACCESS}")
    meta = read_table(found["metadata"], "MIMIC-CXR metadata", ACCESS)
    require_columns(meta, ("dicom_id", "subject_id", "study_id", "ViewPosition"), found["metadata"])
    labels = read_table(found["chexpert"], "MIMIC-CXR CheXpert labels", ACCESS)
    require_columns(labels, ("subject_id", "study_id", *FINDINGS), found["chexpert"])
    split = read_table(found["split"], "MIMIC-CXR split", ACCESS)
    require_columns(split, ("dicom_id", "split"), found["split"])
    pat = read_table(pat_path, "MIMIC-IV patients", ACCESS)
    require_columns(pat, ("subject_id", "gender", "anchor_age"), pat_path)
    counts = {"rows_in_metadata": len(meta)}
    notes = []
    if frontal_only:
        keep = meta["ViewPosition"].isin(["PA", "AP"])
        counts["non_frontal_left_out"] = int((~keep).sum())
        meta = meta[keep]
    df = meta.merge(labels, on=["subject_id", "study_id"], how="left")
    df = df.merge(split[["dicom_id", "split"]], on="dicom_id", how="left")
    df = df.merge(pat[["subject_id", "gender", "anchor_age"]], on="subject_id", how="left")
    if adm_path is not None:
        adm = read_table(adm_path, "MIMIC-IV admissions", ACCESS)
        col = "race" if "race" in adm.columns else "ethnicity"
        require_columns(adm, ("subject_id", col), adm_path)
        df["race"] = df["subject_id"].map(_subject_race(adm))
        n_conf = int((df["race"] == "CONFLICTING").sum())
        if n_conf:
            notes.append(f"{n_conf} images' subjects have conflicting race across admissions: race unknown for them")
    else:
        df["race"] = None
        notes.append("MIMIC-IV admissions.csv.gz absent: race not available")
    df["split"] = df["split"].replace({"validate": "val"})
    df["sample_id"] = df["dicom_id"].astype(str)
    df["patient_id"] = df["subject_id"].astype(str)
    df["label"] = finding_label(df, target)
    sid, stid = df["subject_id"].astype(str), df["study_id"].astype(str)
    df["image"] = [root / "files" / f"p{s[:2]}" / f"p{s}" / f"s{t}" / f"{d}.jpg"
                   for s, t, d in zip(sid, stid, df["dicom_id"])]
    df["image"] = [str(p) if p.is_file() else None for p in df["image"]]
    df, c, n = keep_rows_with_files(df, "image", "image", keep_missing_images, ACCESS, root)
    counts.update(c)
    notes += n + ["age = MIMIC-IV anchor_age (age in the patient's anchor year, not at the study)"]
    return ReadResult(df.reset_index(drop=True), notes, counts, source=str(found["metadata"]))


register(DatasetCard(
    name="mimic-cxr",
    title="MIMIC-CXR-JPG with MIMIC-IV demographics",
    tasks=("classification",),
    modality="chest X-ray",
    dim=2,
    label_definition="'any_finding' (default): 1 unless No Finding == 1 in mimic-cxr-2.0.0-chexpert; "
                     "option target=<finding>",
    attributes=(sex_attribute("gender", "M", "F"), *age_attributes("anchor_age", 60),
                AttributeSpec("race", "race", ("white", "black", "asian", "hispanic", "other"), mapping=MIMIC_RACE,
                              unknown_values=MIMIC_RACE_UNKNOWN,
                              description="MIMIC-IV admissions race (v2) / ethnicity (v1); one value per subject")),
    reader=read_mimic_cxr,
    classes=("no finding", "finding"),
    extra_label_columns=FINDINGS,
    split_policy="official",
    prompt_templates=("a chest X-ray {}.",),
    class_prompts={"no finding": ("with no finding",), "finding": ("with an abnormal finding",)},
    size="377,110 chest X-ray images from 227,835 studies of 65,379 patients",
    license="PhysioNet Credentialed Health Data License 1.5.0",
    citation="Johnson et al., MIMIC-CXR-JPG, 2019; Johnson et al., MIMIC-IV, Sci Data 2023",
    access=ACCESS,
    layout="mimic-cxr-2.0.0-metadata.csv.gz, -chexpert.csv.gz, -split.csv.gz (train/validate/test), "
           "files/pXX/pSUBJECT/sSTUDY/DICOM.jpg; MIMIC-IV hosp/patients.csv.gz (subject_id, gender, anchor_age) and "
           "hosp/admissions.csv.gz (race; 'ethnicity' in v1.0 core/)",
    layout_status="confirmed file and column names; the race value list covers MIMIC-IV v2.2 strings, "
                  "others fail loudly",
))
