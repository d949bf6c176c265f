"""2.5D: clip-zs, clip-adapt and lora run on volumes (slices in, one prediction per volume out)."""

from __future__ import annotations

import pandas as pd
import pytest
from fmb_usage_helpers import tiny_opts, tiny_spec

from fairmedbench.benchmark.run import run

# 16 small volumes (8 slices of 32 x 32): 8 train, 3 val, 5 test
VOLUMES = {"n": 16, "config": {"size": 32, "depth": 8, "split_fractions": (0.5, 0.2, 0.3)}}


@pytest.mark.parametrize("usage,agg", [("clip-zs", "max"), ("clip-adapt", "mean"), ("lora", "attention")])
def test_clip_and_lora_usages_run_on_volumes(tmp_path, small_clip, usage, agg) -> None:
    spec = tiny_spec(small_clip, usage, dataset="synth3d-control", dataset_options=VOLUMES,
                     hparams={"slices": "n:2", "slice_agg": agg, **({} if usage == "clip-zs" else {"epochs": 2})})
    out = run(spec, tiny_opts(tmp_path))
    doc = out.seed_docs[0]
    pred = pd.read_parquet(out.out_dir / doc["predictions"]["file"])
    assert (pred["split"] == "test").sum() == doc["inputs"]["dataset"]["n_test"] == 5
    assert pred["sample_id"].is_unique and not pred["sample_id"].str.contains("#z").any()
    assert doc["usage"]["volumes"]["slice_agg"] == agg
    assert doc["usage"]["volumes"]["slices_per_volume"]["train"]["total"] == 16
