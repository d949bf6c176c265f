"""sam-decoder: predictions match `segment` for the loaded decoder, targets follow the image's geometry, training
lowers the loss on a private copy, runs and comparisons end to end, and mitigations it cannot apply are refused."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from fmb_usage_helpers import TINY, tiny_opts, tiny_spec

from fairmedbench.adapters import USAGES, RunContext
from fairmedbench.adapters.prompts import make_prompt
from fairmedbench.benchmark.compare import compare
from fairmedbench.benchmark.run import run
from fairmedbench.cli import main
from fairmedbench.errors import InputError
from fairmedbench.mitigation import make_mitigation
from fairmedbench.registry.datasets import load_dataset
from fairmedbench.registry.models import load_model
from fairmedbench.tasks.segmentation import DecoderConfig, Trained, fit_decoder, prepare_split


def _ellipse(h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    yy, xx = np.mgrid[:h, :w]
    mask = ((yy - h * 0.45) / (h * 0.25)) ** 2 + ((xx - w * 0.5) / (w * 0.3)) ** 2 <= 1
    rng = np.random.default_rng(h * w)
    image = np.clip(np.where(mask, 190, 50) + rng.normal(0, 10, (h, w)), 0, 255).astype(np.uint8)
    return image, mask


def _dice(a: np.ndarray, b: np.ndarray) -> float:
    return float(2 * (a & b).sum() / (a.sum() + b.sum()))


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models run fastest on one thread (and do not fight other processes for the cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def model(small_sam: str):
    return load_model(small_sam, "random")


def test_an_untrained_decoder_copy_predicts_exactly_what_segment_does(model) -> None:
    problem = USAGES.get("sam-decoder").trainable(model, RunContext(batch_size=2))
    predict = problem.predictor(Trained(problem.new_encoder(), problem.new_decoder().eval()))
    rng = np.random.default_rng(0)
    for h, w in ((64, 64), (56, 40), (30, 70)):
        image, mask = _ellipse(h, w)
        prompt = make_prompt(mask, "bbox", rng, 0.1)
        assert np.array_equal(predict(image, prompt), model.segment(image, box=prompt.box))
    assert problem.notes()["encoder_maps"]["n"] == 3 and problem.size == 32


def test_low_res_target_follows_the_image_geometry(model) -> None:
    for h, w in ((64, 64), (56, 40), (30, 70)):
        _, mask = _ellipse(h, w)
        target = model.low_res_target(mask, 32)
        assert target.shape == (32, 32) and target.dtype == torch.bool
        logits = torch.where(target, 10.0, -10.0)[None, None]
        assert _dice(model.to_image(logits, h, w)[0].numpy() > 0, mask) > 0.9  # back at the image's size


def test_training_lowers_the_loss_on_a_copy_and_leaves_the_loaded_model_unchanged(model) -> None:
    ds = load_dataset("synth-control", None, n=40, config={**TINY["config"], "prevalence": {"female": 1.0,
                                                                                            "male": 1.0}})
    split = ds.split(seed=0)
    before = {k: v.clone() for k, v in model.module.state_dict().items()}
    problem = USAGES.get("sam-decoder").trainable(model, RunContext(batch_size=8))
    train = prepare_split(problem, ds.load_image, ds.load_mask, split.train)
    val = prepare_split(problem, ds.load_image, ds.load_mask, split.val, keep=True)
    assert len(train.keys) == 20 and len(val.prompted) == 8 and set(val.images) == set(val.prompted)
    codes = (ds.samples["attr:sex"].to_numpy() == "male").astype(np.int64)
    cfg = DecoderConfig(lr=1e-3, epochs=3, patience=3)
    decoder, fit = fit_decoder(problem, train, val, codes, 2, cfg, make_mitigation("erm"), seed=0)
    losses = [r["train_loss"] for r in fit.curve[1:]]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert all(0.0 <= r["val_dsc"] <= 1.0 for r in fit.curve)
    assert decoder.encoder is None and decoder.decoder is not model.module.mask_decoder
    assert (fit.trained, fit.frozen) == ("mask decoder", "image encoder and prompt encoder")
    after = model.module.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # encoders and the loaded decoder untouched


def test_run_with_groupdro_writes_results_with_the_training_block(small_sam: str, run_dirs: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    import pandas as pd

    from fairmedbench.engine import store

    spec = tiny_spec(small_sam, "sam-decoder", mitigation="groupdro", attributes=("sex",),
                     hparams={"epochs": 2, "eta": 0.1})
    stages: dict[str, tuple[int, int]] = {}
    out = run(spec, tiny_opts(run_dirs, progress=lambda stage, done, total: stages.update({stage: (done, total)})))
    assert stages["encoder maps (train)"] == (20, 20) and stages["training the decoder (seed 0)"] == (2, 2)
    doc = out.seed_docs[0]
    jsonschema.validate(doc, json.loads(store.SCHEMA_PATH.read_text()))
    assert doc["kind"] == "run-segmentation" and doc["spec"]["usage"] == "sam-decoder"
    tr = doc["training"]
    assert tr["config"]["lr"] == 1e-4 and tr["config"]["epochs"] == 2 and tr["config"]["select"] == "val_dsc"
    assert tr["mitigation"]["name"] == "groupdro" and tr["mitigation"]["hparams"]["eta"] == 0.1
    assert [r["epoch"] for r in tr["val_curve"]] == [-1, 0, 1] and -1 <= tr["best_epoch"] <= 1
    assert tr["best_select_score"] == max(r["val_dsc"] for r in tr["val_curve"])
    maps = doc["usage"]["encoder_maps"]
    assert maps["n"] == sum(doc["usage"]["units"].values()) and maps["shape"] == [256, 8, 8]
    assert set(doc["timings_s"]) == {"load", "prepare", "train", "segment", "metrics"}
    pred = pd.read_parquet(out.out_dir / doc["predictions"]["file"])
    # one row per test sample; the empty ground truths (no prompt, no unit) have empty_gt and no score
    assert len(pred) == doc["inputs"]["dataset"]["n_test"] and set(pred["split"]) == {"test"}
    assert (~pred["empty_gt"]).sum() == doc["usage"]["units"]["test"]
    assert pred.loc[pred["empty_gt"], "dsc"].isna().all()
    assert {"sample_id", "dsc", "iou", "attr:sex"} <= set(pred.columns)
    rep = doc["result"]["reports"][0]
    assert rep["metrics"]["dsc"]["__overall__"]["value"] == pytest.approx(pred["dsc"].mean())
    assert (out.out_dir / "summary.json").exists()
    assert run(spec, tiny_opts(run_dirs)).reused


@pytest.mark.parametrize("usage, mitigation, extra, pattern", [
    ("sam-prompt", "groupdro", {}, "needs a usage that learns from the train split: 'sam-prompt' learns nothing; "
                                   "use --usage sam-decoder"),
    ("sam-decoder", "adversarial", {}, "does not apply to segmentation: its adversary"),
    ("sam-decoder", "group_thresholds", {}, "does not apply to segmentation"),
    ("sam-decoder", "resampling", {"hparams": {"by": "class"}}, "use by=group"),
    ("sam-decoder", "erm", {"hparams": {"select": "worst_group_auc"}}, "choose one of val_dsc, worst_group_dsc"),
    ("sam-decoder", "erm", {"prompt": "center"}, "prompts with bbox, not 'center'"),
])
def test_what_segmentation_cannot_do_is_an_input_error(small_sam: str, tmp_path: Path, usage: str,
                                                       mitigation: str, extra: dict, pattern: str) -> None:
    spec = tiny_spec(small_sam, usage, mitigation=mitigation, attributes=("sex",), hparams=extra.get("hparams", {}),
                     prompt=extra.get("prompt", "bbox"))
    with pytest.raises(InputError, match=pattern):
        run(spec, tiny_opts(tmp_path))


def test_compare_erm_and_groupdro_with_segmentation_metrics(small_sam: str, run_dirs: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    from rich.console import Console

    from fairmedbench.report.terminal import render_compare

    opts = tiny_opts(run_dirs)
    out = compare(small_sam, ["synth-control"], "sex", "sam-decoder", ["groupdro"], (0, 1), opts, weights="random",
                  n_boot=20, dataset_options=TINY, hparams={"epochs": 1})
    assert out.task == "segmentation" and out.methods == ["erm", "groupdro"]
    assert [r.seed_docs[0]["training"]["config"]["select"] for r in out.runs.values()] == ["val_dsc", "val_dsc"]
    row = out.table[1]
    assert row["method"] == "groupdro" and row["dsc"] is not None and 0 <= row["dsc"]["mean"] <= 1
    assert "auc" not in row and {"worst_group_dsc", "dsc_gap", "dsc_diff", "dsc_es"} <= set(row)
    assert {v["metric"] for v in out.versus_erm} <= {"worst_group_dsc", "dsc_gap", "dsc"}
    # segmentation has its paired test-set bootstrap of mean DSC (Task.resampled_headline), whole patients drawn
    boot = out.test_bootstrap["synth-control"]
    assert boot["metric"] == "dsc" and boot["groups"] == ["female", "male"] and boot["unit"] == "patient"
    assert set(boot["methods"]) == {"erm", "groupdro"}
    assert not any("no paired test-set bootstrap" in n for n in out.notes)
    doc = out.to_dict()
    json.dumps(doc, allow_nan=False)
    console = Console(file=io.StringIO(), width=200)
    render_compare(doc, console)
    text = console.file.getvalue()
    assert "worst_group_dsc" in text and "paired test-set bootstrap" in text
    assert "no paired test-set bootstrap" not in text
    with pytest.raises(InputError, match="does not apply to segmentation"):
        compare(small_sam, ["synth-control"], "sex", "sam-decoder", ["domainind"], (0, 1), opts, weights="random")
    # the CLI reaches the same runs (reused) with --usage sam-decoder
    args = ["compare", "--model", small_sam, "--weights", "random", "--dataset", "synth-control", "--attribute",
            "sex", "--usage", "sam-decoder", "--mitigations", "erm,groupdro", "--seeds", "0,1", "--n-boot", "20",
            "--hparam", "epochs=1", "--dataset-option", "n=40", "--dataset-option",
            f"config={json.dumps(TINY['config'])}", "--out", opts.out_root, "--device", "cpu", "--json"]
    capsys.readouterr()
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["task"] == "segmentation" and printed["per_seed"] == doc["per_seed"]


def test_cli_refuses_a_mitigation_for_zero_shot_segmentation(small_sam: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    rc = main(["run", "--model", small_sam, "--weights", "random", "--dataset", "synth-control", "--usage",
               "sam-prompt", "--mitigation", "groupdro", "--dataset-option", "n=40", "--out", str(tmp_path),
               "--device", "cpu"])
    assert rc == 2 and "use --usage sam-decoder" in capsys.readouterr().err


def test_list_usages_shows_sam_decoder(capsys: pytest.CaptureFixture) -> None:
    assert main(["list", "usages", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["sam-decoder"]["task"] == "segmentation"
    assert rows["sam-decoder"]["requires"] == ["segment", "tune_decoder"]
    assert main(["list", "mitigations", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["groupdro"]["tasks"] == "classification, segmentation, multiclass"
    assert rows["adversarial"]["tasks"] == "classification, multiclass"
