"""A board entry with external datasets (`suites.External`): run-suite writes the external predictions into the bundle,
submit recomputes the external results and the shift from them (refusing tampered numbers and files), verify re-runs
the external scores, and the board page opens with the shift answer and shows each external dataset's table."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fairmedbench.benchmark.datasets import load_with_split
from fairmedbench.benchmark.leaderboard import build_board, submit_bundle
from fairmedbench.benchmark.run import RunOptions
from fairmedbench.benchmark.suite import run_suite
from fairmedbench.engine import store
from fairmedbench.leaderboards import suites
from fairmedbench.leaderboards.submit import validate_bundle
from fairmedbench.leaderboards.suites import SUITES, Entry, External, Suite, get_suite, register_suite

# 200 images of 32 px: 60 test samples, 30 per sex (the minimum size of an interval), two training seeds
OPTIONS = {"n": 200, "config": {"size": 32}}
SUITE, PLAIN = "shift-e2e", "shift-e2e-plain"
KEY = "synth-contrast__lp__sex"


def _pins(dataset: str) -> tuple[str, str, int]:
    _, split = load_with_split(dataset, None, seed=0, **OPTIONS)
    return split.fingerprint, suites.test_fingerprint(split.ids["test"]), len(split.ids["test"])


def _suites() -> tuple[Suite, Suite]:
    """A one-entry suite with synth-flip as its external dataset, and the same entry without it."""
    if SUITE not in SUITES:
        split_fp, test_fp, n_test = _pins("synth-contrast")
        _, flip_fp, flip_n = _pins("synth-flip")
        text = 'synth-flip:n=200:config={"size":32}'
        for name, externals in ((SUITE, (External(text, flip_fp, flip_n),)), (PLAIN, ())):
            register_suite(Suite(name, "1.0", "test suite: external evaluation", (
                Entry("synth-contrast", ("sex",), "lp", seeds=(0, 1), split_fingerprint=split_fp,
                      test_fingerprint=test_fp, n_test=n_test, options=tuple(OPTIONS.items()), externals=externals),)))
    return get_suite(SUITE), get_suite(PLAIN)


@pytest.fixture(scope="module")
def shift_bundle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("shift-board")
    _suites()
    opts = RunOptions(out_root=str(tmp / "results"), cache_dir=str(tmp / "cache"), device="cpu")
    bundle = run_suite(SUITE, "moco-cxr", tmp / "bundle", opts, weights="random", n_boot=200)
    outcome = submit_bundle(bundle, SUITE, tmp / "boards")
    return {"tmp": tmp, "bundle": bundle, "outcome": outcome, "paths": build_board(SUITE, tmp / "boards")}


def test_registered_shift_suite_pins_match_the_generator() -> None:
    [entry] = get_suite("synthetic-shift").entries
    _, split = load_with_split(entry.dataset, None, seed=0, **entry.dataset_options)
    assert (split.fingerprint, suites.test_fingerprint(split.ids["test"]), len(split.ids["test"])) == (
        entry.split_fingerprint, entry.test_fingerprint, entry.n_test)
    from fairmedbench.analysis.shift import parse_eval_dataset

    for x in entry.externals:
        request = parse_eval_dataset(x.dataset)
        _, split = load_with_split(request.name, None, seed=0, **request.options)
        assert (suites.test_fingerprint(split.ids["test"]), len(split.ids["test"])) == (x.test_fingerprint, x.n_test)
    assert [x.name for x in entry.externals] == ["synth-flip", "synth-control"]


@pytest.mark.parametrize("make, message", [
    (lambda: External("synth-flip:root=/data"), "drop root="),
    (lambda: External("synth-flip:nx"), "KEY=VALUE"),
    (lambda: External("synth-control:overlap=paired"), "drop overlap="),
    (lambda: Entry("synth-contrast", ("sex",), "lp", externals=(External("synth-flip"), External("synth-flip"))),
     "listed twice"),
])
def test_a_suite_refuses_bad_externals(make: Callable[[], Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_good_bundle_accepted_with_the_external_rows(shift_bundle: dict[str, Any]) -> None:
    out, bundle = shift_bundle["outcome"], shift_bundle["bundle"]
    assert out.accepted, out.lines()
    folder = bundle / "results" / KEY
    assert sorted(p.name for p in folder.iterdir()) == [
        "seed0.external0.predictions.parquet", "seed0.json", "seed0.predictions.parquet",
        "seed1.external0.predictions.parquet", "seed1.json", "seed1.predictions.parquet"]
    docs = [store.read_json(folder / f"seed{k}.json") for k in (0, 1)]
    [row] = json.loads((out.path / "submission.json").read_text())["rows"]
    [ext] = row["external"]
    assert ext["label"] == 'synth-flip:config={"size":32}:n=200' and ext["n_test"] == 60
    # the board columns of the external result: the mean over seeds, as the row's own
    aucs = [d["external"][0]["result"]["reports"][0]["metrics"]["auc"]["__overall__"]["value"] for d in docs]
    assert ext["metrics"]["utility"] == pytest.approx(np.mean(aucs))
    # the shift of the seed mean: the mean of each seed's recorded shift (the gap's too: a mean of gaps)
    shifts = [d["external"][0]["shift"][0] for d in docs]
    for key in ("gap", "diff"):
        assert ext["shift"][key]["shift"] == pytest.approx(np.mean([s[key]["shift"] for s in shifts]))
        assert ext["shift"][key]["internal"] == pytest.approx(np.mean([s[key]["internal"] for s in shifts]))
    for g in ("female", "male"):
        assert ext["shift"]["per_group"][g]["shift"] == pytest.approx(
            np.mean([s["per_group"][g]["shift"] for s in shifts]))
    assert ext["shift"]["diff"]["ci_low"] <= ext["shift"]["diff"]["shift"] <= ext["shift"]["diff"]["ci_high"]
    assert "resamples of the two test sets" in ext["shift_method"]


def _tampered(shift_bundle: dict[str, Any], edit: Callable[[dict[str, Any], Path], None], tmp: Path,
              rehash: bool = False) -> list[str]:
    dst = Path(shutil.copytree(shift_bundle["bundle"], tmp / "bundle"))
    path = dst / "results" / KEY / "seed0.json"
    doc = json.loads(path.read_text())
    edit(doc, dst / "results" / KEY)
    if rehash:  # a submitter can always recompute the run id; the content checks must catch it
        doc["run_id"] = store.run_id({"kind": doc["kind"], "spec": doc["spec"], "inputs": doc["inputs"]})
    path.write_text(json.dumps(doc))
    reasons, _, _ = validate_bundle(dst, get_suite(SUITE))
    return reasons


def _bump(cell: dict[str, Any]) -> None:
    cell["value"] = cell["value"] + 0.01


def _flip_scores(doc: dict[str, Any], folder: Path) -> None:
    f = folder / doc["external"][0]["predictions"]
    frame = pd.read_parquet(f)
    col = next(c for c in frame.columns if c.startswith("score:"))
    frame[col] = 1.0 - frame[col]
    frame.to_parquet(f)


def _drop_test_row(doc: dict[str, Any], folder: Path) -> None:
    f = folder / doc["external"][0]["predictions"]
    pd.read_parquet(f).iloc[1:].to_parquet(f)


@pytest.mark.parametrize("edit, rehash, message", [
    (lambda d, f: _bump(d["external"][0]["result"]["reports"][0]["metrics"]["auc"]["__overall__"]), False,
     "external[0]/result/reports[0]/metrics/auc/__overall__/value: reported"),
    (lambda d, f: _bump(d["external"][0]["result"]["reports"][0]["metrics"]["auc_gap"]["__gap__"]), False,
     "external[0]/result/reports[0]/metrics/auc_gap/__gap__/value"),
    (lambda d, f: d["external"][0]["shift"][0]["diff"].update(shift=d["external"][0]["shift"][0]["diff"]["shift"]
                                                              + 0.01), False, "external[0]/shift[0]/diff/shift"),
    (lambda d, f: d["external"][0]["shift"][0]["per_group"]["male"].update(ci_low=-0.9), False,
     "external[0]/shift[0]/per_group/male/ci_low"),
    (_flip_scores, False, "reported number differs from recomputation: external[0]/"),
    (_drop_test_row, False, "test ids differ from the board's external test set"),
    (lambda d, f: d["external"][0]["result"]["meta"].update(n_boot=10), False, "result.meta.n_boot is 10"),
    (lambda d, f: d["spec"]["eval_datasets"][0].update(label="synth-control:n=200"), True,
     "entry synth-contrast__lp__sex evaluates"),
    (lambda d, f: d["spec"]["eval_datasets"][0]["alignment"]["sex"].update(groups=["male", "female"]), True,
     "external[0]"),
    (lambda d, f: d.pop("external"), False, "no 'external' block"),
    (lambda d, f: (f / d["external"][0]["predictions"]).unlink(), False, "missing (the predictions of"),
    (lambda d, f: shutil.copy(f / "seed0.predictions.parquet", f / "seed0.external1.predictions.parquet"), False,
     "seed0.external1.predictions.parquet: unexpected file"),
])
def test_tampered_external_evaluation_is_refused(shift_bundle: dict[str, Any], tmp_path: Path, edit: Any,
                                                 rehash: bool, message: str) -> None:
    reasons = _tampered(shift_bundle, edit, tmp_path, rehash)
    assert reasons and any(message in r for r in reasons), reasons


def test_an_entry_without_externals_refuses_external_results(shift_bundle: dict[str, Any], tmp_path: Path) -> None:
    dst = Path(shutil.copytree(shift_bundle["bundle"], tmp_path / "bundle"))
    store.write_json(dst / "suite.json", {"name": PLAIN, "version": "1.0"})
    reasons, _, _ = validate_bundle(dst, get_suite(PLAIN))
    assert any("declares none" in r for r in reasons), reasons


def test_board_files_show_the_external_evaluation(shift_bundle: dict[str, Any]) -> None:
    paths = shift_bundle["paths"]
    board = json.loads(paths["json"].read_text())
    [row] = board["rows"]
    assert row["external"][0]["label"] == 'synth-flip:config={"size":32}:n=200'
    assert board["entries"][0]["externals"][0]["n_test"] == 60
    html = paths["html"].read_text()
    assert 'id="shift-answer"' in html and "Does fairness hold on another site?" in html
    assert "Trained on synth-contrast (lp), tested on synth-flip" in html
    md = paths["markdown"].read_text()
    assert "Does fairness hold on another site?" in md and "#### External evaluation (not ranked)" in md
    assert "shift of the difference male - female" in md


def test_board_page_in_chromium(shift_bundle: dict[str, Any], chromium: Any) -> None:
    chromium.set_window_size(1400, 1800)
    chromium.get(shift_bundle["paths"]["html"].resolve().as_uri())
    first = chromium.execute_script("return [...document.body.children].filter(e => e.tagName !== 'H1')[0]")
    assert first.get_attribute("id") == "shift-answer"
    assert first.text.startswith("Does fairness hold on another site? Trained on synth-contrast and tested on "
                                 "synth-flip")
    tables = chromium.find_elements("css selector", "#external ~ div.scroll table")
    head = [th.text for th in tables[0].find_elements("css selector", "thead th")]
    assert head[:4] == ["Rank", "Model", "Revision", "Tier"] and head[-1].endswith("beyond sampling error?")
    cells = [td.text for td in tables[0].find_elements("css selector", "tbody td")]
    assert cells[1] == "moco-cxr" and len(cells) == len(head)
    assert cells[-1] in ("beyond sampling error", "within sampling error", "undefined")


@pytest.mark.slow
def test_verify_reruns_the_external_scores(shift_bundle: dict[str, Any]) -> None:
    from fairmedbench.benchmark.verify import verify_bundle

    v = verify_bundle(shift_bundle["outcome"].path, sample=4, seed=1,
                      opts=RunOptions(cache_dir=str(shift_bundle["tmp"] / "cache"), device="cpu"))
    assert v.passed, v.lines()
    [entry] = v.record["entries"].values()
    val = len(pd.read_parquet(shift_bundle["bundle"] / "results" / KEY / "seed0.predictions.parquet")
              .query("split == 'val'"))
    # per seed: 4 sampled internal test scores, every val score and all 60 external test scores
    assert entry["seeds"]["0"]["n_compared"] == 4 + val + 60


@pytest.mark.parametrize("dataset, usage, task, external, model", [
    ("synth-ordinal", "lp", "multiclass", 'synth-ordinal:n=60:config={"size":64}:data_seed=1', "moco-cxr"),
    pytest.param("synth-contrast", "sam-prompt", "segmentation", 'synth-flip:n=60:config={"size":64}', "litemedsam",
                 marks=pytest.mark.slow),  # LiteMedSAM prompted on 120 images: minutes on a loaded CPU
])
def test_multiclass_and_segmentation_entries_take_external_datasets(tmp_path: Path, dataset: str, usage: str,
                                                                    task: str, external: str, model: str) -> None:
    """The shift is the task's own headline (macro AUC of the class probabilities; mean per-sample DSC of the
    prompted samples), recomputed from the predictions as the runs compute it."""
    from fairmedbench.analysis.shift import parse_eval_dataset

    name = f"shift-{task}"
    if name not in SUITES:
        options = {"n": 60, "config": {"size": 64}}
        _, split = load_with_split(dataset, None, seed=0, **options)
        request = parse_eval_dataset(external)
        _, ext_split = load_with_split(request.name, None, seed=0, **request.options)
        register_suite(Suite(name, "1.0", f"test suite: {task} with an external dataset", (
            Entry(dataset, ("sex",), usage, task=task, seeds=(0,), split_fingerprint=split.fingerprint,
                  test_fingerprint=suites.test_fingerprint(split.ids["test"]), n_test=len(split.ids["test"]),
                  options=tuple(options.items()), externals=(External(external, suites.test_fingerprint(
                      ext_split.ids["test"]), len(ext_split.ids["test"])),)),)))
    opts = RunOptions(out_root=str(tmp_path / "results"), cache_dir=str(tmp_path / "cache"), device="cpu")
    bundle = run_suite(name, model, tmp_path / "bundle", opts, weights="random", n_boot=50)
    out = submit_bundle(bundle, name, tmp_path / "boards")
    assert out.accepted, out.lines()
    [row] = json.loads((out.path / "submission.json").read_text())["rows"]
    assert row["external"][0]["shift"]["metric"] == {"multiclass": "macro_auc", "segmentation": "dsc"}[task]
    [key] = get_suite(name).keys()
    path = bundle / "results" / key / "seed0.json"
    doc = json.loads(path.read_text())
    doc["external"][0]["shift"][0]["gap"]["external"] += 0.01
    path.write_text(json.dumps(doc))
    reasons, _, _ = validate_bundle(bundle, get_suite(name))
    assert any("external[0]/shift[0]/gap/external" in r for r in reasons), reasons
