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
            "sam-med2d", "litemedsam", "sam-med3d"}


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
        assert "encode_image" in d["capabilities"]
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


def test_pretraining_tags_flag_seen_datasets() -> None:
    assert MODELS.get("rad-dino").has_seen("nih-cxr14")
    assert MODELS.get("c2l").has_seen("NIH-CXR14")
    assert not MODELS.get("clip-vit-b32").has_seen("nih-cxr14")
    assert "nih-cxr14" in describe_model("medmae")["pretraining_tags"]
