"""The published methods of issue 33: each loss, sampler or update pinned on a hand-computed case."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fairmedbench.adapters.linear_probe import make_linear_head
from fairmedbench.errors import InputError
from fairmedbench.mitigation import make_mitigation
from fairmedbench.mitigation.base import Batch
from fairmedbench.mitigation.cvar_dro import cvar
from fairmedbench.mitigation.fairclip import fairclip_penalty
from fairmedbench.mitigation.laftr import group_normalised_l1
from fairmedbench.tasks.classification import TrainConfig, run_classification
from fairmedbench.tasks.multiclass import MulticlassConfig, fit_softmax_head, predict_proba

NEW_CLASSIFICATION = ["reweighting", "cvar_dro", "jtt", "sam", "asam", "laftr", "cfair", "fairclip", "fis"]
NEW_SEGMENTATION = ["reweighting", "cvar_dro", "fis", "fair_dice"]
H = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))  # entropy of (2/3, 1/3)


def _batch(logits: list, y: list, groups: list) -> Batch:
    return Batch(torch.tensor(logits, dtype=torch.float64), torch.tensor(y, dtype=torch.float64),
                 torch.tensor(groups), None)


def test_reweighting_weighs_by_inverse_training_group_frequency() -> None:
    """Training groups 0,0,0,1: w = 4 / (2 x 3) = 2/3 and 4 / (2 x 1) = 2; batch losses 1 (g0), 2 (g1) ->
    mean(2/3, 4) = 7/3."""
    m = make_mitigation("reweighting")
    m.epoch_indices(np.zeros(4), np.array([0, 0, 0, 1]), np.random.default_rng(0))
    assert m.weights is not None and np.allclose(m.weights, [2 / 3, 2])
    out = m.loss(torch.tensor([1.0, 2.0], dtype=torch.float64), _batch([[0.0], [0.0]], [[0], [1]], [0, 1]))
    assert float(out) == pytest.approx(7 / 3)
    cells = make_mitigation("reweighting", by="group_class")
    cells.epoch_indices(np.array([1.0, 0, 0, 1]), np.array([0, 0, 0, 1]), np.random.default_rng(0))
    # cells 2g + y: g0y1 -> 1, g0y0 -> 0 (x2), g1y1 -> 3; 3 cells present: w = 4 / (3 n_cell)
    assert cells.weights is not None and np.allclose(cells.weights, [2 / 3, 4 / 3, 0, 4 / 3])


def test_cvar_counts_the_boundary_sample_fractionally() -> None:
    """Losses 4,3,2,1 at alpha 0.3: k = 1.2 -> (4 + 0.2 x 3) / 1.2 = 3.8333; gradient 1/1.2 and 0.2/1.2."""
    losses = torch.tensor([2.0, 4.0, 1.0, 3.0], requires_grad=True)
    out = cvar(losses, 0.3)
    assert float(out.detach()) == pytest.approx(4.6 / 1.2)
    out.backward()
    assert losses.grad is not None
    assert torch.allclose(losses.grad, torch.tensor([0.0, 1 / 1.2, 0.0, 0.2 / 1.2]))
    assert float(cvar(losses.detach(), 1.0)) == pytest.approx(2.5)  # alpha 1 = ERM
    assert float(cvar(losses.detach(), 0.5)) == pytest.approx(3.5)
    with pytest.raises(InputError, match=r"alpha=0.0 must lie in \(0, 1\]"):
        make_mitigation("cvar_dro", alpha=0)


def test_fis_weights_match_the_official_formula_by_hand() -> None:
    """Losses 1, 1 (group 0), 3 (group 1), blur 0.1 (eps 0.01): the Sinkhorn divergence of a Dirac at l to the
    batch {1, 1, 3} is E_batch |l - x|^2 / 2 - eps H(2/3, 1/3) / 2 -> 2/3 - 0.005 H and 4/3 - 0.005 H."""
    m = make_mitigation("fis")
    losses = torch.tensor([1.0, 1.0, 3.0], dtype=torch.float64)
    g = torch.tensor([0, 0, 1])
    d = m.group_distances(losses, g)
    assert torch.allclose(d, torch.tensor([2 / 3, 2 / 3, 4 / 3], dtype=torch.float64) - 0.005 * H, atol=1e-4)
    ind = np.exp([1, 1, 3]) / np.exp([1, 1, 3]).sum()
    dh = np.array([2 / 3, 2 / 3, 4 / 3]) - 0.005 * H
    grp = np.exp(dh) / np.exp(dh).sum()
    expected = np.mean((0.5 * ind + 0.5 * grp) * np.array([1, 1, 3]))
    assert float(m.loss(losses, _batch([[0.0]] * 3, [[0]] * 3, [0, 0, 1]))) == pytest.approx(expected, abs=1e-5)
    with pytest.raises(InputError, match="coef"):
        make_mitigation("fis", coef=1.5)


def test_fairclip_penalty_by_hand_on_one_scale() -> None:
    """Similarities 0.2, 0.2 (group 0), 0.6 (group 1), blur 1e-4: / the batch mean 1/3 the batch is 0.6, 0.6, 1.8,
    group 0 a Dirac at 0.6, group 1 at 1.8: E|x - 0.6|^2/2 + E|x - 1.8|^2/2 = 0.24 + 0.48 = 0.72 at any scale;
    d/ds = (x - 0.6 + x - 1.8) / 3 x 3 = -1.2, -1.2, +1.2 (descent narrows the gap). The official term (batch
    unscaled, each group / its own sum) at 10x the scale: (2.25 + 2.25 + 30.25)/6 + (1 + 1 + 25)/6 = 10.2917."""
    s = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64, requires_grad=True)
    g = torch.tensor([0, 0, 1])
    out = fairclip_penalty(s, g, 1e-4)
    assert float(out.detach()) == pytest.approx(0.72, abs=1e-4)
    out.backward()
    assert s.grad is not None and torch.allclose(s.grad, torch.tensor([-1.2, -1.2, 1.2], dtype=torch.float64),
                                                 atol=1e-3)
    s = s.detach()
    assert float(fairclip_penalty(10 * s, g, 1e-4)) == pytest.approx(0.72, abs=1e-4)
    assert float(fairclip_penalty(10 * s, g, 1e-4, official=True)) == pytest.approx(
        (2.25 + 2.25 + 30.25) / 6 + (1 + 1 + 25) / 6, abs=1e-3)
    # two points per group: 0.1, 0.5 (group 0) and 0.3, 0.7 (group 1) / 0.4 -> the batch's quartiles 0.25, 0.75,
    # 1.25, 1.75 against each group's halves: W2^2 / 2 = (0.5^2 + 0.5^2) / 4 / 2 = 0.0625 per group
    s4 = torch.tensor([0.1, 0.3, 0.5, 0.7], dtype=torch.float64)
    assert float(fairclip_penalty(s4, torch.tensor([0, 1, 0, 1]), 1e-4)) == pytest.approx(0.125, abs=2e-3)


def test_fairclip_is_zero_for_equal_similarities_whatever_the_group_sizes() -> None:
    """Every true label at probability 0.5, groups of 2 and 1: one point cloud, penalty 0 (dividing each group by
    its own sum put group 0 at 1/2 and group 1 at 1 against a batch at 1/3 and charged 1/72 + 2/9 for the sizes);
    lambda is refused below 0."""
    m = make_mitigation("fairclip")
    logits = torch.tensor([[0.0], [0.0], [0.0]], dtype=torch.float64)
    out = m.loss(torch.zeros(3, dtype=torch.float64), Batch(logits, torch.tensor([[1.0], [0.0], [1.0]]),
                                                             torch.tensor([0, 0, 1]), None))
    assert float(out) == 0.0
    with pytest.raises(InputError, match="lambda"):
        make_mitigation("fairclip", **{"lambda": -1.0})


def test_fairclip_default_changes_the_trained_head(toy) -> None:
    """Groups whose labels lie on different features (the minority 10% harder): at the default lambda the head
    differs from ERM's and its groups' mean training true-label probabilities lie closer; at lambda 0 it is
    ERM's bit for bit."""
    train, val, test = toy(n=400)
    cfg = TrainConfig(epochs=30, patience=30, batch_size=128)

    def fit(name: str, **hp: float) -> np.ndarray:
        runs = run_classification(train, val, np.concatenate([test.x, train.x]), make_linear_head,
                                  lambda: make_mitigation(name, **hp), [0], cfg)
        return runs[0].test_scores[:, 0]

    erm, fair, zero = fit("erm"), fit("fairclip"), fit("fairclip", **{"lambda": 0.0})
    assert np.array_equal(erm, zero)
    assert np.abs(erm - fair).max() > 0.01

    def gap(scores: np.ndarray) -> float:
        p = scores[len(test.x):]
        own = np.where(train.y > 0.5, p, 1 - p)
        return float(own[train.groups == 0].mean() - own[train.groups == 1].mean())

    assert 0 < gap(fair) < gap(erm)


def test_sam_and_asam_two_step_update_by_hand() -> None:
    """L(w) = w^2 at w = 1, SGD lr 0.1. SAM rho 0.1: e = 0.1, gradient at 1.1 is 2.2 -> w = 0.78. ASAM rho 0.1,
    eta 0.01: e = rho (|w| + eta) sign(g) = 0.101 -> gradient 2.202 -> w = 0.7798."""
    for name, hp, expected in (("sam", {"rho": 0.1}, 0.78), ("asam", {"rho": 0.1, "eta": 0.01}, 0.7798)):
        w = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
        opt = torch.optim.SGD([w], lr=0.1)

        def closure(w: torch.nn.Parameter = w, opt: torch.optim.Optimizer = opt) -> torch.Tensor:
            opt.zero_grad()
            loss = (w ** 2).sum()
            loss.backward()
            return loss

        make_mitigation(name, **hp).step(opt, closure)
        assert float(w) == pytest.approx(expected), name


def test_jtt_error_set_upsampling_and_restart(toy) -> None:
    """Misclassified: logit 2 vs 1 right, -1 vs 1 wrong, 0.5 vs 0 wrong -> {1, 2}; after it the epoch lists
    every sample once and each error lambda_up - 1 more times; the loop restarts once, after T epochs."""
    m = make_mitigation("jtt", T=2, lambda_up=3)
    assert list(m.misclassified(torch.tensor([[2.0], [-1.0], [0.5]]), torch.tensor([[1.0], [1.0], [0.0]]))) == [1, 2]
    m.error_set = np.array([2])
    counts = np.bincount(m.epoch_indices(np.zeros(4), None, np.random.default_rng(0)))
    assert list(counts) == [1, 1, 3, 1]
    train, val, test = toy(n=300)
    calls: list[int] = []
    jtt = make_mitigation("jtt", T=3)
    original = jtt.end_epoch

    def spy(epoch, model, data):  # noqa: ANN001
        calls.append(epoch)
        return original(epoch, model, data)

    jtt.end_epoch = spy  # type: ignore[method-assign]
    runs = run_classification(train, val, test.x, make_linear_head, lambda: jtt, [0],
                              TrainConfig(epochs=4, patience=1, batch_size=64))
    assert calls == [0, 1, 2]  # no early stop in the ERM phase (patience 1), one restart after T = 3 epochs
    assert jtt.error_set is not None and 0 < len(jtt.error_set) < len(train.y)
    assert len(runs[0].fit.val_losses) <= 4  # the curve is the retraining's only


def test_laftr_group_normalised_l1_and_binary_attribute() -> None:
    """Adversary probabilities 0.2, 0.6 (group 0) and 0.9 (group 1): mean |h - a| per group 0.4 and 0.1 -> 0.5;
    with cells = group x label (labels 0, 1, 1) the three cells give 0.2 + 0.6 + 0.1 = 0.9."""
    prob = torch.tensor([0.2, 0.6, 0.9])
    g = torch.tensor([0, 0, 1])
    assert float(group_normalised_l1(prob, g, g)) == pytest.approx(0.5)
    assert float(group_normalised_l1(prob, g, 2 * g + torch.tensor([0, 1, 1]))) == pytest.approx(0.9)
    with pytest.raises(InputError, match="binary sensitive attribute.*3 groups"):
        make_mitigation("laftr").wrap_head(make_linear_head(np.zeros((4, 3)), 1), 3)


def test_cfair_balancing_weights_by_hand() -> None:
    """Labels 1,1,1,0 and groups 0,0,1,1: class weights 4 / (2 x 1) = 2 and 4 / (2 x 3) = 2/3; within class 0
    only group 1 (weight 1 / (2 x 1)), within class 1 groups of sizes 2 and 1 (3 / 4 and 3 / 2)."""
    m = make_mitigation("cfair")
    m.wrap_head(make_linear_head(np.zeros((4, 3)), 1), 2)
    m.epoch_indices(np.array([1.0, 1, 1, 0]), np.array([0, 0, 1, 1]), np.random.default_rng(0))
    assert m.class_weights is not None and np.allclose(m.class_weights, [2, 2 / 3])
    assert m.group_weights is not None and np.allclose(m.group_weights, [[0, 0.5], [0.75, 1.5]])


def test_fair_dice_weights_groups_by_softmax_of_their_dice_losses() -> None:
    """One-pixel masks, target 1: logit 0 (p 0.5) gives Dice loss 1 - (1 + s) / (1.25 + s), logit -30 (p ~ 0)
    gives ~1; weights softmax of the two; objective mean BCE + sum q_a L_a."""
    m = make_mitigation("fair_dice")
    s = 1e-5
    z = torch.tensor([[[0.0]], [[-30.0]]], dtype=torch.float64)
    t = torch.ones_like(z)
    out = m.loss(torch.zeros(2), Batch(z, t, torch.tensor([0, 1]), None))
    losses = np.array([1 - (1 + s) / (1.25 + s), 1 - s / (1 + s)])
    q = np.exp(losses) / np.exp(losses).sum()
    bce = (math.log(2) + 30 + math.log1p(math.exp(-30))) / 2
    assert m.last_weights is not None and np.allclose(m.last_weights.numpy(), q, atol=1e-9)
    assert float(out) == pytest.approx(bce + (q * losses).sum(), abs=1e-9)


@pytest.mark.parametrize("name", NEW_CLASSIFICATION)
def test_new_methods_train_binary_and_multiclass_heads(toy, name: str) -> None:
    """Each new classification method trains a sigmoid head and a softmax head end to end."""
    train, val, test = toy(n=300)
    runs = run_classification(train, val, test.x, make_linear_head, lambda: make_mitigation(name), [0],
                              TrainConfig(epochs=4, patience=4, batch_size=64), test_groups=test.groups)
    assert np.isfinite(runs[0].test_scores).all()
    cls = {k: np.digitize(d.x[:, 0], [-0.5, 0.5]) for k, d in (("train", train), ("val", val))}
    torch.manual_seed(0)
    model, _ = fit_softmax_head(make_linear_head(train.x, 3), {"train": train.x, "val": val.x}, cls,
                                {"train": train.groups, "val": val.groups}, 2, 3,
                                MulticlassConfig(epochs=3, patience=3, batch_size=64), make_mitigation(name), 0)
    assert np.isfinite(predict_proba(model, test.x)).all()


def test_registry_counts_and_usages() -> None:
    """At least 18 methods serve classification and 8 segmentation; segmentation-only and classifier-only
    methods refuse the other task with a reason."""
    from fairmedbench.mitigation import MITIGATIONS
    from fairmedbench.tasks.base import get_task

    def serving(task: str) -> list[str]:
        return [n for n in MITIGATIONS.names() if make_mitigation(n).serves(get_task(task))]

    assert len(serving("classification")) >= 18 and len(serving("segmentation")) >= 8
    assert set(NEW_SEGMENTATION) <= set(serving("segmentation"))
    for name in ("sam", "jtt", "laftr", "cfair", "fairclip"):
        with pytest.raises(InputError, match=f"{name}.*does not apply to segmentation"):
            make_mitigation(name).check_task(get_task("segmentation"))


def _mlp_head(x_train: np.ndarray, k: int) -> torch.nn.Module:
    """A head with a trainable representation (one hidden layer) and a `.linear` output, as lora's."""

    class MLPHead(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.hidden = torch.nn.Linear(x_train.shape[1], 8)
            self.linear = torch.nn.Linear(8, k)

        def representation(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.hidden(x))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(self.representation(x))

    return MLPHead()


def test_end_regulariser_by_hand() -> None:
    """Unit features (1, 0) g0 y0, (0.6, 0.8) g0 y1, (0, 1) g1 y0: the only same-group pair has cosine 0.6
    (R_orth 0.6); the only same-class cross-group pair has cosine 0 (R_par 1 - 1/2 = 0.5) -> 0.6 a + 0.5 b."""
    from fairmedbench.mitigation.end import end_regulariser

    rep = torch.tensor([[2.0, 0.0], [0.6, 0.8], [0.0, 3.0]])
    y, g = torch.tensor([0, 1, 0]), torch.tensor([0, 0, 1])
    assert float(end_regulariser(rep, y, g, 1.0, 1.0)) == pytest.approx(1.1)
    assert float(end_regulariser(rep, y, g, 2.0, 0.5)) == pytest.approx(1.45)


def test_lnl_entropy_reaches_the_representation_only() -> None:
    """A zero-weight predictor gives p = (1/2, 1/2): negative entropy -log 2 and cross-entropy log 2, so the
    regulariser is 0.1 x (-log 2) + log 2; the predictor's gradient is the cross-entropy's alone."""
    m = make_mitigation("lnl", hidden=0)
    m.wrap_head(_mlp_head(np.zeros((4, 3)), 1), 2)
    assert isinstance(m.predictor, torch.nn.Linear)
    torch.nn.init.zeros_(m.predictor.weight)
    torch.nn.init.zeros_(m.predictor.bias)
    z = torch.tensor([[1.0, 0.0], [0.0, 2.0]]).repeat(1, 4)
    batch = Batch(torch.zeros(2, 1), torch.zeros(2, 1), torch.tensor([0, 1]), z)
    out = m.regulariser(batch)
    assert float(out) == pytest.approx(0.9 * math.log(2))
    out.backward()
    ce = torch.nn.functional.cross_entropy(m.predictor(z.detach()), torch.tensor([0, 1]))
    grads = torch.autograd.grad(ce, [m.predictor.weight])
    assert m.predictor.weight.grad is not None and torch.allclose(m.predictor.weight.grad, grads[0])


@pytest.mark.parametrize("name", ["lnl", "end"])
def test_representation_methods_refuse_frozen_features_and_train_a_representation(toy, name: str) -> None:
    train, val, test = toy(n=300)
    with pytest.raises(InputError, match=f"{name}.*linear probe on cached frozen features has none to change"):
        make_mitigation(name).wrap_head(make_linear_head(train.x, 1), 2)
    runs = run_classification(train, val, test.x, _mlp_head, lambda: make_mitigation(name), [0],
                              TrainConfig(epochs=3, patience=3, batch_size=64))
    assert np.isfinite(runs[0].test_scores).all()


@pytest.mark.parametrize("name", ["lnl", "end"])
def test_frozen_features_refused_before_any_work(name: str, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """On a linear probe of cached features the run exits 2 with the reason, before a folder or cache is made."""
    from fairmedbench.cli import main

    rc = main(["run", "--model", "c2l", "--weights", "random", "--dataset", "synth-underrep", "--attribute", "sex",
               "--usage", "lp", "--mitigation", name, "--out", str(tmp_path / "out"),
               "--cache-dir", str(tmp_path / "cache")])
    assert rc == 2
    assert f"mitigation {name!r} does not apply to usage 'lp'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_sinkhorn_of_coinciding_points_is_zero() -> None:
    """Equal losses everywhere (a zero-diameter cloud, which geomloss cannot schedule) give divergence 0, and FIS
    then weighs the batch uniformly: the objective is the mean loss times the asymptote r / b."""
    from fairmedbench.mitigation.fis import sinkhorn

    x = torch.ones(3, dtype=torch.float64)
    assert float(sinkhorn(x, x[:1], 0.1)) == 0.0
    m = make_mitigation("fis")
    assert float(m.loss(x, _batch([[0.0]] * 3, [[0]] * 3, [0, 0, 1]))) == pytest.approx(1 / 3)
