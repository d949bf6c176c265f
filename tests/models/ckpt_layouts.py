"""Official checkpoint layouts (key -> shape), written from each release's own training code.

Each builder names its source repository and file. The tensors are cheap stand-ins: a 0-d value expanded to the
official shape (torch.save stores one element), filled with a per-key number so a test can check that a tensor
landed on the right parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

Layout = dict[str, tuple[int, ...]]


def tensors(layout: Layout, prefix: str = "") -> dict[str, torch.Tensor]:
    """Stand-in tensors of the layout's shapes; key number i is filled with float(i)."""
    out: dict[str, torch.Tensor] = {}
    for i, (key, shape) in enumerate(layout.items()):
        base = torch.tensor(0 if key.endswith("num_batches_tracked") else float(i))
        out[prefix + key] = base.expand(shape) if shape else base
    return out


def _ln(name: str, dim: int) -> Layout:
    return {f"{name}.weight": (dim,), f"{name}.bias": (dim,)}


def _lin(name: str, out: int, inp: int, bias: bool = True) -> Layout:
    return {f"{name}.weight": (out, inp), **({f"{name}.bias": (out,)} if bias else {})}


def _bn(name: str, dim: int) -> Layout:
    return {f"{name}.weight": (dim,), f"{name}.bias": (dim,), f"{name}.running_mean": (dim,),
            f"{name}.running_var": (dim,), f"{name}.num_batches_tracked": ()}


# --- SAM family: facebookresearch/segment-anything segment_anything/modeling/{image_encoder,prompt_encoder,
# mask_decoder,transformer,common}.py; SAM-Med2D's Adapter_Layer: OpenGVLab/SAM-Med2D
# segment_anything/modeling/image_encoder.py; LVM-Med: duyhominhnguyen/LVM-Med segment_anything/our_vit.py.

def sam_image_encoder(img_size: int = 1024, dim: int = 768, depth: int = 12, heads: int = 12,
                      global_idx: Iterable[int] = (2, 5, 8, 11), abs_pos: bool = True,
                      adapters: bool = False) -> Layout:
    """ImageEncoderViT(patch 16, window 14, rel pos, neck 256) and SAM-Med2D's per-block Adapter."""
    tokens, head_dim = img_size // 16, dim // heads
    lay: Layout = {"patch_embed.proj.weight": (dim, 3, 16, 16), "patch_embed.proj.bias": (dim,)}
    if abs_pos:
        lay["pos_embed"] = (1, tokens, tokens, dim)
    for i in range(depth):
        b = f"blocks.{i}"
        span = tokens if i in set(global_idx) else 14
        lay.update(_ln(f"{b}.norm1", dim))
        lay[f"{b}.attn.rel_pos_h"] = (2 * span - 1, head_dim)
        lay[f"{b}.attn.rel_pos_w"] = (2 * span - 1, head_dim)
        lay.update(_lin(f"{b}.attn.qkv", 3 * dim, dim))
        lay.update(_lin(f"{b}.attn.proj", dim, dim))
        lay.update(_ln(f"{b}.norm2", dim))
        lay.update(_lin(f"{b}.mlp.lin1", 4 * dim, dim))
        lay.update(_lin(f"{b}.mlp.lin2", dim, 4 * dim))
        if adapters:  # Adapter_Layer(embed_dim, mlp_ratio=0.25)
            lay.update(_ln(f"{b}.Adapter.norm", dim))
            lay[f"{b}.Adapter.channel.0.weight"] = (dim // 4, dim)
            lay[f"{b}.Adapter.channel.2.weight"] = (dim, dim // 4)
            lay[f"{b}.Adapter.spatial.0.weight"] = (dim, dim, 3, 3)  # Conv2d(k3, s2)
            lay[f"{b}.Adapter.spatial.2.weight"] = (dim, dim, 4, 4)  # ConvTranspose2d(k4, s2): (in, out, k, k)
    lay["neck.0.weight"] = (256, dim, 1, 1)
    lay.update(_ln("neck.1", 256))
    lay["neck.2.weight"] = (256, 256, 3, 3)
    lay.update(_ln("neck.3", 256))
    return lay


def sam_prompt_encoder() -> Layout:
    """PromptEncoder(embed_dim=256, mask_in_chans=16)."""
    lay: Layout = {"pe_layer.positional_encoding_gaussian_matrix": (2, 128)}
    for i in range(4):
        lay[f"point_embeddings.{i}.weight"] = (1, 256)
    lay["not_a_point_embed.weight"] = (1, 256)
    lay.update({"mask_downscaling.0.weight": (4, 1, 2, 2), "mask_downscaling.0.bias": (4,)})
    lay.update(_ln("mask_downscaling.1", 4))
    lay.update({"mask_downscaling.3.weight": (16, 4, 2, 2), "mask_downscaling.3.bias": (16,)})
    lay.update(_ln("mask_downscaling.4", 16))
    lay.update({"mask_downscaling.6.weight": (256, 16, 1, 1), "mask_downscaling.6.bias": (256,)})
    lay["no_mask_embed.weight"] = (1, 256)
    return lay


def _attention(name: str, internal: int) -> Layout:
    lay: Layout = {}
    for proj in ("q_proj", "k_proj", "v_proj"):
        lay.update(_lin(f"{name}.{proj}", internal, 256))
    lay.update(_lin(f"{name}.out_proj", 256, internal))
    return lay


def _mlp(name: str, dims: list[int]) -> Layout:
    lay: Layout = {}
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        lay.update(_lin(f"{name}.layers.{i}", b, a))
    return lay


def sam_mask_decoder() -> Layout:
    """MaskDecoder(TwoWayTransformer(depth 2, 256, mlp 2048, 8 heads), 3 multimask outputs, IoU head depth 3)."""
    lay: Layout = {}
    for i in range(2):
        t = f"transformer.layers.{i}"
        lay.update(_attention(f"{t}.self_attn", 256))
        lay.update(_ln(f"{t}.norm1", 256))
        lay.update(_attention(f"{t}.cross_attn_token_to_image", 128))  # attention_downsample_rate 2
        lay.update(_ln(f"{t}.norm2", 256))
        lay.update(_lin(f"{t}.mlp.lin1", 2048, 256))
        lay.update(_lin(f"{t}.mlp.lin2", 256, 2048))
        lay.update(_ln(f"{t}.norm3", 256))
        lay.update(_ln(f"{t}.norm4", 256))
        lay.update(_attention(f"{t}.cross_attn_image_to_token", 128))
    lay.update(_attention("transformer.final_attn_token_to_image", 128))
    lay.update(_ln("transformer.norm_final_attn", 256))
    lay["iou_token.weight"] = (1, 256)
    lay["mask_tokens.weight"] = (4, 256)
    lay.update({"output_upscaling.0.weight": (256, 64, 2, 2), "output_upscaling.0.bias": (64,)})
    lay.update(_ln("output_upscaling.1", 64))
    lay.update({"output_upscaling.3.weight": (64, 32, 2, 2), "output_upscaling.3.bias": (32,)})
    for i in range(4):
        lay.update(_mlp(f"output_hypernetworks_mlps.{i}", [256, 256, 256, 32]))
    lay.update(_mlp("iou_prediction_head", [256, 256, 256, 4]))
    return lay


def sam(img_size: int = 1024, adapters: bool = False) -> Layout:
    """A whole Sam model's state dict (pixel_mean/std are non-persistent buffers, not saved)."""
    lay: Layout = {}
    for prefix, part in (("image_encoder.", sam_image_encoder(img_size, adapters=adapters)),
                         ("prompt_encoder.", sam_prompt_encoder()), ("mask_decoder.", sam_mask_decoder())):
        lay.update({prefix + k: v for k, v in part.items()})
    return lay


# --- ResNet-18: torchvision/models/resnet.py (MoCo-CXR's encoders); C2L's models/resnet_mixup.py uses the same
# names (conv1, bn1, layerN.M.{conv1,bn1,conv2,bn2,downsample.0/1}, fc).

def resnet18(fc: Layout | None = None) -> Layout:
    """torchvision-named ResNet-18 with the given `fc` keys (the classifier or projection head)."""
    lay: Layout = {"conv1.weight": (64, 3, 7, 7), **_bn("bn1", 64)}
    inp = 64
    for stage, width in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            b = f"layer{stage}.{block}"
            lay[f"{b}.conv1.weight"] = (width, inp if block == 0 else width, 3, 3)
            lay.update(_bn(f"{b}.bn1", width))
            lay[f"{b}.conv2.weight"] = (width, width, 3, 3)
            lay.update(_bn(f"{b}.bn2", width))
            if block == 0 and stage > 1:
                lay[f"{b}.downsample.0.weight"] = (width, inp, 1, 1)
                lay.update(_bn(f"{b}.downsample.1", width))
        inp = width
    lay.update(fc if fc is not None else _lin("fc", 1000, 512))
    return lay


def moco_cxr_state() -> dict[str, torch.Tensor]:
    """stanfordmlgroup/MoCo-CXR moco_pretraining/moco/moco/builder.py, MoCo v2 (--mlp: fc = Linear, ReLU,
    Linear to dim 128), K=24576, DDP-wrapped (`module.`) as main_moco.py saves model.state_dict()."""
    head = {**_lin("fc.0", 512, 512), **_lin("fc.2", 128, 512)}
    lay: Layout = {}
    for enc in ("encoder_q", "encoder_k"):
        lay.update({f"{enc}.{k}": v for k, v in resnet18(head).items()})
    lay.update({"queue": (128, 24576), "queue_ptr": (1,)})
    return tensors(lay, prefix="module.")


def c2l_state() -> dict[str, torch.Tensor]:
    """funnyzhou/C2L_MICCAI2020 models/resnet_mixup.py InsResNet18: `encoder` = DataParallel(resnet18(low_dim=128))."""
    return tensors(resnet18(_lin("fc", 128, 512)), prefix="encoder.module.")


# --- timm ViT-B/16 and the MAE decoder: lambert-x/medical_mae models_mae.py (MaskedAutoencoderViT built from
# timm's PatchEmbed and Block; mae_vit_base_patch16 = decoder 512-d, 8 blocks, 16 heads).

def _timm_blocks(prefix: str, depth: int, dim: int) -> Layout:
    lay: Layout = {}
    for i in range(depth):
        b = f"{prefix}.{i}"
        lay.update(_ln(f"{b}.norm1", dim))
        lay.update(_lin(f"{b}.attn.qkv", 3 * dim, dim))
        lay.update(_lin(f"{b}.attn.proj", dim, dim))
        lay.update(_ln(f"{b}.norm2", dim))
        lay.update(_lin(f"{b}.mlp.fc1", 4 * dim, dim))
        lay.update(_lin(f"{b}.mlp.fc2", dim, 4 * dim))
    return lay


def mae_vit_b() -> Layout:
    """MaskedAutoencoderViT(img 224, patch 16, 768-d x 12, decoder 512-d x 8)."""
    return mae_vit(768, 12)


def mae_vit(dim: int, depth: int) -> Layout:
    """MaskedAutoencoderViT(img 224, patch 16, dim x depth, decoder 512-d x 8): mae_vit_base_patch16 (768, 12) and
    mae_vit_large_patch16 (1024, 24), the latter RETFound-MAE's (rmaphoh/RETFound_MAE models_mae.py)."""
    lay: Layout = {"cls_token": (1, 1, dim), "pos_embed": (1, 197, dim),
                   "patch_embed.proj.weight": (dim, 3, 16, 16), "patch_embed.proj.bias": (dim,)}
    lay.update(_timm_blocks("blocks", depth, dim))
    lay.update(_ln("norm", dim))
    lay.update(_lin("decoder_embed", 512, dim))
    lay.update({"mask_token": (1, 1, 512), "decoder_pos_embed": (1, 197, 512)})
    lay.update(_timm_blocks("decoder_blocks", 8, 512))
    lay.update(_ln("decoder_norm", 512))
    lay.update(_lin("decoder_pred", 16 * 16 * 3, 512))
    return lay


# --- MedCLIP: RyanWangZf/MedCLIP medclip/modeling_medclip.py (MedCLIPModel with MedCLIPVisionModelViT), towers
# from transformers of its time (4.2x): microsoft/swin-tiny-patch4-window7-224 (SwinModel, old parameter names,
# persistent relative_position_index) and emilyalsentzer/Bio_ClinicalBERT (BertModel with pooler,
# persistent position_ids).

def swin_tiny_legacy() -> Layout:
    """transformers 4.2x SwinModel keys for swin-tiny (depths 2,2,6,2; heads 3,6,12,24; window 7)."""
    lay: Layout = {"embeddings.patch_embeddings.projection.weight": (96, 3, 4, 4),
                   "embeddings.patch_embeddings.projection.bias": (96,), **_ln("embeddings.norm", 96)}
    for stage, (depth, heads) in enumerate(zip((2, 2, 6, 2), (3, 6, 12, 24))):
        dim = 96 * 2 ** stage
        for j in range(depth):
            b = f"encoder.layers.{stage}.blocks.{j}"
            lay.update(_ln(f"{b}.layernorm_before", dim))
            lay[f"{b}.attention.self.relative_position_bias_table"] = (169, heads)
            lay[f"{b}.attention.self.relative_position_index"] = (49, 49)
            for proj in ("query", "key", "value"):
                lay.update(_lin(f"{b}.attention.self.{proj}", dim, dim))
            lay.update(_lin(f"{b}.attention.output.dense", dim, dim))
            lay.update(_ln(f"{b}.layernorm_after", dim))
            lay.update(_lin(f"{b}.intermediate.dense", 4 * dim, dim))
            lay.update(_lin(f"{b}.output.dense", dim, 4 * dim))
        if stage < 3:
            lay[f"encoder.layers.{stage}.downsample.reduction.weight"] = (2 * dim, 4 * dim)
            lay.update(_ln(f"encoder.layers.{stage}.downsample.norm", 4 * dim))
    lay.update(_ln("layernorm", 768))
    return lay


def bert_base_legacy(vocab: int = 28996) -> Layout:
    """transformers 4.2x BertModel keys (12 layers, 768-d, with pooler and the position_ids buffer)."""
    lay: Layout = {"embeddings.position_ids": (1, 512), "embeddings.word_embeddings.weight": (vocab, 768),
                   "embeddings.position_embeddings.weight": (512, 768),
                   "embeddings.token_type_embeddings.weight": (2, 768), **_ln("embeddings.LayerNorm", 768)}
    for i in range(12):
        b = f"encoder.layer.{i}"
        for proj in ("query", "key", "value"):
            lay.update(_lin(f"{b}.attention.self.{proj}", 768, 768))
        lay.update(_lin(f"{b}.attention.output.dense", 768, 768))
        lay.update(_ln(f"{b}.attention.output.LayerNorm", 768))
        lay.update(_lin(f"{b}.intermediate.dense", 3072, 768))
        lay.update(_lin(f"{b}.output.dense", 768, 3072))
        lay.update(_ln(f"{b}.output.LayerNorm", 768))
    lay.update(_lin("pooler.dense", 768, 768))
    return lay


def medclip() -> Layout:
    """MedCLIPModel.state_dict(): vision_model.{model, projection_head}, text_model.{model, projection_head},
    logit_scale."""
    lay: Layout = {f"vision_model.model.{k}": v for k, v in swin_tiny_legacy().items()}
    lay["vision_model.projection_head.weight"] = (512, 768)
    lay.update({f"text_model.model.{k}": v for k, v in bert_base_legacy().items()})
    lay["text_model.projection_head.weight"] = (512, 768)
    lay["logit_scale"] = ()
    return lay


# --- OpenAI CLIP: openai/CLIP clip/model.py (VisionTransformer + text Transformer; the names open_clip keeps in
# the hub file open_clip_pytorch_model.bin of timm/vit_base_patch{32,16}_clip_224.openai).

def _resblocks(prefix: str, layers: int, width: int) -> Layout:
    lay: Layout = {}
    for i in range(layers):
        b = f"{prefix}.resblocks.{i}"
        lay[f"{b}.attn.in_proj_weight"] = (3 * width, width)
        lay[f"{b}.attn.in_proj_bias"] = (3 * width,)
        lay.update(_lin(f"{b}.attn.out_proj", width, width))
        lay.update(_ln(f"{b}.ln_1", width))
        lay.update(_lin(f"{b}.mlp.c_fc", 4 * width, width))
        lay.update(_lin(f"{b}.mlp.c_proj", width, 4 * width))
        lay.update(_ln(f"{b}.ln_2", width))
    return lay


def openai_clip_vit_b(patch: int) -> Layout:
    """CLIP ViT-B/`patch` at 224 px: 768-d x 12 vision, 512-d x 12 text, 512-d joint space."""
    grid = 224 // patch
    lay: Layout = {"positional_embedding": (77, 512), "text_projection": (512, 512), "logit_scale": (),
                   "visual.class_embedding": (768,), "visual.positional_embedding": (grid * grid + 1, 768),
                   "visual.proj": (768, 512), "visual.conv1.weight": (768, 3, patch, patch)}
    lay.update(_ln("visual.ln_pre", 768))
    lay.update(_resblocks("visual.transformer", 12, 768))
    lay.update(_ln("visual.ln_post", 768))
    lay.update(_resblocks("transformer", 12, 512))
    lay["token_embedding.weight"] = (49408, 512)
    lay.update(_ln("ln_final", 512))
    return lay


# --- DINOv2 ViT-B/14 as released on the hub (facebook/dinov2-base: config.json + model.safetensors, written by
# transformers 4.3x's Dinov2Model, huggingface/transformers src/transformers/models/dinov2/modeling_dinov2.py).

DINOV2_BASE_CONFIG = {"architectures": ["Dinov2Model"], "model_type": "dinov2", "hidden_size": 768,
                      "num_hidden_layers": 12, "num_attention_heads": 12, "mlp_ratio": 4, "image_size": 518,
                      "patch_size": 14, "layerscale_value": 1.0, "hidden_act": "gelu", "layer_norm_eps": 1e-6,
                      "qkv_bias": True, "use_swiglu_ffn": False, "drop_path_rate": 0.0}


def dinov2_base() -> Layout:
    """Dinov2Model keys (embeddings, 12 layers with layer scale, final layernorm)."""
    lay: Layout = {"embeddings.cls_token": (1, 1, 768), "embeddings.mask_token": (1, 768),
                   "embeddings.position_embeddings": (1, 37 * 37 + 1, 768),
                   "embeddings.patch_embeddings.projection.weight": (768, 3, 14, 14),
                   "embeddings.patch_embeddings.projection.bias": (768,)}
    for i in range(12):
        b = f"encoder.layer.{i}"
        lay.update(_ln(f"{b}.norm1", 768))
        for proj in ("query", "key", "value"):
            lay.update(_lin(f"{b}.attention.attention.{proj}", 768, 768))
        lay.update(_lin(f"{b}.attention.output.dense", 768, 768))
        lay[f"{b}.layer_scale1.lambda1"] = (768,)
        lay.update(_ln(f"{b}.norm2", 768))
        lay.update(_lin(f"{b}.mlp.fc1", 3072, 768))
        lay.update(_lin(f"{b}.mlp.fc2", 768, 3072))
        lay[f"{b}.layer_scale2.lambda1"] = (768,)
    lay.update(_ln("layernorm", 768))
    return lay


# --- Releases written by a maintained library: the official module tree IS that library's class, built from the
# release's published config on the meta device (no memory, no random init) and read as key -> shape. Sources:
# huggingface/transformers src/transformers/models/{dinov2,clip,siglip,blip,blip_2}/modeling_*.py;
# pytorch/vision torchvision/models/resnet.py; huggingface/pytorch-image-models timm/models/vision_transformer.py;
# mlfoundations/open_clip src/open_clip/{model.py,timm_model.py,hf_model.py}; facebookresearch/segment-anything
# segment_anything/build_sam.py.

def library_layout(build: Callable[[], torch.nn.Module]) -> Layout:
    """Keys and shapes of `build()`'s state dict, constructed on the meta device."""
    with torch.device("meta"):
        module = build()
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


# microsoft/rad-dino: Dinov2Model ViT-B/14 at 518 px with layer scale, the tower of facebook/dinov2-base
# (RAD-DINO's model card; its config.json was not readable offline, so dinov2-base's published one stands in);
# released as config.json + model.safetensors.
RAD_DINO_CONFIG = dict(DINOV2_BASE_CONFIG)

# openai/clip-vit-base-patch32's config.json, which flaviagiammarino/pubmed-clip-vit-base-patch32 and vinid/plip
# keep (fine-tunes of it): CLIPModel, text 512-d x 12 (8 heads, MLP 2048, 77 positions, vocab 49408), vision
# 768-d x 12 (12 heads, MLP 3072, 224 px, patch 32), projection 512.
CLIP_B32_CONFIG = {
    "architectures": ["CLIPModel"], "model_type": "clip", "projection_dim": 512, "logit_scale_init_value": 2.6592,
    "text_config": {"model_type": "clip_text_model", "vocab_size": 49408, "hidden_size": 512,
                    "intermediate_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 8,
                    "max_position_embeddings": 77, "hidden_act": "quick_gelu", "projection_dim": 512,
                    "bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1},
    "vision_config": {"model_type": "clip_vision_model", "hidden_size": 768, "intermediate_size": 3072,
                      "num_hidden_layers": 12, "num_attention_heads": 12, "image_size": 224, "patch_size": 32,
                      "hidden_act": "quick_gelu", "projection_dim": 512},
}

# google/siglip-base-patch16-224 config.json: SiglipConfig's defaults (text 768-d x 12, 64 positions, vocab 32000;
# vision 768-d x 12, 224 px, patch 16, attention-pooling head).
SIGLIP_BASE_CONFIG = {"architectures": ["SiglipModel"], "model_type": "siglip",
                      "text_config": {"model_type": "siglip_text_model"},
                      "vision_config": {"model_type": "siglip_vision_model"}}

# google/medsiglip-448 config.json: SigLIP So400m/14 towers at 448 px (1152-d x 27, 16 heads, MLP 4304).
_SO400M = {"hidden_size": 1152, "intermediate_size": 4304, "num_attention_heads": 16, "num_hidden_layers": 27}
MEDSIGLIP_CONFIG = {"architectures": ["SiglipModel"], "model_type": "siglip",
                    "text_config": {"model_type": "siglip_text_model", **_SO400M, "max_position_embeddings": 64,
                                    "vocab_size": 32000, "projection_size": 1152},
                    "vision_config": {"model_type": "siglip_vision_model", **_SO400M, "image_size": 448,
                                      "patch_size": 14}}

# Salesforce/blip-itm-base-coco config.json: BlipForImageTextRetrieval, ViT-B/16 at 384 px, BERT-base text
# encoder (vocab 30524), 256-d image-text heads (BlipConfig's defaults).
BLIP_ITM_BASE_CONFIG = {"architectures": ["BlipForImageTextRetrieval"], "model_type": "blip",
                        "image_text_hidden_size": 256, "projection_dim": 512,
                        "text_config": {"model_type": "blip_text_model", "vocab_size": 30524},
                        "vision_config": {"model_type": "blip_vision_model", "image_size": 384}}

# Salesforce/blip2-itm-vit-g config.json: Blip2ForImageTextRetrieval, EVA ViT-g/14 (1408-d x 39) at 224 px,
# Q-Former (32 queries, 768-d x 12), 256-d image-text heads (Blip2Config's defaults).
BLIP2_ITM_CONFIG = {"architectures": ["Blip2ForImageTextRetrieval"], "model_type": "blip-2",
                    "num_query_tokens": 32, "image_text_hidden_size": 256,
                    "qformer_config": {"model_type": "blip_2_qformer"},
                    "vision_config": {"model_type": "blip_2_vision_model"}}

# Buffers that the transformers 4.2x versions these files were written with saved as persistent, and which
# current transformers no longer registers: a real release file carries them.
LEGACY_CLIP_BUFFERS: Layout = {"text_model.embeddings.position_ids": (1, 77),
                               "vision_model.embeddings.position_ids": (1, 50)}
LEGACY_BLIP_BUFFERS: Layout = {"text_encoder.embeddings.position_ids": (1, 512)}


def hf_layout(model_cls: Any, config_cls: Any, config: dict[str, Any]) -> Layout:
    """A transformers class's keys for a published config.json."""
    cfg = {k: v for k, v in config.items() if k not in ("architectures", "model_type")}
    return library_layout(lambda: model_cls(config_cls(**cfg)))


# --- BiomedCLIP: microsoft/BiomedCLIP-PubMedBERT_256-vit_base_patch16_224 open_clip_config.json (timm
# vit_base_patch16_224 trunk, no pool, linear projection; hf text tower BiomedBERT-base-uncased-abstract with
# the 'mlp' projection and CLS pooler), built by open_clip's CustomTextCLIP / TimmModel / HFTextEncoder.

BIOMEDCLIP_OPEN_CLIP_CONFIG = {
    "model_cfg": {
        "embed_dim": 512,
        "vision_cfg": {"timm_model_name": "vit_base_patch16_224", "timm_model_pretrained": False,
                       "timm_pool": "", "timm_proj": "linear", "image_size": 224},
        "text_cfg": {"hf_model_name": "microsoft/BiomedNLP-BiomedBERT-base-uncased-abstract",
                     "hf_tokenizer_name": "microsoft/BiomedNLP-BiomedBERT-base-uncased-abstract",
                     "hf_proj_type": "mlp", "hf_pooler_type": "cls_last_hidden_state_pooler",
                     "context_length": 256}},
    "preprocess_cfg": {"mean": [0.48145466, 0.4578275, 0.40821073], "std": [0.26862954, 0.26130258, 0.27577711]},
}
# BiomedBERT-base-uncased-abstract's config.json (BERT-base, vocab 30522).
BIOMEDBERT_CONFIG = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                     "intermediate_size": 3072, "max_position_embeddings": 512, "type_vocab_size": 2}


def biomedclip() -> Layout:
    """open_clip CustomTextCLIP state dict of BiomedCLIP, plus the BERT position_ids buffer its 2023 file holds
    (open_clip's factory.load_checkpoint deletes that key for transformers >= 4.31, confirming it is there)."""
    import open_clip
    from open_clip.hf_model import HFTextEncoder
    from transformers import BertConfig

    cfg = BIOMEDCLIP_OPEN_CLIP_CONFIG["model_cfg"]
    text = cfg["text_cfg"]

    def build() -> torch.nn.Module:
        model = open_clip.CustomTextCLIP(embed_dim=cfg["embed_dim"], vision_cfg=cfg["vision_cfg"],
                                         text_cfg={"context_length": 256, "width": 8, "heads": 1, "layers": 1})
        model.text = HFTextEncoder(text["hf_model_name"], output_dim=cfg["embed_dim"],
                                   config=BertConfig(**BIOMEDBERT_CONFIG), pooler_type=text["hf_pooler_type"],
                                   proj_type=text["hf_proj_type"])
        return model

    return {**library_layout(build), "text.transformer.embeddings.position_ids": (1, 512)}


# --- SAM ViT-L / ViT-H: facebookresearch/segment-anything segment_anything/build_sam.py (build_sam_vit_l/h).

def segment_anything(size: str) -> Layout:
    """sam_model_registry[size]() keys (pixel_mean/std are non-persistent, not in the release)."""
    from segment_anything import sam_model_registry

    return library_layout(lambda: sam_model_registry[size](checkpoint=None))


# --- MobileSAM / TinySAM: ChaoningZhang/MobileSAM mobile_sam/modeling/tiny_vit_sam.py (TinyViT-5M: dims
# 64/128/160/320, depths 2/2/6/2, heads 2/4/5/10, windows 7/7/14/7, MLP and MBConv ratio 4; build_sam_vit_t keeps
# the 1000-class ImageNet head); xinghaochen/TinySAM tinysam/modeling/tiny_vit_sam.py is the same module.
# attention_bias_idxs is registered persistent=False there, so it is not in mobile_sam.pt.

def _conv_bn(name: str, cout: int, cin_per_group: int, k: int) -> Layout:
    return {f"{name}.c.weight": (cout, cin_per_group, k, k), **_bn(f"{name}.bn", cout)}


def _patch_merging(name: str, dim: int, out: int) -> Layout:
    return {**_conv_bn(f"{name}.conv1", out, dim, 1), **_conv_bn(f"{name}.conv2", out, 1, 3),
            **_conv_bn(f"{name}.conv3", out, out, 1)}


def tinyvit_5m_sam() -> Layout:
    """Sam(image_encoder=TinyViT(img_size 1024, num_classes 1000), prompt encoder, mask decoder)."""
    dims, depths, heads, windows = (64, 128, 160, 320), (2, 2, 6, 2), (2, 4, 5, 10), (7, 7, 14, 7)
    enc: Layout = {**_conv_bn("patch_embed.seq.0", 32, 3, 3), **_conv_bn("patch_embed.seq.2", 64, 32, 3)}
    for j in range(depths[0]):  # ConvLayer of MBConv blocks (expand 4)
        b = f"layers.0.blocks.{j}"
        enc.update({**_conv_bn(f"{b}.conv1", 256, 64, 1), **_conv_bn(f"{b}.conv2", 256, 1, 3),
                    **_conv_bn(f"{b}.conv3", 64, 256, 1)})
    enc.update(_patch_merging("layers.0.downsample", 64, 128))
    for stage in range(1, 4):
        dim = dims[stage]
        for j in range(depths[stage]):
            b = f"layers.{stage}.blocks.{j}"
            enc.update(_ln(f"{b}.attn.norm", dim))
            enc.update(_lin(f"{b}.attn.qkv", 3 * dim, dim))
            enc.update(_lin(f"{b}.attn.proj", dim, dim))
            enc[f"{b}.attn.attention_biases"] = (heads[stage], windows[stage] ** 2)
            enc.update(_conv_bn(f"{b}.local_conv", dim, 1, 3))
            enc.update(_ln(f"{b}.mlp.norm", dim))
            enc.update(_lin(f"{b}.mlp.fc1", 4 * dim, dim))
            enc.update(_lin(f"{b}.mlp.fc2", dim, 4 * dim))
        if stage < 3:
            enc.update(_patch_merging(f"layers.{stage}.downsample", dim, dims[stage + 1]))
    enc.update(_ln("norm_head", 320))
    enc.update(_lin("head", 1000, 320))
    enc["neck.0.weight"] = (256, 320, 1, 1)
    enc.update(_ln("neck.1", 256))
    enc["neck.2.weight"] = (256, 256, 3, 3)
    enc.update(_ln("neck.3", 256))
    lay: Layout = {}
    for prefix, part in (("image_encoder.", enc), ("prompt_encoder.", sam_prompt_encoder()),
                         ("mask_decoder.", sam_mask_decoder())):
        lay.update({prefix + k: v for k, v in part.items()})
    return lay
