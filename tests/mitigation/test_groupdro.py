"""GroupDRO: q moves toward the group with the highest loss (Sagawa et al. 2020, Algorithm 1)."""

from __future__ import annotations

import numpy as np
import torch

from fairmedbench.adapters.linear_probe import make_linear_head
from fairmedbench.mitigation import Batch, make_mitigation
from fairmedbench.tasks.classification import TrainConfig, run_classification


def _batch(groups: list[int], k: int = 1) -> Batch:
    g = torch.tensor(groups)
    return Batch(torch.zeros(len(g), k), torch.zeros(len(g), k), g, torch.zeros(len(g), 3))


def test_weights_move_toward_highest_loss_group() -> None:
    m = make_mitigation("groupdro", eta=0.5)
    m.wrap_head(make_linear_head(np.zeros((2, 3)), 1), 3)
    assert np.allclose(m.weights(), 1 / 3)
    batch = _batch([0, 0, 1, 1, 2, 2])
    per = torch.tensor([0.1, 0.1, 0.5, 0.5, 2.0, 2.0])
    previous = m.weights()
    for _ in range(5):
        m.loss(per, batch)
        q = m.weights()
        assert q[2] > previous[2] and q[0] < previous[0] and np.isclose(q.sum(), 1.0)
        previous = q
    assert np.argmax(q) == 2 and q[2] > q[1] > q[0]


def test_exponentiated_gradient_step_and_objective() -> None:
    m = make_mitigation("groupdro", eta=0.1)
    m.wrap_head(make_linear_head(np.zeros((2, 3)), 1), 2)
    per = torch.tensor([1.0, 3.0, 5.0], requires_grad=True)
    out = m.loss(per, _batch([0, 0, 1]))
    group_loss = np.array([2.0, 5.0])
    q = 0.5 * np.exp(0.1 * group_loss)
    q /= q.sum()
    assert np.allclose(m.weights(), q)
    assert np.isclose(float(out.detach()), float(q @ group_loss))
    out.backward()
    assert np.allclose(per.grad.numpy(), [q[0] / 2, q[0] / 2, q[1]])


def test_group_class_cells() -> None:
    m = make_mitigation("groupdro", by="group_class", eta=1.0)
    m.wrap_head(make_linear_head(np.zeros((2, 3)), 1), 2)
    b = _batch([0, 0, 1, 1])
    b.y = torch.tensor([[0.0], [1.0], [0.0], [1.0]])
    m.loss(torch.tensor([0.0, 0.0, 0.0, 3.0]), b)
    assert len(m.weights()) == 4 and np.argmax(m.weights()) == 3  # cell 2 * group 1 + label 1


def test_minority_hard_group_gets_weight_in_training(toy) -> None:
    train, val, test = toy(n=600, minority_scale=0.5)
    made = []

    def factory():
        made.append(make_mitigation("groupdro", eta=0.05))
        return made[-1]

    run_classification(train, val, test.x, make_linear_head, factory, [0],
                       TrainConfig(lr=1e-2, epochs=15, batch_size=64))
    assert made[0].weights()[1] > 0.5  # the minority's labels are noisier: higher loss
