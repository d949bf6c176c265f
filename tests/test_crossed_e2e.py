"""A study file and a board suite with a crossed attribute (sex*age) and declared margins, run end to end: the
sweep's run and the suite's bundle carry the cells and the margins, and the board accepts the bundle (its
recomputation applies the same margins)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fairmedbench.benchmark.datasets import load_with_split
from fairmedbench.benchmark.run import RunOptions
from fairmedbench.benchmark.studies import StudyError, load_study

CELLS = ["female|<60", "female|>=60", "male|<60", "male|>=60"]


def _opts(tmp: Path) -> RunOptions:
    return RunOptions(out_root=str(tmp / "r"), cache_dir=str(tmp / "c"), device="cpu")


def _reports(doc: dict) -> dict[str, dict]:
    return {r["attribute"]: r for r in doc["result"]["reports"]}


def test_a_study_with_a_crossed_attribute_and_a_margin_runs_end_to_end(tmp_path: Path) -> None:
    from fairmedbench.benchmark.sweep import sweep

    path = tmp_path / "crossed.yaml"
    path.write_text("models: [moco-cxr]\ndatasets: [synth-crossed]\nattributes: [sex, 'sex*age']\n"
                    "usages: [lp]\nseeds: [0]\nhparams: {epochs: 3}\nweights: random\nn_boot: 20\nn_perm: 20\n"
                    "margin: {auc: 0.4}\ndataset_options: {n: 60}\n")
    study = load_study(str(path))
    assert study.margin == "auc=0.4"
    result = sweep(study, _opts(tmp_path), report=lambda m: None)
    assert (result.ran, result.failed) == (1, [])
    (run_dir,) = (tmp_path / "r" / "runs").glob("*/*/*/*")
    assert json.loads((run_dir / "config.json").read_text())["margins"] == {"auc": 0.4}
    reports = _reports(json.loads((run_dir / "seed0.json").read_text()))
    assert reports["sex*age"]["groups"] == CELLS and "p_value" in reports["sex*age"]["tests"]["auc_gap"]
    assert reports["sex"]["tests"]["auc_diff"]["margin"] == 0.4


@pytest.mark.parametrize("value, needle", [("-1", "'-1' is not a positive number"), ("[0.1]", "margin"),
                                           ("{auc: x}", "'auc=x' is not a positive number")])
def test_a_bad_study_margin_names_its_line(tmp_path: Path, value: str, needle: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(f"models: [moco-cxr]\ndatasets: [synth-crossed]\nmargin: {value}\n")
    with pytest.raises(StudyError) as err:
        load_study(str(path))
    assert "s.yaml:3: margin" in str(err.value) and needle in str(err.value)


def test_a_suite_with_a_crossed_entry_and_margins_runs_submits_and_builds(tmp_path: Path) -> None:
    from fairmedbench.benchmark.leaderboard import build_board, submit_bundle
    from fairmedbench.benchmark.suite import run_suite
    from fairmedbench.leaderboards import suites
    from fairmedbench.leaderboards.suites import SUITES, Entry, Suite, register_suite

    if "crossed-e2e" not in SUITES:
        _, split = load_with_split("synth-crossed", None, seed=0, n=60)
        entry = Entry("synth-crossed", ("sex", "sex*age"), "lp", seeds=(0,), split_fingerprint=split.fingerprint,
                      test_fingerprint=suites.test_fingerprint(split.ids["test"]), n_test=len(split.ids["test"]),
                      options=(("n", 60),))
        register_suite(Suite("crossed-e2e", "1.0", "test suite: a crossed entry with margins", (entry,),
                             margins=(("auc", 0.4), ("*", 0.2))))
    assert SUITES.get("crossed-e2e").margin == "auc=0.4,0.2"
    assert SUITES.get("crossed-e2e").keys() == ["synth-crossed__lp__sex+sex-x-age"]  # bundle-safe file names
    bundle = run_suite("crossed-e2e", "moco-cxr", tmp_path / "bundle", _opts(tmp_path), weights="random",
                       n_boot=20)
    doc = json.loads(next((bundle / "results").rglob("seed0.json")).read_text())
    reports = _reports(doc)
    assert reports["sex*age"]["groups"] == CELLS
    assert doc["result"]["meta"]["margins"] == {"auc": 0.4, "*": 0.2}
    assert reports["sex"]["tests"]["auc_diff"]["margin"] == 0.4
    outcome = submit_bundle(bundle, "crossed-e2e", tmp_path / "boards")
    assert outcome.accepted, outcome.lines()
    page = Path(build_board("crossed-e2e", tmp_path / "boards")["html"]).read_text()
    assert "sex*age" in page


def test_a_suite_margin_outside_0_1_is_refused() -> None:
    from fairmedbench.leaderboards.suites import Suite

    with pytest.raises(ValueError, match="each margin is"):
        Suite("bad", "1.0", "", (), margins=(("auc", 1.5),))
