"""Multi-class boards: the prediction checks of `submit` (one line per bad input), recomputation with the multi-class
engine, flags on one-hot labels, the page's columns; the suites (synthetic, HAM10000 7-class on the published split)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from bundle_factory import model_card, pinned, rewrite_predictions, write_bundle

from fairmedbench.benchmark.leaderboard import build_board, submit_bundle
from fairmedbench.leaderboards import suites
from fairmedbench.leaderboards.board import rank_rows
from fairmedbench.leaderboards.submit import read_submission
from fairmedbench.leaderboards.suites import SUITES, Entry, Suite, get_suite, register_suite

BOARD = "test-multiclass"
MC = "results/synth-ordinal__linear_probe__sex"
CLASSES = ["grade0", "grade1", "grade2", "grade3"]
SCORES = [f"score:{c}" for c in CLASSES]


def mc_suite() -> Suite:
    """A registered test suite: synth-ordinal (4 classes) by sex, two seeds, pinned to the factory's rows."""
    if BOARD not in SUITES:
        register_suite(Suite(BOARD, "1.0", "multi-class test suite", (
            pinned(Entry("synth-ordinal", ("sex",), "linear_probe", task="multiclass", seeds=(0, 1))),)))
    return get_suite(BOARD)


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_bundle(tmp_path_factory.mktemp("good") / "bundle", mc_suite(), model_card("mc-model"))


@pytest.fixture
def bundle(good: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(good, tmp_path / "bundle"))


def edit_parquet(path: Path, change: Callable[[pd.DataFrame], pd.DataFrame]) -> None:
    change(pd.read_parquet(path)).to_parquet(path, index=False)


def rejected(bundle: Path, root: Path, expect: str) -> list[str]:
    out = submit_bundle(bundle, BOARD, root)
    assert not out.accepted and any(expect in r for r in out.reasons), out.reasons
    assert all(line.startswith("rejected: ") and "\n" not in line for line in out.lines())
    assert not (root / BOARD).exists(), "a rejected bundle must leave nothing behind"
    return out.reasons


def first_test_row(f: pd.DataFrame) -> int:
    return int(f.index[f.split == "test"][0])


def test_good_multiclass_bundle_is_recomputed_and_stored(bundle: Path, tmp_path: Path) -> None:
    out = submit_bundle(bundle, BOARD, tmp_path / "lb")
    assert out.accepted, out.reasons
    row = read_submission(out.path)["rows"][0]
    assert (row["entry"], row["task"], row["attribute"], row["seeds"]) == (
        "synth-ordinal__linear_probe__sex", "multiclass", "sex", [0, 1])
    # the board's columns hold the multi-class board metrics (macro AUC), averaged over the two seeds
    docs = [json.loads((bundle / MC / f"seed{k}.json").read_text()) for k in (0, 1)]
    reports = [d["result"]["reports"][0]["metrics"] for d in docs]
    assert row["metrics"]["utility"] == pytest.approx(
        np.mean([m["macro_auc"]["__overall__"]["value"] for m in reports]))
    assert row["metrics"]["worst_group"] == pytest.approx(
        np.mean([m["worst_group_macro_auc"]["__gap__"]["value"] for m in reports]))
    assert row["metrics"]["gap"] == pytest.approx(np.mean([m["macro_auc_gap"]["__gap__"]["value"] for m in reports]))
    assert set(row["metrics"]) == {"utility", "worst_group", "gap"}
    assert 0.6 < row["metrics"]["utility"] < 0.99


def test_tampered_multiclass_metric_and_ci(bundle: Path, tmp_path: Path) -> None:
    path = bundle / MC / "seed1.json"
    doc = json.loads(path.read_text())
    doc["result"]["reports"][0]["metrics"]["macro_auc"]["__overall__"]["value"] += 0.01
    doc["result"]["reports"][0]["metrics"]["kappa_quadratic_gap"]["__gap__"]["ci_low"] -= 1e-6
    path.write_text(json.dumps(doc))
    reasons = rejected(bundle, tmp_path / "lb", "metrics/macro_auc/__overall__/value: reported")
    assert any("kappa_quadratic_gap/__gap__/ci_low" in r for r in reasons)


def test_class_names_as_labels_are_accepted(bundle: Path, tmp_path: Path) -> None:
    """A label may be the class name instead of its index: the same numbers are recomputed."""
    for k in (0, 1):
        edit_parquet(bundle / MC / f"seed{k}.predictions.parquet",
                     lambda f: f.assign(label=[CLASSES[i] for i in f["label"]]))
    out = submit_bundle(bundle, BOARD, tmp_path / "lb")
    assert out.accepted, out.reasons


def test_unknown_class_index_and_name(bundle: Path, tmp_path: Path) -> None:
    def index(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[f.index[f.split == "test"][:3], "label"] = 7
        return f
    edit_parquet(bundle / MC / "seed0.predictions.parquet", index)
    rejected(bundle, tmp_path / "lb", "seed0.predictions.parquet: column 'label' has 3 value(s) that are not a class "
             "of synth-ordinal (e.g. 7); a label is a class index 0..3 or a class name "
             "['grade0', 'grade1', 'grade2', 'grade3']")

    def name(f: pd.DataFrame) -> pd.DataFrame:
        f = f.assign(label=[CLASSES[i] if i < 4 else "grade7" for i in f["label"]])
        f.loc[first_test_row(f) + 3, "label"] = "Grade1"  # names match exactly
        return f
    edit_parquet(bundle / MC / "seed0.predictions.parquet", name)
    rejected(bundle, tmp_path / "lb", "column 'label' has 4 value(s) that are not a class of synth-ordinal "
             "(e.g. 'grade7')")


def test_probabilities_that_do_not_sum_to_one(bundle: Path, tmp_path: Path) -> None:
    """Within 1e-3 is accepted (4-decimal rounding of 4 classes is off by at most 2e-4); beyond is one line."""
    def rounded(f: pd.DataFrame) -> pd.DataFrame:
        return f.assign(**{c: f[c].round(4) for c in SCORES})
    for k in (0, 1):
        path = bundle / MC / f"seed{k}.predictions.parquet"
        edit_parquet(path, rounded)
    rewrite_predictions(bundle, lambda f, block, _: f)  # the reported numbers follow the rounded scores
    assert submit_bundle(bundle, BOARD, tmp_path / "ok").accepted

    def scaled(f: pd.DataFrame) -> pd.DataFrame:
        rows = f.index[f.split == "test"][:2]
        f.loc[rows, SCORES] = f.loc[rows, SCORES] * 0.9
        return f
    edit_parquet(bundle / MC / "seed1.predictions.parquet", scaled)
    rejected(bundle, tmp_path / "lb", "seed1.predictions.parquet: 2 row(s) whose class probabilities (score:grade0, "
             "score:grade1, score:grade2, score:grade3) do not sum to 1 within 0.001 (largest deviation 0.1, e.g. "
             "sample 'synth-ordinal-test-0000'); write the softmax over all 4 classes")


def test_nan_probability_and_nan_label(bundle: Path, tmp_path: Path) -> None:
    def nan_score(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[first_test_row(f) + 5, "score:grade2"] = float("nan")
        return f
    edit_parquet(bundle / MC / "seed0.predictions.parquet", nan_score)
    rejected(bundle, tmp_path / "lb", "seed0.predictions.parquet: column 'score:grade2' has 1 missing or NaN value(s)")

    def nan_label(f: pd.DataFrame) -> pd.DataFrame:
        f = f.assign(label=f["label"].astype("float64"))
        f.loc[f.index[f.split == "val"][:2], "label"] = float("nan")
        return f
    edit_parquet(bundle / MC / "seed1.predictions.parquet", nan_label)
    rejected(bundle, tmp_path / "lb", "seed1.predictions.parquet: column 'label' has 2 missing or NaN value(s)")


def test_probability_outside_unit_interval(bundle: Path, tmp_path: Path) -> None:
    def negative(f: pd.DataFrame) -> pd.DataFrame:
        i = first_test_row(f)
        f.loc[i, "score:grade0"], f.loc[i, "score:grade1"] = -0.2, f.loc[i, "score:grade1"] + 0.2 + \
            f.loc[i, "score:grade0"]
        return f
    edit_parquet(bundle / MC / "seed0.predictions.parquet", negative)
    rejected(bundle, tmp_path / "lb", "column 'score:grade0' must hold values in [0, 1] (1 outside)")


def test_missing_class_column(bundle: Path, tmp_path: Path) -> None:
    edit_parquet(bundle / MC / "seed0.predictions.parquet", lambda f: f.drop(columns=["score:grade3"]))
    reasons = rejected(bundle, tmp_path / "lb", "seed0.predictions.parquet: missing column 'score:grade3'")
    assert any("1 class probability column(s) missing and 0 unexpected column(s); synth-ordinal has 4 classes, so "
               "the file holds exactly score:grade0, score:grade1, score:grade2, score:grade3 besides sample_id, "
               "split, seed, label, attr:sex" in r for r in reasons), reasons


def test_extra_class_column(bundle: Path, tmp_path: Path) -> None:
    edit_parquet(bundle / MC / "seed1.predictions.parquet", lambda f: f.assign(**{"score:grade4": 0.0}))
    reasons = rejected(bundle, tmp_path / "lb", "seed1.predictions.parquet: unexpected column 'score:grade4'")
    assert any("0 class probability column(s) missing and 1 unexpected column(s)" in r for r in reasons)


def test_result_naming_other_classes(bundle: Path, tmp_path: Path) -> None:
    """The classes (and so the score columns) are the dataset card's, in its order: a reordered list is refused."""
    path = bundle / MC / "seed0.json"
    doc = json.loads(path.read_text())
    doc["predictions"]["classes"] = CLASSES[::-1]
    path.write_text(json.dumps(doc))
    rejected(bundle, tmp_path / "lb", "seed0.json: predictions.classes is ['grade3', 'grade2', 'grade1', 'grade0']; "
             "synth-ordinal has the classes ['grade0', 'grade1', 'grade2', 'grade3'] (in this order")


def test_near_perfect_multiclass_predictions_are_flagged_and_unranked(good: Path, tmp_path: Path) -> None:
    """A forger replaces the probabilities by the one-hot labels (plus a little mass elsewhere) and recomputes the
    numbers with the package's own code: accepted (the arithmetic holds), flagged near-perfect, not ranked."""
    forged = Path(shutil.copytree(good, tmp_path / "forged"))
    (forged / "model.json").write_text((forged / "model.json").read_text().replace("mc-model", "mc-forger"))
    (forged / "card.json").write_text((forged / "card.json").read_text().replace("mc-model", "mc-forger"))

    def one_hot(f: pd.DataFrame, block: dict, doc_path: Path) -> pd.DataFrame:
        p = np.full((len(f), 4), 0.01)
        p[np.arange(len(f)), f["label"].to_numpy()] = 0.97
        return f.assign(**{c: p[:, k] for k, c in enumerate(SCORES)})

    def model_name(path: Path) -> None:
        doc = json.loads(path.read_text())
        doc["spec"]["model"] = doc["inputs"]["model"]["name"] = "mc-forger"
        doc["inputs"]["model"]["weights_sha256"] = json.loads((forged / "model.json").read_text())["weights_sha256"]
        from fairmedbench.engine import store
        doc["run_id"] = store.run_id({"kind": doc["kind"], "spec": doc["spec"], "inputs": doc["inputs"]})
        path.write_text(json.dumps(doc))
    for path in (forged / MC).glob("seed*.json"):
        model_name(path)
    rewrite_predictions(forged, one_hot)
    root = tmp_path / "lb"
    assert submit_bundle(good, BOARD, root).accepted
    out = submit_bundle(forged, BOARD, root)
    assert out.accepted, out.reasons
    assert ("synth-ordinal__linear_probe__sex / sex: near-perfect predictions: seed 0: 100% of test samples have "
            "every class probability within 0.05 of their one-hot label") in out.flags, out.flags
    board = json.loads(Path(build_board(BOARD, root)["json"]).read_text())
    # nothing is verified, so nothing is ranked; the forger's row also carries its near-perfect flag
    assert [(r["model"], r["rank"]) for r in board["rows"]] == [("mc-model", None), ("mc-forger", None)]
    assert "near-perfect predictions" in board["rows"][1]["unranked"]
    assert [c["key"] for c in board["columns"]] == ["utility", "worst_group", "gap"]
    assert board["columns"][0]["metrics"] == [{"task": "multiclass", "name": "macro_auc", "label": "macro AUC"}]


def test_one_hot_flags_need_the_whole_label_vector() -> None:
    from fairmedbench.leaderboards.flags import Facts, SeedPredictions, implausible_groups, near_perfect

    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(4), 10)
    onehot = np.eye(4)[y]
    noisy = np.clip(0.25 + 0.1 * onehot + rng.normal(0, 0.1, (40, 4)), 0.01, None)
    noisy /= noisy.sum(axis=1, keepdims=True)
    group = np.array(["a"] * 40, dtype=object)
    entry = mc_suite().entries[0]

    def facts(scores: np.ndarray) -> Facts:
        return Facts({}, None, entry, "sex", [SeedPredictions(0, np.arange(40).astype(str), onehot, scores,
                                                              {"sex": group}, one_hot=True)])
    assert near_perfect(facts(noisy)) is None and implausible_groups(facts(noisy)) is None
    one_easy = noisy.copy()
    one_easy[y == 0, 0] += 1.0  # class 0 separates one-vs-rest; the others overlap: plausible
    assert implausible_groups(facts(one_easy / one_easy.sum(axis=1, keepdims=True))) is None
    exact = 0.6 * onehot + 0.4 * noisy  # every class separates: the label vector is reproduced
    assert implausible_groups(facts(exact)) == ("seed 0, group a: each of 4 classes scores all its samples above the "
                                                "group's others (no overlap)")
    assert near_perfect(facts(exact)) == "seed 0: overall macro AUC 1.0000 >= 0.99"


def test_multiclass_suites() -> None:
    mc = get_suite("synthetic-multiclass").entries
    assert [(e.dataset, e.task, e.headline, e.attributes, e.seeds, e.n_test) for e in mc] == [
        ("synth-ordinal", "multiclass", "macro_auc", ("sex", "age"), (0, 1, 2), 60)]
    ham = {e.dataset: e for e in get_suite("ham10000").entries if e.task == "multiclass"}["ham10000-7class"]
    assert (ham.test_set, ham.headline, ham.dataset_options) == (suites.HAM_TEST, "macro_auc", {"split_dir": "splits"})
    assert ham.classes == ("akiec", "bcc", "bkl", "df", "mel", "nv", "vasc")
    assert ham.describe()["headline_metric"]["label"] == "macro AUC"


def test_ham_7class_board_split_on_the_official_layout(tmp_path: Path) -> None:
    """The 7-class card reads the same split files: its board test set is the binary card's, sample for sample."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "datasets"))
    from fmb_ds_fixtures import make_ham

    from fairmedbench.errors import InputError
    from fairmedbench.leaderboards.testsets import TestSet
    from fairmedbench.registry.datasets import load_dataset

    root = make_ham(tmp_path / "ham", n=14)  # the published split's layout: splits/{train,val,test}.csv
    meta = pd.read_csv(root / "HAM10000_metadata.csv")
    (root / "HAM10000_metadata.csv").unlink()
    (root / "splits").mkdir()
    for name, part in (("train", meta.iloc[:8]), ("val", meta.iloc[8:10]), ("test", meta.iloc[10:])):
        part.to_csv(root / "splits" / f"{name}.csv", index=False)
    seven = load_dataset("ham10000-7class", root, split_dir="splits")
    binary = load_dataset("ham10000", root, split_dir="splits")
    with pytest.raises(InputError, match="differs from the board's HAM10000 test.*1002 ids"):
        suites.HAM_TEST.split(seven)
    ids = [f"ISIC_{24306 + i:07d}" for i in range(10, 14)]
    own = TestSet("fixture", "provider:test", "s", suites.test_fingerprint(ids), 4)
    split = own.split(seven)
    assert sorted(split.ids["test"]) == ids == sorted(own.split(binary).ids["test"])
    test = seven.samples.set_index("sample_id").loc[ids]
    assert test["label"].tolist() == [1, 0, 3, 6]  # dx bcc, akiec, df, vasc as indices into the card's classes


REAL_HAM = Path(os.environ.get("FMB_REAL_DATA", Path(__file__).resolve().parents[2] / ".." / "shared" / "real")) \
    / "ham10000-mini"


@pytest.mark.skipif(not (REAL_HAM / "splits").is_dir(), reason=f"real HAM10000 split files not found at {REAL_HAM}")
def test_ham_7class_reads_the_pinned_1002_test_ids_from_the_real_split_files() -> None:
    from fairmedbench.registry.datasets import load_dataset

    ds = load_dataset("ham10000-7class", REAL_HAM, split_dir="splits", keep_missing_images=True)  # metadata only
    test = ds.samples[suites.HAM_TEST.is_test(ds.samples)]
    assert (len(test), suites.test_fingerprint(test["sample_id"])) == (1002, suites.HAM_TEST.fingerprint)
    assert set(test["label"]) == set(range(7))


def test_rank_by_utility_where_there_is_no_es() -> None:
    def row(model: str, utility: float | None) -> dict:
        return {"model": model, "revision": "r", "dataset": "d", "usage": "u", "attribute": "sex", "flags": [],
                "tier": "verified", "metrics": {"utility": utility, "worst_group": None, "gap": None}}
    ranked = rank_rows([row("low", 0.7), row("none", None), row("high", 0.8)])
    assert [(r["model"], r["rank"]) for r in ranked] == [("high", 1), ("low", 2), ("none", 3)]


# --- end to end: a real run-suite bundle (random-weight C2L ResNet-18, linear probe, 80 synthetic images) -------

def _e2e_suite() -> Suite:
    from fairmedbench.benchmark.datasets import load_with_split

    name = "mc-e2e"
    if name not in SUITES:
        _, split = load_with_split("synth-ordinal", None, seed=0, n=80)
        register_suite(Suite(name, "1.0", "test suite: multi-class linear probe on 80 synthetic images", (
            Entry("synth-ordinal", ("sex",), "lp", task="multiclass", seeds=(0,), split_fingerprint=split.fingerprint,
                  test_fingerprint=suites.test_fingerprint(split.ids["test"]), n_test=len(split.ids["test"]),
                  options=(("n", 80),)),)))
    return get_suite(name)


@pytest.fixture(scope="module")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The genuine bundle submitted, and a copy (revision 'shuffled') whose test probabilities are permuted across
    samples, its numbers recomputed with the package's own code so that the arithmetic holds."""
    from fairmedbench.benchmark.run import RunOptions
    from fairmedbench.benchmark.suite import run_suite

    tmp = tmp_path_factory.mktemp("mc-e2e")
    _e2e_suite()
    opts = RunOptions(out_root=str(tmp / "results"), cache_dir=str(tmp / "cache"), device="cpu")
    bundle = run_suite("mc-e2e", "c2l", tmp / "bundle", opts, weights="random", n_boot=20)
    shuffled = Path(shutil.copytree(bundle, tmp / "shuffled"))
    model = json.loads((shuffled / "model.json").read_text())
    (shuffled / "model.json").write_text(json.dumps({**model, "revision": "shuffled"}))

    def permute(f: pd.DataFrame, block: dict, _: Path) -> pd.DataFrame:
        test = f.index[f.split == "test"]
        cols = block["columns"]["scores"]
        f.loc[test, cols] = f.loc[test, cols].to_numpy()[np.random.default_rng(3).permutation(len(test))]
        return f
    rewrite_predictions(shuffled, permute)
    boards = tmp / "leaderboards"
    return {"bundle": bundle, "boards": boards, "genuine": submit_bundle(bundle, "mc-e2e", boards),
            "shuffled": submit_bundle(shuffled, "mc-e2e", boards)}


def test_run_suite_bundle_is_accepted_and_ranked_by_macro_auc(e2e: dict) -> None:
    assert e2e["genuine"].accepted, e2e["genuine"].reasons
    assert e2e["shuffled"].accepted, e2e["shuffled"].reasons
    doc = json.loads((e2e["bundle"] / "results" / "synth-ordinal__lp__sex" / "seed0.json").read_text())
    assert doc["kind"] == "run-multiclass" and doc["predictions"]["classes"] == CLASSES
    paths = build_board("mc-e2e", e2e["boards"])
    board = json.loads(Path(paths["json"]).read_text())
    rows = board["rows"]
    # not verified: listed unranked, in the ranking rule's order (no ES: by macro AUC)
    assert [r["rank"] for r in rows] == [None, None] and {r["task"] for r in rows} == {"multiclass"}
    assert rows[0]["metrics"]["utility"] > rows[1]["metrics"]["utility"]
    genuine = next(r for r in rows if r["revision"] != "shuffled")
    assert genuine["metrics"]["utility"] == doc["result"]["reports"][0]["metrics"]["macro_auc"]["__overall__"]["value"]
    page = Path(paths["html"]).read_text()
    assert "utility (macro AUC), higher is better" in page and "<small>macro AUC</small>" in page
    assert ">ES " not in page and "Mean ES" not in page
    assert "multiclass: macro_auc" in page and "multiclass: worst_group_macro_auc" in page
    md = Path(paths["markdown"]).read_text()
    assert "| Model | Revision | Mean rank | Rows | Mean utility | Mean gap | Tiers | Flags |" in md


@pytest.mark.slow
def test_multiclass_submission_verifies_and_a_permuted_copy_does_not(e2e: dict) -> None:
    from fairmedbench.benchmark.run import RunOptions
    from fairmedbench.benchmark.verify import verify_bundle

    opts = RunOptions(cache_dir=None, device="cpu")
    ok = verify_bundle(e2e["genuine"].path, sample=8, seed=1, opts=opts)
    assert ok.passed, ok.lines()
    [entry] = ok.record["entries"].values()
    assert entry["n_compared"] == (8 + 8) * 4  # 8 sampled test items and the 8 val rows, 4 class probabilities each
    bad = verify_bundle(e2e["shuffled"].path, sample=8, seed=1, opts=opts)
    assert not bad.passed
    board = json.loads(Path(build_board("mc-e2e", e2e["boards"])["json"]).read_text())
    assert [(r["revision"] == "shuffled", r["tier"], r["rank"]) for r in board["rows"]] == [
        (False, "verified", 1), (True, "self-reported", None)]
