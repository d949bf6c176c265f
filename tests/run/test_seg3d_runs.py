"""Native 3D segmentation through `benchmark run`: one prompt per volume, volume DSC and HD95 in mm, and the
dimension errors (a 3D model on 2D data, a 3D model with the 2D decoder usage)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairmedbench.benchmark.run import RunOptions, run
from fairmedbench.cli import main
from fairmedbench.errors import InputError
from fairmedbench.metrics.segmentation import hd95
from fairmedbench.spec import RunSpec
from fairmedbench.tasks.segmentation import run_segmentation


@pytest.fixture()
def small_sam_med3d():
    """sam-med3d with a 32^3 crop (2^3 encoder tokens): the real modules with random weights, cheap on a CPU."""
    from fairmedbench.registry.models import MODELS, get_card

    card = get_card("sam-med3d")
    pre = dataclasses.replace(card.preprocessing, size=32, depth=32)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(MODELS._items, "sam-med3d", dataclasses.replace(card, preprocessing=pre))
        yield "sam-med3d"


def _run(tmp: Path, model: str, dataset: str, usage: str = "sam-prompt", prompt: str = "rands"):
    spec = RunSpec(model=model, weights="random", dataset=dataset, usage=usage, seeds=(0,), n_boot=20,
                   dataset_options={"n": 12}, prompt=prompt)
    return run(spec, RunOptions(out_root=str(tmp / "out"), cache_dir=None, device="cpu"))


def test_sam_med3d_segments_synth3d_volumes_with_dsc_and_hd95_per_volume(tmp_path, small_sam_med3d) -> None:
    out = _run(tmp_path, small_sam_med3d, "synth3d-contrast")
    doc = out.seed_docs[0]
    pred = pd.read_parquet(out.out_dir / doc["predictions"]["file"])
    scored = pred[~pred["empty_gt"]]  # a volume with an empty mask has a row but no prompt and no score
    n = len(scored)
    assert n >= 1 and pred["sample_id"].is_unique and len(pred) == doc["inputs"]["dataset"]["n_test"]
    assert len(pred) - n == doc["usage"]["n_skipped"]
    assert pred.loc[pred["empty_gt"], ["dsc", "iou", "hd95"]].isna().all().all()
    assert doc["usage"]["prompted_slices"] == n  # one 3D prompt per volume, not one per slice
    assert scored["dsc"].between(0, 1).all() and ((scored["hd95"] >= 0) | scored["hd95"].isna()).all()
    assert "hd95" in doc["result"]["reports"][0]["metrics"]


def test_a_3d_model_on_2d_data_or_with_the_2d_decoder_usage_is_refused(tmp_path, small_sam_med3d) -> None:
    with pytest.raises(InputError, match="segments 3D volumes; dataset 'synth-contrast' is 2D"):
        _run(tmp_path, small_sam_med3d, "synth-contrast")
    with pytest.raises(InputError, match="'sam-decoder' needs segment, tune_decoder"):
        _run(tmp_path, small_sam_med3d, "synth3d-contrast", usage="sam-decoder", prompt="bbox")
    code = main(["run", "--model", small_sam_med3d, "--weights", "random", "--dataset", "synth-contrast",
                 "--usage", "sam-prompt", "--prompt", "rands", "--dataset-option", "n=12",
                 "--out", str(tmp_path / "cli")])
    assert code == 2


def test_runner_prompts_a_volumetric_predictor_once_and_scores_hd95_in_mm() -> None:
    gt = np.zeros((6, 8, 8), bool)
    gt[2:4, 2:6, 2:6] = True
    shifted = np.roll(gt, 1, axis=0)  # one slice deeper: surfaces 1 voxel = 2 mm apart along D

    def predict(volume, prompt, spacing):
        assert volume.shape == gt.shape and prompt.points.shape == (1, 3) and spacing == (2.0, 1.0, 1.0)
        return shifted

    predict.volumetric = True
    out = run_segmentation(predict, lambda i: np.zeros((6, 8, 8), np.uint8), lambda i: gt, [0], "rand", 0,
                           spacing_of=lambda i: (2.0, 1.0, 1.0))
    assert out.prompted_slices == [1]
    assert out.dsc[0] == pytest.approx(2 * 16 / 64)  # 16 of 32 voxels overlap
    assert out.hd95[0] == pytest.approx(hd95(shifted, gt, spacing=(2.0, 1.0, 1.0))) == pytest.approx(2.0)
