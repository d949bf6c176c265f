"""Functions the CLI calls: list (no heavy imports), describe (card + counts, or where to get data),
split export/import; card mappings."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from fmb_ds_fixtures import make_nih

from fairmedbench.benchmark.datasets import describe_dataset, export_split, import_split, list_datasets, load_with_split
from fairmedbench.errors import InputError, MissingResourceError
from fairmedbench.registry.datasets import DATASETS, AttributeSpec, get_card


def test_list_datasets_is_light():
    code = (
        "import sys, json; from fairmedbench.benchmark.datasets import list_datasets; rows = list_datasets();"
        "print(json.dumps([sorted(m for m in ('torch', 'nibabel', 'pandas', 'PIL', 'open_clip') if m in sys.modules),"
        " len(rows)]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    heavy, n = json.loads(out.stdout)
    assert heavy == [] and n == len(DATASETS)
    rows = list_datasets()
    assert {"name", "task", "modality", "dim", "attributes", "license", "access"} <= set(rows[0])
    assert {r["name"] for r in rows} >= {"synth-control", "nih-cxr14", "ham10000"}


def test_describe_without_data_says_where(monkeypatch):
    monkeypatch.delenv("FMB_DATA_ROOT", raising=False)
    monkeypatch.delenv("FMB_DATA_HAM10000", raising=False)
    d = describe_dataset("ham10000")
    assert d["data"]["present"] is False and "FMB_DATA_HAM10000" in d["data"]["where"]
    assert "dataverse" in d["data"]["access"].lower()
    sex = next(a for a in d["attributes"] if a["name"] == "sex")
    assert sex["mapping"] == {"male": "male", "female": "female"} and sex["unknown_values"] == ["unknown"]
    age = next(a for a in d["attributes"] if a["name"] == "age")
    assert age["bins"] == [{"group": "<60", "min": None, "max_exclusive": 60.0},
                           {"group": ">=60", "min": 60.0, "max_exclusive": None}]
    json.dumps(d, allow_nan=False)


def test_describe_with_data_counts_groups(tmp_path):
    d = describe_dataset("nih-cxr14", make_nih(tmp_path / "nih"))
    assert d["data"]["present"] and d["data"]["n_samples"] == 22
    assert d["data"]["group_counts"]["sex"] == {"female": 10, "male": 12}
    assert sum(d["data"]["split"]["sizes"].values()) == 22
    json.dumps(d)
    s = describe_dataset("synth-control", n=50)
    assert s["data"]["group_counts"]["sex"] == {"female": 25, "male": 25}
    assert s["expected_disparities"][0]["direction"] == "none"


def test_export_import_split_between_labs(tmp_path):
    out = export_split("synth-control", None, 3, tmp_path / "split.json", policy="patient", n=60)
    got = import_split(out["path"], check_data=True, n=60)
    assert got["fingerprint"] == out["fingerprint"] and got["dataset_fingerprint_matches"] is True
    ds, split = load_with_split("synth-control", split_file=out["path"], n=60)
    assert split.fingerprint == out["fingerprint"] and len(split.test) == out["sizes"]["test"]
    assert import_split(out["path"], check_data=True, n=60, data_seed=9)["dataset_fingerprint_matches"] is False
    with pytest.raises(InputError, match="absent from the dataset"):
        load_with_split("synth-control", split_file=out["path"], n=30)


def test_unknown_dataset_suggests():
    with pytest.raises(InputError, match="ham10000"):
        get_card("ham1000")


def test_attribute_mapping_rules():
    spec = AttributeSpec("age", "age", ("<60", ">=60"), bins=(-math.inf, 60.0, math.inf))
    assert spec.map_value(59.9) == ("group", "<60") and spec.map_value("60") == ("group", ">=60")
    assert spec.map_value(float("nan")) == ("unknown", None) and spec.map_value("old") == ("unmapped", None)
    code = AttributeSpec("sex", "s", ("female", "male"), mapping={"0": "male", "1": "female"})
    assert code.map_value(1.0) == ("group", "female") and code.map_value(2) == ("unmapped", None)
    with pytest.raises(ValueError):
        AttributeSpec("x", "x", ("a",), mapping={"1": "b"})
    with pytest.raises(MissingResourceError):
        from fairmedbench.registry.datasets import load_dataset

        load_dataset("nih-cxr14", "/nonexistent/folder")
