"""lora: target modules per family, gradients reach LoRA only, base weights never change, a run end to end."""

from __future__ import annotations

import numpy as np
import pytest
from fmb_usage_helpers import tiny_opts, tiny_spec

from fairmedbench.adapters import RunContext
from fairmedbench.adapters.lora import lora_settings, lora_targets, make_lora_head
from fairmedbench.benchmark.run import run
from fairmedbench.errors import InputError

FAMILIES = [  # (model, input size for a random-weight smoke test, expected LoRA leaf names)
    ("clip-vit-b32", 64, {"c_fc", "c_proj"}),  # open_clip ViT (LoRA on its nn.MultiheadAttention drifts)
    ("dinov2", 28, {"q_proj", "k_proj", "v_proj", "o_proj"}),  # transformers 5.x
    ("imagenet-vit-b16", 32, {"qkv"}),  # timm ViT
    ("litemedsam", 64, {"qkv"}),  # SAM-style TinyViT
]


def _base_state(module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items() if "lora_" not in k}


@pytest.mark.parametrize("name,size,leaves", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_lora_trains_only_lora_weights_and_leaves_the_base_unchanged(name, size, leaves) -> None:
    import torch

    from fairmedbench.registry.models import load_model

    model = load_model(name, "random", image_size=size)
    original = _base_state(model.module)
    x = torch.randn(4, 3, size, size)
    head = make_lora_head(model, RunContext(batch_size=2), lora_settings({}), 1, x.numpy())
    assert {n.split(".")[-1] for n in lora_targets(model.module)} == leaves
    lora = {n: p for n, p in head.named_parameters() if "lora_" in n}
    assert lora and all(p.requires_grad for p in lora.values())
    assert all(not p.requires_grad for n, p in head.encoder.named_parameters() if "lora_" not in n)
    before, lora_before = _base_state(head.encoder), {n: p.detach().clone() for n, p in lora.items()}
    opt = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=1e-2)
    head.train()
    for _ in range(2):  # LoRA's B starts at zero, so A's gradient is zero until B has moved once
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            head.linear(head.representation(x)), torch.tensor([[0.0], [1.0], [0.0], [1.0]]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in lora.values())
    assert all(not torch.equal(p, lora_before[n]) for n, p in lora.items())
    after = _base_state(head.encoder)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    now = _base_state(model.module)  # the loaded model is untouched (the head adapts a private copy)
    assert all(torch.equal(original[k], now[k]) for k in original)
    assert not any("lora_" in n for n, _ in model.module.named_modules())


def test_target_rules_for_transformers_clip_and_resnet() -> None:
    import torchvision
    from transformers import CLIPConfig, CLIPModel

    tiny = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
    clip = CLIPModel(CLIPConfig(text_config=tiny, vision_config={**tiny, "image_size": 32, "patch_size": 16},
                                projection_dim=8))
    names = lora_targets(clip)
    assert names and all(n.startswith("vision_model.") for n in names)  # never the text tower
    assert {n.split(".")[-1] for n in names} == {"q_proj", "k_proj", "v_proj", "out_proj"}
    resnet = torchvision.models.resnet18(weights=None)
    convs = lora_targets(resnet)
    assert "conv1" not in convs and len(convs) == 16  # block convolutions, not the stem
    assert lora_targets(resnet, ["conv2"]) == [n for n in convs if n.endswith("conv2")]
    with pytest.raises(InputError, match="lora_targets"):
        lora_targets(resnet, ["qkv"])
    with pytest.raises(InputError, match="lora_r"):
        lora_settings({"lora_r": 0})


def test_lora_runs_end_to_end_with_its_hparams(small_clip, run_dirs) -> None:
    tiny = {"n": 24, "config": {"size": 64, "split_fractions": (0.5, 0.25, 0.25)}}
    spec = tiny_spec(small_clip, "lora", dataset_options=tiny, hparams={"epochs": 2, "batch_size": 8, "lora_r": 4})
    out = run(spec, tiny_opts(run_dirs))
    doc = out.seed_docs[0]
    lora = doc["usage"]["lora"]
    assert lora["r"] == 4 and lora["alpha"] == 16 and lora["target_leaves"] == ["c_fc", "c_proj"]
    assert lora["n_target_modules"] == 24
    assert doc["usage"]["pixels"]["train"] == [12, 3, 64, 64]
    cfg = doc["training"]["config"]
    assert cfg["lr"] == 5e-4 and cfg["epochs"] == 2 and cfg["batch_size"] == 8
    assert len(doc["training"]["val_losses"]) == 2 and np.isfinite(doc["training"]["best_val_loss"])
    auc = doc["result"]["reports"][0]["metrics"]["auc"]["__overall__"]["value"]
    assert auc is None or 0.0 <= auc <= 1.0
