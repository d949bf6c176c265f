"""Tiny fixtures that reproduce the providers' official file names, folders and columns."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from PIL import Image


def write_png(path: Path, shape=(16, 16), value: int | None = None, rgb: bool = False, mode: str = "L") -> Path:
    """A small image file (PNG/JPEG by suffix)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(abs(hash(path.name)) % 2**32)
    arr = rng.integers(0, 255, size=shape + ((3,) if rgb else ()), dtype=np.uint8)
    if value is not None:
        arr[:] = value
    Image.fromarray(arr).save(path)
    return path


def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


NIH_HEADER = ["Image Index", "Finding Labels", "Follow-up #", "Patient ID", "Patient Age", "Patient Gender",
              "View Position", "OriginalImage[Width", "Height]", "OriginalImagePixelSpacing[x", "y]"]


def make_nih(root: Path, n_patients: int = 12, with_lists: bool = True, missing: int = 2) -> Path:
    """NIH ChestX-ray14 layout: Data_Entry_2017_v2020.csv, train_val_list.txt, test_list.txt, images/."""
    rows, names = [], []
    findings = ["No Finding", "Cardiomegaly", "Effusion|Infiltration", "Hernia", "No Finding"]
    for p in range(1, n_patients + 1):
        for f in range(2):
            name = f"{p:08d}_{f:03d}.png"
            rows.append([name, findings[(p + f) % len(findings)], f, p, 20 + 5 * p, "M" if p % 2 else "F", "PA",
                         2500, 2048, 0.143, 0.143])
            names.append(name)
    write_csv(root / "Data_Entry_2017_v2020.csv", NIH_HEADER, rows)
    for name in names[: len(names) - missing]:
        write_png(root / "images" / name)
    if with_lists:
        test_patients = {p for p in range(1, n_patients + 1) if p % 4 == 0}
        tv = [n for n in names if int(n[:8]) not in test_patients]
        te = [n for n in names if int(n[:8]) in test_patients]
        (root / "train_val_list.txt").write_text("\n".join(tv) + "\n")
        (root / "test_list.txt").write_text("\n".join(te) + "\n")
    return root


HAM_HEADER = ["lesion_id", "image_id", "dx", "dx_type", "age", "sex", "localization", "dataset"]


def make_ham(root: Path, n: int = 12, sexes=("male", "female", "unknown"), masks: bool = True) -> Path:
    """HAM10000 layout: HAM10000_metadata.csv, HAM10000_images_part_1/2, segmentation masks."""
    dx = ["nv", "mel", "bkl", "bcc", "akiec", "df", "vasc"]
    rows = []
    for i in range(n):
        image_id = f"ISIC_{24306 + i:07d}"
        age = "" if i == 5 else float(30 + 5 * i)
        rows.append([f"HAM_{i // 2:07d}", image_id, dx[i % 7], "histo", age, sexes[i % len(sexes)], "back",
                     "vidir_modern"])
        part = "HAM10000_images_part_1" if i < n // 2 else "HAM10000_images_part_2"
        write_png(root / part / f"{image_id}.jpg", (30, 40), rgb=True)
        if masks:
            mpath = root / "HAM10000_segmentations_lesion_tschandl" / f"{image_id}_segmentation.png"
            mpath.parent.mkdir(parents=True, exist_ok=True)
            m = np.zeros((30, 40), np.uint8)
            m[10:20, 10 + i : 20 + i] = 255
            Image.fromarray(m).save(mpath)
    write_csv(root / "HAM10000_metadata.csv", HAM_HEADER, rows)
    return root


def write_npz(path: Path, **arrays) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **{k: np.asarray(v) for k, v in arrays.items()})
    return path


def make_harvard(root: Path, kind: str, n_per_split=(4, 2, 2)) -> Path:
    """FairVLMed10k / Harvard-GF / FairSeg layout: Training/ Validation/ Test/ with data_xxxxx.npz."""
    k = 0
    for folder, n in zip(("Training", "Validation", "Test"), n_per_split):
        for _ in range(n):
            k += 1
            common = dict(age=30 + 7 * k, race=k % 3, ethnicity=(k % 3) - 1, language=k % 3,
                          maritalstatus=(k % 6) - 1)
            if kind == "fairvlmed10k":
                write_npz(root / folder / f"data_{k:05d}.npz", slo_fundus=np.full((20, 24), k, np.uint8),
                          glaucoma=k % 2, gender=k % 2, md=-1.5, tds=np.zeros(52), note=f"note {k}", **common)
            elif kind == "harvard-gf":
                write_npz(root / folder / f"data_{k:04d}.npz", rnflt=np.linspace(-2, 350, 200 * 200).reshape(200, 200),
                          glaucoma=k % 2, male=k % 2, md=0.0, tds=np.zeros(52), **common)
            else:
                mask = np.zeros((20, 24), np.int8)
                mask[5:15, 6:16] = -1
                mask[8:12, 9:13] = -2
                common["age"] = (30 + 7 * k) * 365
                write_npz(root / folder / f"data_{k:05d}.npz", slo_fundus=np.full((20, 24), k, np.uint8),
                          disc_cup_mask=mask, gender=k % 2, **common)
    return root


CHEXPERT_LABELS = ["No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema",
                   "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion", "Pleural Other",
                   "Fracture", "Support Devices"]


def make_chexpert(root: Path, with_demo: bool = True) -> Path:
    """CheXpert-v1.0-small/train.csv, valid.csv, images at Path, and CHEXPERT DEMO.csv beside."""
    base = root / "CheXpert-v1.0-small"
    rows = {"train": [], "valid": []}
    for p in range(1, 9):
        split = "valid" if p == 8 else "train"
        for study, view in ((1, "frontal"), (1, "lateral")):
            path = (f"CheXpert-v1.0-small/{split}/patient{p:05d}/study{study}/"
                    f"view{1 if view == 'frontal' else 2}_{view}.jpg")
            write_png(root / path, (12, 12))
            labels = [1.0 if p % 3 == 0 else ""] + ["" for _ in CHEXPERT_LABELS[1:]]
            if p % 3 == 1:
                labels[10] = 1.0
            if p % 3 == 2:
                labels[10] = -1.0
            rows[split].append([path, "Female" if p % 2 else "Male", 40 + 4 * p, view.capitalize(),
                                "PA" if view == "frontal" else ""] + labels)
    header = ["Path", "Sex", "Age", "Frontal/Lateral", "AP/PA"] + CHEXPERT_LABELS
    write_csv(base / "train.csv", header, rows["train"])
    write_csv(base / "valid.csv", header, rows["valid"])
    if with_demo:
        races = ["White", "Asian, non-Hispanic", "Black or African American", "Other", "Unknown", "White, Hispanic",
                 "Patient Refused", "Asian"]
        write_csv(root / "CHEXPERT DEMO.csv", ["PATIENT", "GENDER", "AGE_AT_CXR", "PRIMARY_RACE", "ETHNICITY"],
                  [[f"patient{p:05d}", "Female", 40 + 4 * p, races[p - 1], "Non-Hispanic/Non-Latino"]
                   for p in range(1, 9)])
    return root


def make_mimic(root: Path, with_admissions: bool = True) -> Path:
    """MIMIC-CXR-JPG metadata/chexpert/split CSVs, files/pXX/..., and MIMIC-IV hosp/patients, admissions."""
    import gzip

    meta, lab, split, pat, adm = [], [], [], [], []
    for k, sid in enumerate(range(10000032, 10000040)):
        study = 50000000 + k
        for j, view in enumerate(("PA", "LATERAL")):
            dicom = f"d{k}-{j}"
            meta.append([dicom, sid, study, "CHEST (PA AND LAT)", view, 100, 100])
            split.append([dicom, study, sid, "test" if k >= 6 else ("validate" if k == 5 else "train")])
            write_png(root / "files" / f"p{str(sid)[:2]}" / f"p{sid}" / f"s{study}" / f"{dicom}.jpg", (10, 10))
        lab.append([sid, study] + [1.0 if (f == "No Finding" and k % 2) else "" for f in CHEXPERT_LABELS])
        pat.append([sid, "F" if k % 2 else "M", 50 + 3 * k, 2150, "2014 - 2016", ""])
        races = ["WHITE", "BLACK/AFRICAN AMERICAN", "ASIAN - CHINESE", "HISPANIC/LATINO - PUERTO RICAN", "UNKNOWN",
                 "OTHER", "WHITE", "WHITE"]
        adm.append([sid, 20000000 + k, races[k]])
        if k == 7:
            adm.append([sid, 30000000 + k, "BLACK/AFRICAN AMERICAN"])
    def gz(path, header, rows):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = write_csv(path.with_suffix(""), header, rows)
        with open(tmp, "rb") as src, gzip.open(path, "wb") as dst:
            dst.write(src.read())
        tmp.unlink()
    gz(root / "mimic-cxr-2.0.0-metadata.csv.gz",
       ["dicom_id", "subject_id", "study_id", "PerformedProcedureStepDescription", "ViewPosition", "Rows", "Columns"],
       meta)
    gz(root / "mimic-cxr-2.0.0-chexpert.csv.gz", ["subject_id", "study_id"] + CHEXPERT_LABELS, lab)
    gz(root / "mimic-cxr-2.0.0-split.csv.gz", ["dicom_id", "study_id", "subject_id", "split"], split)
    gz(root / "hosp" / "patients.csv.gz",
       ["subject_id", "gender", "anchor_age", "anchor_year", "anchor_year_group", "dod"], pat)
    if with_admissions:
        gz(root / "hosp" / "admissions.csv.gz", ["subject_id", "hadm_id", "race"], adm)
    return root


def make_papila(root: Path) -> Path:
    """PAPILA ClinicalData/patient_data_od.xlsx, _os.xlsx (title row, header, units row) and FundusImages/."""
    import pandas as pd

    for eye in ("od", "os"):
        rows = [["PAPILA clinical data", None, None, None, None],
                [None, "Age", "Gender", "Diagnosis", "Refractive_Defect"],
                [None, "years", "0: male, 1: female", "0 healthy 1 glaucoma 2 suspicious", "D"]]
        for i in range(2, 12):
            rows.append([f"#{i:03d}", 40 + 3 * i, i % 2, (i + (eye == "os")) % 3, -1.25])
            write_png(root / "FundusImages" / f"RET{i:03d}{eye.upper()}.jpg", (14, 18), rgb=True)
        (root / "ClinicalData").mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_excel(root / "ClinicalData" / f"patient_data_{eye}.xlsx", header=False, index=False)
    return root


BRSET_HEADER = ["image_id", "patient_id", "camera", "patient_age", "comorbidities", "diabetes_time_y", "insuline",
                "patient_sex", "exam_eye", "diabetes", "nationality", "optic_disc", "vessels", "macula", "DR_SDRG",
                "DR_ICDR", "focus", "iluminaton", "image_field", "artifacts", "quality", "diabetic_retinopathy"]


def make_brset(root: Path) -> Path:
    rows = []
    for i in range(1, 13):
        rows.append([f"img{i:05d}", (i + 1) // 2, "Canon CR", "" if i == 3 else 30 + 4 * i, "diabetes1", 5, "yes",
                     1 if i % 3 else 2, 1 + i % 2, "yes", "Brazil", 1, 1, 1, i % 5, i % 5, 1, 1, 1, 1, "Adequate",
                     int(i % 5 > 0)])
        write_png(root / "fundus_photos" / f"img{i:05d}.jpg", (12, 16), rgb=True)
    write_csv(root / "labels.csv", BRSET_HEADER, rows)
    return root


def make_fitzpatrick(root: Path) -> Path:
    header = ["md5hash", "fitzpatrick_scale", "fitzpatrick_centaur", "label", "nine_partition_label",
              "three_partition_label", "qc", "url", "url_alphanum"]
    parts = ["benign", "malignant", "non-neoplastic"]
    rows = []
    for i in range(12):
        h = f"{i:032x}"
        rows.append([h, -1 if i == 4 else 1 + i % 6, 1 + i % 6, "psoriasis", "inflammatory", parts[i % 3], "",
                     "http://x", "x"])
        write_png(root / "images" / f"{h}.jpg", (10, 10), rgb=True)
    write_csv(root / "fitzpatrick17k.csv", header, rows)
    return root


def make_montgomery(root: Path) -> Path:
    base = root / "MontgomerySet"
    for i in range(1, 9):
        name = f"MCUCXR_{i:04d}_{i % 2}.png"
        write_png(base / "CXR_png" / name, (20, 16))
        for side, cols in (("left", slice(2, 7)), ("right", slice(9, 14))):
            m = np.zeros((20, 16), np.uint8)
            m[3:17, cols] = 255
            (base / "ManualMask" / f"{side}Mask").mkdir(parents=True, exist_ok=True)
            Image.fromarray(m).save(base / "ManualMask" / f"{side}Mask" / name)
        (base / "ClinicalReadings").mkdir(parents=True, exist_ok=True)
        (base / "ClinicalReadings" / name.replace(".png", ".txt")).write_text(
            f"Patient's Sex: {'F' if i % 3 else 'M'}\nPatient's Age: {30 + 5 * i:03d}Y\n"
            f"{'normal' if i % 2 == 0 else 'TB'}\n")
    return root


def make_tusc(root: Path) -> Path:
    import h5py

    root.mkdir(parents=True, exist_ok=True)
    ids, frames = [], []
    for a in ("1_", "2_", "3_", "4_"):
        for f in range(3):
            ids.append(a)
            frames.append(f)
    n = len(ids)
    with h5py.File(root / "dataset.hdf5", "w") as h:
        h["image"] = np.arange(n * 12 * 10, dtype=np.uint8).reshape(n, 12, 10)
        m = np.zeros((n, 12, 10), np.uint8)
        m[:, 3:8, 2:6] = 255
        h["mask"] = m
        h["annot_id"] = np.array([s.encode() for s in ids])
        h["frame_num"] = np.array(frames)
    write_csv(root / "metadata.csv",
              ["annot_id", "age", "sex", "location", "ti-rads_composition", "histopath_diagnosis"],
              [["1_", 45, "F", "r lobe", "solid", "Benign"], ["2_", 70, "M", "l lobe", "solid", "Malignant"],
               ["3_", 33, "F", "isthmus", "cystic", "Benign"], ["4_", 61, "F", "r lobe", "solid", "Benign"]])
    return root


def write_nifti(path: Path, arr: np.ndarray, spacing=(0.8, 0.9, 2.5)) -> Path:
    import nibabel as nib

    path.parent.mkdir(parents=True, exist_ok=True)
    img = nib.Nifti1Image(arr, np.diag([*spacing, 1.0]))
    nib.save(img, str(path))
    return path


def write_mha(path: Path, arr_zyx: np.ndarray, spacing_xyz=(0.6, 0.6, 3.3)) -> Path:
    """A MetaImage with local data (the SPIDER format)."""
    types = {np.dtype(np.int16): "MET_SHORT", np.dtype(np.uint8): "MET_UCHAR", np.dtype(np.uint16): "MET_USHORT"}
    path.parent.mkdir(parents=True, exist_ok=True)
    z, y, x = arr_zyx.shape
    header = (f"ObjectType = Image\nNDims = 3\nBinaryData = True\nBinaryDataByteOrderMSB = False\n"
              f"ElementSpacing = {' '.join(str(s) for s in spacing_xyz)}\nDimSize = {x} {y} {z}\n"
              f"ElementType = {types[arr_zyx.dtype]}\nElementDataFile = LOCAL\n")
    path.write_bytes(header.encode() + np.ascontiguousarray(arr_zyx).tobytes())
    return path


def volume(shape_xyz=(10, 8, 6), value_range=(-1000, 400), seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(value_range[0], value_range[1], size=shape_xyz).astype(np.int16)
