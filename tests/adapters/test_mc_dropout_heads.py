"""MC dropout heads: lp and lora sample only their head dropout at inference, seeded, leaving eval-mode
predictions and the global RNG alone; dropout 0 changes nothing and cannot be sampled. A LoRA head's eval-mode
encoder runs once per input batch, not once per pass, with the very passes of T full forwards."""

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


def _full_passes(head, x: np.ndarray, samples: int, seed: int) -> np.ndarray:
    """The reference: every pass runs the whole model (encoder included), head dropout sampling, same seeding."""
    import torch

    head.eval()
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        for name, m in head.named_modules():
            if name.split(".")[-1] == "mc_dropout":
                m.train()
        out = [torch.sigmoid(head(torch.as_tensor(x))).numpy().astype(np.float64) for _ in range(samples)]
    head.eval()
    return np.stack(out)


@pytest.fixture(scope="module")
def vit_lora_head():
    """A LoRA head (head dropout 0.5, chunks of 2 images) on a random ViT-B/16 at 32 px, and an encoder-pass
    counter (one patch embedding per encoder forward)."""
    from fairmedbench.registry.models import load_model

    model = load_model("imagenet-vit-b16", "random", image_size=32)
    x = np.random.default_rng(0).normal(size=(5, 3, 32, 32)).astype(np.float32)
    head = make_lora_head(model, RunContext(batch_size=2), lora_settings({"dropout": 0.5}), 2, x)
    calls = []
    head.encoder.patch_embed.register_forward_hook(lambda *_: calls.append(1))
    return head, x, calls


def test_lora_mc_runs_the_encoder_once_per_batch_with_the_same_passes(vit_lora_head, monkeypatch) -> None:
    import hashlib
    from types import SimpleNamespace

    head, x, calls = vit_lora_head
    calls.clear()
    want = _full_passes(head, x, 4, seed=3)
    assert len(calls) == 4 * 3  # reference: T passes x 3 chunks of <= 2 images
    hashed = []
    monkeypatch.setattr("fairmedbench.adapters.lora.hashlib",
                        SimpleNamespace(blake2b=lambda *a, **k: hashed.append(1) or hashlib.blake2b(*a, **k)))
    calls.clear()
    got = mc_predict(head, x, 4, seed=3)
    assert len(calls) == 3  # the encoder once per chunk; the 4 passes re-run dropout + linear only
    assert len(hashed) == 3  # pixels read once per chunk; later passes find the same chunk of the same array
    assert got.std(axis=0).max() > 0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-7)  # same masks in the same order: same passes
    assert head._memo is None  # released with the call


def test_lora_mc_memo_reaches_through_volume_and_mitigation_wrappers(vit_lora_head) -> None:
    from fairmedbench.adapters.volumes import make_volume_head, to_volumes
    from fairmedbench.mitigation import make_mitigation

    head, x, calls = vit_lora_head
    volumes = to_volumes(x, [3, 2])  # (2, 3, C, H, W), the second volume NaN-padded: new slice tensors per pass
    vol = make_volume_head(head, "mean", x)
    di = make_mitigation("domainind").wrap_head(head, 2)
    for wrapped, inputs in ((vol, volumes), (di, x)):
        calls.clear()
        want = _full_passes(wrapped, inputs, 3, seed=1)
        n_full = len(calls)
        calls.clear()
        got = mc_predict(wrapped, inputs, 3, seed=1)
        assert n_full == 3 * len(calls) and len(calls) == 3
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-7)


def test_lora_memo_is_bypassed_while_lora_dropout_samples(vit_lora_head) -> None:
    import torch

    from fairmedbench.adapters.lora import lora_train_mode

    head, x, calls = vit_lora_head
    xt = torch.as_tensor(x[:2])
    calls.clear()
    with head.encoder_memo(), torch.no_grad():
        lora_train_mode(head.encoder, True)  # LoRA dropout on: two calls are two different encoder draws
        try:
            head(xt), head(xt)
        finally:
            lora_train_mode(head.encoder, False)
        assert len(calls) == 2
        head(xt), head(xt)  # eval encoder: encoded once, then reused
    assert len(calls) == 3


def test_lora_memo_re_encodes_an_input_written_in_place(vit_lora_head) -> None:
    import torch

    head, x, calls = vit_lora_head
    xt = torch.as_tensor(x[:2].copy())
    head.eval()
    calls.clear()
    with torch.no_grad():
        with head.encoder_memo():
            before = head(xt)
            xt.add_(1.0)  # same memory, new pixels: torch's version counter moved, so no stale encoding
            after = head(xt)
        assert len(calls) == 2
        fresh = head(xt)
    assert not torch.equal(before, after) and torch.equal(after, fresh)
