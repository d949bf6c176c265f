"""Weight resolution: random is seeded, offline hub misses fail fast and clearly, bad files are refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fairmedbench.errors import InputError, MissingResourceError
from fairmedbench.registry.models import get_card, load_model
from fairmedbench.registry.models.weights import load_into, read_state_dict, resolve_weights


def test_random_weights_are_seeded() -> None:
    card = get_card("moco-cxr")
    assert resolve_weights(card, "random:7").identity == "random:seed=7"
    a = load_model("moco-cxr", "random", seed=3).module.state_dict()
    b = load_model("moco-cxr", "random", seed=3).module.state_dict()
    c = load_model("moco-cxr", "random", seed=4).module.state_dict()
    key = next(k for k, v in a.items() if v.is_floating_point() and v.numel() > 100)
    assert torch.equal(a[key], b[key]) and not torch.equal(a[key], c[key])


def test_offline_hub_miss_is_a_clear_error(tmp_path: Path) -> None:
    code = (
        "import json\n"
        "from fairmedbench.registry.models import load_model\n"
        "try:\n    load_model('dinov2')\n    msg = ''\n"
        "except Exception as e:\n    msg = type(e).__name__ + ': ' + str(e)\n"
        "print(json.dumps({'msg': msg}))"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["msg"].startswith("MissingResourceError")
    assert "facebook/dinov2-base" in got["msg"] and "huggingface-cli download" in got["msg"]


def test_missing_path_and_unknown_package_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(MissingResourceError, match="no such file"):
        load_model("moco-cxr", str(tmp_path / "nope.pth"))
    with pytest.raises(MissingResourceError, match="--weights PATH"):
        load_model("medsam")  # only a Google Drive link: must say how to get it, never try to download


def test_corrupt_file_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pth"
    bad.write_bytes(b"not a checkpoint at all")
    with pytest.raises(InputError, match="cannot read weights file"):
        read_state_dict(bad)


class _Evil:
    def __reduce__(self) -> tuple:
        return (print, ("pickled code ran",))


def test_pickled_code_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "evil.pth"
    torch.save({"state_dict": {"w": torch.zeros(1)}, "x": _Evil()}, path)
    with pytest.raises(InputError, match="pickled code"):
        read_state_dict(path)


def test_wrong_architecture_reports_missing_and_unexpected_keys() -> None:
    module = torch.nn.Sequential(torch.nn.Linear(2, 3))
    state = {"0.weight": torch.zeros(3, 2), "extra.bias": torch.zeros(1)}
    with pytest.raises(InputError) as err:
        load_into(module, state, what="toy")
    msg = str(err.value)
    assert "missing keys (1): 0.bias" in msg and "unexpected keys (1): extra.bias" in msg
    with pytest.raises(InputError, match="shape mismatches"):
        load_into(module, {"0.weight": torch.zeros(2, 2), "0.bias": torch.zeros(3)}, what="toy")


def test_unavailable_card_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    import fairmedbench.registry.models as models

    off = dataclasses.replace(get_card("moco-cxr"), available=False, notes="Not available: no such package.")
    monkeypatch.setattr(models, "get_card", lambda name: off)
    with pytest.raises(MissingResourceError, match="cannot be built in this version: Not available: no such"):
        load_model("moco-cxr", "random")

