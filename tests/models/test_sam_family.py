"""SAM-family checkpoints other than LiteMedSAM: published extras (TinyViT classifier head) are tolerated."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from fairmedbench.registry.models import get_card, load_model
from fairmedbench.registry.models.sam import load_sam_family
from fairmedbench.registry.models.weights import resolve_weights


def test_mobilesam_style_checkpoint_with_classifier_head_loads(tmp_path: Path) -> None:
    src = load_model("mobilesam", "random", image_size=256, fuse=False)
    state = dict(src.module.state_dict())
    state["image_encoder.norm_head.weight"] = torch.ones(320)
    state["image_encoder.head.weight"] = torch.zeros(1000, 320)
    path = tmp_path / "mobile_sam_like.pt"
    torch.save(state, path)
    card = get_card("mobilesam")

    small = dataclasses.replace(card, preprocessing=dataclasses.replace(card.preprocessing, size=256))
    loaded = load_sam_family(small, resolve_weights(small, str(path)), fuse=False)
    key = "image_encoder.layers.1.blocks.0.attn.qkv.weight"
    assert torch.equal(loaded.module.state_dict()[key], state[key])


def test_tinysam_always_keeps_the_best_of_its_three_multimask_outputs() -> None:
    """xinghaochen/TinySAM tinysam/modeling/mask_decoder.py returns masks[:, 1:] only and demo.py keeps
    masks[scores.argmax()]: a box prompt must not read SAM's single-mask token 0, untrained in TinySAM."""
    model = load_model("tinysam", "random", image_size=64)
    emb = model.module.image_encoder(torch.zeros(1, 3, 64, 64))
    box = torch.tensor([[[8.0, 8.0, 40.0, 40.0]]])
    sparse, dense = model.module.prompt_encoder(points=None, boxes=box, masks=None)
    pe = model.module.prompt_encoder.get_dense_pe()
    with torch.no_grad():
        low_res, iou = model.module.mask_decoder(image_embeddings=emb, image_pe=pe, sparse_prompt_embeddings=sparse,
                                                 dense_prompt_embeddings=dense, multimask_output=True)
    best = int(iou[0].argmax())
    assert torch.equal(model.decode(emb, box, multimask=False), low_res[:, best:best + 1])
