"""One predictions table per task, written and read in one place (issue 29.2): the same predictions score the same
through a run's writer and scorer, `evaluate` on a file and `submit`'s reader of a bundle; the segmentation task
leaves empty-ground-truth rows out of every metric itself; the resampled headline comes from the task; a plugin
task's external shift meets no KeyError."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fairmedbench.benchmark.evaluate import EvaluateOptions, run_evaluate
from fairmedbench.leaderboards.submit import Limits, _read_predictions, recompute
from fairmedbench.leaderboards.suites import Entry
from fairmedbench.registry.datasets import get_card
from fairmedbench.tasks.base import PredictionTable, get_task
from fairmedbench.tasks.common import score_and_write, score_settings
from fairmedbench.tasks.table import SplitPredictions

N_BOOT = N_PERM = 40


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(d))
    out["meta"].pop("data_checks", None)  # submit's recomputation drops it (what the data hide, not a number)
    return out


def _three_ways(tmp: Path, task_name: str, parts: list[SplitPredictions], tasks: list[str], classes: list[str],
                policy: str | None, evaluate: EvaluateOptions, dataset: str) -> list[dict[str, Any]]:
    """The result of a run's writer + scorer, of `evaluate` with `evaluate`'s options and of submit's reader +
    recomputation of the Parquet the run wrote."""
    task = get_task(task_name)
    path = tmp / "seed0.predictions.parquet"
    spec = SimpleNamespace(profile="default", n_boot=N_BOOT, n_perm=N_PERM, margins={})
    run, _ = score_and_write(task, path, parts, 0, tasks, ["sex"], score_settings(spec, 0, policy),  # type: ignore[arg-type]
                             classes)
    evaluated = run_evaluate(dataclasses.replace(evaluate, n_boot=N_BOOT, n_perm=N_PERM, out=str(tmp / "e.json")))
    entry = Entry(dataset, ("sex",), "linear_probe", task=task_name)
    block = task.predictions_block(path.name, tasks, ["sex"], classes)
    cols = _read_predictions(path.name, path.read_bytes(), entry, block, 0)
    submitted = recompute(path.name, {"predictions": block, "result": run.to_dict()}, entry, cols, Limits())
    return [_jsonable(run.to_dict()), _jsonable(evaluated.result.to_dict()), submitted]


def _ids(n: int, prefix: str) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    sex = np.where(np.arange(n) % 2 == 0, "F", "M").astype(object)
    return (np.array([f"{prefix}{i}" for i in range(n)]), np.array([f"p{prefix}{i // 2}" for i in range(n)]),
            {"sex": sex})


def test_binary_predictions_score_the_same_by_run_evaluate_and_submit(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    parts = []
    for split, n in (("val", 60), ("test", 120)):
        ids, pids, attrs = _ids(n, split)
        y = (rng.random(n) < 0.4).astype(np.int64)[:, None]
        parts.append(SplitPredictions(split, ids, pids, attrs, y, np.clip(0.3 * y + 0.7 * rng.random((n, 1)), 0, 1)))
    frame = get_task("classification").frame(parts, 0, ["y"])
    frame.rename(columns={"attr:sex": "sex"}).to_csv(tmp_path / "user.csv", index=False)  # a user's file
    opts = EvaluateOptions(predictions=str(tmp_path / "user.csv"), labels=["label:y"], scores=["score:y"],
                           attributes=["sex"])
    run, evaluated, submitted = _three_ways(tmp_path, "classification", parts, ["label:y"], [], "val_youden",
                                            opts, "synth-contrast")
    # the file's label column is named label:y, so its task column is too; the run's is named by the card
    assert run["reports"] == evaluated["reports"] == submitted["reports"]
    assert run["meta"] == evaluated["meta"] == submitted["meta"]
    assert run["meta"]["thresholds"]["label:y"]["policy"] == "val_youden"


def test_multiclass_predictions_score_the_same_by_run_evaluate_and_submit(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    classes = [str(c) for c in get_card("synth-ordinal").classes]
    parts = []
    for split, n in (("val", 40), ("test", 120)):
        ids, pids, attrs = _ids(n, split)
        y = np.arange(n) % len(classes)
        logits = rng.normal(size=(n, len(classes))) + 1.5 * np.eye(len(classes))[y]
        probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        parts.append(SplitPredictions(split, ids, pids, attrs, y, probs))
    frame = get_task("multiclass").frame(parts, 0, ["grade"], classes)
    frame.rename(columns={"attr:sex": "sex", "label": "grade"}).to_csv(tmp_path / "user.csv", index=False)
    opts = EvaluateOptions(predictions=str(tmp_path / "user.csv"), labels=["grade"], scores=["score:*"],
                           attributes=["sex"])
    run, evaluated, submitted = _three_ways(tmp_path, "multiclass", parts, ["grade"], classes, None, opts,
                                            "synth-ordinal")
    assert run["reports"] == evaluated["reports"] == submitted["reports"]
    assert run["meta"] == evaluated["meta"] == submitted["meta"]


def _mask_rows(folder: Path) -> tuple[pd.DataFrame, np.ndarray]:
    """40 mask pairs (8 x 8 squares in 16 x 16): 30 predictions shifted by s = i % 5 px (DSC (8 - s) / 8), and 10
    rows (every fourth) whose ground truth is empty while the prediction is not (DSC 0 if it were scored)."""
    rows, dsc = [], []
    for i in range(40):
        gt = np.zeros((16, 16), dtype=np.uint8)
        pred = np.zeros((16, 16), dtype=np.uint8)
        s = i % 5
        pred[4:12, 4 + s:12 + s] = 1
        if i % 4:
            gt[4:12, 4:12] = 1
            dsc.append((8 - s) / 8)
        np.save(folder / f"gt{i}.npy", gt)
        np.save(folder / f"pred{i}.npy", pred)
        rows.append({"sample_id": f"s{i}", "patient_id": f"p{i}", "split": "test", "sex": "F" if i % 2 else "M",
                     "pred_mask": f"pred{i}.npy", "gt_mask": f"gt{i}.npy"})
    return pd.DataFrame(rows), np.array(dsc)


def test_segmentation_with_empty_ground_truths_scores_the_same_by_run_evaluate_and_submit(tmp_path: Path) -> None:
    """The issue's 40-row table with 10 empty ground truths: overall DSC over the 30 scored rows by every path
    (evaluate --masks scored all 40 before: 0.60-style means with n 40)."""
    from fairmedbench.metrics.segmentation import dice_batch

    rows, expected = _mask_rows(tmp_path)
    rows.to_csv(tmp_path / "masks.csv", index=False)
    preds = [np.load(tmp_path / f) for f in rows["pred_mask"]]
    gts = [np.load(tmp_path / f) for f in rows["gt_mask"]]
    batch = dice_batch(preds, gts)
    empty = np.asarray(batch.empty_gt, dtype=bool)
    assert empty.sum() == 10
    values = {"dsc": np.where(empty, np.nan, batch.dsc), "iou": np.where(empty, np.nan, batch.iou), "empty_gt": empty}
    part = SplitPredictions("test", rows["sample_id"].to_numpy(), rows["patient_id"].to_numpy(),
                            {"sex": rows["sex"].to_numpy(dtype=object)}, values=values)
    opts = EvaluateOptions(predictions=str(tmp_path / "masks.csv"), masks=True, attributes=["sex"])
    run, evaluated, submitted = _three_ways(tmp_path, "segmentation", [part], ["segmentation"], [], None, opts,
                                            "synth-contrast")
    assert run["reports"] == evaluated["reports"] == submitted["reports"]
    assert run["meta"] == evaluated["meta"] == submitted["meta"]
    report = run["reports"][0]
    assert report["counts"]["__overall__"]["n"] == 30
    assert report["metrics"]["dsc"]["__overall__"]["value"] == pytest.approx(expected.mean())
    assert expected.mean() == pytest.approx(np.mean([(8 - i % 5) / 8 for i in range(40) if i % 4]))


def test_the_task_leaves_empty_ground_truth_rows_out_whoever_builds_the_table() -> None:
    """Hand-computed: 30 rows at DSC 0.8 and 10 empty-ground-truth rows at DSC 0 score 0.80 (n 30), not 0.60
    (n 40), even when a caller passes the rows to Task.score itself."""
    n = 40
    empty = np.arange(n) % 4 == 0
    test = {"dsc": np.where(empty, 0.0, 0.8), "empty_gt": empty,
            "attr:sex": np.where(np.arange(n) % 2 == 0, "F", "M").astype(object)}
    task = get_task("segmentation")
    res = task.score(PredictionTable(test, ("segmentation",), ("sex",)),
                     score_settings(SimpleNamespace(profile="default", n_boot=0, n_perm=0, margins={}), 0))  # type: ignore[arg-type]
    overall = res.reports[0].values["dsc"]["__overall__"][0]
    assert res.reports[0].counts["__overall__"]["n"] == 30 and overall == pytest.approx(0.8)


def test_the_reader_checks_roles_and_names_every_problem() -> None:
    from fairmedbench.errors import InputError

    task = get_task("classification")
    cols = {"split": np.array(["test"] * 3), "label:y": np.array([0, 1, 2]), "score:y": np.array([0.1, 1.5, 0.3]),
            "attr:sex": np.array(["F", "M", "F"], dtype=object)}
    with pytest.raises(InputError, match=r"f\.parquet: column 'label:y' must hold 0/1 labels; column 'score:y' "
                                         r"must hold values in \[0, 1\] \(1 outside\)"):
        task.table(cols, ["y"], ["sex"], where="f.parquet: ")
    seg = get_task("segmentation")
    filled = {"dsc": np.array([0.5, 0.9]), "empty_gt": np.array([False, True]),
              "attr:sex": np.array(["F", "M"], dtype=object)}
    with pytest.raises(InputError, match="has a value on 1 row"):
        seg.table(filled, ["segmentation"], ["sex"])
    read = seg.table({**filled, "dsc": np.array([0.5, np.nan])}, ["segmentation"], ["sex"])
    assert list(read.test["dsc"]) == [0.5] and read.val == {}


def test_the_resampled_headline_comes_from_the_task_for_segmentation() -> None:
    """Mean DSC per group of every score set on shared resamples: the point is the group mean (hand-computed), and
    two identical score sets are resampled identically (paired)."""
    task = get_task("segmentation")
    dsc = np.array([0.2, 0.4, 0.6, 0.8, 1.0, 0.0])
    groups = np.array(["a", "a", "a", "b", "b", "b"])
    d = task.resampled_headline(None, np.stack([dsc, dsc]), groups, 30, 0, "x")
    assert d.groups == ["a", "b"] and np.allclose(d.point, [[0.4, 0.6], [0.4, 0.6]])
    assert np.array_equal(d.resampled[:, 0], d.resampled[:, 1]) and d.resampled.shape == (30, 2, 2)


def test_a_plugin_task_gets_its_external_shift_without_a_key_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A task registered by a plugin (here: classification's layout under another name, with its own headline
    metric) gets the shift of its headline between two test sets; its metric is the task's, from the registry."""
    from fairmedbench.analysis.shift import SiteScores, site_shifts
    from fairmedbench.metrics.specs import METRIC_SPECS, MetricSpec
    from fairmedbench.tasks.base import TASKS

    monkeypatch.setitem(TASKS._items, "toy", dataclasses.replace(get_task("classification"), name="toy"))
    monkeypatch.setitem(METRIC_SPECS._items, "toy_auc", MetricSpec("toy_auc", "toy", "group", True, (0.0, 1.0),
                                                                   True, True, "the toy task's AUC"))
    rng = np.random.default_rng(3)
    n = 80
    g = np.where(np.arange(n) % 2 == 0, "F", "M").astype(object)
    y = np.arange(n) // 2 % 2
    site = SiteScores(y, np.clip(0.3 * y + 0.7 * rng.random(n), 0, 1), {"sex": g}, None, np.arange(n))
    [block] = site_shifts("toy", site, site, 20, 0, "twin", 10)
    assert block["metric"] == "toy_auc"
    assert block["per_group"]["F"]["internal"] == block["per_group"]["F"]["external"]


def test_score_settings_go_to_a_result_and_come_back() -> None:
    """tasks.table.record_settings (called by Task.score) and settings_from_meta are one pair: every setting a
    recomputation needs comes back as it went in, with the groups in the reported order."""
    from fairmedbench.spec import ScoreSettings
    from fairmedbench.tasks.table import settings_from_meta

    rng = np.random.default_rng(5)
    n = 80
    y = (np.arange(n) % 3 == 0).astype(np.int64)
    test = {"label:y": y, "score:y": np.clip(0.3 * y + 0.7 * rng.random(n), 0, 1),
            "attr:sex": np.where(np.arange(n) % 2 == 0, "M", "F").astype(object)}
    sent = ScoreSettings(threshold="fixed:0.3", n_boot=7, n_perm=5, seed=3, ci_level=0.9, min_group_size=10,
                         fpr_at_tpr=0.9, rates_at_fpr=0.1, ece_bins=10)
    task = get_task("classification")
    result = task.score(PredictionTable(test, ("y",), ("sex",)), sent).to_dict()
    back = settings_from_meta(result, task, ["sex"], ["y"])
    assert back == dataclasses.replace(sent, groups={"sex": ("F", "M")})


def test_segmentation_compare_gets_its_paired_test_set_bootstrap(tmp_path: Path) -> None:
    """compare's paired bootstrap of a segmentation comparison, from the frames the runs wrote, through the task
    (its empty-ground-truth rows left out). Hand-computed points: erm's DSC is 0.6 (F) and 0.8 (M) in both seeds,
    groupdro's 0.7 and 0.8; worst group 0.6 and 0.7, M - F 0.2 and 0.1, worst-group change from ERM +0.1."""
    from fairmedbench.benchmark.compare import CompareOutcome, _test_bootstrap
    from fairmedbench.engine.results import RunResult

    task = get_task("segmentation")
    n = 48
    ids, pids, attrs = _ids(n, "t")
    empty = np.arange(n) % 6 == 0
    female = attrs["sex"] == "F"
    runs: dict[str, list[RunResult]] = {}
    for method, f_dsc in (("erm", 0.6), ("groupdro", 0.7)):
        runs[method] = []
        for seed in (0, 1):
            dsc = np.where(empty, np.nan, np.where(female, f_dsc, 0.8))
            part = SplitPredictions("test", ids, pids, attrs, values={"dsc": dsc, "iou": dsc / (2 - dsc),
                                                                      "empty_gt": empty})
            folder = tmp_path / f"{method}{seed}"
            folder.mkdir()
            task.frame([part], seed, ["segmentation"]).to_parquet(folder / "p.parquet", index=False)
            runs[method].append(RunResult({"predictions": task.predictions_block("p.parquet", ["segmentation"],
                                                                                 ["sex"])}, folder))
    out = CompareOutcome("sex", ["erm", "groupdro"], ["synth"], task="segmentation")
    doc = _test_bootstrap(out, runs, "synth", "sex", 60)
    assert doc["metric"] == "dsc" and doc["groups"] == ["F", "M"] and doc["n_boot"] == 60
    erm, dro = doc["methods"]["erm"], doc["methods"]["groupdro"]
    assert erm["worst_group_dsc"]["value"] == pytest.approx(0.6)
    assert dro["worst_group_dsc"]["value"] == pytest.approx(0.7)
    assert erm["dsc_diff"]["value"] == pytest.approx(0.2) and dro["dsc_diff"]["value"] == pytest.approx(0.1)
    assert dro["worst_group_dsc_vs_erm"]["value"] == pytest.approx(0.1)
    # constant DSC within each group: every resample gives the same group means, so the intervals are points
    assert dro["worst_group_dsc_vs_erm"]["ci_low"] == pytest.approx(0.1) == dro["worst_group_dsc_vs_erm"]["ci_high"]
