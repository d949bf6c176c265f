"""The foundation models of 2025-26: general vision (DINOv3, SigLIP 2, AIMv2), retina (RETFound), pathology (UNI2-h,
Virchow2, Prov-GigaPath, CONCH), radiology (CheXzero, MedGemma's image encoder) and segmentation (SAM 2.1, SAM 3).
Pure data, no heavy imports; each card's source for its numbers is named beside it."""

from __future__ import annotations

from fairmedbench.registry.models.card import ModelCard, Preprocessing, WeightSource, register
from fairmedbench.registry.models.cards import (
    CLIP_MEAN,
    CLIP_STD,
    HALF,
    IMAGENET_MEAN,
    IMAGENET_STD,
    SA1B,
    VISION_CAPS,
    VL_CAPS,
)

_M = "fairmedbench.registry.models."


def _hf_gate(repo: str, terms: str) -> str:
    return (f"gated: accept {terms} at https://huggingface.co/{repo} while logged in, then `huggingface-cli login` "
            "with a token of that account")


# --- general vision ------------------------------------------------------------------------------

# facebook/dinov3-vit{s,b,l}16-pretrain-lvd1689m: config.json (DINOv3ViTConfig) and preprocessor_config.json
# (DINOv3ViTImageProcessorFast: resize to 224 x 224, bilinear, ImageNet mean/std).
for _size, _dim in (("s", 384), ("b", 768), ("l", 1024)):
    _repo = f"facebook/dinov3-vit{_size}16-pretrain-lvd1689m"
    register(ModelCard(
        name=f"dinov3-vit{_size}16", family="dinov3", kind="vision", capabilities=VISION_CAPS,
        preprocessing=Preprocessing(size=224, mean=IMAGENET_MEAN, std=IMAGENET_STD, resize="squash",
                                    interpolation="bilinear"),
        embedding_dim=_dim, weights=WeightSource(hub_id=_repo, gated=_hf_gate(_repo, "the DINOv3 License")),
        license="DINOv3 License (commercial use allowed, with its terms)",
        pretraining_data=("LVD-1689M (1.7B curated web images), distilled from the DINOv3 ViT-7B teacher",),
        loader=_M + "hf_zoo:load_dinov3", loader_options={"config": f"vit{_size}16"},
        reference="Simeoni et al., DINOv3 (2025); facebookresearch/dinov3",
        notes=f"ViT-{_size.upper()}/16 with RoPE and 4 register tokens (transformers DINOv3ViTModel); embedding = "
              "final normed [CLS] token (the pooler output).",
    ))

register(ModelCard(
    name="siglip2", family="siglip", kind="vision-language", capabilities=VL_CAPS,
    # google/siglip2-base-patch16-224 preprocessor_config.json: 224 x 224, bicubic, mean = std = 0.5
    preprocessing=Preprocessing(size=224, mean=HALF, std=HALF, resize="squash"),
    embedding_dim=768, weights=WeightSource(hub_id="google/siglip2-base-patch16-224"),
    license="Apache-2.0", pretraining_data=("WebLI (10B images, 109 languages)",),
    loader=_M + "hf:load_siglip", loader_options={"config": "siglip2-base-224"}, text_context_length=64,
    reference="Tschannen et al., SigLIP 2 (2025)",
    notes="SigLIP 2 base/16 at 224 px, fixed-resolution release (transformers SiglipModel, Gemma tokenizer, text "
          "padded to 64 tokens as its processor does); 768-d pooled embeddings.",
))

register(ModelCard(
    name="aimv2-large", family="aimv2", kind="vision", capabilities=VISION_CAPS,
    # timm's pretrained cfg of aimv2_large_patch14_224.apple_pt: 224 px, crop_pct 1.0, bicubic, CLIP mean/std
    preprocessing=Preprocessing(size=224, mean=CLIP_MEAN, std=CLIP_STD),
    embedding_dim=1024,
    weights=WeightSource(hub_id="timm/aimv2_large_patch14_224.apple_pt", hub_filename="model.safetensors"),
    license="Apple ASCL (apple-amlr: research use)",
    pretraining_data=("DFN-2B, COYO-700M and HQITP image-text pairs with synthetic captions (AIMv2 paper)",),
    loader=_M + "timm_zoo:load_timm_encoder", loader_options={"arch": "aimv2_large_patch14_224", "pool": "avg"},
    reference="Fini et al., Multimodal Autoregressive Pre-training of Large Vision Encoders (AIMv2, CVPR 2025)",
    notes="ViT-L/14 with RMSNorm and SwiGLU, no class token (timm's aimv2 port of apple/ml-aim); embedding = "
          "mean of the final normed patch tokens, as timm's pooling.",
))

# --- retina --------------------------------------------------------------------------------------

_RET = "https://github.com/rmaphoh/RETFound"
register(ModelCard(
    name="retfound-mae", family="retfound", kind="vision", capabilities=VISION_CAPS,
    # RETFound's util/datasets.py build_transform (eval): resize 256 bicubic, centre-crop 224, ImageNet mean/std
    preprocessing=Preprocessing(size=224, resize_size=256, mean=IMAGENET_MEAN, std=IMAGENET_STD),
    embedding_dim=1024,
    weights=WeightSource(hub_id="YukunZhou/RETFound_mae_natureCFP", hub_filename="RETFound_mae_natureCFP.pth",
                         gated=_hf_gate("YukunZhou/RETFound_mae_natureCFP", "the RETFound terms (contact "
                                                                            "information shared)")),
    license="CC-BY-NC-4.0",
    pretraining_data=("904K colour fundus photographs (MEH-MIDAS, Moorfields, and public fundus datasets)",),
    loader=_M + "timm_zoo:load_timm_encoder",
    loader_options={"arch": "vit_large_patch16_224", "checkpoint": "mae", "pool": "token"},
    reference="Zhou et al., RETFound (Nature 2023); " + _RET,
    notes="MAE ViT-L/16 (timm VisionTransformer); the checkpoint {'model': MaskedAutoencoderViT} keeps its "
          "decoder, dropped here as main_finetune.py does; embedding = final normed [CLS] token.",
))

register(ModelCard(
    name="retfound-dinov2", family="retfound", kind="vision", capabilities=VISION_CAPS,
    preprocessing=Preprocessing(size=224, resize_size=256, mean=IMAGENET_MEAN, std=IMAGENET_STD),
    embedding_dim=1024,
    weights=WeightSource(hub_id="YukunZhou/RETFound_dinov2_meh", hub_filename="RETFound_dinov2_meh.pth",
                         gated=_hf_gate("YukunZhou/RETFound_dinov2_meh", "the RETFound terms (contact "
                                                                         "information shared)")),
    license="CC-BY-NC-4.0",
    pretraining_data=("MEH-MIDAS colour fundus photographs (Moorfields), from DINOv2 LVD-142M weights",),
    loader=_M + "timm_zoo:load_timm_encoder",
    loader_options={"arch": "vit_large_patch14_dinov2", "checkpoint": "dinov2-teacher", "pool": "token"},
    reference="Zhou et al., Revealing the impact of pre-training data on medical foundation models (2025); " + _RET,
    notes="DINOv2 ViT-L/14 at 224 px (timm vit_large_patch14_dinov2, layer scale), as RETFound_MAE's "
          "models_vit.RETFound_dinov2 builds it; the checkpoint {'teacher': {backbone.*, heads}} loaded as its "
          "main_finetune.py does (read at 897d71c): `backbone.` stripped, heads and mask token dropped, the "
          "position embedding resampled to the 16 x 16 grid; chunked block names unchunked; embedding = final "
          "normed [CLS] token.",
))

# --- pathology -----------------------------------------------------------------------------------

register(ModelCard(
    name="uni2-h", family="pathology-vit", kind="vision", capabilities=VISION_CAPS,
    # MahmoodLab/UNI2-h README: timm_kwargs below; transform Resize(224), ToTensor, ImageNet mean/std
    preprocessing=Preprocessing(size=224, mean=IMAGENET_MEAN, std=IMAGENET_STD),
    embedding_dim=1536,
    weights=WeightSource(hub_id="MahmoodLab/UNI2-h", hub_filename="pytorch_model.bin",
                         gated=_hf_gate("MahmoodLab/UNI2-h", "the UNI2 terms (institutional email)")),
    license="CC-BY-NC-ND-4.0",
    pretraining_data=("Mass-340K-like collection: 200M+ tiles from 350K+ H&E and IHC whole-slide images "
                      "(MGB, BWH and GTEx)",),
    loader=_M + "timm_zoo:load_timm_encoder",
    loader_options={"arch": "vit_huge_patch14_224", "pool": "token", "kwargs": {
        "patch_size": 14, "depth": 24, "num_heads": 24, "init_values": 1e-5, "embed_dim": 1536,
        "mlp_ratio": 2.66667 * 2, "no_embed_class": True, "mlp_layer": "SwiGLUPacked", "act_layer": "silu",
        "reg_tokens": 8, "dynamic_img_size": True}},
    reference="Chen et al., UNI (Nat. Med. 2024); UNI2-h release (2025)",
    notes="ViT-H/14 (1536-d, 24 blocks, SwiGLU, 8 registers) built with the README's timm kwargs; embedding = "
          "final normed [CLS] token, as the README's model(image).",
))

register(ModelCard(
    name="virchow2", family="pathology-vit", kind="vision", capabilities=VISION_CAPS,
    # paige-ai/Virchow2 config.json (timm): vit_huge_patch14_224, mlp_ratio 5.3375, 4 registers, SwiGLU/SiLU;
    # transform: resize 224 bicubic, centre-crop 224, ImageNet mean/std
    preprocessing=Preprocessing(size=224, mean=IMAGENET_MEAN, std=IMAGENET_STD),
    embedding_dim=2560,
    weights=WeightSource(hub_id="paige-ai/Virchow2", hub_filename="pytorch_model.bin",
                         gated=_hf_gate("paige-ai/Virchow2", "the Virchow2 terms (institutional email)")),
    license="CC-BY-NC-ND-4.0",
    pretraining_data=("3.1M whole-slide images (MSKCC), H&E and IHC, 5x-40x",),
    loader=_M + "timm_zoo:load_timm_encoder",
    loader_options={"arch": "vit_huge_patch14_224", "pool": "token+avg", "kwargs": {
        "init_values": 1e-5, "mlp_ratio": 5.3375, "reg_tokens": 4, "mlp_layer": "SwiGLUPacked",
        "act_layer": "silu", "dynamic_img_size": True}},
    reference="Zimmermann et al., Virchow2 (2024)",
    notes="ViT-H/14 (1280-d, 32 blocks, SwiGLU, 4 registers); embedding = [CLS] token concatenated with the mean "
          "of the patch tokens (registers excluded), 2560-d, as the hub README.",
))

register(ModelCard(
    name="prov-gigapath", family="pathology-vit", kind="vision", capabilities=VISION_CAPS,
    # prov-gigapath/prov-gigapath config.json (timm) and README transform: resize 256 bicubic, centre-crop 224
    preprocessing=Preprocessing(size=224, resize_size=256, mean=IMAGENET_MEAN, std=IMAGENET_STD),
    embedding_dim=1536,
    weights=WeightSource(hub_id="prov-gigapath/prov-gigapath", hub_filename="pytorch_model.bin",
                         gated=_hf_gate("prov-gigapath/prov-gigapath", "the Prov-GigaPath terms")),
    license="Apache-2.0 (with the hub's research-use terms)",
    pretraining_data=("1.3B tiles from 171K whole-slide images of Providence Health (Prov-Path)",),
    loader=_M + "timm_zoo:load_timm_encoder",
    loader_options={"arch": "vit_giant_patch14_dinov2", "pool": "token", "kwargs": {
        "patch_size": 16, "embed_dim": 1536, "depth": 40, "num_heads": 24, "init_values": 1e-5,
        "mlp_ratio": 5.33334}},
    reference="Xu et al., A whole-slide foundation model for digital pathology (Prov-GigaPath, Nature 2024)",
    notes="The tile encoder: DINOv2 ViT-giant at patch 16 (1536-d, 40 blocks, SwiGLU); embedding = final normed "
          "[CLS] token, as timm's pooled output. The slide encoder (LongNet) is not part of this card.",
))

register(ModelCard(
    name="conch", family="coca", kind="vision-language", capabilities=VL_CAPS,
    preprocessing=Preprocessing(size=448, mean=CLIP_MEAN, std=CLIP_STD),
    embedding_dim=512,
    weights=WeightSource(hub_id="MahmoodLab/CONCH", hub_filename="pytorch_model.bin",
                         gated=_hf_gate("MahmoodLab/CONCH", "the CONCH terms (institutional email)")),
    license="CC-BY-NC-ND-4.0",
    pretraining_data=("1.17M histopathology image-caption pairs (PubMed Central and educational sources)",),
    loader=_M + "timm_zoo:load_timm_encoder", available=False,
    reference="Lu et al., A visual-language foundation model for computational pathology (CONCH, Nat. Med. 2024)",
    notes="Not available in this version: CONCH's CoCa model (ViT-B/16 at 448 px with attentional poolers, its "
          "own text tower) is defined only "
          "in MahmoodLab's `conch` package, which is not on PyPI (conch-fork there is a third-party copy) and no "
          "maintained library here builds it. To use it: pip install git+https://github.com/Mahmoodlab/CONCH.git, "
          "accept the terms at https://huggingface.co/MahmoodLab/CONCH and score the predictions of a head on its "
          "embeddings (its create_model_from_pretrained) with `benchmark evaluate`.",
))

# --- radiology -----------------------------------------------------------------------------------

register(ModelCard(
    name="chexzero", family="clip", kind="vision-language", capabilities=VL_CAPS,
    # rajpurkarlab/CheXzero zero_shot.py: Normalize((101.48761,)*3, (83.43944,)*3) on 0-255 pixels, Resize(224)
    # bicubic after preprocess_data.py pads each image to a square
    preprocessing=Preprocessing(size=224, mean=(101.48761 / 255,) * 3, std=(83.43944 / 255,) * 3,
                                resize="longest_pad"),
    embedding_dim=512,
    weights=WeightSource(url="https://github.com/rajpurkarlab/CheXzero (best_64_5e-05_original_22000_0.864.pt)",
                         how_to_get="download best_64_5e-05_original_22000_0.864.pt from the CheXzero README's "
                                    "Google Drive link and pass --weights PATH"),
    license="see https://github.com/rajpurkarlab/CheXzero",
    pretraining_data=("WIT-400M (OpenAI CLIP)", "MIMIC-CXR (377K images with their reports)"),
    training_datasets=("mimic-cxr",),
    loader=_M + "clip:load_open_clip", loader_options={"arch": "ViT-B-32-quickgelu"}, text_context_length=77,
    reference="Tiu et al., Expert-level detection of pathologies from unannotated chest X-ray images via "
              "self-supervised learning (CheXzero, Nat. Biomed. Eng. 2022)",
    notes="OpenAI CLIP ViT-B/32 fine-tuned on MIMIC-CXR image-impression pairs; the checkpoint is the clip "
          "package's model.state_dict() (OpenAI names, as open_clip keeps them). CheXzero pads to a square "
          "centred; here the padding is bottom-right, as the zoo's longest_pad.",
))

register(ModelCard(
    name="medgemma-vision", family="siglip", kind="vision", capabilities=VISION_CAPS,
    # google/medgemma-4b-it preprocessor_config.json (Gemma3ImageProcessor): 896 x 896, bilinear, mean = std = 0.5
    preprocessing=Preprocessing(size=896, mean=HALF, std=HALF, resize="squash", interpolation="bilinear"),
    embedding_dim=1152,
    weights=WeightSource(hub_id="google/medgemma-4b-it",
                         gated=_hf_gate("google/medgemma-4b-it", "the Health AI Developer Foundations terms")),
    license="Health AI Developer Foundations terms of use",
    pretraining_data=("WebLI (SigLIP-400M)", "MedSigLIP's medical image-text pairs (chest X-ray, CT/MRI slices, "
                                            "dermatology, ophthalmology, histopathology)"),
    loader=_M + "hf_zoo:load_medgemma_vision",
    reference="Sellergren et al., MedGemma technical report (2025)",
    notes="MedGemma 4B's image encoder: SigLIP So400m/14 at 896 px (transformers SiglipVisionModel, no pooling "
          "head), read alone from the release's safetensors shards (vision_tower.* keys; the language model is "
          "never loaded); embedding = mean of the 4096 output tokens, before Gemma 3's projector. Its "
          "per-dataset training list is not recorded here, so no training_datasets are claimed.",
))

# --- segmentation --------------------------------------------------------------------------------

# facebookresearch/sam2 README checkpoints (2024-09-28 release) and the sam2 package's configs; SAM2Transforms:
# resize to 1024 x 1024, ImageNet mean/std.
SAM2_PRE = Preprocessing(size=1024, mean=IMAGENET_MEAN, std=IMAGENET_STD, resize="squash", interpolation="bilinear")
for _short, _file in (("t", "tiny"), ("s", "small"), ("b+", "base_plus"), ("l", "large")):
    register(ModelCard(
        name=f"sam2.1-hiera-{_short}", family="sam2", kind="segmentation", capabilities=("encode_image", "segment"),
        preprocessing=SAM2_PRE, embedding_dim=256,
        weights=WeightSource(url=f"https://dl.fbaipublicfiles.com/segment_anything_2/092824/sam2.1_hiera_{_file}.pt"),
        license="Apache-2.0", pretraining_data=SA1B + ("SA-V (51K videos, 643K masklets)",),
        loader=_M + "sam2_family:load_sam2", loader_options={"config": f"sam2.1/sam2.1_hiera_{_short}.yaml"},
        reference="Ravi et al., SAM 2: Segment Anything in Images and Videos (ICLR 2025); SAM 2.1 checkpoints",
        notes=f"Hiera-{_short.upper()} image encoder, FPN neck, prompt encoder and mask decoder built from the PyPI "
              "`sam2` package's own config; each image is segmented alone as SAM2ImagePredictor does (box = two "
              "corner points); embedding = global average of the stride-16 map.",
    ))

register(ModelCard(
    name="sam3", family="sam3", kind="segmentation", capabilities=("encode_image", "segment"),
    preprocessing=Preprocessing(size=1008, mean=HALF, std=HALF, resize="squash", interpolation="bilinear"),
    embedding_dim=256,
    weights=WeightSource(hub_id="facebook/sam3", gated=_hf_gate("facebook/sam3", "the SAM License")),
    license="SAM License", pretraining_data=("SA-Co (4M unique concepts, images and videos)",) + SA1B,
    loader=_M + "sam2_family:load_sam2", available=False,
    reference="Carion et al., SAM 3: Segment Anything with Concepts (2025); facebookresearch/sam3",
    notes="Not available in this version: SAM 3 is published on PyPI as `sam3` (Meta's package), which "
          "fairmedbench does not install, and its "
          "weights are gated; this version has no loader for its concept-prompted detector (text and exemplar "
          "prompts on a shared perception encoder), whose prompts differ from the box and point prompts of this zoo's "
          "SAM family. To run it yourself: pip install sam3 and accept the terms at https://huggingface.co/facebook/sam3.",
))
