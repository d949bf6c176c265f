"""Segmentation test sets with empty ground-truth masks: run-suite writes one row per test sample (empty_gt rows
unscored), submit accepts the bundle and recomputes the metrics on prompted samples only, the board builds, and
every reader (flags, verify's comparison) leaves the unscored rows out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fairmedbench.benchmark.datasets import load_with_split
from fairmedbench.benchmark.leaderboard import build_board, submit_bundle
from fairmedbench.benchmark.run import RunOptions
from fairmedbench.benchmark.suite import run_suite
from fairmedbench.benchmark.verify import _compare
from fairmedbench.leaderboards import suites
from fairmedbench.leaderboards.flags import Facts, from_columns, near_perfect
from fairmedbench.leaderboards.suites import SUITES, Entry, Suite, get_suite, register_suite
from fairmedbench.metrics.result import OVERALL
from fairmedbench.metrics.seg_fairness import evaluate_segmentation

N = 20  # synth-contrast with 20 images: 6 test images, 2 of them without a lesion (empty mask)
ENTRY = "synth-contrast__sam-prompt__sex"


def _suite() -> Suite:
    if "seg-empty" not in SUITES:
        _, split = load_with_split("synth-contrast", None, seed=0, n=N)
        register_suite(Suite("seg-empty", "1.0", "test suite: box prompts on 20 synthetic images", (
            Entry("synth-contrast", ("sex",), "sam-prompt", task="segmentation", seeds=(0,),
                  split_fingerprint=split.fingerprint, test_fingerprint=suites.test_fingerprint(split.ids["test"]),
                  n_test=len(split.ids["test"]), options=(("n", N),)),)))
    return get_suite("seg-empty")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run-suite bundle of random-weight LiteMedSAM on a test set with empty masks."""
    _suite()
    tmp = tmp_path_factory.mktemp("seg-empty")
    opts = RunOptions(out_root=str(tmp / "results"), cache_dir=str(tmp / "cache"), device="cpu")
    return run_suite("seg-empty", "litemedsam", tmp / "bundle", opts, weights="random", n_boot=20)


def _files(bundle: Path) -> tuple[dict[str, Any], pd.DataFrame]:
    folder = bundle / "results" / ENTRY
    return json.loads((folder / "seed0.json").read_text()), pd.read_parquet(folder / "seed0.predictions.parquet")


def test_every_test_sample_has_a_row_and_empty_ones_are_unscored(bundle: Path) -> None:
    doc, frame = _files(bundle)
    ds, split = load_with_split("synth-contrast", None, seed=0, n=N)
    empty_ids = sorted(str(ds.samples["sample_id"].iloc[int(i)]) for i in split.positions["test"]
                       if not np.asarray(ds.load_mask(int(i))).any())
    assert len(empty_ids) == 2 and len(frame) == doc["inputs"]["dataset"]["n_test"] == 6
    assert frame["sample_id"].tolist() == list(split.ids["test"])  # split order, one row each
    empty = frame["empty_gt"].to_numpy(dtype=bool)
    assert sorted(frame.loc[empty, "sample_id"]) == empty_ids
    assert frame.loc[empty, ["dsc", "iou"]].isna().all().all()
    assert frame.loc[~empty, ["dsc", "iou"]].notna().all().all()
    assert doc["usage"]["n_skipped"] == 2 and sorted(doc["usage"]["skipped"]) == empty_ids
    assert set(doc["usage"]["skipped"].values()) == {"empty ground-truth mask: no prompt can be derived from it"}
    assert doc["result"]["meta"]["n_samples"] == 4 and doc["result"]["meta"]["n_empty_gt"] == 0


def test_a_result_from_before_empty_rows_is_recomputed_not_reused(bundle: Path, tmp_path: Path) -> None:
    """A stored seed result without usage.n_skipped (its Parquet lacks the empty-mask rows) is run again."""
    opts = RunOptions(out_root=str(bundle.parent / "results"), cache_dir=str(bundle.parent / "cache"), device="cpu")
    [doc_path] = list((bundle.parent / "results").rglob("seed0.json"))
    old = json.loads(doc_path.read_text())
    old["usage"].pop("n_skipped")
    doc_path.write_text(json.dumps(old))
    pred_path = doc_path.with_name("seed0.predictions.parquet")
    pd.read_parquet(pred_path).query("~empty_gt").to_parquet(pred_path, index=False)  # the old layout
    again = run_suite("seg-empty", "litemedsam", tmp_path / "bundle", opts, weights="random", n_boot=20)
    doc, frame = _files(again)
    assert doc["usage"]["n_skipped"] == 2 and len(frame) == 6 and len(pd.read_parquet(pred_path)) == 6
    assert doc["result"] == _files(bundle)[0]["result"]


def test_metrics_are_those_of_the_prompted_samples(bundle: Path) -> None:
    """The empty rows change no number: the result equals the engine on the prompted rows alone (the runner's
    call before empty rows were written), and the group means are the hand-computed means of those rows."""
    doc, frame = _files(bundle)
    prompted = frame[~frame["empty_gt"]]
    meta = doc["result"]["meta"]
    again = evaluate_segmentation(prompted["dsc"].to_numpy(), {"sex": prompted["attr:sex"].to_numpy()},
                                  iou=prompted["iou"].to_numpy(), profile=meta["profile"], n_boot=meta["n_boot"],
                                  seed=meta["seed"], n_perm=meta["n_perm"],
                                  patient_ids=prompted["patient_id"].to_numpy())
    checks = doc["result"]["meta"].pop("data_checks")  # what Task.score adds beside the engine's numbers
    assert checks["decision"] == "passed" and checks["n_rows"] == len(prompted)
    assert json.loads(json.dumps(again.to_dict())) == doc["result"]
    [report] = doc["result"]["reports"]
    dsc = report["metrics"]["dsc"]
    assert dsc[OVERALL]["value"] == pytest.approx(prompted["dsc"].mean(), abs=1e-12)
    for g, rows in prompted.groupby("attr:sex"):
        assert dsc[g]["value"] == pytest.approx(rows["dsc"].mean(), abs=1e-12)
        assert report["counts"][g]["n"] == len(rows)
    assert sum(report["counts"][g]["n"] for g in report["groups"]) == 4


def test_run_suite_bundle_is_accepted_and_the_board_builds(bundle: Path, tmp_path: Path) -> None:
    out = submit_bundle(bundle, "seg-empty", tmp_path / "lb")
    assert out.accepted, out.lines()
    paths = build_board("seg-empty", tmp_path / "lb")
    board = json.loads(Path(paths["json"]).read_text())
    [row] = board["rows"]
    doc, frame = _files(bundle)
    assert row["model"] == "litemedsam" and row["runs"][0]["n_test"] == 6
    assert row["metrics"]["utility"] == pytest.approx(frame.loc[~frame["empty_gt"], "dsc"].mean(), abs=1e-12)
    assert "litemedsam" in Path(paths["html"]).read_text()


def _tampered(bundle: Path, tmp: Path, change: Any) -> Path:
    copy = Path(shutil.copytree(bundle, tmp / "copy"))
    path = copy / "results" / ENTRY / "seed0.predictions.parquet"
    frame = pd.read_parquet(path)
    change(frame)
    frame.to_parquet(path, index=False)
    return copy


def test_a_score_on_an_empty_row_is_refused(bundle: Path, tmp_path: Path) -> None:
    def score_empty(frame: pd.DataFrame) -> None:
        frame.loc[frame["empty_gt"], "dsc"] = 1.0

    out = submit_bundle(_tampered(bundle, tmp_path, score_empty), "seg-empty", tmp_path / "lb")
    assert not out.accepted
    assert any("column 'dsc' has a value on 2 row(s) with empty_gt true" in r for r in out.reasons), out.reasons


def test_a_missing_score_on_a_prompted_row_is_refused(bundle: Path, tmp_path: Path) -> None:
    def drop_score(frame: pd.DataFrame) -> None:
        frame.loc[frame.index[~frame["empty_gt"]][0], "iou"] = np.nan

    out = submit_bundle(_tampered(bundle, tmp_path, drop_score), "seg-empty", tmp_path / "lb")
    assert not out.accepted
    assert any("column 'iou' has 1 NaN value(s)" in r for r in out.reasons), out.reasons


def test_hiding_a_prompted_sample_as_empty_is_refused(bundle: Path, tmp_path: Path) -> None:
    """Marking a badly segmented sample empty_gt (out of every metric) disagrees with the run's skipped block."""
    def hide(frame: pd.DataFrame) -> None:
        worst = frame["dsc"].idxmin()
        frame.loc[worst, "empty_gt"] = True
        frame.loc[worst, ["dsc", "iou"]] = np.nan

    out = submit_bundle(_tampered(bundle, tmp_path, hide), "seg-empty", tmp_path / "lb")
    assert not out.accepted
    assert any("usage.skipped names 2 sample(s) (n_skipped 2), the predictions have 3 row(s) with empty_gt" in r
               for r in out.reasons), out.reasons


def test_flags_and_verify_leave_empty_rows_out() -> None:
    test = {"sample_id": np.array(["a", "b", "c", "d"], dtype=object), "dsc": np.array([0.995, np.nan, 1.0, np.nan]),
            "iou": np.array([0.99, np.nan, 1.0, np.nan]), "empty_gt": np.array([0.0, 1.0, 0.0, 1.0]),
            "attr:sex": np.array(["f", "m", "m", "f"], dtype=object)}
    block = {"format": "segmentation", "attributes": ["sex"],
             "columns": {"id": "sample_id", "split": "split", "seed": "seed", "labels": [], "scores": ["dsc"]}}
    p = from_columns(test, block, 0)
    assert p.ids.tolist() == ["a", "c"] and p.scores[:, 0].tolist() == [0.995, 1.0]
    assert p.attributes["sex"].tolist() == ["f", "m"]
    entry = get_suite("synthetic-seg").entries[0]
    # 2 of 2 scored samples at DSC >= 0.99: near-perfect (counting the empty rows would give 50%, not flagged)
    flag = near_perfect(Facts({"name": "x"}, None, entry, "sex", [p]))
    assert flag == "seed 0: 100% of test samples have DSC >= 0.99"

    sub = pd.DataFrame({"sample_id": ["a", "b", "c", "d"], "split": "test", "dsc": [0.5, np.nan, 0.7, np.nan],
                        "iou": [0.4, np.nan, 0.6, np.nan], "empty_gt": [False, True, False, True]})
    again = sub.assign(dsc=[0.5, np.nan, 0.75, np.nan])
    assert _compare(sub, again, ["a", "b", "c", "d"], block) == (4, pytest.approx(0.05), [])
    hd = sub.assign(hd95=[2.0, np.nan, np.nan, np.nan])  # c has a distance in the data; a null hides it
    assert _compare(hd, again.assign(hd95=[2.0, np.nan, 3.5, np.nan]), ["a", "b", "c", "d"], block)[2] == [
        "1 sampled item(s) have a null hd95 where the re-run has a value, or the reverse, e.g. ('test', 'c')"]
    assert _compare(hd, again.assign(hd95=[2.5, np.nan, np.nan, np.nan]), ["a", "b", "c", "d"], block)[2] == []
    lied = sub.assign(empty_gt=[False, True, True, True], dsc=[0.5, np.nan, np.nan, np.nan])
    n, diff, problems = _compare(lied, again, ["a", "b", "c", "d"], block)
    assert (n, diff) == (2, 0.0) and problems == [
        "1 sampled item(s) disagree with the data on empty_gt (covered but not scored), e.g. ('test', 'c')"]


def _read_hd95(hd95: list[float], dsc: tuple[float, ...] = (0.5, np.nan, 0.0, 0.7)) -> list[str] | None:
    """Submit's reader on four segmentation rows (b has an empty ground truth, c an empty prediction: DSC 0)."""
    import io

    from fairmedbench.leaderboards.submit import _read_predictions, _Stop

    frame = pd.DataFrame({"sample_id": list("abcd"), "split": "test", "seed": 0, "dsc": list(dsc),
                          "iou": [0.4, np.nan, 0.0, 0.6], "empty_gt": [False, True, False, False], "hd95": hd95,
                          "attr:sex": list("fmmf")})
    block = {"columns": {"id": "sample_id", "split": "split", "seed": "seed", "labels": [], "scores": ["dsc"],
                         "attributes": ["attr:sex"]}, "attributes": ["sex"], "tasks": ["segmentation"]}
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    try:
        _read_predictions("seed0.predictions.parquet", buf.getvalue(), get_suite("synthetic-seg").entries[0], block, 0)
    except _Stop as stop:
        return stop.args[0]
    return None


def test_hd95_may_be_null_only_where_the_prediction_is_empty() -> None:
    """A 3D run writes a null HD95 where the predicted mask is empty (undefined, DSC 0): accepted; a null HD95
    beside a positive DSC hides a distance and is refused, as is a distance on an empty-ground-truth row."""
    assert _read_hd95([3.0, np.nan, np.nan, 2.0]) is None
    assert _read_hd95([3.0, np.nan, np.nan, np.nan]) == [
        "seed0.predictions.parquet: column 'hd95' is null on 1 row(s) with dsc > 0; HD95 is undefined only where "
        "the predicted mask is empty (dsc 0), so give the distance there"]
    lines = _read_hd95([3.0, 1.0, np.nan, 2.0])
    assert lines and "column 'hd95' has a value on 1 row(s) with empty_gt true" in lines[0]
    assert _read_hd95([3.0, np.nan, np.nan, -1.0]) == [
        "seed0.predictions.parquet: column 'hd95' has 1 negative value(s); a distance is >= 0 (pixels or mm)"]
    # a bad dsc column is reported, not a traceback from the HD95 rule that reads it
    assert _read_hd95([3.0, np.nan, np.nan, 2.0], dsc=(np.nan, np.nan, 0.0, 0.7)) == [
        "seed0.predictions.parquet: column 'dsc' has 1 NaN value(s); every sample needs a finite value"]
    assert _read_hd95([3.0, np.nan, np.nan, np.inf]) == [
        "seed0.predictions.parquet: column 'hd95' has 1 infinite value(s); every sample needs a finite value"]
