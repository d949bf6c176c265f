"""`benchmark run` end to end on the built-in synthetic data with cheap random-weight encoders."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fairmedbench.benchmark.run import RunOptions, run
from fairmedbench.cli import main
from fairmedbench.engine import store
from fairmedbench.errors import InputError, MissingResourceError
from fairmedbench.spec import RunSpec

SMALL = {"n": 60}


def _spec(**kw) -> RunSpec:
    base = dict(model="moco-cxr", weights="random", dataset="synth-contrast", usage="lp", seeds=(0, 1),
                n_boot=50, dataset_options=SMALL, hparams={"epochs": 30})
    base.update(kw)
    return RunSpec(**base)


def _opts(tmp: Path, **kw) -> RunOptions:
    return RunOptions(**{"out_root": str(tmp / "results"), "cache_dir": str(tmp / "cache"), "device": "cpu", **kw})


@pytest.fixture(scope="module")
def lp_run(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("run")
    return tmp, run(_spec(), _opts(tmp))


@pytest.fixture
def lp_cache(lp_run) -> dict[str, str]:
    """lp_run's feature cache, for a test's own runs on the same images (random-weight ResNet-18, moco-cxr: the
    runner's behaviour does not depend on the encoder) that check nothing about the cache."""
    return {"cache_dir": str(lp_run[0] / "cache")}


def test_lp_run_writes_valid_results_per_seed_and_summary(lp_run) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    import pandas as pd

    tmp, out = lp_run
    schema = json.loads(store.SCHEMA_PATH.read_text())
    assert not out.reused and len(out.seed_docs) == 2
    for seed, doc in zip((0, 1), out.seed_docs):
        jsonschema.validate(doc, schema)
        assert doc["spec"]["seed"] == seed and doc["kind"] == "run-classification"
        assert doc["inputs"]["dataset"]["split_fingerprint"] and doc["inputs"]["dataset"]["test_fingerprint"]
        assert doc["result"]["meta"]["thresholds"]["label"]["source"] == "validation"
        pred = pd.read_parquet(out.out_dir / doc["predictions"]["file"])
        assert set(pred["split"]) == {"val", "test"} and set(pred["seed"]) == {seed}
        assert {"label:label", "score:label", "attr:sex", "attr:age"} <= set(pred.columns)
        assert (pred["split"] == "test").sum() == doc["inputs"]["dataset"]["n_test"]
        # the hardware is provenance (environment), never identity: the same run on a GPU keeps its run id
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), None) if Path("/proc/cpuinfo").is_file() else None
        assert doc["environment"]["device"].startswith("cpu ") and (cpu is None or doc["environment"]["device"] ==
                                                                     f"cpu {cpu}")
        assert "device" not in json.dumps(doc["inputs"]) and "device" not in json.dumps(doc["spec"])
    summary = store.read_json(out.out_dir / "summary.json")
    assert summary["across_seeds"]["label/sex"]["auc"]["n_seeds"] == 2
    feats = out.seed_docs[0]["usage"]["features"]
    assert set(feats) == {"train", "val", "test"} and not feats["train"]["from_cache"]


def test_rerun_reuses_and_force_reads_feature_cache(lp_run) -> None:
    tmp, first = lp_run
    again = run(_spec(), _opts(tmp))
    assert again.reused and again.out_dir == first.out_dir
    forced = run(_spec(), _opts(tmp, force=True))
    assert not forced.reused
    assert all(v["from_cache"] for v in forced.seed_docs[0]["usage"]["features"].values())
    a = first.seed_docs[0]["result"]["reports"][0]["metrics"]["auc"]
    b = forced.seed_docs[0]["result"]["reports"][0]["metrics"]["auc"]
    assert a == b  # identical seeds give identical numbers on CPU


def test_test_labels_never_choose_threshold_or_checkpoint(lp_run, monkeypatch: pytest.MonkeyPatch) -> None:
    tmp, first = lp_run
    original = __import__("fairmedbench.benchmark.datasets", fromlist=["load_with_split"]).load_with_split

    def shuffled(*args, **kwargs):
        ds, split = original(*args, **kwargs)
        labels = ds.samples["label"].to_numpy().copy()
        test = split.test
        labels[test] = np.random.default_rng(5).permutation(labels[test])
        ds.samples["label"] = labels
        return ds, split

    monkeypatch.setattr("fairmedbench.benchmark.datasets.load_with_split", shuffled)
    other = run(_spec(), _opts(tmp, force=True, out_root=str(tmp / "shuffled")))
    for a, b in zip(first.seed_docs, other.seed_docs):
        assert a["result"]["meta"]["thresholds"] == b["result"]["meta"]["thresholds"]
        assert a["training"]["best_epoch"] == b["training"]["best_epoch"]
        assert a["training"]["val_losses"] == b["training"]["val_losses"]
    auc = lambda d: d["result"]["reports"][0]["metrics"]["auc"]["__overall__"]["value"]  # noqa: E731
    assert auc(first.seed_docs[0]) != auc(other.seed_docs[0])  # the test labels did change


def test_interrupted_run_leaves_no_partial_files_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           lp_cache: dict[str, str]) -> None:
    calls = {"n": 0}
    import fairmedbench.tasks.scoring as scoring

    original = scoring.evaluate_classification  # the runner scores through the task's scorer

    def interrupt_on_second(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(scoring, "evaluate_classification", interrupt_on_second)
    with pytest.raises(KeyboardInterrupt):
        run(_spec(), _opts(tmp_path, **lp_cache))
    folder = next((tmp_path / "results").rglob("seed0.json")).parent
    names = sorted(p.name for p in folder.iterdir())
    # the config and the lock, then seed 0: no summary, no seed 1, no temporary files
    assert names == [".lock", "config.json", "seed0.json", "seed0.predictions.parquet"]
    monkeypatch.setattr(scoring, "evaluate_classification", original)
    resumed = run(_spec(), _opts(tmp_path, **lp_cache))
    assert calls["n"] == 2 and (folder / "summary.json").exists() and len(resumed.seed_docs) == 2


def test_mitigation_and_hparams_are_recorded(tmp_path: Path, lp_cache: dict[str, str]) -> None:
    out = run(_spec(mitigation="groupdro", seeds=(0,), hparams={"epochs": 5, "eta": 0.1}), _opts(tmp_path, **lp_cache))
    tr = out.seed_docs[0]["training"]
    assert tr["mitigation"]["name"] == "groupdro" and tr["mitigation"]["hparams"]["eta"] == 0.1
    assert tr["config"]["epochs"] == 5


@pytest.mark.parametrize("kw, needle", [
    ({"usage": "sam-prompt"}, "cannot run here"),
    ({"usage": "clip-zs"}, "needs encode_image, encode_text"),  # a vision-only model
    ({"model": "litemedsam", "dataset": "nih-cxr14", "usage": "sam-prompt"}, "offers classification"),
    ({"attributes": ("race",)}, "has no attribute 'race'"),
    ({"model": "imagenet-resnet5"}, "Did you mean"),
])
def test_usage_and_name_errors(tmp_path: Path, kw: dict, needle: str) -> None:
    with pytest.raises(InputError) as exc:
        run(_spec(**kw), _opts(tmp_path))
    assert needle in str(exc.value)


def test_missing_real_dataset_says_where_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("FMB_DATA_NIH_CXR14", "FMB_DATA_ROOT"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(MissingResourceError) as exc:
        run(_spec(dataset="nih-cxr14", dataset_options={}), _opts(tmp_path))
    assert "FMB_DATA_NIH_CXR14" in str(exc.value)


def test_cli_run_default_command_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    base = ["--model", "moco-cxr", "--weights", "random", "--dataset", "synth-control",
            "--dataset-option", "n=40", "--n-boot", "20", "--hparam", "epochs=5", "--out", str(tmp_path / "r"),
            "--cache-dir", str(tmp_path / "c"), "--device", "cpu"]
    assert main(base + ["--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["kind"] == "run-classification-summary"
    assert main(base + ["--usage", "sam-prompt"]) == 2
    err = capsys.readouterr().err
    assert "Possible usages" in err and "Traceback" not in err


def test_an_imported_split_is_part_of_the_run_identity(lp_run, tmp_path: Path) -> None:
    from fairmedbench.benchmark.datasets import export_split

    tmp, first = lp_run
    path = tmp_path / "split.json"
    export_split("synth-contrast", None, 1, str(path), n=60)
    other = run(_spec(split_file=str(path)), _opts(tmp))
    assert not other.reused and other.out_dir != first.out_dir
    assert other.config.split_fingerprint.endswith(f"file:{store.sha256_file(path)}")


def test_missing_group_values_are_refused_before_any_encode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mitigation that trains with every training sample's group refuses training samples without one (their
    code would be -1: a traceback in the adversary, an error after the encode elsewhere) before any work."""
    from fairmedbench.benchmark import datasets

    real = datasets.load_with_split

    def with_gaps(*args, **kw):
        ds, split = real(*args, **kw)
        ds.samples.loc[ds.samples.index[split.train[:3]], "attr:sex"] = None
        return ds, split

    monkeypatch.setattr(datasets, "load_with_split", with_gaps)
    for mitigation in ("groupdro", "adversarial"):
        with pytest.raises(InputError, match=rf"mitigation '{mitigation}' trains with each training sample's sex "
                                             r"group, but 3 of \d+ training samples have no sex value"):
            run(_spec(attributes=("sex",), mitigation=mitigation, seeds=(0,)), _opts(tmp_path))
    assert not (tmp_path / "cache").exists()  # refused before feature extraction
    out = run(_spec(attributes=("sex",), seeds=(0,), hparams={"epochs": 2}), _opts(tmp_path))  # ERM trains
    assert out.seed_docs[0]["spec"]["mitigation"] == "erm"

