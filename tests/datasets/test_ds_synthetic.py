"""Built-in synthetic datasets: determinism, declared counts and prevalences, bias mechanisms."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fairmedbench.errors import InputError
from fairmedbench.registry.datasets import get_card, load_dataset
from fairmedbench.registry.datasets.synthetic import CONTRAST, LAWS, UNDERREP, SynthConfig, render


def test_same_seed_identical_arrays_other_seed_differs():
    a = load_dataset("synth-contrast", n=40, data_seed=3)
    b = load_dataset("synth-contrast", n=40, data_seed=3)
    c = load_dataset("synth-contrast", n=40, data_seed=4)
    assert a.fingerprint == b.fingerprint != c.fingerprint
    for i in (0, 7, 39):
        assert np.array_equal(a.load_image(i), b.load_image(i))
        assert np.array_equal(a.load_mask(i), b.load_mask(i))
    assert not np.array_equal(a.load_image(0), c.load_image(0))


def test_sample_reproducible_alone():
    ds = load_dataset("synth-contrast", n=30, data_seed=5)
    row = ds.samples.iloc[11]
    group = {"F": "female", "M": "male"}[row["sex"]]
    img, mask = render(replace(CONTRAST, n=30, seed=5), int(row["index"]), group,
                       int(row["lesion"]), bool(row["marker"]))
    assert np.array_equal(img, ds.load_image(11)) and np.array_equal(mask, ds.load_mask(11))


def test_images_masks_labels_consistent():
    ds = load_dataset("synth-control", n=40, data_seed=1)
    for i in range(10):
        img, mask = ds.load_image(i), ds.load_mask(i)
        assert img.shape == (256, 256) and img.dtype == np.uint8 and mask.dtype == bool
        assert mask.any() == bool(ds.samples.loc[i, "lesion"])
    assert (ds.samples["label"] == ds.samples["lesion"]).all()


@pytest.mark.parametrize("name", ["synth-control", "synth-contrast", "synth-underrep", "synth-laws",
                                  "synth-laws-control"])
def test_counts_and_prevalence_match_declared(name):
    ds = load_dataset(name)
    cfg = get_card(name).reader.config
    s = ds.samples
    assert len(s) == cfg.n
    sizes = s["split"].value_counts()
    assert [sizes["train"], sizes["val"], sizes["test"]] == [round(cfg.n * f) for f in cfg.split_fractions]
    for split in ("train", "val", "test"):
        part = s[s["split"] == split]
        assert abs((part["attr:sex"] == "female").mean() - cfg.share(split)) < 1 / len(part) + 1e-9
        for group in ("female", "male"):
            g = part[part["attr:sex"] == group]
            assert abs(g["lesion"].mean() - cfg.prevalence[group]) <= 1 / len(g) + 1e-9
    split = ds.split()
    assert split.sizes()["train"] == sizes["train"]


def test_underrep_train_share_and_expected_disparity_in_card():
    ds = load_dataset("synth-underrep")
    train = ds.samples[ds.samples["split"] == "train"]
    test = ds.samples[ds.samples["split"] == "test"]
    assert (train["attr:sex"] == "female").mean() == pytest.approx(UNDERREP.female_share_train, abs=0.01)
    assert (test["attr:sex"] == "female").mean() == pytest.approx(0.5, abs=0.01)
    card = get_card("synth-contrast").to_dict()
    expected = {"attribute": "sex", "group": "female", "metric": "auc", "direction": "lower"}
    assert expected in card["expected_disparities"]
    assert get_card("synth-control").to_dict()["expected_disparities"][0]["direction"] == "none"


def test_laws_preset_minority_label_shows_only_as_a_marker_that_majority_samples_do_not_teach():
    s = load_dataset("synth-laws").samples
    f, m = s[s["sex"] == "F"], s[s["sex"] == "M"]
    assert f.groupby("label")["marker"].mean().to_dict() == pytest.approx({0: 0.15, 1: 0.85}, abs=0.06)
    # Bernoulli(0.5) in both classes of males: 150 per class, 3 standard deviations = 0.12
    assert m.groupby("label")["marker"].mean().to_dict() == pytest.approx({0: 0.5, 1: 0.5}, abs=0.12)
    # a female lesion adds nothing to the image (the random stream does not depend on the label)
    with_lesion, mask = render(LAWS, 5, "female", 1, False)
    assert mask.any() and np.array_equal(with_lesion, render(LAWS, 5, "female", 0, False)[0])
    assert not np.array_equal(render(LAWS, 5, "male", 1, False)[0], render(LAWS, 5, "male", 0, False)[0])
    assert get_card("synth-laws-control").to_dict()["expected_disparities"][0]["direction"] == "none"


def test_contrast_mechanism_lowers_lesion_contrast_in_female_group():
    cfg = SynthConfig(n=20, contrast={"female": 0.35, "male": 1.0}, noise={"female": 0.0, "male": 0.0})
    f_img, mask = render(cfg, 3, "female", 1, False)
    f_bg, _ = render(cfg, 3, "female", 0, False)
    m_img, _ = render(cfg, 3, "male", 1, False)
    f_gain = f_img[mask].astype(float).mean() - f_bg[mask].astype(float).mean()
    m_gain = m_img[mask].astype(float).mean() - f_bg[mask].astype(float).mean()
    assert 0 < f_gain < 0.5 * m_gain


def test_label_noise_and_marker_mechanisms():
    cfg = {"label_noise": {"female": 0.2, "male": 0.0}, "marker": {"female": 0.0, "male": 1.0}}
    ds = load_dataset("synth-control", n=200, config=cfg)
    s = ds.samples
    f, m = s[s["sex"] == "F"], s[s["sex"] == "M"]
    assert (f["label"] != f["lesion"]).mean() == pytest.approx(0.2, abs=0.01)
    assert (m["label"] == m["lesion"]).all()
    assert (m["marker"] == (m["lesion"] == 1)).all()
    i = int(m.index[m["marker"]][0])
    assert ds.load_image(i)[12:20, 12:20].min() >= 240


def test_data_root_is_ignored_for_generated_data(tmp_path):
    nowhere = load_dataset("synth-control", tmp_path / "nowhere", n=20)
    assert nowhere.fingerprint == load_dataset("synth-control", n=20).fingerprint


def test_3d_variant():
    ds = load_dataset("synth3d-contrast", n=12, data_seed=2)
    vol, mask = ds.load_image(0), ds.load_mask(0)
    assert vol.shape == (32, 64, 64) and vol.dtype == np.uint8 and mask.shape == vol.shape
    assert ds.spacing(0) == (1.0, 1.0, 1.0)
    assert get_card("synth3d-contrast").dim == 3


def test_bad_config_is_input_error():
    with pytest.raises(InputError, match="prevalence"):
        load_dataset("synth-control", n=50, config={"prevalence": {"female": 1.5, "male": 0.5}})
    with pytest.raises(InputError, match="fields"):
        load_dataset("synth-control", config={"colour": 1})
    with pytest.raises(InputError, match="does not take"):
        load_dataset("synth-control", resolution=3)


def test_thousand_images_are_generated_on_demand_and_repeatably():
    ds = load_dataset("synth-control", n=1000)
    first = [ds.load_image(i) for i in (0, 499, 999)]
    assert all(im.dtype == np.uint8 and im.shape == first[0].shape for im in first)
    for i, im in zip((0, 499, 999), first):
        np.testing.assert_array_equal(ds.load_image(i), im)
    assert not np.array_equal(first[0], first[1])


def test_underrep_minority_lesions_are_dark_where_the_majority_lesions_are_bright():
    cfg = replace(UNDERREP, noise={"female": 0.0, "male": 0.0})
    for group, sign in (("female", -1), ("male", 1)):
        img, mask = render(cfg, 5, group, 1, False)
        bg, _ = render(cfg, 5, group, 0, False)
        gain = img[mask].astype(float).mean() - bg[mask].astype(float).mean()
        assert sign * gain > 10  # grey levels: the lesion is clearly darker / brighter than what it covers
    with pytest.raises(InputError, match="contrast"):
        SynthConfig(contrast={"female": -3.0, "male": 1.0}).validate()


def test_fingerprint_follows_the_generator_settings_not_only_the_table():
    base = load_dataset("synth-control", n=40)
    # same table, other pixels: cached features keyed by the fingerprint must not be reused
    darker = load_dataset("synth-control", n=40, config={"contrast": {"female": 0.5, "male": 1.0}})
    same = load_dataset("synth-control", n=40, config={"contrast": {"male": 1.0, "female": 1.0}})
    assert (base.samples["sample_id"] == darker.samples["sample_id"]).all()
    assert darker.fingerprint != base.fingerprint
    assert same.fingerprint == base.fingerprint
