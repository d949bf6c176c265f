"""MC dropout heads: lp and lora sample only their head dropout at inference, seeded, leaving eval-mode
predictions and the global RNG alone; dropout 0 changes nothing and cannot be sampled."""

from __future__ import annotations

import numpy as np
import pytest

from fairmedbench.adapters import RunContext
from fairmedbench.adapters.linear_probe import make_linear_head
from fairmedbench.adapters.lora import lora_settings, make_lora_head
from fairmedbench.errors import InputError
from fairmedbench.tasks.classification import mc_predict, predict


def test_linear_head_mc_samples_vary_are_seeded_and_leave_eval_alone() -> None:
    import torch

    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 8)).astype(np.float32)
    torch.manual_seed(0)
    head = make_linear_head(x, 3, dropout=0.5)
    before = predict(head, x)
    state = torch.random.get_rng_state()
    a, b = mc_predict(head, x, 4, seed=1), mc_predict(head, x, 4, seed=1)
    assert a.shape == (4, 20, 3) and np.array_equal(a, b)  # seeded
    assert torch.equal(state, torch.random.get_rng_state())  # the global RNG is untouched
    assert a.std(axis=0).max() > 0  # the passes differ
    assert not head.mc_dropout.training and np.array_equal(predict(head, x), before)
    soft = mc_predict(head, x, 3, seed=1, softmax=True)
    np.testing.assert_allclose(soft.sum(axis=2), 1.0, atol=1e-12)


def test_dropout_zero_is_identity_and_cannot_be_sampled() -> None:
    import torch

    x = np.ones((4, 5), dtype=np.float32)
    head = make_linear_head(x, 1)
    assert isinstance(head.mc_dropout, torch.nn.Identity)
    with pytest.raises(InputError, match="no dropout to sample"):
        mc_predict(head, x, 5, seed=0)


def test_lora_head_samples_its_head_dropout_only() -> None:
    import torch

    from fairmedbench.registry.models import load_model

    model = load_model("imagenet-vit-b16", "random", image_size=32)
    x = torch.randn(3, 3, 32, 32).numpy()
    settings = lora_settings({"dropout": 0.5})
    assert settings["head_dropout"] == 0.5 and settings["dropout"] == 0.1  # LoRA's own dropout is separate
    head = make_lora_head(model, RunContext(batch_size=2), settings, 2, x)
    samples = mc_predict(head, x, 3, seed=0)
    assert samples.shape == (3, 3, 2) and samples.std(axis=0).max() > 0
    lora_drop = [m for n, m in head.encoder.named_modules() if n.endswith("lora_dropout")]
    assert lora_drop and not any(m.training for m in lora_drop)
