"""Multi-class dataset cards: the synth-ordinal preset (known disparity) and HAM10000's 7 diagnosis classes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fairmedbench.errors import InputError
from fairmedbench.registry.datasets import get_card, load_dataset
from fairmedbench.registry.datasets.synthetic import ORDINAL, SynthConfig, render
from fairmedbench.tasks.multiclass import class_labels


def test_ordinal_card_counts_and_labels():
    card = get_card("synth-ordinal")
    assert card.tasks == ("multiclass",) and card.classes == ("grade0", "grade1", "grade2", "grade3")
    assert {"attribute": "sex", "group": "female", "metric": "macro_auc", "direction": "lower"} in \
        card.to_dict()["expected_disparities"]
    ds = load_dataset("synth-ordinal", n=400)
    y, classes = class_labels(ds)
    assert classes == list(card.classes)
    counts = ds.samples.groupby(["split", "attr:sex", "label"]).size().unstack()
    # equal numbers of each grade in every split x group (60/10/30 split, half female): test 400 * 0.3 / 2 / 4
    assert (counts.loc["test"].to_numpy() == 15).all() and (counts.loc["train"].to_numpy() == 30).all()
    assert (ds.samples["label"] == ds.samples["lesion"]).all()
    with pytest.raises(InputError, match="no segmentation masks"):
        ds.load_mask(0)


def test_ordinal_signal_grows_with_grade_and_is_weaker_for_females():
    cfg = replace(ORDINAL, noise={"female": 0.0, "male": 0.0})
    gains = {}
    for group in ("female", "male"):
        base = render(cfg, 5, group, 0, False)[0].astype(float)
        _, mask = render(cfg, 5, group, 3, False)
        gains[group] = [render(cfg, 5, group, g, False)[0].astype(float)[mask].mean() - base[mask].mean()
                        for g in (1, 2, 3)]
    for g1, g2, g3 in gains.values():
        # intensity grade/3 of the full amplitude: steps of equal size (uint8 rounding aside)
        assert 0 < g1 < g2 < g3 and g2 == pytest.approx(2 * g1, rel=0.05) and g3 == pytest.approx(3 * g1, rel=0.05)
    assert gains["female"][2] == pytest.approx(0.35 * gains["male"][2], rel=0.05)


def test_ordinal_config_errors():
    with pytest.raises(InputError, match="grades=1"):
        SynthConfig(grades=1).validate()
    with pytest.raises(InputError, match="label_noise"):
        SynthConfig(grades=3, label_noise={"female": 0.1, "male": 0.0}).validate()


def test_ham_7class_reads_the_ham10000_folder(monkeypatch, tmp_path):
    card = get_card("ham10000-7class")
    assert card.tasks == ("multiclass",) and card.classes == ("akiec", "bcc", "bkl", "df", "mel", "nv", "vasc")
    assert card.env_var == get_card("ham10000").env_var == "FMB_DATA_HAM10000"
    monkeypatch.delenv("FMB_DATA_HAM10000", raising=False)
    monkeypatch.setenv("FMB_DATA_ROOT", str(tmp_path))
    assert card.root_candidates()[-1] == ("FMB_DATA_ROOT", tmp_path / "ham10000")


def test_ham_7class_on_the_real_split_metadata(real_data):
    root = real_data / "ham10000-mini"
    ds = load_dataset("ham10000-7class", root, keep_missing_images=True)
    y, classes = class_labels(ds)
    assert len(ds) == 9958
    # the README's release: nv 6660, mel 1111, bkl 1089, bcc 514, akiec 327, vasc 142, df 115
    assert dict(zip(classes, np.bincount(y).tolist())) == {"akiec": 327, "bcc": 514, "bkl": 1089, "df": 115,
                                                           "mel": 1111, "nv": 6660, "vasc": 142}
    assert (ds.samples["dx"].to_numpy() == np.array(classes)[y]).all()
    split = ds.split("official")
    assert split.sizes() == {"train": 7967, "val": 989, "test": 1002}
    # every class reaches train, so a softmax head can learn each of them
    assert set(y[split.train]) == set(range(7))
    binary = load_dataset("ham10000", root, keep_missing_images=True)
    assert (binary.samples["label"] == np.isin(y, [0, 4]).astype(int)).all()  # akiec or mel
    assert ds.group_counts()["sex"] == binary.group_counts()["sex"]
