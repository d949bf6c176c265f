"""Readers of the other official layouts, each on a tiny fixture with the provider's file names,
folders, columns and raw attribute codes."""

from __future__ import annotations

import numpy as np
import pytest
from fmb_ds_fixtures import (
    make_brset,
    make_chexpert,
    make_fitzpatrick,
    make_harvard,
    make_mimic,
    make_montgomery,
    make_papila,
    make_tusc,
    volume,
    write_csv,
    write_mha,
    write_nifti,
)

from fairmedbench.errors import InputError, MissingResourceError
from fairmedbench.registry.datasets import load_dataset


def test_fairvlmed10k_npz_with_attributes_inside(tmp_path):
    ds = load_dataset("fairvlmed10k", make_harvard(tmp_path / "f", "fairvlmed10k"))
    s = ds.samples
    assert len(ds) == 8 and sorted(s["split"].unique()) == ["test", "train", "val"]
    assert (s.loc[s["gender"] == 1, "attr:sex"] == "male").all()
    assert (s.loc[s["gender"] == 0, "attr:sex"] == "female").all()
    assert (s.loc[s["race"] == 0, "attr:race"] == "asian").all()
    assert s.loc[s["ethnicity"] == -1, "attr:ethnicity"].isna().all()
    assert ds.report["excluded"]["ethnicity"] == {"-1": 2}
    assert s["label"].tolist() == (s["glaucoma"] % 2).tolist()
    assert ds.load_image(0).shape == (20, 24)
    assert ds.split().sizes() == {"train": 4, "val": 2, "test": 2}


def test_harvard_gf_rnflt_and_male_key(tmp_path):
    ds = load_dataset("harvard-gf", make_harvard(tmp_path / "g", "harvard-gf"))
    assert set(ds.samples["attr:sex"]) == {"male", "female"}
    img = ds.load_image(0)
    assert img.shape == (200, 200) and img.dtype == np.uint8 and img.max() == 255


def test_harvard_fairseg_disc_cup_masks_and_age_in_days(tmp_path):
    ds = load_dataset("harvard-fairseg", make_harvard(tmp_path / "s", "harvard-fairseg"))
    disc, cup = ds.load_mask(0, "disc"), ds.load_mask(0, "cup")
    assert disc.sum() == 100 and cup.sum() == 16 and (cup <= disc).all()
    assert ds.samples["age_years"].max() < 120 and any("days" in n for n in ds.report["notes"])
    with pytest.raises(InputError, match="rim"):
        ds.load_mask(0, "rim")


def test_harvard_npz_missing_field_error_or_skipped(tmp_path):
    root = make_harvard(tmp_path / "f", "fairvlmed10k")
    np.savez(root / "Training" / "data_00099.npz", slo_fundus=np.zeros((4, 4), np.uint8), glaucoma=1)
    with pytest.raises(InputError, match="data_00099.npz: missing field 'age'"):
        load_dataset("fairvlmed10k", root)
    ds = load_dataset("fairvlmed10k", root, skip_bad=True)
    assert len(ds) == 8 and ds.report["skipped_bad_npz"] == 1


def test_chexpert_with_demographics(tmp_path):
    ds = load_dataset("chexpert", make_chexpert(tmp_path / "c"))
    s = ds.samples
    assert len(ds) == 8 and ds.report["lateral_views_left_out"] == 8
    assert (s.loc[s["Sex"] == "Female", "attr:sex"] == "female").all()
    assert s.set_index("patient_id").loc["patient00002", "attr:race"] == "asian"
    assert ds.report["excluded"]["race"] == {"Unknown": 1, "Patient Refused": 1}
    assert s.set_index("patient_id").loc["patient00003", "label"] == 0  # No Finding == 1
    eff = load_dataset("chexpert", tmp_path / "c", target="Pleural Effusion").samples.set_index("patient_id")["label"]
    assert eff["patient00001"] == 1 and eff["patient00002"] == 0  # uncertain -1 counts as 0
    assert ds.load_image(0).shape == (12, 12)


def test_chexpert_without_demographics_and_unmapped_race(tmp_path):
    root = make_chexpert(tmp_path / "c", with_demo=False)
    ds = load_dataset("chexpert", root)
    assert ds.samples["attr:race"].isna().all() and any("race not available" in n for n in ds.report["notes"])
    write_csv(root / "CHEXPERT DEMO.csv", ["PATIENT", "PRIMARY_RACE"], [["patient00001", "Martian"]])
    with pytest.raises(InputError, match=r"'PRIMARY_RACE'.*'Martian'"):
        load_dataset("chexpert", root)


def test_mimic_cxr_joins_mimic_iv(tmp_path):
    ds = load_dataset("mimic-cxr", make_mimic(tmp_path / "m"))
    s = ds.samples.set_index("subject_id")
    assert len(ds) == 8 and ds.report["non_frontal_left_out"] == 8
    assert s.loc[10000034, "attr:race"] == "asian" and s.loc[10000035, "attr:race"] == "hispanic"
    assert s.loc[10000032, "attr:sex"] == "male" and s.loc[10000033, "attr:sex"] == "female"
    assert pd_isna(s.loc[10000039, "attr:race"])  # conflicting admissions
    split = ds.split(seed=0)
    assert split.sizes() == {"train": 5, "val": 1, "test": 2}
    assert ds.load_image(0).shape == (10, 10)


def pd_isna(v) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v))


def test_mimic_cxr_missing_patients_file(tmp_path):
    root = make_mimic(tmp_path / "m")
    (root / "hosp" / "patients.csv.gz").unlink()
    with pytest.raises(MissingResourceError, match="patients.csv.gz.*physionet"):
        load_dataset("mimic-cxr", root)


def test_papila_clinical_sheets(tmp_path):
    pytest.importorskip("openpyxl")
    root = make_papila(tmp_path / "p")
    ds = load_dataset("papila", root)
    s = ds.samples
    assert ds.report["suspects"] == 7 and len(ds) == 13
    assert set(s["label"]) == {0, 1}
    assert (s.loc[s["Gender"] == 1, "attr:sex"] == "female").all()
    assert (s.loc[s["Gender"] == 0, "attr:sex"] == "male").all()
    assert set(s["attr:age"]) == {"<60", ">=60"}
    both = load_dataset("papila", root, suspect="positive")
    assert len(both) == 20 and both.samples.groupby("patient_id").size().max() == 2
    assert ds.load_image(0).shape == (14, 18, 3)


def test_brset_labels(tmp_path):
    ds = load_dataset("brset", make_brset(tmp_path / "b"))
    s = ds.samples
    assert (s.loc[s["patient_sex"] == 1, "attr:sex"] == "male").all()
    assert (s.loc[s["patient_sex"] == 2, "attr:sex"] == "female").all()
    assert (s["label"] == (s["DR_ICDR"] > 0)).all() and ds.report["excluded"]["age"] == {"<missing>": 1}
    split = ds.split(seed=0, fractions=(0.5, 0.25, 0.25))
    assert set(s.iloc[split.train]["patient_id"]).isdisjoint(s.iloc[split.test]["patient_id"])


def test_fitzpatrick_skin_types(tmp_path):
    ds = load_dataset("fitzpatrick17k", make_fitzpatrick(tmp_path / "z"))
    counts = ds.group_counts()
    assert counts["skin_type"]["excluded"] == 1 and sum(counts["skin_type"][str(k)] for k in range(1, 7)) == 11
    assert counts["skin_type_binary"] == {"1-3": 6, "4-6": 5, "excluded": 1}
    assert ds.samples["label"].sum() == 4


def test_montgomery_lungs_and_readings(tmp_path):
    ds = load_dataset("montgomery", make_montgomery(tmp_path / "mc"))
    s = ds.samples
    assert len(ds) == 8 and s["label"].tolist() == [i % 2 for i in range(1, 9)]
    assert s.loc[0, "attr:sex"] == "female" and s.loc[2, "attr:sex"] == "male" and s.loc[0, "age"] == 35
    left, right, lungs = ds.load_mask(0, "left"), ds.load_mask(0, "right"), ds.load_mask(0)
    assert left.sum() == right.sum() == 70 and lungs.sum() == 140


def test_tusc_hdf5_frames(tmp_path):
    pytest.importorskip("h5py")
    ds = load_dataset("tusc", make_tusc(tmp_path / "t"))
    assert len(ds) == 12 and ds.samples["patient_id"].nunique() == 4
    assert ds.group_counts()["sex"] == {"female": 9, "male": 3}
    assert ds.load_image(4).shape == (12, 10) and ds.load_mask(4).sum() == 20
    assert len(load_dataset("tusc", tmp_path / "t", every_nth_frame=2)) == 8


def test_adni_collection_and_nifti(tmp_path):
    root = tmp_path / "adni"
    header = ["Image Data ID", "Subject", "Group", "Sex", "Age", "Visit", "Modality", "Description", "Type", "Acq Date",
              "Format", "Downloaded"]
    rows = []
    for k in range(6):
        iid, subj = f"I{1000 + k}", f"002_S_{k // 2:04d}"
        rows.append([iid, subj, ["CN", "MCI", "AD"][k % 3], "M" if k % 2 else "F", 55 + 5 * k, "sc", "MRI", "MPRAGE",
                     "Original", "1/01/2010", "NiFTI", "1/01/2020"])
        write_nifti(root / "ADNI" / subj / "MPRAGE" / "2010-01-01" / iid / f"ADNI_{subj}_MR_MPRAGE_br_raw_{iid}.nii",
                    volume(seed=k).astype(np.float32))
    write_csv(root / "ADNI1_Screening_1_04_2020.csv", header, rows)
    ds = load_dataset("adni", root)
    assert len(ds) == 6 and ds.samples["label"].tolist() == [0, 1, 1, 0, 1, 1]
    vol = ds.load_image(0)
    assert vol.shape == (6, 8, 10) and vol.dtype == np.uint8
    assert ds.spacing(0) == pytest.approx((2.5, 0.9, 0.8))
    assert ds.load_slices(0, 3).shape == (3, 8, 10)
    split = ds.split(seed=1, fractions=(0.34, 0.33, 0.33))
    assert set(ds.samples.iloc[split.train]["patient_id"]).isdisjoint(ds.samples.iloc[split.test]["patient_id"])


def test_covid_ct_md_volumes(tmp_path):
    root = tmp_path / "cc"
    rows = []
    classes = (("COVID-19", "COVID-19 Cases"), ("CAP", "Cap Cases"), ("Normal", "Normal Cases"))
    for k, (diag, folder) in enumerate(classes * 2):
        case = f"P{k:03d}"
        rows.append([case, diag, "M" if k % 2 else "F", f"0{40 + 10 * k}Y"])
        write_nifti(root / folder / f"{case}.nii.gz", volume(seed=k))
    write_csv(root / "Clinical-data.csv", ["Folder", "Diagnosis", "Patient Gender", "Patient Age"], rows)
    ds = load_dataset("covid-ct-md", root)
    assert ds.samples["label"].tolist() == [1, 1, 0, 1, 1, 0]
    assert ds.samples["age_years"].tolist() == [40, 50, 60, 70, 80, 90]
    assert ds.load_image(0).shape == (6, 8, 10)


def test_kits23_masks(tmp_path):
    import json

    root = tmp_path / "kits23" / "dataset"
    cases = []
    for k in range(3):
        cid = f"case_{k:05d}"
        seg = np.zeros((10, 8, 6), np.uint8)
        seg[2:6, 2:6, 1:4] = 1
        seg[3:5, 3:5, 2:3] = 2
        seg[5, 5, 3] = 3
        write_nifti(root / cid / "imaging.nii.gz", volume(seed=k))
        write_nifti(root / cid / "segmentation.nii.gz", seg)
        cases.append({"case_id": cid, "gender": ["male", "female", "male"][k], "age_at_nephrectomy": 50 + 10 * k})
    (root / "kits23.json").write_text(json.dumps(cases))
    ds = load_dataset("kits23", tmp_path / "kits23")
    assert ds.load_mask(0).sum() == 48 and ds.load_mask(0, "tumor").sum() == 4 and ds.load_mask(0, "masses").sum() == 5
    assert ds.load_mask(0).shape == ds.load_image(0).shape == (6, 8, 10)
    assert ds.group_counts()["sex"] == {"female": 1, "male": 2}


def test_kits23_mask_shape_mismatch(tmp_path):
    import json

    root = tmp_path / "kits23" / "dataset"
    write_nifti(root / "case_00000" / "imaging.nii.gz", volume())
    write_nifti(root / "case_00000" / "segmentation.nii.gz", np.zeros((4, 4, 4), np.uint8))
    (root / "kits23.json").write_text(
        json.dumps([{"case_id": "case_00000", "gender": "male", "age_at_nephrectomy": 60}]))
    with pytest.raises(InputError, match=r"shape \(4, 4, 4\).*\(6, 8, 10\)"):
        load_dataset("kits23", tmp_path / "kits23").load_mask(0)


def test_spider_metaimage(tmp_path):
    root = tmp_path / "spider"
    rows = []
    for k in range(1, 4):
        for seq in ("t1", "t2"):
            arr = np.full((5, 7, 9), 10 * k, np.int16)
            lab = np.zeros((5, 7, 9), np.uint8)
            lab[1:3, 2:4, 2:5] = 3
            lab[3, 3, 3] = 100
            write_mha(root / "images" / f"{k}_{seq}.mha", arr)
            write_mha(root / "masks" / f"{k}_{seq}.mha", lab)
            rows.append([f"{k}_{seq}.mha", "training", "F" if k % 2 else "M", 50 + 5 * k])
    write_csv(root / "overview.csv", ["new_file_name", "subset", "sex", "age"], rows)
    ds = load_dataset("spider", root)
    assert len(ds) == 6 and ds.samples["patient_id"].nunique() == 3
    assert ds.load_image(0).shape == (5, 7, 9) and ds.spacing(0) == pytest.approx((3.3, 0.6, 0.6))
    assert ds.load_mask(0).sum() == 12 and ds.load_mask(0, "canal").sum() == 1
    assert len(load_dataset("spider", root, sequence="t2")) == 3


def test_candi_and_ircadb(tmp_path):
    root = tmp_path / "candi"
    for k, subj in enumerate(("BPDwoPsy_030", "HC_001")):
        d = root / "SchizBull_2008" / "group" / subj
        write_nifti(d / f"{subj}_procimg.nii.gz", volume(seed=k).astype(np.float32))
        write_nifti(d / f"{subj}_seg.nii.gz", (volume(seed=k) > 0).astype(np.uint8))
    write_csv(root / "SchizBull_2008_Demographics.csv", ["Subject", "Gender", "Age"],
              [["BPDwoPsy_030", "F", 9], ["HC_001", "M", 14]])
    ds = load_dataset("candi", root)
    assert ds.group_counts()["age"] == {"<12": 1, ">=12": 1} and ds.load_mask(1).shape == (6, 8, 10)
    ir = tmp_path / "ircadb"
    write_nifti(ir / "3Dircadb1.1" / "image.nii.gz", volume())
    write_nifti(ir / "3Dircadb1.1" / "liver.nii.gz", np.ones((10, 8, 6), np.uint8))
    with pytest.raises(MissingResourceError, match="patients.csv"):
        load_dataset("ircadb", ir)
    write_csv(ir / "patients.csv", ["patient", "sex", "age"], [[1, "F", 7], [2, "M", 46]])
    ds = load_dataset("ircadb", ir)
    assert len(ds) == 1 and ds.report["rows_without_volume"] == 1 and ds.load_mask(0).all()


def test_corrupt_nifti_is_skipped_with_skip_bad_and_named_without_it(tmp_path):
    root = tmp_path / "adni"
    header = ["Image Data ID", "Subject", "Group", "Sex", "Age", "Visit", "Modality", "Description", "Type", "Acq Date",
              "Format", "Downloaded"]
    rows, paths = [], []
    for k in range(6):
        iid, subj = f"I{1000 + k}", f"002_S_{k // 2:04d}"
        rows.append([iid, subj, ["CN", "MCI", "AD"][k % 3], "M" if k % 2 else "F", 55 + 5 * k, "sc", "MRI", "MPRAGE",
                     "Original", "1/01/2010", "NiFTI", "1/01/2020"])
        paths.append(write_nifti(root / "ADNI" / subj / "MPRAGE" / "2010-01-01" / iid /
                                 f"ADNI_{subj}_MR_MPRAGE_br_raw_{iid}.nii", volume(seed=k).astype(np.float32)))
    write_csv(root / "ADNI1_Screening_1_04_2020.csv", header, rows)
    paths[2].write_bytes(paths[2].read_bytes()[:200])  # header cut: not a NIfTI any more
    with pytest.raises(InputError, match=r"volume .*I1002.nii could not be read"):
        load_dataset("adni", root, verify=True)
    ok = load_dataset("adni", root, skip_bad=True)
    assert len(ok) == 5 and ok.report["skipped"] == {"decode failure": 1}
