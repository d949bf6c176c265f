"""Precision 'auto': bf16 on CUDA or where the CPU runs it natively (a cached probe), fp32 otherwise."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from fairmedbench.engine import device as dev
from fairmedbench.errors import InputError


@pytest.fixture
def probe_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh probe cache under $XDG_CACHE_HOME and a counter of probe measurements."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(dev, "_RESOLVED", {})
    return tmp_path


def _fake_probe(monkeypatch: pytest.MonkeyPatch, speedups: tuple[float, float]) -> list[int]:
    calls: list[int] = []

    def measure(repeats: int = 3) -> tuple[float, float]:
        calls.append(repeats)
        return speedups

    monkeypatch.setattr(dev, "measure_bf16_speedup", measure)
    return calls


def test_explicit_precisions_pass_through_and_unknown_ones_are_input_errors() -> None:
    assert dev.resolve_precision("fp32", "cpu") == "fp32"
    assert dev.resolve_precision("bf16", "cpu") == "bf16"
    assert "auto" in dev.PRECISIONS
    with pytest.raises(InputError, match="expected one of auto, fp32, bf16"):
        dev.resolve_precision("fp16", "cpu")


def test_emulated_bf16_resolves_to_fp32_and_says_why_once(probe_home: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    calls = _fake_probe(monkeypatch, (0.06, 0.01))
    assert dev.resolve_precision("auto", "cpu") == "fp32"
    assert dev.resolve_precision("auto", "cpu") == "fp32"
    err = capsys.readouterr().err
    assert err.count("precision auto -> fp32 (bf16 matmul 0.06x, conv 0.01x the speed of fp32") == 1
    assert str(probe_home / "fairmedbench" / "precision.json") in err
    assert len(calls) == 1


def test_native_bf16_resolves_to_bf16_only_when_both_kernels_are_clearly_faster(
        probe_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_probe(monkeypatch, (2.0, 1.9))
    assert dev.resolve_precision("auto", "cpu") == "bf16"
    (probe_home / "fairmedbench" / "precision.json").unlink()
    dev._RESOLVED.clear()
    _fake_probe(monkeypatch, (2.0, 1.1))  # conv not clearly faster: stay in fp32
    assert dev.resolve_precision("auto", "cpu") == "fp32"


def test_probe_is_cached_per_machine_and_measured_again_for_another_torch(
        probe_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_probe(monkeypatch, (1.5, 1.4))
    first = dev.bf16_probe()
    second = dev.bf16_probe()
    assert (first.cached, second.cached, len(calls)) == (False, True, 1)
    assert (second.matmul_speedup, second.conv_speedup) == (1.5, 1.4)
    stored = json.loads((probe_home / "fairmedbench" / "precision.json").read_text())
    (key,) = stored
    assert torch.__version__ in key and stored[key]["matmul_speedup"] == 1.5
    monkeypatch.setattr(torch, "__version__", "0.0.0-other")
    assert not dev.bf16_probe().cached and len(calls) == 2
    assert len(json.loads((probe_home / "fairmedbench" / "precision.json").read_text())) == 2


def test_unreadable_probe_cache_is_measured_again(probe_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_probe(monkeypatch, (0.5, 0.5))
    path = probe_home / "fairmedbench" / "precision.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert not dev.bf16_probe().native and len(calls) == 1
    assert dev.bf16_probe().cached


def test_cuda_resolves_to_bf16_where_supported(probe_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_probe(monkeypatch, (0.1, 0.1))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert dev.resolve_precision("auto", "cuda") == "bf16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    dev._RESOLVED.clear()
    assert dev.resolve_precision("auto", "cuda:0") == "fp32"
    assert dev.resolve_precision("auto", "mps") == "fp32"
    assert calls == []  # the CPU probe is not run for other devices


def test_real_probe_measures_both_kernels_and_caches_them(probe_home: Path) -> None:
    threads = torch.get_num_threads()
    probe = dev.bf16_probe()
    assert torch.get_num_threads() == threads  # the probe runs on one thread and restores the setting
    assert probe.matmul_speedup > 0 and probe.conv_speedup > 0 and not probe.cached
    assert probe.native == (min(probe.matmul_speedup, probe.conv_speedup) >= dev.BF16_MIN_SPEEDUP)
    assert dev.bf16_probe().cached
    mode = (probe_home / "fairmedbench" / "precision.json").stat().st_mode & 0o777
    mask = os.umask(0)
    os.umask(mask)
    assert mode == 0o666 & ~mask


def test_cpu_inference_keeps_freed_memory_in_the_heap() -> None:
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt is glibc's")
    assert dev.keep_freed_memory() and dev.keep_freed_memory()  # idempotent
