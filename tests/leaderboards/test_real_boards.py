"""Real boards: test-set rules on fixtures in the providers' layouts, the packaged NIH test ids against the real
metadata, partial coverage accepted and ranked separately, ids outside the pinned set refused."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "datasets"))
from bundle_factory import N_TEST, dataset_rows, model_card, write_bundle  # noqa: E402
from fmb_ds_fixtures import make_chexpert, make_ham, make_harvard, make_mimic, make_nih, make_papila  # noqa: E402

from fairmedbench.benchmark.leaderboard import build_board, submit_bundle  # noqa: E402
from fairmedbench.errors import InputError, MissingResourceError  # noqa: E402
from fairmedbench.leaderboards import suites  # noqa: E402
from fairmedbench.leaderboards.board import rank_rows  # noqa: E402
from fairmedbench.leaderboards.suites import SUITES, Entry, Suite, get_suite, register_suite  # noqa: E402
from fairmedbench.leaderboards.testsets import TestSet, patient_hash_share, write_ids  # noqa: E402
from fairmedbench.registry.datasets import load_dataset  # noqa: E402

REAL = Path(os.environ.get("FMB_REAL_DATA", Path(__file__).resolve().parents[2] / ".." / "shared" / "real"))
NIH_META = REAL / "nih-cxr14" / "Data_Entry_2017_v2020.csv.gz"


def test_patient_hash_rule_definition() -> None:
    expect = int(hashlib.sha256(b"s:p").hexdigest()[:16], 16) / 2.0 ** 64
    assert patient_hash_share("s", "p") == expect == pytest.approx(0.5218632622094637, abs=1e-15)


def test_bad_rules_are_refused() -> None:
    for rule in ("provider:holdout", "patient-hash:salt:1.5", "patient-hash::0.2", "random:0.2"):
        with pytest.raises(ValueError, match="is not provider"):
            TestSet("t", rule, "s")


def test_real_boards_name_attributes_headline_and_test_sets() -> None:
    for name in ("nih-cxr14", "ham10000", "chexpert", "mimic-cxr", "fairvlmed10k", "harvard-gf", "papila"):
        for e in get_suite(name).entries:
            assert e.test_set is not None and e.split_fingerprint is None
            assert e.headline == {"classification": "auc", "segmentation": "dsc", "multiclass": "macro_auc"}[e.task]
            d = e.describe()
            assert d["attributes"] == list(e.attributes) and d["headline_metric"]["label"] in ("AUC", "DSC",
                                                                                              "macro AUC")
    nih = get_suite("nih-cxr14").entries[0]
    assert (nih.test_fingerprint, nih.n_test, nih.pending, nih.partial_coverage) == (
        suites.NIH_TEST.fingerprint, 22013, False, True)
    ham = get_suite("ham10000").entries
    assert [e.task for e in ham] == ["classification", "segmentation", "multiclass"]
    assert all(e.n_test == 1002 and not e.pending and not e.partial_coverage for e in ham)
    assert get_suite("mimic-cxr").entries[0].pending  # no copy here: checked for consistency until pinned
    with pytest.raises(ValueError, match="is a segmentation metric"):
        Entry("nih-cxr14", ("sex",), "lp", headline="dsc")
    with pytest.raises(ValueError, match="test pins differ"):
        Entry("nih-cxr14", ("sex",), "lp", test_set=suites.NIH_TEST, n_test=5)


def test_packaged_nih_ids_match_their_pins() -> None:
    ids = suites.NIH_TEST.pinned_ids()
    assert len(ids) == 22013 and suites.test_fingerprint(ids) == suites.NIH_TEST.fingerprint
    assert "00000003_000.png" not in ids or patient_hash_share("fairmedbench/nih-cxr14/test/v1", "3") < 0.2
    assert all(patient_hash_share("fairmedbench/nih-cxr14/test/v1", str(int(i[:8]))) < 0.2 for i in list(ids)[:500])


@pytest.mark.skipif(not NIH_META.is_file(), reason=f"real NIH metadata not found at {NIH_META} (set FMB_REAL_DATA)")
def test_packaged_nih_ids_are_the_rule_over_the_official_metadata() -> None:
    meta = pd.read_csv(NIH_META, usecols=["Image Index", "Patient ID"])
    assert len(meta) == 112120
    frame = pd.DataFrame({"sample_id": meta["Image Index"], "patient_id": meta["Patient ID"].astype(str)})
    derived = set(frame["sample_id"][suites.NIH_TEST.is_test(frame)])
    assert derived == set(suites.NIH_TEST.pinned_ids())
    assert frame["patient_id"][suites.NIH_TEST.is_test(frame)].nunique() == 6209
    present = {p.name for p in (REAL / "nih-cxr14" / "images").glob("*.png")}
    assert len(present) == 621 and len(present & derived) == 115


def test_nih_board_split_on_the_official_layout(tmp_path: Path) -> None:
    make_nih(tmp_path, n_patients=40, missing=0)  # with the official lists, whose test patients are p % 4 == 0
    ds = load_dataset("nih-cxr14", tmp_path)
    rule = TestSet("NIH rule, unpinned", suites.NIH_TEST.rule, "the board's rule without its packaged ids")
    split = rule.split(ds)
    rule_patients = {3, 6, 13, 22, 24, 25, 26, 28, 35, 37, 39}  # patient_hash_share < 0.2, computed once
    assert {int(s[:8]) for s in split.ids["test"]} == rule_patients
    assert len(split.ids["test"]) == 2 * len(rule_patients)
    train_val = set(split.ids["train"]) | set(split.ids["val"])
    assert "00000004_000.png" in train_val  # in the official test_list.txt, but not a board test patient
    assert split.policy == "board:patient-hash:fairmedbench/nih-cxr14/test/v1:0.2"
    with pytest.raises(InputError, match="6 test id.s. are not in the board's pinned test set"):
        suites.NIH_TEST.split(ds)  # the fixture's follow-up images _001 of test patients are not real NIH images


def _ham_splits(root: Path) -> Path:
    make_ham(root, n=14)
    meta = pd.read_csv(root / "HAM10000_metadata.csv")
    (root / "HAM10000_metadata.csv").unlink()
    (root / "splits").mkdir()
    for name, part in (("train", meta.iloc[:8]), ("val", meta.iloc[8:10]), ("test", meta.iloc[10:])):
        part.to_csv(root / "splits" / f"{name}.csv", index=False)
    return root


def test_provider_test_sets_on_fixture_layouts(tmp_path: Path) -> None:
    ham = load_dataset("ham10000", _ham_splits(tmp_path / "ham"), split_dir="splits")
    with pytest.raises(InputError, match="differs from the board's HAM10000 test.*1002 ids"):
        suites.HAM_TEST.split(ham)
    ids = [f"ISIC_{24306 + i:07d}" for i in range(10, 14)]
    own = TestSet("fixture", "provider:test", "s", suites.test_fingerprint(ids), 4)
    assert sorted(own.split(ham).ids["test"]) == ids

    mimic = load_dataset("mimic-cxr", make_mimic(tmp_path / "mimic"))
    split = suites.MIMIC_TEST.split(mimic)
    assert sorted(split.ids["test"]) == ["d6-0", "d7-0"]  # the reader keeps frontal views
    assert set(split.ids["val"]) == {"d5-0"}  # the provider's 'validate' is kept as val

    chexpert = load_dataset("chexpert", make_chexpert(tmp_path / "chexpert"))
    split = suites.CHEXPERT_TEST.split(chexpert)
    assert list(split.ids["test"]) == ["CheXpert-v1.0-small/valid/patient00008/study1/view1_frontal.jpg"]
    assert split.ids["val"] and not set(split.ids["val"]) & set(split.ids["test"])

    for name, ts, width in (("fairvlmed10k", suites.FAIRVLMED_TEST, 5), ("harvard-gf", suites.HARVARD_GF_TEST, 4)):
        ds = load_dataset(name, make_harvard(tmp_path / name, name))
        split = ts.split(ds)
        assert sorted(split.ids["test"]) == [f"data_{k:0{width}d}" for k in (7, 8)]
        assert sorted(split.ids["val"]) == [f"data_{k:0{width}d}" for k in (5, 6)]

    papila = load_dataset("papila", make_papila(tmp_path / "papila"))
    split = suites.PAPILA_TEST.split(papila)
    test_patients = {"004", "009"}  # patient_hash_share < 0.2, computed once
    expect = sorted(papila.samples["sample_id"][papila.samples["patient_id"].isin(test_patients)])
    assert sorted(split.ids["test"]) == expect and {s[3:6] for s in expect} == test_patients


def test_provider_rule_without_split_files_says_what_to_do(tmp_path: Path) -> None:
    ds = load_dataset("fairvlmed10k", make_harvard(tmp_path, "fairvlmed10k"))
    frame = ds.samples.drop(columns=["split"])
    with pytest.raises(MissingResourceError, match="official 'test' split"):
        suites.FAIRVLMED_TEST.is_test(frame)


def _coverage_suite(tmp_path: Path, extra: int, drop: int = 0) -> str:
    """A board whose pinned ids are the factory's test rows (minus `drop`) plus `extra` ids nobody holds."""
    name = f"test-coverage-{extra}-{drop}"
    if name not in SUITES:
        base = Entry("synth-control", ("sex", "age"), "linear_probe", seeds=(0, 1))
        held = list(dataset_rows(base.dataset, "test", N_TEST)["sample_id"])[drop:]
        ids = held + [f"absent-{i}" for i in range(extra)]
        path = tmp_path / f"{name}.txt.gz"
        fp = write_ids(path, ids)
        ts = TestSet(f"pinned {len(ids)}", "patient-hash:test:0.5", "test ids", fp, len(ids), str(path))
        entry = Entry(base.dataset, base.attributes, base.usage, seeds=base.seeds, test_set=ts)
        register_suite(Suite(name, "1.0", "test suite with partial coverage", (entry,)))
    return name


def test_partial_coverage_is_accepted_shown_and_ranked_separately(tmp_path: Path) -> None:
    partial, complete = _coverage_suite(tmp_path, extra=40), _coverage_suite(tmp_path, extra=0)
    assert gzip.decompress((tmp_path / f"{partial}.txt.gz").read_bytes()).decode().count("\n") == N_TEST + 40
    for board in (partial, complete):
        out = submit_bundle(write_bundle(tmp_path / board, get_suite(board), model_card("m1")), board, tmp_path / "lb")
        assert out.accepted, out.reasons
    stored = {b: json.loads(next((tmp_path / "lb" / b).rglob("submission.json")).read_text())
              for b in (partial, complete)}
    # the factory's scores are near-perfect (flagged, so unranked): this test is about coverage groups only
    rows = {b: rank_rows([{**r, "model": "m1", "revision": "r1", "flags": [], "tier": "verified"}
                          for r in stored[b]["rows"]])
            for b in stored}
    assert rows[partial][0]["coverage"] == {"test_set": "pinned 100", "evaluated": 60, "pinned": 100,
                                            "complete": False}
    assert rows[partial][0]["rank_group"] == "partial" and rows[complete][0]["rank_group"] == "complete"
    mixed = rank_rows([{**rows[complete][0], "model": "a"}, {**rows[partial][0], "model": "b"}])
    assert [(r["model"], r["rank"], r["rank_group"]) for r in mixed] == [("a", 1, "complete"), ("b", 1, "partial")]
    page = Path(build_board(partial, tmp_path / "lb")["html"]).read_text()
    assert "60 / 100 (60.0%) partial" in page and "pinned 100" in page
    md = (tmp_path / "lb" / partial / "leaderboard.md").read_text()
    assert "60 / 100 (60.0%) partial" in md and "any non-empty subset of the 100 pinned test ids" in md


def test_test_ids_outside_the_pinned_set_are_refused(tmp_path: Path) -> None:
    board = _coverage_suite(tmp_path, extra=40, drop=1)
    out = submit_bundle(write_bundle(tmp_path / "b", get_suite(board), model_card("m1")), board, tmp_path / "lb")
    assert not out.accepted
    assert any("1 test id(s) are not in the board's pinned test set" in r for r in out.reasons), out.reasons


HAM_SPLITS = REAL / "ham10000-mini" / "splits"


@pytest.mark.skipif(not HAM_SPLITS.is_dir(), reason=f"real HAM10000 split files not found at {HAM_SPLITS}")
def test_ham_pin_is_the_published_test_split_and_the_mini_copy_is_refused() -> None:
    test = pd.read_csv(HAM_SPLITS / "test.csv")
    assert (len(test), suites.test_fingerprint(test["image_id"])) == (suites.HAM_TEST.n, suites.HAM_TEST.fingerprint)
    ds = load_dataset("ham10000", REAL / "ham10000-mini", split_dir="splits")  # 5 real images, none in test
    assert len(ds) == 5
    with pytest.raises(InputError, match="empty test"):
        suites.HAM_TEST.split(ds)


def test_validation_ids_inside_the_pinned_test_set_are_refused(tmp_path: Path) -> None:
    name = "test-coverage-val-leak"
    if name not in SUITES:
        base = Entry("synth-control", ("sex", "age"), "linear_probe", seeds=(0, 1))
        ids = list(dataset_rows(base.dataset, "test", N_TEST)["sample_id"]) + \
            list(dataset_rows(base.dataset, "val", 40)["sample_id"])[:3]
        path = tmp_path / "leak.txt.gz"
        ts = TestSet("pinned with val", "patient-hash:test:0.5", "test ids", write_ids(path, ids), len(ids), str(path))
        register_suite(Suite(name, "1.0", "val rows inside the pinned test set",
                             (Entry(base.dataset, base.attributes, base.usage, seeds=base.seeds, test_set=ts),)))
    out = submit_bundle(write_bundle(tmp_path / "b", get_suite(name), model_card("m1")), name, tmp_path / "lb")
    assert not out.accepted
    assert any("3 validation id(s) belong to the board's test set" in r for r in out.reasons), out.reasons


def test_cli_lists_and_describes_real_boards_with_pins_and_coverage(capsys: pytest.CaptureFixture[str]) -> None:
    from fairmedbench.cli import main

    assert main(["list", "suites", "--json"]) == 0
    listed = {s["name"]: s for s in json.loads(capsys.readouterr().out)}
    assert {"nih-cxr14", "ham10000", "chexpert", "mimic-cxr", "fairvlmed10k", "harvard-gf", "papila"} <= set(listed)
    assert listed["nih-cxr14"]["test sets"] == [f"{suites.NIH_TEST.name} (fingerprint 7124224c8b5a, partial "
                                                "coverage, ranked separately)"]
    assert listed["mimic-cxr"]["test sets"] == [f"{suites.MIMIC_TEST.name} (fingerprint pending, complete coverage)"]
    assert main(["describe", "suite", "ham10000"]) == 0
    doc = json.loads(capsys.readouterr().out)
    seg = doc["entries"][1]
    assert (seg["task"], seg["headline_metric"]["name"], seg["attributes"]) == ("segmentation", "dsc", ["sex", "age"])
    assert seg["test_set"]["fingerprint"] == suites.HAM_TEST.fingerprint
    assert seg["test_set"]["coverage_rule"] == "exactly the 1,002 pinned test ids (complete coverage)"


def test_run_suite_refuses_entries_the_model_cannot_run_before_any_work(tmp_path: Path) -> None:
    from fairmedbench.benchmark.run import RunOptions
    from fairmedbench.benchmark.suite import run_suite

    opts = RunOptions(data_root=str(tmp_path / "absent"), out_root=str(tmp_path / "r"))
    with pytest.raises(InputError, match=r"cannot run nih-cxr14__clip-zs__sex\+age \(usage clip-zs needs "
                                         r"encode_text\); run the others with --entry nih-cxr14__lp__sex\+age"):
        run_suite("nih-cxr14", "moco-cxr", tmp_path / "b", opts, weights="random")
    with pytest.raises(InputError, match="has no entry 'nope'"):
        run_suite("nih-cxr14", "moco-cxr", tmp_path / "b", opts, weights="random", entries=["nope"])
    assert not (tmp_path / "b").exists() and not (tmp_path / "r").exists()
