"""NIH ChestX-ray14 and HAM10000 readers on fixtures in the official layouts; attribute mappings and
the bad-input errors (missing root, metadata, column; unmapped value; undecodable image; mask shape)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fmb_ds_fixtures import make_ham, make_nih, write_png

from fairmedbench.errors import InputError, MissingResourceError
from fairmedbench.registry.datasets import load_dataset


def test_nih_reads_official_layout_and_split(tmp_path):
    root = make_nih(tmp_path / "nih")
    ds = load_dataset("nih-cxr14", root)
    assert len(ds) == 22 and ds.report["rows_without_image"] == 2 and ds.report["rows_in_metadata"] == 24
    assert any("partial release" in n for n in ds.report["notes"])
    s = ds.samples
    assert set(s["attr:sex"]) == {"male", "female"}
    assert (s.loc[s["Patient Gender"] == "M", "attr:sex"] == "male").all()
    assert s.loc[s["sample_id"] == "00000002_000.png", "Effusion"].item() == 1
    assert s.loc[s["sample_id"] == "00000004_000.png", "label"].item() == 0
    assert (s.loc[s["age_years"] >= 60, "attr:age"] == ">=60").all()
    split = ds.split(seed=0)
    test_patients = set(s.iloc[split.test]["patient_id"])
    assert test_patients and all(int(p) % 4 == 0 for p in test_patients)
    assert set(s.iloc[split.val]["patient_id"]).isdisjoint(s.iloc[split.train]["patient_id"])
    assert ds.load_image(0).shape == (16, 16)


def test_nih_without_lists_falls_back_to_patient_policy(tmp_path):
    ds = load_dataset("nih-cxr14", make_nih(tmp_path / "nih", with_lists=False, missing=0))
    with pytest.raises(InputError, match="no official split"):
        ds.split("official")
    a, b = ds.split("patient", seed=1), ds.split(seed=1)
    assert a.fingerprint == b.fingerprint and b.policy.startswith("patient")


def test_data_root_from_env(tmp_path, monkeypatch):
    make_nih(tmp_path / "all" / "nih-cxr14")
    monkeypatch.setenv("FMB_DATA_ROOT", str(tmp_path / "all"))
    assert len(load_dataset("nih-cxr14")) == 22
    monkeypatch.setenv("FMB_DATA_NIH_CXR14", str(tmp_path / "absent"))
    monkeypatch.delenv("FMB_DATA_ROOT")
    with pytest.raises(MissingResourceError, match="FMB_DATA_NIH_CXR14.*nihcc"):
        load_dataset("nih-cxr14")


def test_missing_metadata_and_column(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(MissingResourceError, match="Data_Entry_2017.*Request access"):
        load_dataset("nih-cxr14", tmp_path / "empty")
    root = make_nih(tmp_path / "nih")
    meta = root / "Data_Entry_2017_v2020.csv"
    pd.read_csv(meta).drop(columns=["Patient Gender"]).to_csv(meta, index=False)
    with pytest.raises(InputError, match=r"Data_Entry_2017_v2020.csv.*Patient Gender"):
        load_dataset("nih-cxr14", root)


def test_unmapped_attribute_value_error_or_skipped(tmp_path):
    root = make_nih(tmp_path / "nih")
    meta = root / "Data_Entry_2017_v2020.csv"
    df = pd.read_csv(meta)
    df.loc[0, "Patient Gender"] = "O"
    df.to_csv(meta, index=False)
    with pytest.raises(InputError, match=r"'Patient Gender'.*'O' \(1 rows\)"):
        load_dataset("nih-cxr14", root)
    ds = load_dataset("nih-cxr14", root, skip_bad=True)
    assert ds.report["skipped"] == {"unmapped Patient Gender=O": 1} and len(ds) == 21


def test_undecodable_image_error_or_skipped(tmp_path):
    root = make_nih(tmp_path / "nih", missing=0)
    (root / "images" / "00000003_001.png").write_bytes(b"not a png")
    ds = load_dataset("nih-cxr14", root)
    pos = int(np.flatnonzero(ds.samples["sample_id"] == "00000003_001.png")[0])
    with pytest.raises(InputError, match="00000003_001.png could not be decoded"):
        ds.load_image(pos)
    with pytest.raises(InputError, match="could not be decoded"):
        load_dataset("nih-cxr14", root, verify=True)
    ok = load_dataset("nih-cxr14", root, verify=True, skip_bad=True)
    assert len(ok) == 23 and ok.report["skipped"] == {"decode failure": 1}


def test_empty_split_is_an_error(tmp_path):
    root = make_nih(tmp_path / "nih", n_patients=3, missing=0)
    ds = load_dataset("nih-cxr14", root)
    with pytest.raises(InputError, match=r"has empty val, test"):
        ds.split()


def test_ham_reads_official_layout_with_masks(tmp_path):
    root = make_ham(tmp_path / "ham")
    ds = load_dataset("ham10000", root)
    s = ds.samples
    assert len(ds) == 12 and ds.report["rows_with_mask"] == 12
    assert (s.loc[s["sex"] == "male", "attr:sex"] == "male").all()
    assert (s.loc[s["sex"] == "female", "attr:sex"] == "female").all()
    assert s.loc[s["sex"] == "unknown", "attr:sex"].isna().all()
    assert ds.report["excluded"] == {"sex": {"unknown": 4}, "age": {"<missing>": 1}, "age_bins": {"<missing>": 1}}
    assert ds.group_counts()["sex"] == {"female": 4, "male": 4, "excluded": 4}
    assert list(s.loc[s["dx"].isin(["mel", "akiec"]), "label"].unique()) == [1]
    assert list(s.loc[~s["dx"].isin(["mel", "akiec"]), "label"].unique()) == [0]
    img, mask = ds.load_image(3), ds.load_mask(3)
    assert img.shape == (30, 40, 3) and mask.shape == (30, 40) and mask.sum() == 100
    assert set(s["patient_id"]) == {f"HAM_{k:07d}" for k in range(6)}
    split = ds.split(seed=0, fractions=(0.5, 0.25, 0.25))
    assert set(s.iloc[split.train]["patient_id"]).isdisjoint(s.iloc[split.test]["patient_id"])


def test_ham_unknown_as_group_or_dropped(tmp_path):
    root = make_ham(tmp_path / "ham")
    grouped = load_dataset("ham10000", root, unknown="group")
    assert grouped.group_counts()["sex"] == {"female": 4, "male": 4, "unknown": 4}
    dropped = load_dataset("ham10000", root, unknown="drop")
    assert len(dropped) == 8 and dropped.report["skipped"]["unknown sex=unknown"] == 4
    with pytest.raises(InputError, match="unknown="):
        load_dataset("ham10000", root, unknown="guess")


def test_ham_mask_shape_mismatch(tmp_path):
    root = make_ham(tmp_path / "ham", n=4)
    write_png(root / "HAM10000_segmentations_lesion_tschandl" / "ISIC_0024307_segmentation.png", (10, 10), value=255)
    ds = load_dataset("ham10000", root)
    pos = int(np.flatnonzero(ds.samples["image_id"] == "ISIC_0024307")[0])
    with pytest.raises(InputError, match=r"ISIC_0024307.*shape \(10, 10\).*\(30, 40\)"):
        ds.load_mask(pos)
    ok = load_dataset("ham10000", root, verify=True, skip_bad=True)
    assert len(ok) == 3 and ok.report["skipped"] == {"mask shape != image shape": 1}


def test_ham_bad_dx_value(tmp_path):
    root = make_ham(tmp_path / "ham", n=4)
    meta = root / "HAM10000_metadata.csv"
    df = pd.read_csv(meta)
    df.loc[1, "dx"] = "melanoma"
    df.to_csv(meta, index=False)
    with pytest.raises(InputError, match=r"HAM10000_metadata.csv.*'dx'.*melanoma"):
        load_dataset("ham10000", root)


def test_unmapped_age_counted_once_for_attributes_sharing_a_column(tmp_path):
    root = make_ham(tmp_path / "ham")
    meta = root / "HAM10000_metadata.csv"
    df = pd.read_csv(meta)
    df["age"] = df["age"].astype(object)
    df.loc[0, "age"] = "old"
    df.to_csv(meta, index=False)
    with pytest.raises(InputError, match=r"column 'age' has value\(s\) 'old'"):
        load_dataset("ham10000", root)
    ds = load_dataset("ham10000", root, skip_bad=True)
    assert ds.report["skipped"] == {"unmapped age=old": 1} and len(ds) == 11


def test_truncated_png_is_skipped_with_skip_bad_and_named_without_it(tmp_path):
    root = make_nih(tmp_path / "nih", missing=0)
    png = root / "images" / "00000005_000.png"
    png.write_bytes(png.read_bytes()[:60])  # a valid header, the pixel data cut off (an interrupted copy)
    ds = load_dataset("nih-cxr14", root)  # without skip_bad: loads lazily, the decode names the file
    pos = int(np.flatnonzero(ds.samples["sample_id"] == "00000005_000.png")[0])
    with pytest.raises(InputError, match=r"image .*00000005_000.png could not be decoded .*skip_bad"):
        ds.load_image(pos)
    ok = load_dataset("nih-cxr14", root, skip_bad=True)  # skip_bad decodes every image before any work
    assert len(ok) == 23 and "00000005_000.png" not in set(ok.samples["sample_id"])
    assert ok.report["skipped"] == {"decode failure": 1} and ok.report["rows_loaded"] == 23
    assert any("00000005_000.png" in note for note in ok.report["notes"])


def test_nih_view_option_keeps_one_view_position(tmp_path):
    """view=AP|PA keeps one View Position (a second site for external evaluation); an absent view is refused."""
    root = make_nih(tmp_path / "nih")
    meta = pd.read_csv(root / "Data_Entry_2017_v2020.csv")
    meta.loc[meta["Patient ID"] % 3 == 0, "View Position"] = "AP"
    meta.to_csv(root / "Data_Entry_2017_v2020.csv", index=False)
    ap, pa = load_dataset("nih-cxr14", root, view="AP"), load_dataset("nih-cxr14", root, view="PA")
    assert set(ap.samples["View Position"]) == {"AP"} and set(pa.samples["View Position"]) == {"PA"}
    assert len(ap) + len(pa) == len(load_dataset("nih-cxr14", root)) and ap.fingerprint != pa.fingerprint
    assert any("View Position AP only" in n for n in ap.report["notes"])
    with pytest.raises(InputError, match="View Position values are AP, PA"):
        load_dataset("nih-cxr14", root, view="LL")
