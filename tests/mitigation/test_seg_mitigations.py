"""InD and FEBS on toy tensors: InD trains each group's decoder on its own group and predicts without the attribute
(the mean of the group decoders' logits); FEBS's weights and loss by hand, and the worst group's error bound is the
one raised most."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_segmentation_hooks import PixelSegmenter, fit, toy_data

from fairmedbench.errors import InputError
from fairmedbench.mitigation import Batch, make_mitigation
from fairmedbench.tasks.base import get_task
from fairmedbench.tasks.segmentation import DecoderConfig, Trained, fit_decoder, prepare_split


def _conv(weight: float, bias: float) -> torch.nn.Conv2d:
    conv = torch.nn.Conv2d(1, 1, 1)
    with torch.no_grad():
        conv.weight.fill_(weight)
        conv.bias.fill_(bias)
    return conv


class TwoOutputs(torch.nn.Module):
    """A decoder shaped like SAM's: (mask logits, IoU predictions), called with keywords."""

    def __init__(self, shift: float) -> None:
        super().__init__()
        self.shift = torch.nn.Parameter(torch.tensor(shift))

    def forward(self, image_embeddings: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return image_embeddings + self.shift, torch.full((len(image_embeddings), 1), float(self.shift))


# --- InD -----------------------------------------------------------------------------------------------------

def test_ind_combines_every_group_decoder_without_the_attribute() -> None:
    m = make_mitigation("ind")
    assert m.needs_attribute_at_training and not m.needs_attribute_at_inference
    wrapped = m.wrap_head(_conv(1.0, 0.0), 2)
    with torch.no_grad():
        wrapped.group_heads[1].weight.fill_(3.0)
        wrapped.group_heads[1].bias.fill_(-4.0)
    x = torch.tensor([[[[0.5, 2.0]]]])  # logits: head 0 (0.5, 2.0), head 1 (-2.5, 2.0)
    with torch.no_grad():
        out = wrapped(x)  # no group codes anywhere
    assert torch.allclose(out, torch.tensor([[[[-1.0, 2.0]]]]))  # mean logits: same sign as the paper's sum
    mean_prob = make_mitigation("ind", combine="mean_prob").wrap_head(_conv(1.0, 0.0), 2)
    mean_prob.load_state_dict(wrapped.state_dict())
    with torch.no_grad():
        p = torch.sigmoid(mean_prob(x))
    expected = (torch.sigmoid(torch.tensor([0.5, 2.0])) + torch.sigmoid(torch.tensor([-2.5, 2.0]))) / 2
    assert torch.allclose(p.flatten(), expected, atol=1e-6)


def test_ind_averages_a_sam_style_decoders_other_outputs() -> None:
    wrapped = make_mitigation("ind").wrap_head(TwoOutputs(0.0), 3)
    with torch.no_grad():
        for k, h in enumerate(wrapped.group_heads):
            h.shift.fill_(float(k))  # shifts 0, 1, 2
        masks, iou = wrapped(image_embeddings=torch.zeros(2, 4))
    assert torch.allclose(masks, torch.ones(2, 4)) and torch.allclose(iou, torch.ones(2, 1))


def test_ind_trains_each_decoder_on_its_own_group_only() -> None:
    images, masks, _ = toy_data(30, 0.0, 0)  # every training sample in group 0
    problem = PixelSegmenter(pretrained=True)
    train = prepare_split(problem, images.__getitem__, masks.__getitem__, range(30))
    vi, vm, vg = toy_data(10, 0.5, 1)
    val = prepare_split(problem, lambda i: vi[i - 30], lambda i: vm[i - 30], range(30, 40), keep=True)
    codes = np.concatenate([np.zeros(30, np.int64), vg])
    trained, outcome = fit_decoder(problem, train, val, codes, 2, DecoderConfig(lr=0.05, epochs=2, patience=2,
                                                                                 batch_size=10, select="val_dsc"),
                                   make_mitigation("ind"), seed=0)
    heads = trained.decoder.group_heads
    assert heads[1].weight.item() == 10.0 and heads[1].bias.item() == -5.0  # never saw a sample: as loaded
    assert len(outcome.curve) == 3 and all(0 <= r["val_dsc"] <= 1 for r in outcome.curve)  # predicted w/o groups
    if outcome.best_epoch >= 0:
        assert not torch.equal(heads[0].weight, heads[1].weight)
    predict = problem.predictor(Trained(None, trained.decoder))
    assert predict(vi[0], None).shape == (8, 8)


def test_ind_needs_the_attribute_at_training_and_applies_to_segmentation_only() -> None:
    with pytest.raises(InputError, match="sensitive attribute at training"):
        fit("ind", codes=False)
    with pytest.raises(InputError, match="does not apply to classification: .*use domainind"):
        make_mitigation("ind").check_task(get_task("classification"))
    with pytest.raises(InputError, match="combine='max'"):
        make_mitigation("ind", combine="max")
    assert make_mitigation("ind").describe()["tasks"] == ["segmentation"]


# --- FEBS ----------------------------------------------------------------------------------------------------

def _dice(p: list[float], t: list[float]) -> float:
    """Soft Dice loss with squared denominators and smooth 1e-5, by hand."""
    inter = sum(a * b for a, b in zip(p, t))
    return 1 - (2 * inter + 1e-5) / (sum(a * a for a in p) + sum(b * b for b in t) + 1e-5)


def _toy() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Group 0 predicts well (p = 0.9, 0.1), group 1 badly (p = 0.5, 0.5); targets (1, 0)."""
    p = torch.tensor([[[0.9, 0.1]], [[0.5, 0.5]]], dtype=torch.float64)
    return torch.logit(p), torch.tensor([[[1.0, 0.0]], [[1.0, 0.0]]], dtype=torch.float64), torch.tensor([0, 1])


def test_febs_weights_and_loss_by_hand() -> None:
    z, t, g = _toy()
    m = make_mitigation("febs")
    l0, l1 = _dice([0.9, 0.1], [1, 0]), _dice([0.5, 0.5], [1, 0])  # 0.010989, 0.333333
    losses, w = m.group_weights(torch.sigmoid(z), t, g)
    assert losses.tolist() == pytest.approx([l0, l1])
    w0, w1 = math.tanh(1.0), math.tanh(l0 / l1)  # the worst group gets the smallest scale
    assert w.tolist() == pytest.approx([w0, w1]) and w1 < w0
    bce = -(math.log(0.9) + math.log(0.9) + 2 * math.log(0.5)) / 4
    scaled = _dice([0.9 * w0, 0.1 * w0, 0.5 * w1, 0.5 * w1], [1, 0, 1, 0])
    loss = m.loss(torch.zeros(2), Batch(z, t, g, None))
    assert float(loss) == pytest.approx(bce + scaled)
    assert m.last_weights.tolist() == pytest.approx([w0, w1])
    gamma0 = make_mitigation("febs", gamma=0.0).group_weights(torch.sigmoid(z), t, g)[1]
    assert gamma0.tolist() == pytest.approx([w0, w0])  # gamma 0: every group tanh(1)


def test_febs_raises_the_worst_groups_error_bound_most() -> None:
    z, t, g = _toy()
    m = make_mitigation("febs")
    p = torch.sigmoid(z)
    losses, w = m.group_weights(p, t, g)
    bound = [_dice((w[a] * p[a]).flatten().tolist(), t[a].flatten().tolist()) for a in (0, 1)]
    raised = [bound[a] - float(losses[a]) for a in (0, 1)]
    assert raised[1] > 0.6 and 0 < raised[0] < 0.1  # 0.634 for the worst group, 0.060 for the best
    # a perfect prediction of the worst group can no longer reach zero loss: its bound is 1 - 2w / (1 + w^2)
    w1 = float(w[1])
    assert _dice([w1, 0.0], [1, 0]) == pytest.approx(1 - 2 * w1 / (1 + w1 * w1), abs=1e-4)


def test_febs_scaled_predictions_shrink_the_worst_groups_gradient_share() -> None:
    """As the official code computes it, scaling the worst group's probabilities down also scales its gradient
    down: its share of the gradient falls (pinned here; see the module note in mitigation/febs.py)."""
    z, t, g = _toy()

    def share(objective) -> float:
        x = z.clone().requires_grad_(True)
        objective(x).backward()
        return float(x.grad[1].abs().sum() / x.grad.abs().sum())

    m = make_mitigation("febs")
    plain = share(lambda x: torch.nn.functional.binary_cross_entropy_with_logits(x, t) + (
        1 - (2 * (torch.sigmoid(x) * t).sum() + 1e-5) / ((torch.sigmoid(x) ** 2).sum() + (t * t).sum() + 1e-5)))
    febs = share(lambda x: m.loss(torch.zeros(2), Batch(x, t, g, None)))
    assert febs < plain


def test_febs_ignores_groups_absent_from_the_batch_and_refuses_bad_input() -> None:
    z, t, _ = _toy()
    m = make_mitigation("febs")
    _, w = m.group_weights(torch.sigmoid(z), t, torch.tensor([2, 2]))  # only group 2 in the batch
    assert math.isnan(w[0]) and math.isnan(w[1]) and float(w[2]) == pytest.approx(math.tanh(1.0))
    assert torch.isfinite(m.loss(torch.zeros(2), Batch(z, t, torch.tensor([2, 2]), None)))
    with pytest.raises(InputError, match="sensitive attribute"):
        m.loss(torch.zeros(2), Batch(z, t, None, None))
    with pytest.raises(InputError, match="per-pixel logits"):
        m.loss(torch.zeros(2), Batch(None, None, torch.tensor([0, 1]), None))
    with pytest.raises(InputError, match="does not apply to classification"):
        m.check_task(get_task("classification"))
    with pytest.raises(InputError, match="gamma"):
        make_mitigation("febs", gamma=-1.0)


def test_febs_trains_in_the_segmentation_loop() -> None:
    _, outcome, m, _ = fit("febs", pretrained=True)
    assert np.isfinite([r["train_loss"] for r in outcome.curve[1:]]).all()
    w = m.last_weights.tolist()
    assert len(w) == 2 and min(w) < max(w) == pytest.approx(math.tanh(1.0))
