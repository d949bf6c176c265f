"""Checkpoint-layout tests of the 2025-26 cards: a file with exactly the official release's keys, shapes and container
goes through the card's loader (`--weights PATH`) with every key consumed and none invented; a truncated or foreign
file is refused in one line naming its first missing or unexpected key.

Layouts come from the official classes built with each release's published config (timm / transformers / the sam2
package: the library that wrote the file, or the authors' training code in ckpt_layouts.py), never from our loaders.
Large ViTs are checked on the meta device (no memory, no init): the loader's strict key check is the same; the
tensors are assigned, so a stand-in's value is read back from the parameter it landed on.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import ckpt_layouts as L
import pytest
import torch

from fairmedbench.errors import InputError
from fairmedbench.registry.models import MODELS, get_card, load_model
from fairmedbench.registry.models.card import loader_function
from fairmedbench.registry.models.runtime import FoundationModel
from fairmedbench.registry.models.weights import resolve_weights

SLOW = [pytest.mark.slow, pytest.mark.skipif(not os.environ.get("FMB_RUN_SLOW"),
                                             reason="full-size build on CPU; FMB_RUN_SLOW=1 runs it")]


def _timm(arch: str, **kwargs: Any) -> L.Layout:
    import timm

    return L.library_layout(lambda: timm.create_model(arch, pretrained=False, **kwargs))


def _swiglu() -> Any:
    from timm.layers import SwiGLUPacked

    return SwiGLUPacked


# The hub's published timm kwargs of each release (README / config.json), the classifier head removed as the
# releases ship (num_classes 0).
def uni2_h() -> L.Layout:
    """MahmoodLab/UNI2-h README timm_kwargs."""
    return _timm("vit_huge_patch14_224", img_size=224, patch_size=14, depth=24, num_heads=24, init_values=1e-5,
                 embed_dim=1536, mlp_ratio=2.66667 * 2, num_classes=0, no_embed_class=True, mlp_layer=_swiglu(),
                 act_layer=torch.nn.SiLU, reg_tokens=8, dynamic_img_size=True)


def virchow2() -> L.Layout:
    """paige-ai/Virchow2 config.json model_args, with the README's mlp_layer / act_layer."""
    return _timm("vit_huge_patch14_224", img_size=224, init_values=1e-5, num_classes=0, mlp_ratio=5.3375,
                 global_pool="", dynamic_img_size=True, reg_tokens=4, mlp_layer=_swiglu(), act_layer=torch.nn.SiLU)


def prov_gigapath() -> L.Layout:
    """prov-gigapath/prov-gigapath config.json: vit_giant_patch14_dinov2 with patch 16 at 224 px."""
    return _timm("vit_giant_patch14_dinov2", img_size=224, in_chans=3, patch_size=16, embed_dim=1536, depth=40,
                 num_heads=24, init_values=1e-5, mlp_ratio=5.33334, num_classes=0)


def aimv2_large() -> L.Layout:
    """timm/aimv2_large_patch14_224.apple_pt model.safetensors (no head: num_classes 0 in its pretrained cfg)."""
    return _timm("aimv2_large_patch14_224", num_classes=0)


def _save_bin(tmp_path: Path, name: str, state: dict[str, torch.Tensor] | dict[str, Any]) -> Path:
    path = tmp_path / name
    torch.save(state, path)
    return path


def _save_safetensors(path: Path, state: dict[str, torch.Tensor]) -> Path:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in state.items()}, str(path), metadata={"format": "pt"})
    return path


def _hf_folder(tmp_path: Path, name: str, config: dict[str, Any], layout: L.Layout) -> tuple[Path, dict]:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    state = L.tensors(layout)
    _save_safetensors(folder / "model.safetensors", state)
    return folder, state


def _dinov3(size: str) -> tuple[dict[str, Any], L.Layout]:
    from transformers import DINOv3ViTConfig, DINOv3ViTModel

    from fairmedbench.registry.models.hf_zoo import DINOV3_CONFIGS

    config = {"architectures": ["DINOv3ViTModel"], "model_type": "dinov3_vit", **DINOV3_CONFIGS[size]}
    return config, L.hf_layout(DINOv3ViTModel, DINOv3ViTConfig, config)


def _retfound_dinov2_teacher(chunked: bool) -> L.Layout:
    """facebookresearch/dinov2 train/ssl_meta_arch.py teacher of a ViT-L/14 at 224 px: backbone.* (mask token,
    layer scale; blocks.<chunk>.<i> with block_chunks=4) and the DINO head (dinov2/layers/dino_head.py: 3-layer MLP
    2048 -> bottleneck 256, weight-normed last layer to 65536 prototypes)."""
    lay: L.Layout = {"cls_token": (1, 1, 1024), "pos_embed": (1, 257, 1024), "mask_token": (1, 1024),
                     "patch_embed.proj.weight": (1024, 3, 14, 14), "patch_embed.proj.bias": (1024,)}
    for i in range(24):
        b = f"blocks.{i // 6}.{i}" if chunked else f"blocks.{i}"
        lay.update({f"{b}.norm1.weight": (1024,), f"{b}.norm1.bias": (1024,),
                    f"{b}.attn.qkv.weight": (3072, 1024), f"{b}.attn.qkv.bias": (3072,),
                    f"{b}.attn.proj.weight": (1024, 1024), f"{b}.attn.proj.bias": (1024,),
                    f"{b}.ls1.gamma": (1024,), f"{b}.norm2.weight": (1024,), f"{b}.norm2.bias": (1024,),
                    f"{b}.mlp.fc1.weight": (4096, 1024), f"{b}.mlp.fc1.bias": (4096,),
                    f"{b}.mlp.fc2.weight": (1024, 4096), f"{b}.mlp.fc2.bias": (1024,), f"{b}.ls2.gamma": (1024,)})
    lay.update({"norm.weight": (1024,), "norm.bias": (1024,)})
    out = {f"backbone.{k}": v for k, v in lay.items()}
    out.update({"dino_head.mlp.0.weight": (2048, 1024), "dino_head.mlp.0.bias": (2048,),
                "dino_head.mlp.2.weight": (2048, 2048), "dino_head.mlp.2.bias": (2048,),
                "dino_head.mlp.4.weight": (256, 2048), "dino_head.mlp.4.bias": (256,),
                "dino_head.last_layer.weight_g": (65536, 1), "dino_head.last_layer.weight_v": (65536, 256)})
    return out


def medgemma_shards(folder: Path) -> dict[str, torch.Tensor]:
    """google/medgemma-4b-it: Gemma3ForConditionalGeneration in two safetensors shards; the vision tower is
    transformers' SiglipVisionModel (896 px, no head) under `vision_tower.`, beside the language model and the
    multimodal projector (a few of their keys stand in for the 4B parameters)."""
    from transformers import SiglipVisionConfig, SiglipVisionModel

    from fairmedbench.registry.models.hf_zoo import MEDGEMMA_VISION

    tower = L.library_layout(lambda: SiglipVisionModel(SiglipVisionConfig(**MEDGEMMA_VISION)))
    # transformers 5's SiglipVisionModel drops its own `vision_model.` prefix from state_dict(); the release has it
    vision = L.tensors({f"vision_tower.vision_model.{k.removeprefix('vision_model.')}": v for k, v in tower.items()})
    other = L.tensors({"multi_modal_projector.mm_input_projection_weight": (1152, 2560),
                       "multi_modal_projector.mm_soft_emb_norm.weight": (1152,),
                       "language_model.model.embed_tokens.weight": (262208, 2560),
                       "language_model.model.norm.weight": (2560,)})
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["Gemma3ForConditionalGeneration"],
                                                    "model_type": "gemma3"}))
    keys = sorted(vision)
    _save_safetensors(folder / "model-00001-of-00002.safetensors",
                      {**{k: vision[k] for k in keys[: len(keys) // 2]}, **other})
    _save_safetensors(folder / "model-00002-of-00002.safetensors", {k: vision[k] for k in keys[len(keys) // 2:]})
    return vision


def sam2_layout(config: str) -> L.Layout:
    """The sam2 package's own SAM2Base built from its config file, as build_sam2 does."""
    import sam2
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(Path(sam2.__file__).parent / "configs" / config).model
    model = instantiate(cfg, _recursive_=True)  # on CPU: Hiera reads tensor values while it is built
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


# name -> (writes the official file(s) into tmp_path and returns (path, {checkpoint key -> tensor}), a key whose
# value must land on the named parameter: (checkpoint key, model key))
def _files() -> dict[str, Any]:
    def bare(layout_fn: Any, filename: str) -> Any:
        return lambda tmp: (lambda st: (_save_bin(tmp, filename, st), st))(L.tensors(layout_fn()))

    def dinov3(size: str) -> Any:
        def write(tmp: Path) -> tuple[Path, dict]:
            config, layout = _dinov3(size)
            return _hf_folder(tmp, f"dinov3-{size}", config, layout)
        return write

    def siglip2(tmp: Path) -> tuple[Path, dict]:
        from transformers import SiglipConfig, SiglipModel

        config = {"architectures": ["SiglipModel"], "model_type": "siglip",
                  "text_config": {"model_type": "siglip_text_model", "vocab_size": 256000},
                  "vision_config": {"model_type": "siglip_vision_model"}}
        return _hf_folder(tmp, "siglip2", config, L.hf_layout(SiglipModel, SiglipConfig, config))

    def retfound_mae(tmp: Path) -> tuple[Path, dict]:
        state = L.tensors(L.mae_vit(1024, 24))
        return _save_bin(tmp, "RETFound_mae_natureCFP.pth", {"model": state}), state

    def retfound_dinov2(tmp: Path) -> tuple[Path, dict]:
        state = L.tensors(_retfound_dinov2_teacher(chunked=False))
        return _save_bin(tmp, "RETFound_dinov2_meh.pth", {"teacher": state}), state

    def medgemma(tmp: Path) -> tuple[Path, dict]:
        return tmp / "medgemma-4b-it", medgemma_shards(tmp / "medgemma-4b-it")

    def sam2(short: str) -> Any:
        def write(tmp: Path) -> tuple[Path, dict]:
            state = L.tensors(sam2_layout(f"sam2.1/sam2.1_hiera_{short}.yaml"))
            return _save_bin(tmp, f"sam2.1_hiera_{short}.pt", {"model": state}), state
        return write

    def aimv2(tmp: Path) -> tuple[Path, dict]:
        state = L.tensors(aimv2_large())
        return _save_safetensors(tmp / "model.safetensors", state), state

    return {
        "dinov3-vits16": (dinov3("vits16"), "model.layer.11.mlp.down_proj.weight"),
        "dinov3-vitb16": (dinov3("vitb16"), "embeddings.register_tokens"),
        "dinov3-vitl16": (dinov3("vitl16"), "model.layer.23.layer_scale2.lambda1"),
        "siglip2": (siglip2, "text_model.embeddings.token_embedding.weight"),
        "aimv2-large": (aimv2, "blocks.23.mlp.fc1_g.weight"),
        "retfound-mae": (retfound_mae, "blocks.23.attn.qkv.bias"),
        "retfound-dinov2": (retfound_dinov2, ("backbone.blocks.23.ls2.gamma", "blocks.23.ls2.gamma")),
        "uni2-h": (bare(uni2_h, "pytorch_model.bin"), "reg_token"),
        "virchow2": (bare(virchow2, "pytorch_model.bin"), "blocks.31.mlp.fc2.weight"),
        "prov-gigapath": (bare(prov_gigapath, "pytorch_model.bin"), "blocks.39.ls2.gamma"),
        "chexzero": (bare(lambda: L.openai_clip_vit_b(32), "best_64_5e-05_original_22000_0.864.pt"),
                     "visual.proj"),
        "medgemma-vision": (medgemma, ("vision_tower.vision_model.encoder.layers.26.mlp.fc2.weight",
                                       "vision_model.encoder.layers.26.mlp.fc2.weight")),
        "sam2.1-hiera-t": (sam2("t"), "sam_mask_decoder.conv_s1.weight"),
        "sam2.1-hiera-s": (sam2("s"), "image_encoder.trunk.blocks.15.mlp.layers.1.weight"),
        "sam2.1-hiera-b+": (sam2("b+"), "image_encoder.trunk.blocks.23.attn.qkv.weight"),
        "sam2.1-hiera-l": (sam2("l"), "image_encoder.trunk.blocks.47.attn.qkv.weight"),
    }


FILES = _files()
NEW_CARDS = sorted(FILES)
# Tens of seconds on 2 cores: SAM 2.1 b+/l built for real; MedGemma's 896-px tower written to safetensors in full
BIG = {"sam2.1-hiera-b+", "sam2.1-hiera-l", "medgemma-vision"}
# Built for real, not on meta: open_clip's create_model moves the model itself (CheXzero, ViT-B/32); SAM 2's Hiera
# reads tensor values while it is built; transformers' from_pretrained refuses the meta device (hub folders).
CPU_BUILT = {"chexzero", "sam2.1-hiera-t", "sam2.1-hiera-s", "sam2.1-hiera-b+", "sam2.1-hiera-l"}


def _load_on_meta(name: str, path: Path | str) -> FoundationModel:
    """The card's loader on the meta device (before any .to()): strict key check, tensors assigned, nothing
    allocated."""
    card = get_card(name)
    if name in CPU_BUILT or (Path(path) / "config.json").is_file() and not name.startswith("medgemma"):
        return loader_function(card)(card, resolve_weights(card, str(path)))
    with torch.device("meta"):
        return loader_function(card)(card, resolve_weights(card, str(path)))


def _first(model: FoundationModel, key: str) -> float:
    state = model.module.state_dict()
    if key not in state:  # transformers 5's SiglipVisionModel names its keys without `vision_model.`
        key = key.removeprefix("vision_model.")
    return float(state[key].reshape(-1)[0])


def _cards() -> list[Any]:
    return [pytest.param(n, marks=SLOW) if n in BIG else n for n in NEW_CARDS]


@pytest.mark.parametrize("name", _cards())
def test_official_checkpoint_loads_every_key(tmp_path: Path, name: str) -> None:
    write, probe = FILES[name]
    path, state = write(tmp_path)
    ckpt_key, model_key = probe if isinstance(probe, tuple) else (probe, probe)
    model = _load_on_meta(name, path)
    assert _first(model, model_key) == float(state[ckpt_key].reshape(-1)[0])  # landed on its own parameter


@pytest.mark.parametrize("name", _cards())
def test_truncated_or_foreign_checkpoint_names_its_first_bad_key_in_one_line(tmp_path: Path, name: str) -> None:
    write, _ = FILES[name]
    _, state = write(tmp_path)
    own = sorted(_load_on_meta(name, "random").module.state_dict())
    dropped = own[0]  # the first key the architecture needs, in sorted order
    tower = f"vision_tower.vision_model.{dropped.removeprefix('vision_model.')}"
    ckpt_key = next(k for k in state if k in (dropped, f"backbone.{dropped}", tower))
    truncated = {k: v for k, v in state.items() if k != ckpt_key}
    prefix = "vision_tower.vision_model." if name == "medgemma-vision" else ""  # the tower's published prefix
    truncated[f"{prefix}blocks.99.invented.weight"] = torch.zeros(2)
    bad = _save_bin(tmp_path, "truncated.pth", truncated)
    with pytest.raises(InputError) as err:
        _load_on_meta(name, bad)
    msg = str(err.value)
    assert "\n" not in msg
    assert f"missing keys (1): {dropped};" in msg
    assert "unexpected keys (1): " in msg and "blocks.99.invented.weight;" in msg


def test_retfound_dinov2_chunked_teacher_loads(tmp_path: Path) -> None:
    """DINOv2's trainer with block_chunks=4 names blocks `blocks.<chunk>.<i>`: the same weights, unchunked."""
    state = L.tensors(_retfound_dinov2_teacher(chunked=True))
    assert "backbone.blocks.3.23.ls2.gamma" in state
    model = _load_on_meta("retfound-dinov2", _save_bin(tmp_path, "teacher.pth", {"teacher": state}))
    assert _first(model, "blocks.23.ls2.gamma") == float(state["backbone.blocks.3.23.ls2.gamma"][0])


def test_retfound_dinov2_teacher_at_518_px_is_resampled_to_224(tmp_path: Path) -> None:
    """A teacher that kept DINOv2 LVD-142M's 37 x 37 grid (1 + 1369 positions) loads at 224 px (16 x 16) with its
    [CLS] position kept and the patch grid resampled, as RETFound's interpolate_pos_embed does; the hand case:
    a constant grid stays constant under bicubic resampling."""
    state = L.tensors(_retfound_dinov2_teacher(chunked=False))
    pos = torch.full((1, 1 + 37 * 37, 1024), 0.25)
    pos[:, 0] = 3.0
    state["backbone.pos_embed"] = pos
    model = _load_on_meta("retfound-dinov2", _save_bin(tmp_path, "teacher518.pth", {"teacher": state}))
    got = model.module.state_dict()["pos_embed"]
    assert tuple(got.shape) == (1, 257, 1024)
    assert float(got[0, 0, 0]) == 3.0
    assert torch.allclose(got[0, 1:], torch.full((256, 1024), 0.25), atol=1e-6)


def test_data_parallel_module_prefix_is_stripped(tmp_path: Path) -> None:
    """A checkpoint saved from DataParallel / DDP (every key under `module.`) loads as the bare state dict."""
    state = L.tensors(L.openai_clip_vit_b(32))
    path = _save_bin(tmp_path, "chexzero-ddp.pt", {f"module.{k}": v for k, v in state.items()})
    model = _load_on_meta("chexzero", path)
    assert _first(model, "visual.proj") == float(state["visual.proj"].reshape(-1)[0])


def test_medgemma_tower_keys_map_under_both_published_prefixes() -> None:
    """The cheap sibling of MedGemma's layout test: transformers 4.5x and >= 4.52 prefixes, language model dropped."""
    from fairmedbench.registry.models.hf_zoo import _tower_key

    key_map = _tower_key("")
    for prefix in ("vision_tower.vision_model.", "model.vision_tower.vision_model."):
        assert key_map(prefix + "encoder.layers.26.mlp.fc2.weight") == "encoder.layers.26.mlp.fc2.weight"
    assert key_map("language_model.model.norm.weight") is None
    assert _tower_key("vision_model.")("vision_tower.vision_model.post_layernorm.bias") == \
        "vision_model.post_layernorm.bias"


def test_medgemma_file_without_a_vision_tower_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "not-medgemma"
    folder.mkdir()
    _save_safetensors(folder / "model.safetensors", L.tensors({"language_model.model.norm.weight": (8,)}))
    with pytest.raises(InputError, match="hold no vision tower"):
        _load_on_meta("medgemma-vision", folder)


@pytest.mark.parametrize("name", ["dinov3-vits16", "chexzero", "sam2.1-hiera-t"])
def test_small_new_models_embed_from_official_files(tmp_path: Path, name: str) -> None:
    """Full-size builds of the cheap ones: the loaded model runs and gives the card's embedding size."""
    path, state = FILES[name][0](tmp_path)
    model = load_model(name, str(path))
    key = FILES[name][1]
    assert _first(model, key) == float(state[key].reshape(-1)[0])
    size = model.card.preprocessing.size
    emb = model.encode_image(torch.zeros(1, 3, size, size))
    assert emb.shape == (1, model.card.embedding_dim)


@pytest.mark.parametrize("name", [pytest.param(n, marks=SLOW) for n in ("virchow2", "uni2-h", "retfound-mae")])
def test_large_new_models_embed_from_official_files(tmp_path: Path, name: str) -> None:
    path, _ = FILES[name][0](tmp_path)
    model = load_model(name, str(path))
    emb = model.encode_image(torch.zeros(1, 3, 224, 224))
    assert emb.shape == (1, model.card.embedding_dim)


def test_gated_and_unbuildable_cards_say_what_to_do() -> None:
    from fairmedbench.benchmark.models import describe_model

    uni = describe_model("uni2-h")["what_to_do"]
    assert "accept the UNI2 terms" in uni and "huggingface.co/MahmoodLab/UNI2-h" in uni
    for name, install in (("conch", "pip install git+https://github.com/Mahmoodlab/CONCH.git"),
                          ("sam3", "pip install sam3")):
        card = describe_model(name)
        assert card["available"] is False and card["what_to_do"].startswith("Not available in this version")
        assert install in card["what_to_do"]
    assert describe_model("chexzero")["what_to_do"] == ""
    # the usages each card serves follow its capabilities: prompted segmentation only for the segmenters
    assert "sam-prompt" in describe_model("sam2.1-hiera-l")["usages"]
    assert "lp" in describe_model("uni2-h")["usages"] and "sam-prompt" not in describe_model("uni2-h")["usages"]
    assert "clip-zs" in describe_model("chexzero")["usages"]


def test_every_new_available_card_has_a_layout_test() -> None:
    new = {n for n in MODELS.names() if MODELS.get(n).loader.split(":")[0].rsplit(".", 1)[-1]
           in ("timm_zoo", "hf_zoo", "sam2_family")} | {"siglip2", "chexzero"}
    assert {n for n in new if MODELS.get(n).available} == set(NEW_CARDS)
