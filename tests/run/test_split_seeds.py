"""Repeated splits (`--split-seeds`): the test split stays fixed, train/val are re-drawn per split seed at patient
level, one encode of the train+val pool serves every split seed, and the summary across split seeds (mean, std,
t interval) stands beside each split's bootstrap interval."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fairmedbench.benchmark.run import RunOptions, run
from fairmedbench.engine.splits import patient_split, redraw_train_val
from fairmedbench.metrics.stats import seed_summary
from fairmedbench.spec import RunSpec


def test_redraw_keeps_test_and_redeals_train_val_by_patient() -> None:
    rng = np.random.default_rng(0)
    pids = np.array([f"P{i // 2}" for i in range(200)])  # two samples per patient
    sids = np.array([f"S{i}" for i in range(200)])
    strata = rng.integers(0, 2, 200).astype(str)
    base = patient_split(sids, pids, strata, (0.6, 0.2, 0.2), seed=0).bind(list(sids))
    draws = [redraw_train_val(base, sids, pids, strata, s) for s in (0, 1, 0)]
    for d in draws:
        assert d.ids["test"] == base.ids["test"]
        assert set(d.ids["train"]) | set(d.ids["val"]) == set(base.ids["train"]) | set(base.ids["val"])
        assert not set(pids[d.train]) & set(pids[d.val])  # patient level
        assert abs(len(d.val) - len(base.val)) <= 4 and d.policy.endswith("+redraw")
    assert draws[0].ids == draws[2].ids and draws[0].ids["train"] != draws[1].ids["train"]
    assert draws[0].fingerprint != draws[1].fingerprint


def test_split_seeds_run_summarises_across_splits(tmp_path: Path) -> None:
    opts = RunOptions(out_root=str(tmp_path / "out"), cache_dir=str(tmp_path / "cache"), device="cpu",
                      log=lambda m: None)
    spec = RunSpec(model="moco-cxr", weights="random", dataset="synth-contrast", usage="lp", attributes=("sex",),
                   dataset_options={"n": 80, "config": {"size": 32}}, n_boot=50, hparams={"epochs": 3},
                   seeds=(0, 1), split_seeds=(0, 1, 2))
    outcome = run(spec, opts)
    leaves = outcome.split_runs
    assert len(leaves) == 3 and len({x.config.run_id for x in leaves} | {outcome.config.run_id}) == 4
    assert len({x.seeds[0].inputs["dataset"]["test_fingerprint"] for x in leaves}) == 1  # test fixed
    assert len({x.config.split_fingerprint for x in leaves}) == 3  # train/val re-drawn
    # one encode of the train+val pool: the second and third split seeds read it from the cache
    notes = [x.seeds[0].doc["usage"]["features"] for x in leaves]
    assert not notes[0]["trainval"]["from_cache"] and notes[1]["trainval"]["from_cache"] and notes[2]["test"][
        "from_cache"]
    summary = json.loads((outcome.summary_dir / "summary.json").read_text())
    assert summary["split_seeds"] == [0, 1, 2] and summary["test_fixed"]
    cell = summary["across_splits"]["label/sex"]["auc"]
    vals = [r["value"] for r in cell["per_split"]]
    for r, leaf in zip(cell["per_split"], leaves):
        assert r["value"] == pytest.approx(leaf.summary["across_seeds"]["label/sex"]["auc"]["mean"])
        assert r["bootstrap"]["ci_low"] <= r["bootstrap"]["value"] <= r["bootstrap"]["ci_high"]
    s = seed_summary(vals, bounds=(0.0, 1.0))
    assert (cell["mean"], cell["std"], cell["ci_low"], cell["ci_high"]) == pytest.approx(
        (s.mean, s.std, s.ci_low, s.ci_high))
    again = run(spec, opts)  # every split seed's run is reused
    assert again.reused and again.summary["across_splits"] == summary["across_splits"]
