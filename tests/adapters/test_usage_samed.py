"""samed: LoRA lands on every attention qkv of the SAM-family encoder, a training step changes only LoRA and
mask-decoder parameters (the issue's acceptance), the loaded model is untouched, and runs end to end with the
segmentation mitigations."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from fmb_usage_helpers import tiny_opts, tiny_spec

from fairmedbench.adapters import USAGES, RunContext
from fairmedbench.adapters.prompts import make_prompt
from fairmedbench.benchmark.run import run
from fairmedbench.errors import InputError
from fairmedbench.mitigation import make_mitigation
from fairmedbench.registry.models import load_model
from fairmedbench.tasks.segmentation import DecoderConfig, Trained, dice_bce_loss, fit_decoder, prepare_split


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models run fastest on one thread (and do not fight other processes for the cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _ellipses(n: int, size: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(size)
    yy, xx = np.mgrid[:size, :size]
    images, masks = [], []
    for _ in range(n):
        cy, cx = rng.uniform(0.35, 0.65, 2) * size
        mask = ((yy - cy) / (size * 0.2)) ** 2 + ((xx - cx) / (size * 0.25)) ** 2 <= 1
        images.append(np.clip(np.where(mask, 190, 50) + rng.normal(0, 10, mask.shape), 0, 255).astype(np.uint8))
        masks.append(mask)
    return images, masks


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _one_step_changes(model, size: int) -> tuple[dict, set[str], set[str], set[str]]:
    """One AdamW step of samed on two ellipses: the problem's notes, the decoder's parameter names, the trainable
    names and the changed names."""
    problem = USAGES.get("samed").trainable(model, RunContext(batch_size=2))
    images, masks = _ellipses(2, size)
    keys = problem.encode(images)
    trained = Trained(problem.new_encoder(), problem.new_decoder())
    named = {f"encoder.{n}": p for n, p in trained.encoder.named_parameters()}
    named.update({f"decoder.{n}": p for n, p in trained.decoder.named_parameters()})
    buffers = {n: b.clone() for n, b in trained.encoder.named_buffers()}
    before = {n: p.detach().clone() for n, p in named.items()}
    trainable = {n for n, p in named.items() if p.requires_grad}
    opt = torch.optim.AdamW([named[n] for n in sorted(trainable)], lr=1e-2, weight_decay=0.01)
    trained.train(True)
    rng = np.random.default_rng(0)
    boxes = [make_prompt(m, "bbox", rng, 0.0).box for m in masks]
    logits = problem.logits(trained, keys, boxes, [m.shape for m in masks])
    target = torch.stack([problem.target(m) for m in masks])
    dice_bce_loss(logits, target).mean().backward()
    opt.step()
    changed = {n for n, p in named.items() if not torch.equal(before[n], p.detach())}
    assert all(torch.equal(buffers[n], b) for n, b in trained.encoder.named_buffers())  # BatchNorm stats etc.
    return problem.notes(), {n for n in named if n.startswith("decoder.")}, trainable, changed


def _check_only_lora_and_decoder(notes: dict, decoder: set[str], trainable: set[str], changed: set[str],
                                 n_blocks: int) -> None:
    lora = trainable - decoder
    assert lora and all(n.startswith("encoder.") and (".lora_A." in n or ".lora_B." in n) for n in lora)
    assert decoder <= trainable  # the whole mask decoder trains
    assert changed <= trainable  # nothing frozen moved: base encoder weights untouched
    assert {n for n in changed if ".lora_B." in n} == {n for n in lora if ".lora_B." in n}  # B starts at 0
    assert any(n.startswith("decoder.") for n in changed)
    assert notes["lora"]["n_target_modules"] == n_blocks and notes["lora"]["target_leaves"] == ["qkv"]
    assert len(lora) == 2 * n_blocks and notes["lora"]["r"] == 4 and notes["lora"]["alpha"] == 4


def test_a_step_changes_only_lora_and_mask_decoder_parameters(small_sam: str) -> None:
    model = load_model(small_sam, "random")
    loaded = _snapshot(model.module)
    notes, decoder, trainable, changed = _one_step_changes(model, 32)
    # TinyViT-5M (LiteMedSAM): stage 0 is convolutional, stages 1-3 have 2 + 6 + 2 attention blocks
    _check_only_lora_and_decoder(notes, decoder, trainable, changed, n_blocks=10)
    assert notes["lora"]["lora_parameters"] == sum(
        4 * (d + 3 * d) for d, k in ((128, 2), (160, 6), (320, 2)) for _ in range(k))
    after = model.module.state_dict()
    assert all(torch.equal(loaded[k], after[k]) for k in loaded)  # the loaded model is never changed


def test_the_training_loop_optimises_exactly_lora_and_the_mask_decoder(small_sam: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    optimised: list[torch.nn.Parameter] = []

    class Spy(torch.optim.AdamW):
        def __init__(self, params, **kw) -> None:
            params = list(params)
            optimised.extend(params)
            super().__init__(params, **kw)

    monkeypatch.setattr(torch.optim, "AdamW", Spy)
    problem = USAGES.get("samed").trainable(load_model(small_sam, "random"), RunContext(batch_size=2))
    images, masks = _ellipses(4, 32)
    train = prepare_split(problem, images.__getitem__, masks.__getitem__, range(2))
    val = prepare_split(problem, images.__getitem__, masks.__getitem__, range(2, 4), keep=True)
    trained, fit = fit_decoder(problem, train, val, None, 1, DecoderConfig(epochs=1, batch_size=2),
                               make_mitigation("erm"), seed=0)
    expected = [p for n, p in trained.encoder.named_parameters() if ".lora_" in n]
    assert len(expected) == 20 and all(p.requires_grad for p in expected)
    expected += list(trained.decoder.parameters())
    assert {id(p) for p in optimised} == {id(p) for p in expected} and len(optimised) == len(expected)
    assert [r["epoch"] for r in fit.curve] == [-1, 0] and fit.trained.startswith("LoRA")


@pytest.mark.slow
@pytest.mark.parametrize("name, n_blocks", [("sam-vit-b", 12), ("medsam", 12), ("mobilesam", 10)])
def test_every_sam_family_card_gets_lora_on_each_attention_block(name: str, n_blocks: int) -> None:
    model = load_model(name, "random", image_size=64)
    _check_only_lora_and_decoder(*_one_step_changes(model, 64), n_blocks=n_blocks)


def test_lora_settings_are_checked(small_sam: str) -> None:
    model = load_model(small_sam, "random")
    with pytest.raises(InputError, match="lora_r=0"):
        USAGES.get("samed").trainable(model, RunContext(hparams={"lora_r": 0}))
    with pytest.raises(InputError, match="no module of that name"):
        USAGES.get("samed").trainable(model, RunContext(hparams={"lora_targets": "q_proj"}))
    problem = USAGES.get("samed").trainable(model, RunContext(hparams={"lora_r": 2, "lora_targets": "qkv,proj"}))
    assert problem.notes()["lora"]["target_leaves"] == ["proj", "qkv"] and problem.settings["r"] == 2


@pytest.mark.parametrize("mitigation", ["erm", "ind", "febs"])
def test_run_records_what_samed_trains(small_sam: str, run_dirs: Path, mitigation: str) -> None:
    spec = tiny_spec(small_sam, "samed", mitigation=mitigation, attributes=("sex",), hparams={"epochs": 1})
    out = run(spec, tiny_opts(run_dirs))
    doc = out.seed_docs[0]
    tr = doc["training"]
    assert tr["trained"].startswith("LoRA") and "prompt encoder" in tr["frozen"]
    assert tr["mitigation"]["name"] == mitigation and [r["epoch"] for r in tr["val_curve"]] == [-1, 0]
    assert doc["usage"]["name"] == "samed" and doc["usage"]["lora"]["n_target_modules"] == 10
    assert doc["usage"]["images_kept"]["n"] == sum(doc["usage"]["units"].values())
    rep = doc["result"]["reports"][0]
    assert 0.0 <= rep["metrics"]["dsc"]["__overall__"]["value"] <= 1.0
    json.dumps(doc, allow_nan=False)


def test_list_shows_samed_and_the_segmentation_mitigations(capsys: pytest.CaptureFixture) -> None:
    from fairmedbench.cli import main

    assert main(["list", "usages", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["samed"]["task"] == "segmentation" and rows["samed"]["requires"] == ["segment", "tune_decoder"]
    assert main(["list", "mitigations", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["ind"]["tasks"] == "segmentation" and rows["febs"]["tasks"] == "segmentation"
