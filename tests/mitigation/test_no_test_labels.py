"""No mitigation's training, checkpoint choice or threshold reads a test label: flipping every test label leaves
each method's validation curve, chosen epoch, thresholds and every predicted score unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairmedbench.benchmark.run import RunOptions, run
from fairmedbench.mitigation import MITIGATIONS, make_mitigation
from fairmedbench.spec import RunSpec
from fairmedbench.tasks.base import get_task

# every method a linear probe of frozen features can train (lnl and end refuse it: they need an encoder that
# trains, and their loss hooks see the same training batches as every other method's)
METHODS = [n for n in MITIGATIONS.names() if make_mitigation(n).serves(get_task("classification"))
           and not MITIGATIONS.get(n).needs_trainable_representation]
CHEAP = {"jtt", "sam", "cfair", "dfr"}  # the restart, the two-step update, a training-split count, the refit
PARAMS = [pytest.param(n, marks=() if n in CHEAP else pytest.mark.slow) for n in METHODS]


def _run(name: str, tmp: Path, out: str):  # noqa: ANN202
    spec = RunSpec(model="c2l", weights="random", dataset="synth-underrep", usage="lp", seeds=(0,),
                   n_boot=0, n_perm=0, attributes=("sex",), mitigation=name, dataset_options={"n": 60},
                   hparams={"epochs": 6, "batch_size": 16})
    return run(spec, RunOptions(out_root=str(tmp / out), cache_dir=str(tmp / "cache"), device="cpu"))


@pytest.mark.parametrize("name", PARAMS)
def test_flipping_test_labels_changes_no_training_choice(name: str, tmp_path_factory: pytest.TempPathFactory,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    tmp = tmp_path_factory.getbasetemp() / "no-test-labels"
    first = _run(name, tmp, f"{name}-plain")
    original = __import__("fairmedbench.benchmark.datasets", fromlist=["load_with_split"]).load_with_split

    def flipped(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        ds, split = original(*args, **kwargs)
        labels = ds.samples["label"].to_numpy().copy()
        labels[split.test] = 1 - labels[split.test]
        ds.samples["label"] = labels
        return ds, split

    monkeypatch.setattr("fairmedbench.benchmark.datasets.load_with_split", flipped)
    other = _run(name, tmp, f"{name}-flipped")
    a, b = first.seed_docs[0], other.seed_docs[0]
    assert a["result"]["meta"]["thresholds"] == b["result"]["meta"]["thresholds"]
    assert a["training"]["best_epoch"] == b["training"]["best_epoch"]
    assert a["training"]["val_losses"] == b["training"]["val_losses"]
    pa = pd.read_parquet(first.out_dir / a["predictions"]["file"])
    pb = pd.read_parquet(other.out_dir / b["predictions"]["file"])
    assert np.array_equal(pa["score:label"].to_numpy(), pb["score:label"].to_numpy())  # the same trained weights
    test = pa["split"] == "test"
    assert not np.array_equal(pa.loc[test, "label:label"].to_numpy(), pb.loc[test, "label:label"].to_numpy())
