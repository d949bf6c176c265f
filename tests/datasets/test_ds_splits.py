"""Split engine: patient-level, seeded, stratified; official splits; fingerprint; export/import."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairmedbench.engine.splits import (
    Split,
    load_split,
    official_split,
    patient_split,
    save_split,
    split_fingerprint,
)
from fairmedbench.errors import InputError, MissingResourceError


def _table(n_patients: int, per_patient: list[int], labels: list[int], groups: list[int]):
    sids, pids, strata = [], [], []
    for p in range(n_patients):
        for k in range(per_patient[p % len(per_patient)]):
            sids.append(f"s{p}_{k}")
            pids.append(f"p{p}")
            strata.append(f"{labels[(p + k) % len(labels)]}|{groups[p % len(groups)]}")
    return sids, pids, strata


@settings(max_examples=40, deadline=None)
@given(
    n_patients=st.integers(3, 60),
    per_patient=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    labels=st.lists(st.integers(0, 1), min_size=1, max_size=6),
    groups=st.lists(st.integers(0, 2), min_size=1, max_size=6),
    seed=st.integers(0, 2**31 - 1),
)
def test_no_patient_crosses_splits_and_seed_is_reproducible(n_patients, per_patient, labels, groups, seed):
    sids, pids, strata = _table(n_patients, per_patient, labels, groups)
    a = patient_split(sids, pids, strata, seed=seed)
    b = patient_split(sids, pids, strata, seed=seed)
    patient_of = dict(zip(sids, pids))
    seen = {}
    for name in ("train", "val", "test"):
        for sid in a.ids[name]:
            p = patient_of[sid]
            assert seen.setdefault(p, name) == name, f"patient {p} in {seen[p]} and {name}"
    assert sorted(sum((list(a.ids[n]) for n in a.ids), [])) == sorted(sids)
    assert a.fingerprint == b.fingerprint
    for name in ("train", "val", "test"):
        assert [sids[i] for i in a.positions[name]] == list(a.ids[name])


def test_other_seed_other_fingerprint_and_stratification():
    rng = np.random.default_rng(0)
    n = 400
    sids = [f"s{i}" for i in range(n)]
    pids = [f"p{i // 2}" for i in range(n)]
    labels = rng.integers(0, 2, n // 2).repeat(2)
    groups = rng.integers(0, 2, n // 2).repeat(2)
    strata = [f"{y}|{g}" for y, g in zip(labels, groups)]
    fps = {patient_split(sids, pids, strata, seed=s).fingerprint for s in range(5)}
    assert len(fps) == 5
    split = patient_split(sids, pids, strata, fractions=(0.5, 0.25, 0.25), seed=3)
    strata = np.asarray(strata)
    for name, frac in (("train", 0.5), ("test", 0.25)):
        for s in np.unique(strata):
            share = (strata[split.positions[name]] == s).sum() / (strata == s).sum()
            assert abs(share - frac) < 0.06


def test_fingerprint_is_sha256_of_sorted_ids_per_split():
    ids = {"train": ["b", "a"], "val": ["c"], "test": ["d"]}
    assert split_fingerprint(ids) == split_fingerprint({"train": ["a", "b"], "val": ["c"], "test": ["d"]})
    assert split_fingerprint(ids) != split_fingerprint({"train": ["a"], "val": ["b", "c"], "test": ["d"]})
    assert len(split_fingerprint(ids)) == 64


def test_official_split_carves_val_from_train_by_patient():
    sids = [f"s{i}" for i in range(100)]
    pids = [f"p{i // 2}" for i in range(100)]
    official = ["test" if i >= 80 else "train" for i in range(100)]
    split = official_split(sids, pids, official, val_fraction=0.2, seed=1)
    assert set(split.ids["test"]) == set(sids[80:])
    assert len(split.ids["val"]) == 16 and len(split.ids["train"]) == 64
    assert split.policy.startswith("official")
    again = official_split(sids, pids, official, seed=1).fingerprint
    assert official_split(sids, pids, official, seed=1).fingerprint == again


def test_official_split_rejects_patient_in_two_splits_and_bad_values():
    with pytest.raises(InputError, match="patient"):
        official_split(["a", "b"], ["p", "p"], ["train", "test"])
    with pytest.raises(InputError, match="holdout"):
        official_split(["a", "b"], ["p", "q"], ["train", "holdout"])


def test_export_import_roundtrip_and_tamper_check(tmp_path):
    sids = [f"s{i}" for i in range(30)]
    split = patient_split(sids, sids, seed=7, dataset="toy", dataset_fingerprint="abc")
    path = save_split(split, tmp_path / "sub" / "split.json")
    back = load_split(path)
    assert back.fingerprint == split.fingerprint and back.seed == 7 and back.dataset == "toy"
    bound = back.bind(list(reversed(sids)))
    assert [list(reversed(sids))[i] for i in bound.test] == list(back.ids["test"])
    data = json.loads(path.read_text())
    data["ids"]["train"] = data["ids"]["train"][1:]
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match="fingerprint"):
        load_split(path)
    with pytest.raises(MissingResourceError):
        load_split(tmp_path / "absent.json")
    with pytest.raises(InputError, match="absent from the dataset"):
        split.bind(sids[:10])
    with pytest.raises(InputError, match="not bound"):
        _ = Split(split.ids, "x").train


def test_bad_fractions():
    with pytest.raises(InputError, match="fractions"):
        patient_split(["a"], ["a"], fractions=(0.5, 0.5, 0.5))


@settings(max_examples=25, deadline=None)
@given(
    n_patients=st.integers(40, 90),
    labels=st.lists(st.integers(0, 1), min_size=2, max_size=6),
    seed=st.integers(0, 2**31 - 2),
)
def test_other_seed_gives_other_fingerprint(n_patients, labels, seed):
    sids, pids, strata = _table(n_patients, [1, 2], labels, [0, 1])
    a = patient_split(sids, pids, strata, seed=seed)
    b = patient_split(sids, pids, strata, seed=seed + 1)
    assert a.fingerprint != b.fingerprint
