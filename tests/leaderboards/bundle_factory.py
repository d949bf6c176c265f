"""Test bundles: small synthetic predictions, metrics from fairmedbench.metrics, written in the bundle format."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fairmedbench.engine import store
from fairmedbench.leaderboards.bundle import write_header, write_result
from fairmedbench.leaderboards.suites import Entry, Suite, test_fingerprint
from fairmedbench.metrics import evaluate_classification
from fairmedbench.metrics.multiclass import evaluate_multiclass
from fairmedbench.metrics.seg_fairness import evaluate_segmentation
from fairmedbench.tasks.base import get_task

N_VAL, N_TEST, N_BOOT = 40, 60, 30


def model_card(name: str, quality: float = 1.5, pretraining: tuple[str, ...] = (),
               training_datasets: tuple[str, ...] = ()) -> dict[str, Any]:
    """A random-weight style model card; `quality` sets how well its scores separate the classes."""
    return {"name": name, "revision": "r1", "weights_sha256": hashlib.sha256(name.encode()).hexdigest(),
            "license": "Apache-2.0", "family": "test", "kind": "vision", "pretraining_data": list(pretraining),
            "training_datasets": list(training_datasets), "quality": quality}


def _rng(*keys: Any) -> np.random.Generator:
    return np.random.default_rng(int.from_bytes(hashlib.sha256(repr(keys).encode()).digest()[:8], "little"))


def dataset_rows(dataset: str, split: str, n: int) -> pd.DataFrame:
    """The dataset's fixed samples of one split: ids, labels of two tasks, sex and age groups (any model)."""
    r = _rng(dataset, split)
    return pd.DataFrame({"sample_id": [f"{dataset}-{split}-{i:04d}" for i in range(n)],
                         "lesion": r.integers(0, 2, n), "effusion": r.integers(0, 2, n),
                         "sex": r.choice(["female", "male"], n), "age": r.choice(["<60", ">=60"], n),
                         "grade": r.integers(0, 4, n)})


def split_fingerprint(dataset: str) -> str:
    """A stand-in for the dataset card's split fingerprint."""
    return hashlib.sha256(f"split:{dataset}".encode()).hexdigest()


def pinned(entry: Entry) -> Entry:
    """The entry with its test set pinned to the factory's dataset rows."""
    test = dataset_rows(entry.dataset, "test", N_TEST)
    return Entry(entry.dataset, entry.attributes, entry.usage, entry.task, entry.profile, entry.seeds,
                 split_fingerprint(entry.dataset), test_fingerprint(test["sample_id"]), N_TEST)


def make_result(entry: Entry, model: dict[str, Any], seed: int, tasks: tuple[str, ...] = ("lesion",),
                intersect: bool = False) -> tuple[dict[str, Any], pd.DataFrame]:
    """(result document, predictions frame) of one entry and seed, computed with fairmedbench.metrics."""
    r = _rng(model["name"], entry.key, seed)
    q = model["quality"]
    test = dataset_rows(entry.dataset, "test", N_TEST)
    attrs = list(entry.attributes)
    block_file = f"seed{seed}.predictions.parquet"
    if entry.task == "classification":
        val = dataset_rows(entry.dataset, "val", N_VAL)
        frames = []
        for part in (val, test):
            cols: dict[str, Any] = {"sample_id": part["sample_id"], "split": "val" if part is val else "test",
                                    "seed": seed}
            for task in tasks:
                z = q * (2 * part[task].to_numpy() - 1) + r.normal(0, 1, len(part))
                cols[f"label:{task}"] = part[task].astype("int64")
                cols[f"score:{task}"] = 1 / (1 + np.exp(-z))
            frames.append(pd.DataFrame({**cols, **{f"attr:{a}": part[a] for a in attrs}}))
        frame = pd.concat(frames, ignore_index=True)
        v, t = frame[frame.split == "val"], frame[frame.split == "test"]
        labels, scores = [f"label:{k}" for k in tasks], [f"score:{k}" for k in tasks]
        result = evaluate_classification(t[labels].to_numpy(), t[scores].to_numpy(),
                                         {a: t[f"attr:{a}"].to_numpy() for a in attrs}, task_names=list(tasks),
                                         val_y_true=v[labels].to_numpy(), val_y_score=v[scores].to_numpy(),
                                         n_boot=N_BOOT, seed=seed, min_group_size=10, profile=entry.profile,
                                         intersect=intersect)
        kind = "classification"
    elif entry.task == "multiclass":  # label = class index ('grade', 4 classes); softmax of q * one-hot + noise
        classes = list(entry.classes)
        val = dataset_rows(entry.dataset, "val", N_VAL)
        frames = []
        for part in (val, test):
            y = part["grade"].to_numpy() % len(classes)
            z = q * np.eye(len(classes))[y] + r.normal(0, 1, (len(part), len(classes)))
            p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
            frames.append(pd.DataFrame({"sample_id": part["sample_id"], "split": "val" if part is val else "test",
                                        "seed": seed, "label": y.astype("int64"),
                                        **{f"score:{c}": p[:, k] for k, c in enumerate(classes)},
                                        **{f"attr:{a}": part[a] for a in attrs}}))
        frame = pd.concat(frames, ignore_index=True)
        t = frame[frame.split == "test"]
        result = evaluate_multiclass(t["label"].to_numpy(), t[[f"score:{c}" for c in classes]].to_numpy(),
                                     {a: t[f"attr:{a}"].to_numpy() for a in attrs}, classes=classes,
                                     task_name="label", n_boot=N_BOOT, seed=seed, min_group_size=10,
                                     intersect=intersect)
        tasks, kind = ("label",), "multiclass"
    else:
        # about 10% empty ground truths: not prompted, so no score, and left out of the metrics (as a run does)
        empty = r.random(N_TEST) < 0.1
        dsc = np.where(empty, np.nan, np.clip(0.5 + 0.1 * q + r.normal(0, 0.15, N_TEST), 0, 1))
        frame = pd.DataFrame({"sample_id": test["sample_id"], "split": "test", "seed": seed, "dsc": dsc,
                              "iou": dsc / (2 - dsc), "empty_gt": empty, **{f"attr:{a}": test[a] for a in attrs}})
        scored = frame[~empty]
        result = evaluate_segmentation(scored["dsc"].to_numpy(), {a: scored[f"attr:{a}"].to_numpy() for a in attrs},
                                       iou=scored["iou"].to_numpy(), n_boot=N_BOOT, seed=seed, min_group_size=10,
                                       profile=entry.profile, intersect=intersect)
        tasks, kind = ("segmentation",), "segmentation"
    spec = {"model": model["name"], "dataset": entry.dataset, "attributes": list(entry.attributes),
            "usage": entry.usage, "seeds": list(entry.seeds), "profile": entry.profile, "n_boot": N_BOOT, "seed": seed,
            "weights": model["weights_sha256"] or "random:seed=0"}
    inputs = {"dataset": {"name": entry.dataset, "fingerprint": f"synthetic:{entry.dataset}",
                          "split_fingerprint": split_fingerprint(entry.dataset),
                          "test_fingerprint": test_fingerprint(test["sample_id"]), "n_test": N_TEST},
              "model": {"name": model["name"], "weights_sha256": model["weights_sha256"]}}
    doc = store.result_document(f"run-{entry.task}", spec, result.to_dict(), inputs, {"total": 0.1})
    doc["predictions"] = get_task(kind).predictions_block(block_file, list(tasks), attrs, entry.classes)
    return doc, frame


def bundle_card(model: dict[str, Any], description: str = "a test model") -> dict[str, Any]:
    """card.json for a test model that is not registered (submit.CARD_SCHEMA)."""
    return {"name": model["name"], "description": description, "family": model["family"], "kind": model["kind"],
            "license": model["license"], "weights": {"url": f"https://example.org/{model['name']}.safetensors"},
            "pretraining_data": model["pretraining_data"], "training_datasets": model["training_datasets"]}


def write_bundle(folder: Path, suite: Suite, model: dict[str, Any], description: str = "a test model") -> Path:
    """A complete bundle answering every entry and seed of `suite` (with card.json: test models are not registered)."""
    write_header(folder, model, suite, bundle_card(model, description))
    for entry in suite.entries:
        for seed in entry.seeds:
            doc, frame = make_result(entry, model, seed)
            write_result(folder, entry, seed, doc, frame)
    return folder


def pending_synthetic_suite() -> Suite:
    """The built-in 'synthetic' suite with its test-set pins removed (the factory's rows are stand-ins)."""
    import dataclasses

    from fairmedbench.leaderboards.suites import SUITES, get_suite, register_suite

    name = "synthetic-pending"
    if name in SUITES:
        return SUITES.get(name)
    base = get_suite("synthetic")
    entries = tuple(dataclasses.replace(e, split_fingerprint=None, test_fingerprint=None, n_test=None)
                    for e in base.entries)
    return register_suite(Suite(name, base.version, base.description, entries))


def pinned_suite() -> Suite:
    """A registered test suite with pinned test sets: classification over two seeds and segmentation."""
    from fairmedbench.leaderboards.suites import SUITES, register_suite

    name = "test-pinned"
    if name in SUITES:
        return SUITES.get(name)
    return register_suite(Suite(name, "1.0", "test suite with pinned fingerprints", (
        pinned(Entry("synth-control", ("sex", "age"), "linear_probe", seeds=(0, 1))),
        pinned(Entry("synth-contrast", ("sex",), "sam_prompt", task="segmentation")))))


def rewrite_predictions(bundle: Path, change: Any) -> None:
    """Change every predictions Parquet of a bundle with `change(frame, block, doc_path) -> frame`, then recompute
    every reported number with the package's own recomputation (`submit.recompute`), as a forger would."""
    import json

    from fairmedbench.leaderboards.submit import Limits, _read_predictions, recompute
    from fairmedbench.leaderboards.suites import get_suite

    suite = get_suite(json.loads((bundle / "suite.json").read_text())["name"])
    for doc_path in sorted((bundle / "results").rglob("seed*.json")):
        doc = json.loads(doc_path.read_text())
        block = doc["predictions"]
        pred = doc_path.with_name(block["file"])
        change(pd.read_parquet(pred), block, doc_path).to_parquet(pred, index=False)
        entry = suite.entry(doc_path.parent.name)
        cols = _read_predictions(pred.name, pred.read_bytes(), entry, block, int(doc["spec"]["seed"]))
        again = recompute(doc_path.name, doc, entry, cols, Limits())
        doc["result"]["reports"] = again["reports"]
        doc["result"]["meta"].update(again["meta"])
        doc_path.write_text(json.dumps(doc))


def forge(bundle: Path, seed: int = 7) -> None:
    """The attack of issue 15: classification scores replaced by values close to the labels (0.02 + 0.96 label,
    plus noise of sd 0.01), every reported number recomputed so that the arithmetic checks out."""
    rng = np.random.default_rng(seed)

    def near_labels(frame: pd.DataFrame, block: dict[str, Any], _: Path) -> pd.DataFrame:
        for label, score in zip(block["columns"]["labels"], block["columns"]["scores"]):
            frame[score] = np.clip(0.02 + 0.96 * frame[label] + rng.normal(0, 0.01, len(frame)), 0, 1)
        return frame

    rewrite_predictions(bundle, near_labels)


def forge_plausible(bundle: Path, seed: int = 11) -> None:
    """The attack of issue 23: scores = 0.25 * label + 0.75 * U(0, 1) (AUC about 0.78, overlapping groups: no
    near-perfect or implausible flag), every reported number recomputed with the package's own recomputation."""
    rng = np.random.default_rng(seed)

    def plausible(frame: pd.DataFrame, block: dict[str, Any], _: Path) -> pd.DataFrame:
        for label, score in zip(block["columns"]["labels"], block["columns"]["scores"]):
            frame[score] = 0.25 * frame[label] + 0.75 * rng.random(len(frame))
        return frame

    rewrite_predictions(bundle, plausible)


def passed_record(suite: Suite, tolerance: float = 1e-4, max_abs_diff: float = 1e-7) -> dict[str, Any]:
    """A verification record in which every entry of `suite` passed (what `benchmark verify` writes, without the
    re-run)."""
    return {"date": "2026-01-01T00:00:00+00:00", "engine": "fairmedbench test", "sample": 64, "seed": 0,
            "precision": "fp32", "device": "cpu", "tolerance": None, "passed": True,
            "entries": {e.key: {"passed": True, "reasons": [], "n_compared": 10, "max_abs_diff": max_abs_diff,
                                "tolerance": tolerance, "board_tolerance": 1e-4, "seeds": {}} for e in suite.entries}}


def record_verification(sub: Path, record: dict[str, Any]) -> Path:
    """Store `record` beside a stored submission (board/submissions/<model>/<revision>), MACed under its board's key
    as `benchmark verify` does."""
    from fairmedbench.leaderboards.seal import board_key
    from fairmedbench.leaderboards.tiers import write_verification

    key = board_key(sub.parent.parent.parent)
    assert key is not None, "the board's first submission created its key"
    return write_verification(sub, record, key)
