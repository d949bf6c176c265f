"""The multiclass task end to end: synth-ordinal through lp (and lora), saved predictions re-evaluated."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fairmedbench.adapters import USAGES
from fairmedbench.benchmark.evaluate import EvaluateOptions, run_evaluate
from fairmedbench.benchmark.run import RunOptions, run
from fairmedbench.engine import store
from fairmedbench.errors import InputError
from fairmedbench.metrics.result import GAP
from fairmedbench.spec import RunSpec
from fairmedbench.tasks.base import get_task

CLASSES = ["grade0", "grade1", "grade2", "grade3"]


def _spec(**kw) -> RunSpec:
    base = dict(model="moco-cxr", weights="random", dataset="synth-ordinal", usage="lp", attributes=("sex",),
                seeds=(0, 1), n_boot=40, dataset_options={"n": 80}, hparams={"epochs": 20})
    base.update(kw)
    return RunSpec(**base)


def _opts(tmp: Path, **kw) -> RunOptions:
    return RunOptions(**{"out_root": str(tmp / "results"), "cache_dir": str(tmp / "cache"), "device": "cpu", **kw})


@pytest.fixture(scope="module")
def lp_run(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("mc")
    return tmp, run(_spec(), _opts(tmp))


def test_lp_run_writes_softmax_predictions_and_valid_results(lp_run) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    import pandas as pd

    tmp, out = lp_run
    schema = json.loads(store.SCHEMA_PATH.read_text())
    assert out.config.task == "multiclass" and len(out.seed_docs) == 2
    for seed, doc in zip((0, 1), out.seed_docs):
        jsonschema.validate(doc, schema)
        assert doc["kind"] == "run-multiclass" and doc["result"]["meta"]["classes"] == CLASSES
        assert doc["training"]["loss"] == "cross-entropy" and doc["usage"]["head"] == "softmax over 4 classes"
        block = doc["predictions"]
        assert block["classes"] == CLASSES and block["columns"]["labels"] == ["label"]
        assert block["columns"]["scores"] == [f"score:{c}" for c in CLASSES]
        pred = pd.read_parquet(out.out_dir / block["file"])
        assert set(pred["split"]) == {"val", "test"} and set(pred["seed"]) == {seed}
        probs = pred[block["columns"]["scores"]].to_numpy()
        assert np.allclose(probs.sum(axis=1), 1.0) and set(pred["label"]) == {0, 1, 2, 3}
        rep = doc["result"]["reports"][0]
        assert rep["counts"]["female"] == {"n": 12, "n:grade0": 3, "n:grade1": 3, "n:grade2": 3, "n:grade3": 3}
        assert {"macro_auc", "kappa_quadratic", "tpr:grade3", "macro_auc_vs_best"} <= set(rep["metrics"])
    summary = store.read_json(out.out_dir / "summary.json")
    assert summary["kind"] == "run-multiclass-summary"
    assert summary["across_seeds"]["label/sex"]["macro_auc"]["n_seeds"] == 2


def test_evaluate_on_saved_predictions_equals_the_run(lp_run, tmp_path: Path) -> None:
    import pandas as pd

    _, out = lp_run
    doc = out.seed_docs[0]
    pred = pd.read_parquet(out.out_dir / doc["predictions"]["file"]).rename(columns={"attr:sex": "sex"})
    path = tmp_path / "preds.parquet"
    pred.to_parquet(path)  # val rows stay in: evaluate scores the test rows only
    ev = run_evaluate(EvaluateOptions(predictions=str(path), labels=["label"], scores=["score:*"],
                                      attributes=["sex"], n_boot=doc["spec"]["n_boot"], seed=doc["spec"]["seed"],
                                      out=str(tmp_path / "ev" / "result.json")))
    assert ev.document["kind"] == "evaluate-multiclass"
    mine, theirs = ev.result.report(), out.results[0].report()
    assert mine.values.keys() == theirs.values.keys()
    for m, per in theirs.values.items():  # same rows, same bootstrap stream (seed, task 'label', attribute 'sex')
        assert mine.values[m].keys() == per.keys(), m
        for g, cell in per.items():
            assert mine.values[m][g] == pytest.approx(cell, nan_ok=True), (m, g)
    assert np.isfinite(theirs.values["macro_auc"]["__overall__"][1])  # an interval was compared, not only NaN


def test_mitigations_and_usages_that_do_not_serve_multiclass_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not apply to multiclass: .*argmax"):
        run(_spec(mitigation="group_thresholds"), _opts(tmp_path))
    with pytest.raises(InputError, match="argmax"):  # a threshold would be silently unused otherwise
        run(_spec(threshold="fixed:0.3"), _opts(tmp_path))
    with pytest.raises(InputError, match="offers multiclass"):
        run(_spec(usage="clip-zs", model="clip-vit-b32"), _opts(tmp_path))
    assert get_task("multiclass").headline == "macro_auc"
    assert get_task("multiclass").versus_erm == ("worst_group_macro_auc", "macro_auc_gap", "macro_auc")


def test_usages_name_the_tasks_they_serve() -> None:
    lp = type(USAGES.get("lp"))()
    assert lp.task_for(("multiclass",)) == "multiclass" and lp.task_for(("classification", "segmentation")) \
        == "classification"
    assert "multiclass" in lp.describe()["tasks"] and USAGES.get("sam-prompt").tasks == ("segmentation",)


@pytest.mark.slow
def test_ordinal_disparity_is_found_by_lp(tmp_path: Path) -> None:
    out = run(_spec(seeds=(0,), n_boot=200, dataset_options={"n": 400}, hparams={"epochs": 60}), _opts(tmp_path))
    rep = out.results[0].report()
    # measured: macro AUC female 0.638 [0.553, 0.725] vs male 0.788 [0.711, 0.858]; gap 0.150 [0.040, 0.255]
    assert rep.value("macro_auc", "female") < rep.value("macro_auc", "male")
    assert rep.value("kappa_quadratic", "female") < rep.value("kappa_quadratic", "male")
    assert rep.values["macro_auc_gap"][GAP][1] > 0  # the CI of the gap excludes 0
    assert rep.values["macro_auc_vs_best"]["female"][2] < 0


@pytest.mark.slow
def test_lora_trains_a_softmax_head(tmp_path: Path) -> None:
    out = run(_spec(usage="lora", seeds=(0,), n_boot=0, dataset_options={"n": 40},
                    hparams={"epochs": 1, "lora_r": 2}), _opts(tmp_path))
    doc = out.seed_docs[0]
    assert doc["kind"] == "run-multiclass" and doc["usage"]["name"] == "lora"
    assert doc["usage"]["lora"]["r"] == 2 and np.isfinite(doc["training"]["best_val_loss"])


def test_a_binary_head_refuses_multiclass_labels() -> None:
    from fairmedbench.adapters.linear_probe import make_linear_head
    from fairmedbench.mitigation import make_mitigation
    from fairmedbench.tasks.classification import SplitArrays, TrainConfig, fit_head

    x = np.random.default_rng(0).normal(size=(8, 3))
    y = np.array([0, 1, 2, 3, 0, 1, 2, 3])
    with pytest.raises(InputError, match="multiclass task"):
        fit_head(make_linear_head(x, 1), SplitArrays(x, y), SplitArrays(x, y), TrainConfig(epochs=1),
                 make_mitigation("erm"), 0)
