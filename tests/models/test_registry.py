"""Model cards and registry: listing is instant and torch-free; cards are complete; bad names suggest."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fairmedbench.benchmark.models import describe_model, list_models
from fairmedbench.errors import InputError
from fairmedbench.registry.models import MODELS

REQUIRED = {"clip-vit-b32", "clip-vit-b16", "biomedclip", "pubmedclip", "medclip", "plip", "siglip", "blip",
            "blip2", "dinov2", "rad-dino", "medmae", "moco-cxr", "c2l", "lvm-med-vit", "imagenet-resnet50",
            "imagenet-vit-b16", "sam-vit-b", "sam-vit-l", "sam-vit-h", "medsam", "mobilesam", "tinysam",
            "sam-med2d", "litemedsam", "sam-med3d", "ft-sam", "medsiglip", "medsam2", "fastsam3d", "segvol"}


def test_listing_does_not_import_torch() -> None:
    code = (
        "import sys, json\n"
        "from fairmedbench.benchmark.models import list_models\n"
        "rows = list_models()\n"
        "heavy = [m for m in ('torch', 'open_clip', 'transformers', 'timm', 'segment_anything') if m in sys.modules]\n"
        "print(json.dumps({'n': len(rows), 'heavy': heavy}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    assert got["heavy"] == []
    assert got["n"] == len(MODELS)


def test_every_required_model_has_a_complete_card() -> None:
    assert REQUIRED <= set(MODELS.names())
    for row in list_models():
        d = describe_model(row["name"])
        assert d["kind"] in {"vision", "vision-language", "segmentation"}
        assert d["embedding_dim"] > 0 and d["preprocessing"]["size"] > 0
        assert d["license"] and d["pretraining_data"] and d["weight_source"] != "none"
        # 2D models all embed images; volumetric ones (preprocessing.depth > 0) only segment whole volumes
        assert "encode_image" in d["capabilities"] or d["preprocessing"]["depth"] > 0
        if d["kind"] == "vision-language":
            assert "encode_text" in d["capabilities"]
        if d["kind"] == "segmentation":
            assert "segment" in d["capabilities"]
        if not d["available"]:
            assert "Not available" in d["notes"]


def test_unknown_model_suggests_close_names() -> None:
    with pytest.raises(InputError, match="Did you mean litemedsam"):
        describe_model("litemedsm")


def test_describe_is_json_serialisable() -> None:
    assert json.loads(json.dumps(describe_model("litemedsam")))["name"] == "litemedsam"


def test_training_datasets_are_registered_cards_and_flag_seen_data() -> None:
    """One fact per model: `training_datasets` names registered dataset cards; seen_in_pretraining reads it."""
    from fairmedbench.registry.datasets import DATASETS
    from fairmedbench.registry.models import seen_in_pretraining

    for name in MODELS.names():
        for ds in MODELS.get(name).training_datasets:
            assert ds in DATASETS, f"model {name!r} lists {ds!r}, which is not a registered dataset card"
            assert seen_in_pretraining(name, ds)
    assert seen_in_pretraining("rad-dino", "nih-cxr14") and seen_in_pretraining("c2l", "nih-cxr14")
    assert seen_in_pretraining("medmae", "nih-cxr14") and seen_in_pretraining("litemedsam", "ham10000")
    assert seen_in_pretraining("medsam", "ham10000")
    assert not seen_in_pretraining("clip-vit-b32", "nih-cxr14")
    assert "nih-cxr14" in describe_model("medmae")["training_datasets"]
    assert seen_in_pretraining("my-model", "ham10000", ["ham10000"]) and not seen_in_pretraining("my-model", "ham10000")
