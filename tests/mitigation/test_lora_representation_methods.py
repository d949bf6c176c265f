"""lnl and end under `--usage lora`: the training step hands them the LoRA encoder's own features, and their
regulariser alone moves the LoRA weights (the encoder trains), never the frozen base."""

from __future__ import annotations

import pytest
import torch

from fairmedbench.adapters import RunContext
from fairmedbench.adapters.lora import lora_settings, make_lora_head
from fairmedbench.mitigation import make_mitigation
from fairmedbench.mitigation.base import Batch
from fairmedbench.mitigation.end import end_regulariser
from fairmedbench.tasks.common import _batch_closure


@pytest.fixture(scope="module")
def c2l():
    from fairmedbench.registry.models import load_model

    return load_model("c2l", "random")


@pytest.mark.parametrize("name", ["lnl", "end"])
def test_regulariser_reaches_the_lora_encoder_through_the_training_step(c2l, name: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(6, 3, 32, 32)  # a ResNet pools any size: 32 px keeps the step cheap
    y = torch.tensor([[0.0], [1.0], [0.0], [1.0], [0.0], [1.0]])
    g = torch.tensor([0, 0, 0, 1, 1, 1])
    head = make_lora_head(c2l, RunContext(batch_size=6, precision="fp32"), lora_settings({}), 1, x.numpy())
    m = make_mitigation(name)
    assert m.wrap_head(head, 2) is head  # accepted: lora's representation trains
    head.eval()
    with torch.no_grad():  # LoRA's B starts at zero: the representation is the encoder's own embedding
        torch.testing.assert_close(head.representation(x), c2l.encode_image(x), rtol=1e-5, atol=1e-5)
    head.train()
    lora = {n: p for n, p in head.named_parameters() if "lora_" in n}
    assert lora and all(p.requires_grad for p in lora.values())
    assert not any(p.requires_grad for n, p in head.named_parameters() if "lora_" not in n and
                   not n.startswith("linear."))
    opt = torch.optim.SGD([*head.parameters(), *m.extra_parameters()], lr=0.0)
    seen: dict[str, torch.Tensor] = {}

    def zero_task_loss(logits: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return 0.0 * logits.sum(dim=1)  # the task loss adds nothing: every gradient is the regulariser's

    original = m.loss

    def spy(per_sample: torch.Tensor, batch: Batch) -> torch.Tensor:
        seen["rep"] = batch.representation.detach().clone()
        return original(per_sample, batch)

    m.loss = spy  # type: ignore[method-assign]
    loss = _batch_closure(head, m, opt, x, y, g, zero_task_loss)()
    rep = seen["rep"]
    assert rep.shape == (6, 512)
    # the loss is the regulariser of that representation (recomputed here from the hook's own formula)
    if name == "end":
        expect = end_regulariser(rep, y[:, 0].long(), g, 1.0, 1.0)
    else:
        expect = m.regulariser(Batch(torch.zeros(6, 1), y, g, rep))
    assert float(loss.detach()) == pytest.approx(float(expect.detach()), rel=1e-5)
    # its gradient reaches LoRA (B, as A's gradient is zero while B is), not the base nor the output layer
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in lora.items() if "lora_B" in n)
    assert head.linear.weight.grad is not None and float(head.linear.weight.grad.abs().sum()) == 0.0
    if name == "lnl":  # the bias predictor trains too (its cross-entropy)
        assert m.predictor is not None
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in m.predictor.parameters()
                   if p.dim() > 1)
