"""Mitigations on a softmax head (the multiclass task): the hooks see class indices, cells are group x K classes;
plugins whose definition is binary are refused with their reason."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fairmedbench.adapters.linear_probe import make_linear_head
from fairmedbench.errors import InputError
from fairmedbench.mitigation import Batch, make_mitigation
from fairmedbench.tasks.base import get_task
from fairmedbench.tasks.multiclass import MulticlassConfig, fit_softmax_head, predict_proba

K = 3
CFG = MulticlassConfig(epochs=15, patience=15, batch_size=64)


def _split(n: int, seed: int, minority: float = 0.2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group 0 shows its class on features 0..2, group 1 (the `minority` share) on features 3..5."""
    rng = np.random.default_rng(seed)
    g = (rng.random(n) < minority).astype(np.int64)
    x = rng.normal(size=(n, 2 * K))
    logits = 3.0 * np.where(g[:, None] == 0, x[:, :K], x[:, K:])
    y = np.argmax(logits + rng.gumbel(size=logits.shape), axis=1).astype(np.int64)
    return x, y, g


def _data(n: int = 600, seed: int = 0, minority: float = 0.2) -> tuple[dict, dict, dict]:
    parts = {k: _split(n if k == "train" else n // 2, 3 * seed + i, minority)
             for i, k in enumerate(("train", "val", "test"))}
    return ({k: v[0] for k, v in parts.items()}, {k: v[1] for k, v in parts.items()},
            {k: v[2] for k, v in parts.items()})


def _fit(name: str, seed: int = 0, cfg: MulticlassConfig = CFG, **hp: object) -> tuple[object, object, dict]:
    x, y, g = _data()
    mitigation = make_mitigation(name, **hp)
    torch.manual_seed(seed)
    model, _ = fit_softmax_head(make_linear_head(x["train"], K), x, y, g, 2, K, cfg, mitigation, seed)
    return model, mitigation, x


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ------------------------------------------------------------------ which plugins serve the task, and why not
@pytest.mark.parametrize("name, hp", [("erm", {}), ("groupdro", {}), ("groupdro", {"by": "group_class"}),
                                      ("resampling", {}), ("resampling", {"by": "class"}),
                                      ("resampling", {"by": "group_class"}), ("adversarial", {}),
                                      ("adversarial", {"variant": "eo"}), ("domainind", {}),
                                      ("domainind", {"combine": "mean_prob"}), ("fairness_loss", {})])
def test_plugins_whose_definition_carries_over_are_allowed(name: str, hp: dict) -> None:
    assert make_mitigation(name, **hp).unsupported(get_task("multiclass")) is None


@pytest.mark.parametrize("name, hp, reason", [
    ("group_thresholds", {}, "argmax over the classes' probabilities, with no threshold to move"),
    ("fairness_loss", {"target": "tpr"}, "softmax head over classes does not have; use target=loss"),
    ("fairness_loss", {"target": "eo"}, "sigmoid score against 0/1 labels"),
    ("febs", {}, "Dice loss"),
    ("ind", {}, "copies a mask decoder once per group; for a classification head use domainind"),
    ("groupdro", {"by": "group_class", "label_column": 1}, "label_column=1 but a multi-class label is one column"),
    ("resampling", {"by": "class", "label_column": 2}, "label_column=2 but a multi-class label is one column"),
])
def test_binary_or_segmentation_plugins_are_refused_with_their_reason(name: str, hp: dict, reason: str) -> None:
    with pytest.raises(InputError, match=f"mitigation '{name}' does not apply to multiclass: .*{reason}"):
        make_mitigation(name, **hp).check_task(get_task("multiclass"))
    # the binary classification task still takes the fairness_loss rates
    if name == "fairness_loss":
        make_mitigation(name, **hp).check_task(get_task("classification"))


def test_a_softmax_head_needs_two_classes() -> None:
    with pytest.raises(InputError, match=">= 2 classes"):
        make_mitigation("resampling").softmax_classes(1)


# ------------------------------------------------------------------ resampling: group x K-class cells
def test_resampling_cells_are_group_times_k_classes_hand_checked() -> None:
    from fairmedbench.mitigation._common import balance_units

    y = np.array([0, 1, 2, 3, 0, 3, 3])
    g = np.array([0, 0, 1, 1, 1, 0, 0])
    # cell = 4 g + y: hand-computed
    assert balance_units("resampling", "group_class", y, g, 0, n_classes=4).tolist() == [0, 1, 6, 7, 4, 3, 3]
    assert balance_units("resampling", "class", y, g, 0, n_classes=4).tolist() == y.tolist()
    # without the softmax declaration the old 0/1 rule would merge classes 1, 2, 3 into one "positive" cell
    assert balance_units("resampling", "group_class", y, g, 0).tolist() == [0, 1, 3, 3, 2, 1, 1]
    with pytest.raises(InputError, match="class indices 0..2"):
        balance_units("resampling", "class", y, g, 0, n_classes=3)


def test_resampling_epoch_balances_the_group_class_cells() -> None:
    # 2 groups x 4 classes with cell sizes 40, 20, 10, 5 / 8, 4, 2, 1 (n = 90): each of the 8 cells must get 1/8
    sizes = [[40, 20, 10, 5], [8, 4, 2, 1]]
    g = np.concatenate([np.full(sum(row), gi) for gi, row in enumerate(sizes)])
    y = np.concatenate([np.repeat(np.arange(4), row) for row in sizes])
    m = make_mitigation("resampling", by="group_class")
    m.softmax_classes(4)
    rng = np.random.default_rng(0)
    draws = np.concatenate([m.epoch_indices(y, g, rng) for _ in range(400)])
    assert len(draws) == 400 * 90
    share = np.bincount(4 * g[draws] + y[draws], minlength=8) / len(draws)
    assert np.allclose(share, 1 / 8, atol=0.006), share
    # by=class: the 4 classes (sizes 48, 24, 12, 6) each drawn 1/4
    m = make_mitigation("resampling", by="class")
    m.softmax_classes(4)
    share = np.bincount(y[m.epoch_indices(y, g, np.random.default_rng(1))], minlength=4) / 90
    assert share.min() > 0.15 and share.max() < 0.35


def test_resampling_trains_a_softmax_head_on_balanced_epochs() -> None:
    erm, _, x = _fit("erm")
    res, m, _ = _fit("resampling", by="group_class")
    assert m.n_classes == K
    p_erm, p_res = predict_proba(erm, x["test"]), predict_proba(res, x["test"])
    assert np.allclose(p_res.sum(axis=1), 1.0) and not np.allclose(p_erm, p_res)


# ------------------------------------------------------------------ GroupDRO: per-group cross-entropy
def test_groupdro_q_over_group_class_cells_with_k_classes() -> None:
    m = make_mitigation("groupdro", by="group_class", eta=0.5)
    m.softmax_classes(K)
    m.wrap_head(make_linear_head(np.zeros((2, 4)), K), 2)
    assert m.weights().shape == (2 * K,)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    g = torch.tensor([0, 0, 0, 1, 1, 1])
    assert m.units(Batch(torch.zeros(6, K), y, g, None)).tolist() == [0, 1, 2, 3, 4, 5]
    per = torch.tensor([0.1, 0.1, 0.1, 0.1, 0.1, 2.0])
    out = m.loss(per, Batch(torch.zeros(6, K), y, g, None))
    q = np.full(6, 1 / 6) * np.exp(0.5 * per.numpy())  # hand: one exponentiated-gradient step
    q /= q.sum()
    assert np.allclose(m.weights(), q, atol=1e-6) and float(out) == pytest.approx(float(q @ per.numpy()), abs=1e-6)


def test_groupdro_weights_move_toward_the_worse_group_during_training() -> None:
    _, m, _ = _fit("groupdro", eta=0.05)
    q = m.weights()
    assert q.shape == (2,) and q[1] > 0.5 > q[0], q  # the minority (group 1) has the higher cross-entropy


# ------------------------------------------------------------------ adversarial: eo adversary sees the class one-hot
def test_adversarial_eo_reads_logits_and_the_class_one_hot() -> None:
    m = make_mitigation("adversarial", variant="eo", hidden=0)
    m.softmax_classes(K)
    m.wrap_head(make_linear_head(np.random.default_rng(0).normal(size=(5, 4)), K), 2)
    assert m.adversary_input == "logits" and m.adversary.in_features == 2 * K
    logits = torch.randn(6, K)
    y, g = torch.tensor([0, 1, 2, 0, 1, 2]), torch.tensor([0, 0, 0, 1, 1, 0])
    got = m.adversary_loss(Batch(logits, y, g, None), reverse=False)
    ce = F.cross_entropy(m.adversary(torch.cat([logits, F.one_hot(y, K).float()], 1)), g, reduction="none")
    # cells (group, class): (0,0) (0,1) (0,2)x2 (1,0) (1,1): 5 cells, the (0,2) pair shares weight 1/2
    expected = (ce[0] + ce[1] + (ce[2] + ce[5]) / 2 + ce[3] + ce[4]) / 5
    assert float(got.detach()) == pytest.approx(float(expected.detach()), abs=1e-6)


def test_adversarial_changes_the_softmax_head() -> None:
    erm, _, x = _fit("erm")
    adv, m, _ = _fit("adversarial", **{"lambda": 2.0})
    assert m.adversary is not None and m.adversary_input == "logits"
    assert not np.allclose(predict_proba(erm, x["test"]), predict_proba(adv, x["test"]), atol=1e-4)


# ------------------------------------------------------------------ domainind: one softmax head per group
def test_domainind_mean_prob_is_the_mean_of_per_group_softmaxes() -> None:
    x = torch.randn(8, 4)
    for combine in ("sum_logits", "mean_prob"):
        m = make_mitigation("domainind", combine=combine)
        m.softmax_classes(K)
        model = m.wrap_head(make_linear_head(x.numpy(), K), 2)
        z = torch.stack([h(model.representation(x)) for h in model.group_heads], 1)  # (b, 2, K)
        p = torch.softmax(model(x), dim=1)
        if combine == "mean_prob":
            assert torch.allclose(p, torch.softmax(z, 2).mean(1), atol=1e-6)
        else:  # the paper's argmax of summed logits
            assert torch.equal(p.argmax(1), z.sum(1).argmax(1))


def test_domainind_trains_each_group_head_on_its_group() -> None:
    model, _, x = _fit("domainind", cfg=MulticlassConfig(epochs=40, patience=40, batch_size=64))
    w = [h.weight.detach().abs().numpy() for h in model.group_heads]  # (K, 2K) each
    assert w[0][:, :K].sum() > 2 * w[0][:, K:].sum() and w[1][:, K:].sum() > 2 * w[1][:, :K].sum()
    assert np.allclose(predict_proba(model, x["test"]).sum(axis=1), 1.0)


# ------------------------------------------------------------------ fairness_loss: spread of group cross-entropies
def test_fairness_loss_penalises_the_variance_of_group_cross_entropies() -> None:
    m = make_mitigation("fairness_loss", weight=2.0)
    m.softmax_classes(K)
    per = torch.tensor([1.0, 3.0, 0.5, 0.5, 0.5])
    g = torch.tensor([0, 0, 1, 1, 1])
    out = m.loss(per, Batch(torch.zeros(5, K), torch.tensor([0, 1, 2, 0, 1]), g, None))
    # group means 2.0 and 0.5: population variance 0.5625; mean loss 1.1
    assert float(out) == pytest.approx(1.1 + 2.0 * 0.5625)
    # the softmax loop checks the task's rules itself (a caller that skipped resolve): binary rates are refused
    x, y, groups = _data(n=60)
    with pytest.raises(InputError, match="does not apply to multiclass: target=tpr compares soft"):
        fit_softmax_head(make_linear_head(x["train"], K), x, y, groups, 2, K, CFG,
                         make_mitigation("fairness_loss", target="tpr"), 0)


def test_attribute_needed_at_training_is_a_clear_error() -> None:
    x, y, _ = _data(n=60)
    none = {k: None for k in x}
    with pytest.raises(InputError, match="needs the sensitive attribute at training"):
        fit_softmax_head(make_linear_head(x["train"], K), x, y, none, 0, K, CFG, make_mitigation("groupdro"), 0)
