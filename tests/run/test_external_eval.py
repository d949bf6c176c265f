"""External evaluation (`--eval-dataset`): refusals before any work, the synthetic shift pair (a site where the
bias flips, one where it vanishes, a same-bias twin where there is no shift), multi-class and segmentation, and
NIH ChestX-ray14 PA -> AP on the real images."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairmedbench.benchmark.resolve import resolve_run
from fairmedbench.benchmark.run import RunOptions, run
from fairmedbench.cli import main
from fairmedbench.spec import RunSpec

BASE = ["--model", "litemedsam", "--weights", "random", "--dataset", "synth-contrast", "--dataset-option", "n=24"]
# a small, easy version of the synthetic lesions (64 px, brighter lesions) that a random-weight ResNet-18 separates
SMALL = {"n": 300, "config": {"size": 64, "lesion_amplitude": 0.4}}
SMALL_TEXT = 'n=300:config={"size":64,"lesion_amplitude":0.4}'


def _opts(tmp_path: Path) -> RunOptions:
    return RunOptions(out_root=str(tmp_path / "out"), cache_dir=str(tmp_path / "cache"), device="cpu",
                      log=lambda m: None)


@pytest.mark.parametrize("extra, message", [
    (["--eval-dataset", "synth-ordinal"], "offers multiclass"),
    (["--eval-dataset", "nih-cxr14"], "class names differ"),
    (["--eval-dataset", "synth3d-contrast"], "is 3D"),
    (["--eval-dataset", "synth-contrast:n=24"], "the run's own dataset"),
    (["--eval-dataset", "synth-flip,synth-flip"], "give each external dataset once"),
    (["--eval-dataset", "synth-fl1p"], "synth-fl1p"),
    (["--eval-dataset", "synth-flip:split=val"], "split=test"),
    (["--usage", "lp", "--eval-dataset", "synth-flip", "--prevalence", "0.3"], "--prevalence-on test"),
    # 24 images: a test split of 4 females (2 with a lesion) and 3 males; the twin renders synth-contrast's 3 male and
    # 2 lesion-free female test images pixel for pixel, and the 17 others are synth-contrast's train and validation
    (["--eval-dataset", "synth-control:n=24"], "5 of its 7 items are also in the run's test split"),
    (["--eval-dataset", "synth-control:n=24:data_seed=3:overlap=paired"], "drop overlap=paired"),
    (["--eval-dataset", "synth-contrast:n=24:split=all"], "17 of its 24 items are in the run's training"),
    (["--split-seeds", "0,0"], "--split-seeds"),
    (["--split-seeds", "0,1", "--split-file", "x.json"], "--split-file"),
])
def test_bad_requests_fail_before_any_work(extra: list[str], message: str, tmp_path: Path, capsys) -> None:
    """Exit 2 with one line naming the problem, before any model is loaded or image encoded."""
    assert main([*BASE, *extra, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("benchmark: error:") and message in err[0], err
    assert not (tmp_path / "runs").exists()


def test_eval_datasets_are_part_of_the_run_identity() -> None:
    spec = RunSpec(model="moco-cxr", dataset="synth-contrast", usage="lp", weights="random", attributes=("sex",),
                   dataset_options={"n": 40})
    plain = resolve_run(spec, device="cpu").config
    a = resolve_run(replace(spec, eval_datasets=("synth-flip:n=40",)), device="cpu").config
    b = resolve_run(replace(spec, eval_datasets=("synth-flip:n=41",)), device="cpu").config
    assert len({plain.run_id, a.run_id, b.run_id}) == 3
    assert "eval_datasets" not in plain.identity()  # a run without one keeps the id it had
    [meta] = a.eval_datasets
    assert meta["dataset"] == "synth-flip" and meta["options"] == {"n": 40} and meta["split"] == "test"
    assert meta["alignment"]["sex"]["groups"] == ["female", "male"]


@pytest.mark.slow  # four 300-image sets through a ResNet-18: about a minute alone, minutes on a loaded machine
def test_synthetic_shift_pair(tmp_path: Path) -> None:
    """Trained on synth-contrast (female lesions at 0.35x contrast): on synth-flip (male lesions at 0.35x) the
    signed AUC difference male - female moves with an interval excluding 0; on a same-bias twin (other samples,
    data_seed=1) its shift has an interval including 0; on synth-control (data_seed=3: disjoint from the internal
    test set) the bias vanishes there."""
    spec = RunSpec(model="moco-cxr", weights="random", dataset="synth-contrast", usage="lp", attributes=("sex",),
                   dataset_options=SMALL, n_boot=500, precision="fp32",
                   eval_datasets=(f"synth-flip:{SMALL_TEXT}", f"synth-contrast:{SMALL_TEXT}:data_seed=1",
                                  f"synth-control:{SMALL_TEXT}:data_seed=3"))
    outcome = run(spec, _opts(tmp_path))
    doc = outcome.seed_docs[0]
    internal = doc["result"]["reports"][0]["metrics"]["auc_diff"]["__gap__"]
    assert internal["ci_low"] > 0  # the injected bias is found on the internal test set
    flip, twin, control = ({s["attribute"]: s for s in e["shift"]}["sex"] for e in doc["external"])
    assert flip["diff"]["of"] == "male - female"
    assert flip["diff"]["shift"] < 0 and flip["diff"]["ci_high"] < 0 and flip["diff"]["excludes_0"]
    assert flip["diff"]["external"] < 0  # the bias is reversed there
    assert twin["diff"]["ci_low"] < 0 < twin["diff"]["ci_high"] and not twin["diff"]["excludes_0"]
    ctl = doc["external"][2]["result"]["reports"][0]["metrics"]["auc_diff"]["__gap__"]
    # the bias vanishes on the control site (at data_seed 3 both groups reach AUC 1: every resample gives 0, which
    # has no interval)...
    assert abs(ctl["value"]) < 0.05 and (ctl["ci_low"] is None or ctl["ci_low"] <= 0 <= ctl["ci_high"])
    assert control["diff"]["shift"] < 0  # ...so the difference moves towards 0 from the internal one
    # each external set went through the same metric engine call; its predictions are stored beside the run's
    for e in doc["external"]:
        pred = pd.read_parquet(outcome.out_dir / e["predictions"])
        assert len(pred) == e["n_test"] == 90 and set(pred["split"]) == {"test"}
        assert e["result"]["reports"][0]["counts"]["__overall__"]["n"] == e["n_test"]
    summary = json.loads((outcome.out_dir / "summary.json").read_text())
    assert [x["label"] for x in summary["external"]] == [e["label"] for e in doc["external"]]
    assert summary["external"][0]["attributes"][0]["shift"]["diff"]["per_seed"][0]["shift"] == flip["diff"]["shift"]


def test_multiclass_head_is_evaluated_on_an_external_set(tmp_path: Path) -> None:
    opts = {"n": 120, "config": {"size": 32}}
    spec = RunSpec(model="moco-cxr", weights="random", dataset="synth-ordinal", usage="lp", attributes=("sex",),
                   dataset_options=opts, n_boot=50, hparams={"epochs": 3},
                   eval_datasets=('synth-ordinal:n=120:config={"size":32}:data_seed=3',))
    outcome = run(spec, _opts(tmp_path))
    [ext] = outcome.seed_docs[0]["external"]
    [sh] = ext["shift"]
    assert sh["metric"] == "macro_auc" and set(sh["per_group"]) == {"female", "male"}
    pred = pd.read_parquet(outcome.out_dir / ext["predictions"])
    scores = pred[[c for c in pred.columns if c.startswith("score:")]].to_numpy()
    assert scores.shape == (ext["n_test"], 4) and np.allclose(scores.sum(axis=1), 1)
    assert "macro_auc" in ext["result"]["reports"][0]["metrics"]


def test_segmentation_external_results_with_a_stub_segmenter(tmp_path: Path) -> None:
    """The segmentation runner's external step: the same predictor on the external test split, DSC per group
    through the segmentation engine, the shift of the group mean DSC."""
    from fairmedbench.tasks.common import attr_columns, patient_ids
    from fairmedbench.tasks.segmentation import _external_results, run_segmentation

    def fill_box(image: np.ndarray, prompt) -> np.ndarray:
        out = np.zeros(image.shape[:2], bool)
        x0, y0, x1, y1 = prompt.box.astype(int)
        out[y0:y1 + 1, x0:x1 + 1] = True
        return out

    spec = RunSpec(model="litemedsam", weights="random", dataset="synth-contrast", usage="sam-prompt",
                   attributes=("sex",), dataset_options={"n": 40, "config": {"size": 32}}, n_boot=50,
                   eval_datasets=('synth-flip:n=40:config={"size":32}',))
    r = resolve_run(spec, device="cpu")
    ds, split, config = r.dataset, r.split, r.config
    internal = run_segmentation(fill_box, ds.load_image, ds.load_mask, split.test, "bbox", 0)
    [ext] = _external_results(config, r.externals, fill_box, tmp_path, 0, 0.0, internal,
                              attr_columns(ds, config, np.asarray(internal.positions)),
                              patient_ids(ds, np.asarray(internal.positions)))
    [sh] = ext["shift"]
    assert sh["metric"] == "dsc" and set(sh["per_group"]) == {"female", "male"}
    female = sh["per_group"]["female"]
    assert female["shift"] == pytest.approx(female["external"] - female["internal"])
    pred = pd.read_parquet(tmp_path / ext["predictions"])
    assert len(pred) == ext["n_test"] and pred["dsc"].notna().sum() == ext["result"]["reports"][0]["counts"][
        "__overall__"]["n"]


@pytest.mark.slow
def test_real_nih_pa_to_ap(real_data: Path, tmp_path: Path) -> None:
    """A second site from one real release: trained on the PA views, evaluated on every AP view (split=all)."""
    root = str(real_data / "nih-cxr14")
    spec = RunSpec(model="moco-cxr", weights="random", dataset="nih-cxr14", usage="lp", attributes=("sex",),
                   dataset_options={"view": "PA"}, n_boot=200, eval_datasets=("nih-cxr14:view=AP:split=all",))
    outcome = run(spec, replace(_opts(tmp_path), data_root=root))
    [ext] = outcome.seed_docs[0]["external"]
    assert ext["n_test"] == 103 and ext["label"] == "nih-cxr14:split=all:view=AP"
    assert outcome.seed_docs[0]["inputs"]["dataset"]["n_test"] < 518
    [sh] = ext["shift"]
    assert set(sh["per_group"]) == {"female", "male"} and sh["diff"]["of"] == "male - female"


@pytest.mark.slow  # two seeds of a ResNet-18 on 52 images: about 30 s here; test_shift_over_seeds_* are its siblings
def test_paired_overlap_and_every_seed_on_the_terminal_and_the_page(tmp_path: Path, capsys) -> None:
    """overlap=paired on the twin that shares synth-contrast's male and lesion-free test images: the run says so on
    the terminal and the page, and both show the shift of every training seed with the mean ± std and the t
    interval across seeds (not seed 0's alone)."""
    from fairmedbench.analysis.shift import SHIFT_METHOD_PAIRED

    small = 'n=40:config={"size":32}'
    assert main(["run", "--model", "moco-cxr", "--weights", "random", "--dataset", "synth-contrast",
                 "--dataset-option", "n=40", "--dataset-option", 'config={"size":32}', "--usage", "lp",
                 "--attribute", "sex", "--seeds", "0,1", "--n-boot", "200", "--precision", "fp32", "--report",
                 "--eval-dataset", f"synth-control:{small}:overlap=paired", "--out", str(tmp_path / "out"),
                 "--cache-dir", str(tmp_path / "cache")]) == 0
    out = " ".join(re.sub("[│┃]", " ", capsys.readouterr().out).split())  # rich wraps long lines, draws boxes
    [folder] = (tmp_path / "out" / "runs").glob("*/*/*/*")
    docs = [json.loads((folder / f"seed{k}.json").read_text()) for k in (0, 1)]
    [meta] = docs[0]["spec"]["eval_datasets"]
    assert meta["overlap"] == {"resampling": "paired", "n_shared": 9}  # 6 male + 3 lesion-free female of 12
    assert all(d["external"][0]["shift_method"] == SHIFT_METHOD_PAIRED for d in docs)
    diffs = [d["external"][0]["shift"][0]["diff"]["shift"] for d in docs]
    assert all(d["external"][0]["shift"][0]["diff"]["paired"] for d in docs)
    mean, std = (diffs[0] + diffs[1]) / 2, abs(diffs[0] - diffs[1]) / np.sqrt(2)
    half = 12.706 * std / np.sqrt(2)  # t(0.975, 1 df) * std / sqrt(2 seeds)
    row = f"{mean:+.3f} ± {std:.3f} [{mean - half:+.3f}, {mean + half:+.3f}]"
    assert "shares items with the run's test set (overlap=paired)" in out
    assert "a paired bootstrap of the two test sets" in out and "all 2 seeds" in out
    assert f"difference male - female {diffs[0]:+.3f} {diffs[1]:+.3f} {row}" in out
    page = (folder / "report.html").read_text()
    assert "Paired: this set shares items with the run" in page and "all 2 seeds" in page and row in page
    summary = json.loads((folder / "summary.json").read_text())
    across = summary["external"][0]["attributes"][0]["shift"]["diff"]
    assert [r["shift"] for r in across["per_seed"]] == diffs and across["mean"] == pytest.approx(mean)


def test_real_nih_external_set_holding_trained_views_is_refused(real_data: Path) -> None:
    """One real release read twice: the PA-trained run evaluated on every view (split=all) would test on the 414
    PA images it trained or validated on (518 PA views, 104 in the test split); the AP views share none."""
    from fairmedbench.errors import InputError

    spec = RunSpec(model="moco-cxr", weights="random", dataset="nih-cxr14", usage="lp", attributes=("sex",),
                   dataset_options={"view": "PA"}, eval_datasets=("nih-cxr14:split=all",))
    with pytest.raises(InputError, match="414 of its 621 items are in the run's training or validation split"):
        resolve_run(spec, data_root=str(real_data / "nih-cxr14"), device="cpu")
