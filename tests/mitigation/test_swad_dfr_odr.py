"""SWAD, DFR and ODR: the averaging rule, the balanced refit and the loss terms pinned on hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fairmedbench.adapters.linear_probe import make_linear_head
from fairmedbench.errors import InputError
from fairmedbench.mitigation import make_mitigation
from fairmedbench.mitigation.base import Batch
from fairmedbench.mitigation.dfr import balanced_subset, refit_last_layer
from fairmedbench.mitigation.odr import entropy_to_uniform, gaussian_kl, prior_means
from fairmedbench.mitigation.swad import swad_valley
from fairmedbench.tasks.classification import TrainConfig, run_classification


def test_swad_valley_start_and_end_by_hand() -> None:
    """Ns 3: e_2 = 3 is the minimum of (3, 3.5, 3.2) -> ts 2, l = 1.3 x 3.2333 = 4.2033; Ne 3: the first window
    whose minimum exceeds l is (5, 6, 7) ending at 8 -> te = 8 - 3 = 5."""
    losses = [5, 4, 3, 3.5, 3.2, 4, 5, 6, 7, 8]
    assert swad_valley(losses, 3, 3, 0.3) == (2, 5)
    assert swad_valley(losses[:8], 3, 3, 0.3) == (2, None)  # the valley has not ended yet
    assert swad_valley([3.0, 2.0], 3, 3, 0.3) == (None, None)  # too few points for a start
    assert swad_valley(losses, 3, 3, 0.05)[1] == 4  # l = 3.395: (3.5, 3.2, 4)... (3.2, 4, 5) min 3.2; (4, 5, 6) -> 7


def test_swad_averages_every_step_of_the_valley_epochs_by_hand() -> None:
    """L = -w, SGD lr 1 from w = 0: the steps give w = 1, 2 | 3, 4 | 5, 6 | 7, 8. Losses 3, 1, 1.2, 5 with Ns 2,
    Ne 1, r 1.3: ts 1 (1 = min(1, 1.2)), l = 1.43, 5 > l at epoch 3 -> te 2, training ends there; the average of
    the weights after epochs 1 and 2's steps is (3 + 4 + 5 + 6) / 4 = 4.5."""
    m = make_mitigation("swad", n_converge=2, n_tolerance=1, tolerance_ratio=0.3)
    w = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    opt = torch.optim.SGD([w], lr=1.0)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = -w.sum()
        loss.backward()
        return loss

    stops = []
    for epoch, loss in enumerate([3.0, 1.0, 1.2, 5.0]):
        m.step(opt, closure)
        m.step(opt, closure)
        stops.append(m.after_validation(epoch, loss))
    assert stops == [False, False, False, True]
    assert m.sums[0] == [] and all(len(m.sums[k]) == 1 for k in (1, 2, 3))  # epoch 0 is before the start: freed
    m.after_fit(torch.nn.Identity(), (torch.zeros(1), torch.zeros(1), None))
    assert float(w.detach()) == pytest.approx(4.5) and m.valley == (1, 2)
    # no start before the end (losses falling): the valley starts at the lowest loss, the last epoch, w = 7.5
    m = make_mitigation("swad", n_converge=3, n_tolerance=1)
    w.data.zero_()
    for epoch, loss in enumerate([4.0, 3.0, 2.0, 1.0]):
        m.step(opt, closure)
        m.step(opt, closure)
        assert not m.after_validation(epoch, loss)
    assert [len(x) for x in m.sums] == [0, 0, 1, 1]  # epochs 0 and 1 failed their windows: freed
    m.after_fit(torch.nn.Identity(), (torch.zeros(1), torch.zeros(1), None))
    assert float(w.detach()) == pytest.approx(7.5) and m.valley == (3, 3)
    with pytest.raises(InputError, match="n_converge=0"):
        make_mitigation("swad", n_converge=0)


def test_swad_in_the_classifier_loop_trains_past_early_stopping(toy) -> None:
    """With patience 1 an ERM loop stops early; SWAD runs until its own rule ends it (or the last epoch) and
    records its valley."""
    train, val, test = toy(n=300)
    swad = make_mitigation("swad")
    runs = run_classification(train, val, test.x, make_linear_head, lambda: swad, [0],
                              TrainConfig(epochs=12, patience=1, batch_size=64))
    assert swad.valley is not None and swad.valley[0] <= swad.valley[1] < 12
    assert len(runs[0].fit.val_losses) == len(swad.losses)
    assert np.isfinite(runs[0].fit.best_val_loss)


def test_dfr_balanced_subsets_by_hand() -> None:
    """Units 0 x3, 1 x2, 2 x4: every subset has 2 of each (the smallest unit), drawn without replacement."""
    units = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])
    rng = np.random.default_rng(0)
    for _ in range(5):
        sub = balanced_subset(units, rng)
        assert list(np.bincount(units[sub])) == [2, 2, 2] and len(set(sub)) == 6


def test_dfr_refit_maps_the_standardised_fit_back_to_raw_features() -> None:
    """One subset of everything: the refitted layer on raw features gives the decision values of the logistic
    regression on standardised ones; with C large the 1-D separable-by-threshold case puts the boundary between
    the classes (x = 2.5 between 2 and 3)."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(1)
    rep = rng.normal(size=(40, 3)) * [1, 5, 0.2] + [0, 3, -1]
    y = (rep[:, 0] + 0.2 * rng.normal(size=40) > 0).astype(np.int64)[:, None]
    w, b = refit_last_layer(rep, y, [np.arange(40)], 1.0, 0)
    z = (rep - rep.mean(0)) / rep.std(0)
    ref = LogisticRegression(C=1.0, solver="liblinear", l1_ratio=1.0, max_iter=5000, random_state=0).fit(z, y[:, 0])
    assert np.allclose(rep @ w.T + b, ref.decision_function(z)[:, None], atol=1e-8)
    x = np.array([[0.0], [1.0], [2.0], [3.0], [4.0], [5.0]])
    w1, b1 = refit_last_layer(x, np.array([[0], [0], [0], [1], [1], [1]]), [np.arange(6)], 1e4, 0)
    assert -b1[0] / w1[0, 0] == pytest.approx(2.5, abs=0.05)
    # a 2-class softmax head gets logits (-a/2, a/2): the same probability of class 1
    w2, b2 = refit_last_layer(x, np.array([0, 0, 0, 1, 1, 1]), [np.arange(6)], 1e4, 2)
    logits = x @ w2.T + b2
    assert np.allclose(logits[:, 0], -logits[:, 1]) and -b2[1] / w2[1, 0] == pytest.approx(2.5, abs=0.05)


def test_dfr_holds_out_training_samples_from_erm_and_refits_on_them(toy) -> None:
    """Half the training split never appears in an ERM epoch; the last layer is then the refit's, not ERM's."""
    train, val, test = toy(n=400)
    dfr = make_mitigation("dfr", n_subsets=3)
    seen: list[np.ndarray] = []
    original = dfr.epoch_indices

    def spy(y, groups, rng):  # noqa: ANN001, ANN202
        idx = original(y, groups, rng)
        seen.append(idx)
        return idx

    models: list[torch.nn.Module] = []
    refit = dfr.after_fit

    def keep(model, data):  # noqa: ANN001, ANN202
        models.append(model)
        return refit(model, data)

    dfr.epoch_indices = spy  # type: ignore[method-assign]
    dfr.after_fit = keep  # type: ignore[method-assign]
    run_classification(train, val, test.x, make_linear_head, lambda: dfr, [0],
                       TrainConfig(epochs=3, patience=3, batch_size=64))
    assert dfr.held is not None and len(dfr.held) == 200
    assert all(not np.isin(idx, dfr.held).any() and len(idx) == 200 for idx in seen)
    model = models[0]
    x = torch.as_tensor(train.x[dfr.held], dtype=torch.float32)
    with torch.no_grad():
        rep = model.representation(x).double().numpy()
    yh = train.y[dfr.held][:, None].astype(np.int64)
    rng = np.random.default_rng(dfr.subset_seed)
    units = 2 * train.groups[dfr.held] + yh[:, 0]
    w, b = refit_last_layer(rep, yh, [balanced_subset(units, rng) for _ in range(3)], 1.0, 0)
    assert np.allclose(model.linear.weight.detach().numpy(), w, atol=1e-5)
    assert np.allclose(model.linear.bias.detach().numpy(), b, atol=1e-5)


def test_dfr_refuses_a_held_out_split_without_a_group_before_training() -> None:
    dfr = make_mitigation("dfr", held_out=0.1)
    y, g = np.array([0, 1] * 10, dtype=float), np.array([0] * 19 + [1])
    with pytest.raises(InputError, match="held-out 0.1 of the training split"):
        for seed in range(50):  # some draw leaves the single group-1 sample out of the 2 held-out samples
            make_mitigation("dfr", held_out=0.1).epoch_indices(y, g, np.random.default_rng(seed))
    with pytest.raises(InputError, match="held_out=1.5"):
        make_mitigation("dfr", held_out=1.5)
    assert dfr.hparams["C"] == 1.0
    with pytest.raises(InputError, match="lacks a class to refit on"):  # a subset of one class: no regression to fit
        refit_last_layer(np.arange(4.0)[:, None], np.array([[0], [0], [1], [1]]), [np.array([0, 1])], 1.0, 0)
    with pytest.raises(InputError, match="lacks a class to refit on"):  # a softmax head's class 2 missing
        refit_last_layer(np.arange(4.0)[:, None], np.array([0, 1, 0, 1]), [np.arange(4)], 1.0, 3)


def test_odr_loss_terms_by_hand() -> None:
    """KL(N((0, 0), I) || N((1, 0), I)) = 1/2; with var (2, 1) at the prior mean 1/2 (2 - 1 - log 2) = 0.1534;
    KL((3/4, 1/4) || uniform) = 0.75 log 0.75 + 0.25 log 0.25 + log 2 = 0.1308; priors (1, 0, 1, 0) _|_ (0, 1, 0, 1)."""
    assert float(gaussian_kl(torch.zeros(1, 2), torch.zeros(1, 2), torch.tensor([1.0, 0.0]))) == pytest.approx(0.5)
    lv = torch.tensor([[math.log(2.0), 0.0]])
    assert float(gaussian_kl(torch.tensor([[1.0, 0.0]]), lv, torch.tensor([1.0, 0.0]))) == pytest.approx(
        0.5 * (1 - math.log(2)))
    assert float(entropy_to_uniform(torch.tensor([[math.log(3.0), 0.0]]))) == pytest.approx(
        0.75 * math.log(0.75) + 0.25 * math.log(0.25) + math.log(2))
    assert float(entropy_to_uniform(torch.zeros(3, 4))) == pytest.approx(0.0, abs=1e-7)
    m_t, m_s = prior_means(4)
    assert m_t.tolist() == [1, 0, 1, 0] and m_s.tolist() == [0, 1, 0, 1] and float(m_t @ m_s) == 0


def test_odr_total_loss_and_the_fixed_attribute_classifier_by_hand() -> None:
    """z_dim 2, codes at their prior means with unit variance (KLs 0), attribute classifier 0 (logits 0): L_S =
    log 2, L_E = 0 -> L = mean(per_sample) + log 2. The entropy term moves the encoder, never the classifier."""
    m = make_mitigation("odr", z_dim=2, lambda_e=1.0, lambda_od=1.0)
    head = m.wrap_head(make_linear_head(np.zeros((4, 3)), 1), 2)
    sens = head.sensitive
    with torch.no_grad():
        sens.weight.zero_()
        sens.bias.zero_()
    mu_t, mu_s = torch.tensor([[1.0, 0.0]] * 2), torch.tensor([[0.0, 1.0]] * 2)
    rep = torch.cat([mu_t, torch.zeros(2, 2), mu_s, torch.zeros(2, 2), mu_t, mu_s], dim=1)
    batch = Batch(torch.zeros(2, 1), torch.zeros(2, 1), torch.tensor([0, 1]), rep)
    out = m.loss(torch.tensor([0.5, 1.5]), batch)
    assert float(out.detach()) == pytest.approx(1.0 + math.log(2))
    # non-zero classifier: its gradient comes from L_S alone (L_E holds it fixed)
    with torch.no_grad():
        sens.weight.copy_(torch.tensor([[1.0, -1.0], [0.5, 2.0]]))
    z_t = torch.tensor([[2.0, -1.0], [0.3, 0.7]], requires_grad=True)
    rep = torch.cat([mu_t, torch.zeros(2, 2), mu_s, torch.zeros(2, 2), z_t, mu_s], dim=1)
    sens.zero_grad()
    m.loss(torch.zeros(2), Batch(torch.zeros(2, 1), torch.zeros(2, 1), torch.tensor([0, 1]), rep)).backward()
    full = sens.weight.grad.clone()
    sens.zero_grad()
    torch.nn.functional.cross_entropy(sens(mu_s), torch.tensor([0, 1])).backward()
    assert torch.allclose(full, sens.weight.grad)
    assert z_t.grad is not None and z_t.grad.abs().sum() > 0  # the entropy term does reach z_T


def test_odr_trains_and_predicts_from_the_mean_code(toy) -> None:
    train, val, test = toy(n=300)
    odr = make_mitigation("odr")
    runs = run_classification(train, val, test.x, make_linear_head, lambda: odr, [0],
                              TrainConfig(epochs=3, patience=3, batch_size=64))
    model = odr.module
    assert model is not None
    model.eval()
    x = torch.as_tensor(test.x[:5], dtype=torch.float32)
    with torch.no_grad():
        assert torch.equal(model(x), model(x))  # deterministic at inference: the mean of z_T
    assert np.isfinite(runs[0].test_scores).all() and runs[0].test_scores.std() > 0


@pytest.mark.parametrize("name", ["swad", "dfr", "odr"])
def test_swad_dfr_odr_train_a_softmax_head(toy, name: str) -> None:
    """Each trains a 3-class softmax head end to end (DFR's refit: one multinomial regression)."""
    from fairmedbench.tasks.multiclass import MulticlassConfig, fit_softmax_head, predict_proba

    train, val, test = toy(n=300)
    cls = {k: np.digitize(d.x[:, 0], [-0.5, 0.5]) for k, d in (("train", train), ("val", val))}
    torch.manual_seed(0)
    model, _ = fit_softmax_head(make_linear_head(train.x, 3), {"train": train.x, "val": val.x}, cls,
                                {"train": train.groups, "val": val.groups}, 2, 3,
                                MulticlassConfig(epochs=4, patience=4, batch_size=64), make_mitigation(name), 0)
    p = predict_proba(model, test.x)
    assert np.isfinite(p).all() and np.allclose(p.sum(axis=1), 1.0, atol=1e-5)
