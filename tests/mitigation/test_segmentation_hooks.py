"""Mitigation plugins in the segmentation loop (`fit_decoder`), on a stand-in for a SAM decoder whose "encoder map"
is the image itself: which plugins apply, GroupDRO's weights, resampling's draws, selection rules, the loss."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from fairmedbench.adapters.sam_decoder import image_key
from fairmedbench.errors import InputError
from fairmedbench.mitigation import make_mitigation
from fairmedbench.tasks.base import get_task
from fairmedbench.tasks.segmentation import (
    DecoderConfig,
    dice_bce_loss,
    fit_decoder,
    prepare_split,
    selection_score_seg,
)


class PixelSegmenter:
    """A TrainableSegmenter on 8 x 8 images: map = the image (1 channel), decoder = a 1x1 convolution, logits on
    the image grid; the box prompt is ignored. `pretrained`: the decoder starts out segmenting bright squares."""

    def __init__(self, pretrained: bool = False) -> None:
        self.maps: dict[str, torch.Tensor] = {}
        self.pretrained = pretrained

    def encode(self, images: Any) -> list[str]:
        keys = []
        for image in images:
            keys.append(image_key(image))
            self.maps[keys[-1]] = torch.tensor(image, dtype=torch.float32)[None] / 255.0
        return keys

    trained, frozen = "a 1x1 convolution", "nothing"

    def new_encoder(self) -> None:
        return None

    def new_decoder(self) -> torch.nn.Module:
        conv = torch.nn.Conv2d(1, 1, 1)
        if self.pretrained:
            with torch.no_grad():
                conv.weight.fill_(10.0)
                conv.bias.fill_(-5.0)
        return conv

    def target(self, mask: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(mask)

    def logits(self, trained: Any, keys: Any, boxes: Any, shapes: Any) -> torch.Tensor:
        return trained.decoder(torch.stack([self.maps[k] for k in keys]))[:, 0]

    def predictor(self, trained: Any) -> Any:
        def predict(image: np.ndarray, prompt: Any) -> np.ndarray:
            with torch.no_grad():
                return (self.logits(trained, self.encode([image]), None, None)[0] > 0).numpy()

        return predict


def toy_data(n: int, share_1: float, seed: int) -> tuple[dict, dict, np.ndarray]:
    """Group 0: the mask is the bright square of its image (learnable); group 1: a random mask unrelated to a
    noise image (unlearnable, so its loss stays high)."""
    rng = np.random.default_rng(seed)
    groups = (np.arange(n) < round(n * share_1)).astype(np.int64)
    images, masks = {}, {}
    for i in range(n):
        if groups[i] == 0:
            mask = np.zeros((8, 8), bool)
            y, x = rng.integers(0, 5, 2)
            mask[y:y + 3, x:x + 3] = True
            image = np.where(mask, 220, 30).astype(np.uint8)
        else:
            mask = rng.random((8, 8)) < 0.5
            mask[0, 0] = True
            image = rng.integers(0, 256, (8, 8)).astype(np.uint8)
        images[i], masks[i] = image, mask
    return images, masks, groups


def fit(name: str, n: int = 60, share_1: float = 0.2, cfg: DecoderConfig | None = None, codes: bool = True,
        pretrained: bool = False, **hparams: Any) -> tuple[Any, Any, Any, np.ndarray]:
    images, masks, groups = toy_data(n, share_1, 0)
    problem = PixelSegmenter(pretrained)
    train = prepare_split(problem, images.__getitem__, masks.__getitem__, range(n))
    vi, vm, vg = toy_data(20, 0.5, 1)
    val = prepare_split(problem, lambda i: vi[i - n], lambda i: vm[i - n], range(n, n + 20), keep=True)
    all_codes = np.concatenate([groups, vg]) if codes else None
    mitigation = make_mitigation(name, **hparams)
    cfg = cfg or DecoderConfig(lr=0.05, epochs=4, patience=4, batch_size=10)
    decoder, outcome = fit_decoder(problem, train, val, all_codes, 2, cfg, mitigation, seed=0)
    return decoder, outcome, mitigation, groups


@pytest.mark.parametrize("name, hparams, applies", [
    ("erm", {}, True),
    ("groupdro", {}, True),
    ("groupdro", {"by": "group_class"}, False),
    ("resampling", {}, True),
    ("resampling", {"by": "class"}, False),
    ("resampling", {"by": "group_class"}, False),
    ("fairness_loss", {}, True),
    ("fairness_loss", {"target": "tpr"}, False),
    ("fairness_loss", {"target": "eo"}, False),
    ("adversarial", {}, False),
    ("domainind", {}, False),
    ("group_thresholds", {}, False),
])
def test_which_plugins_apply_to_segmentation(name: str, hparams: dict, applies: bool) -> None:
    m = make_mitigation(name, **hparams)
    m.check_task(get_task("classification"))  # every plugin applies to classification
    assert (m.unsupported(get_task("segmentation")) is None) == applies
    if applies:
        m.check_task(get_task("segmentation"))
    else:
        with pytest.raises(InputError, match=f"mitigation {name!r} does not apply to segmentation: .{{40,}}"):
            m.check_task(get_task("segmentation"))


def test_non_applicable_plugin_is_refused_by_the_loop() -> None:
    with pytest.raises(InputError, match="adversary"):
        fit("adversarial")
    with pytest.raises(InputError, match="use by=group"):
        fit("resampling", by="class")


def test_erm_learns_the_learnable_group() -> None:
    _, outcome, _, _ = fit("erm")
    curve = outcome.curve
    assert curve[0]["epoch"] == -1 and len(curve) == 5
    assert curve[-1]["train_loss"] < curve[1]["train_loss"]
    assert outcome.best_epoch >= 0 and outcome.best_score > curve[0]["val_dsc"]


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[int], list[float]]]:
    """Every training batch's (group codes, per-sample losses) as the plugin's loss hook receives them (with the
    batch's 8 x 8 logits and 0/1 targets)."""
    batches: list[tuple[list[int], list[float]]] = []
    original = make_mitigation

    def spying(method: str, **hp: Any) -> Any:
        m = original(method, **hp)
        loss = m.loss

        def record(per_sample: Any, batch: Any) -> Any:
            assert batch.logits.shape == batch.y.shape == (len(per_sample), 8, 8) and batch.representation is None
            assert set(batch.y.unique().tolist()) <= {0.0, 1.0}
            batches.append((batch.groups.tolist(), per_sample.detach().tolist()))
            return loss(per_sample, batch)

        m.loss = record
        return m

    monkeypatch.setitem(globals(), "make_mitigation", spying)
    return batches


def test_groupdro_moves_weight_to_the_group_with_the_higher_segmentation_loss(seen: list) -> None:
    _, _, dro, _ = fit("groupdro", pretrained=True, eta=1.0)
    g = np.concatenate([b[0] for b in seen])
    loss = np.concatenate([b[1] for b in seen])
    assert loss[g == 1].mean() > loss[g == 0].mean() + 0.5  # the decoder segments squares, random masks stay hard
    q = dro.weights()
    assert q[1] > 0.9 and q.sum() == pytest.approx(1.0)  # from uniform to the hard (minority) group


@pytest.mark.parametrize("name, expected", [("erm", 0.2), ("resampling", 0.5)])
def test_resampling_draws_groups_equally_in_expectation(name: str, expected: float, seen: list) -> None:
    fit(name, n=100, cfg=DecoderConfig(lr=0.05, epochs=6, patience=6, batch_size=25))
    g = np.concatenate([b[0] for b in seen])
    assert len(g) == 600 and all(len(b[0]) == 25 for b in seen)
    assert g.mean() == pytest.approx(expected, abs=0.06)  # 600 draws: sd of the share is 0.02


def test_fairness_loss_on_group_losses_trains() -> None:
    _, outcome, m, _ = fit("fairness_loss", weight=0.5)
    assert m.describe()["hparams"]["target"] == "loss"
    assert np.isfinite([r["train_loss"] for r in outcome.curve[1:]]).all()


def test_selection_rules() -> None:
    with pytest.raises(InputError, match="val_dsc or worst_group_dsc"):
        fit("erm", cfg=DecoderConfig(select="worst_group_auc"))
    with pytest.raises(InputError, match="sensitive attribute"):
        fit("erm", cfg=DecoderConfig(select="worst_group_dsc"), codes=False)
    with pytest.raises(InputError, match="sensitive attribute at training"):
        fit("groupdro", codes=False)
    with pytest.raises(InputError, match="epochs"):
        fit("erm", cfg=DecoderConfig(epochs=-1))
    _, outcome, _, _ = fit("erm", cfg=DecoderConfig(lr=0.05, epochs=3, patience=3, batch_size=10,
                                                    select="worst_group_dsc"))
    best = max(outcome.curve, key=lambda r: r["val_worst_group_dsc"])
    assert outcome.best_epoch == best["epoch"] and outcome.best_score == best["val_worst_group_dsc"]
    dsc, g = np.array([0.9, 0.7, 0.2, 0.4]), np.array([0, 0, 1, -1])
    assert selection_score_seg("val_dsc", dsc, g) == pytest.approx(0.55)
    assert selection_score_seg("worst_group_dsc", dsc, g) == pytest.approx(0.2)


def test_no_epoch_better_than_the_loaded_decoder_keeps_it() -> None:
    decoder, outcome, _, _ = fit("erm", cfg=DecoderConfig(lr=1e-9, epochs=2, patience=1, batch_size=10))
    assert outcome.best_epoch == -1 and len(outcome.curve) == 2  # patience 1: one epoch without improvement


def test_dice_bce_matches_monai_dice_plus_bce() -> None:
    monai = pytest.importorskip("monai")
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 16, 16, generator=g)
    target = (torch.rand(3, 16, 16, generator=g) > 0.7).float()
    dice = monai.losses.DiceLoss(sigmoid=True, squared_pred=True, reduction="none")(logits[:, None], target[:, None])
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, target, reduction="none").mean((1, 2))
    assert torch.allclose(dice_bce_loss(logits, target), dice.flatten() + bce, atol=1e-6)


def test_volumes_train_on_their_non_empty_slices_and_validate_per_volume() -> None:
    rng = np.random.default_rng(3)
    vols, masks = {}, {}
    for i in range(12):
        m = np.zeros((4, 8, 8), bool)
        for z in (1, 2):
            y, x = rng.integers(0, 5, 2)
            m[z, y:y + 3, x:x + 3] = True
        vols[i], masks[i] = np.where(m, 220, 30).astype(np.uint8), m
    masks[11][:] = False  # no prompt anywhere: neither a training unit nor validated
    problem = PixelSegmenter(pretrained=True)
    train = prepare_split(problem, vols.__getitem__, masks.__getitem__, range(8))
    val = prepare_split(problem, vols.__getitem__, masks.__getitem__, range(8, 12), keep=True)
    assert len(train.keys) == 16 and train.unit_positions[:4] == [0, 0, 1, 1]
    assert all(m.shape == (8, 8) for m in train.masks) and val.prompted == [8, 9, 10]
    assert val.images[8].shape == (4, 8, 8)
    _, outcome = fit_decoder(problem, train, val, np.zeros(12, np.int64), 1,
                             DecoderConfig(lr=0.05, epochs=3, patience=3, batch_size=4), make_mitigation("erm"), 0)
    assert outcome.curve[0]["val_dsc"] == 1.0  # the exact slices, pooled per volume (unprompted slices empty)
    assert len(outcome.curve) == 4 and np.isfinite(outcome.curve[-1]["train_loss"])


@pytest.mark.parametrize("name", ["reweighting", "cvar_dro", "fis", "fair_dice"])
def test_published_segmentation_methods_train(name: str) -> None:
    """Each published method that serves segmentation trains the decoder (their losses are pinned by hand in
    test_published_methods.py)."""
    _, outcome, _, _ = fit(name)
    assert np.isfinite([r["train_loss"] for r in outcome.curve[1:]]).all()
