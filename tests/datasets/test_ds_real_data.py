"""Readers on the shared real data (skipped without $FMB_REAL_DATA)."""

from __future__ import annotations

import numpy as np

from fairmedbench.registry.datasets import load_dataset


def test_nih_loads_the_621_real_images_with_sex_and_age(real_data):
    ds = load_dataset("nih-cxr14", real_data / "nih-cxr14")
    assert len(ds) == 621
    assert ds.report["rows_in_metadata"] == 112120 and ds.report["rows_without_image"] == 112120 - 621
    assert any("partial release" in n for n in ds.report["notes"])
    assert ds.group_counts()["sex"] == {"female": 295, "male": 326}
    ages = ds.samples["age_years"]
    assert ages.min() == 2 and ages.max() == 86 and ds.samples["attr:age"].notna().all()
    assert int((ds.samples["label"] == 0).sum()) == 100
    assert ds.load_image(0).shape == (256, 256)
    split = ds.split("patient", seed=0)
    assert split.fingerprint == ds.split("patient", seed=0).fingerprint != ds.split("patient", seed=1).fingerprint


def test_ham_split_metadata_maps_sex_and_reports_unknown(real_data):
    root = real_data / "ham10000-mini"
    ds = load_dataset("ham10000", root, keep_missing_images=True)
    assert len(ds) == 9958
    raw = ds.samples["sex"]
    assert ds.group_counts()["sex"] == {"female": int((raw == "female").sum()), "male": int((raw == "male").sum()),
                                        "excluded": 10}
    assert (ds.samples.loc[raw == "male", "attr:sex"] == "male").all()
    assert ds.report["excluded"]["sex"] == {"unknown": 10}
    grouped = load_dataset("ham10000", root, keep_missing_images=True, unknown="group")
    assert grouped.group_counts()["sex"]["unknown"] == 10
    split = ds.split("official")
    assert split.sizes() == {"train": 7967, "val": 989, "test": 1002}
    # the split files carry the reference benchmark's derived columns: our label agrees with its binaryLabel,
    # while its 0/1 'Sex' column folds the 10 'unknown' rows into the female code (1)
    assert (ds.samples["label"] == ds.samples["binaryLabel"]).all()
    unknown = ds.samples["sex"] == "unknown"
    assert (ds.samples.loc[unknown, "Sex"] == 1).all() and ds.samples.loc[unknown, "attr:sex"].isna().all()


def test_ham_real_images_and_masks_align(real_data):
    ds = load_dataset("ham10000", real_data / "ham10000-mini", verify=True)
    assert len(ds) == 5 and ds.report["rows_with_mask"] == 5
    assert sorted(ds.samples["split"]) == ["train"] * 4 + ["val"]
    for i in range(5):
        img, mask = ds.load_image(i), ds.load_mask(i)
        assert img.shape[:2] == mask.shape and img.ndim == 3 and mask.dtype == bool
        assert 0.02 < mask.mean() < 0.9
        # the lesion is darker than the surrounding skin in dermoscopy
        gray = img.mean(axis=2)
        assert gray[mask].mean() < gray[~mask].mean()
    assert ds.load_mask(0).shape == (450, 600)
    assert np.isin(ds.samples["attr:sex"], ["male", "female"]).all()
