"""The frozen encoder's CPU path: ONNX Runtime agrees with the torch module to float rounding (tiny LiteMedSAM,
random weights), the choice is measured once per machine and printed, and the path keys the feature cache."""

from __future__ import annotations

import copy
import json
import weakref
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from fairmedbench.engine.features import cache_key, extract_features
from fairmedbench.errors import InputError
from fairmedbench.registry.models import encoder_path as ep
from fairmedbench.registry.models import load_model

SIZE = 64  # LiteMedSAM's architecture (1x1 stem, four stages, neck) at a quarter of its input size


@pytest.fixture(scope="module")
def onnx_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One user cache for the module: the tiny encoder is exported once and reused by every test."""
    return tmp_path_factory.mktemp("xdg")


@pytest.fixture
def fresh(onnx_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The shared export cache, no resolved choice, no probe result and no forced path."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(onnx_home))
    monkeypatch.delenv(ep.ENV, raising=False)
    monkeypatch.setattr(ep, "_RESOLVED", {})
    (onnx_home / "fairmedbench" / "encoder_path.json").unlink(missing_ok=True)
    yield onnx_home


def _tiny(seed: int = 0):
    return load_model("litemedsam", "random", seed=seed, image_size=SIZE)


def _pixels(n: int) -> torch.Tensor:
    return torch.rand(n, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))


@pytest.mark.slow  # 16 s; test_features_of_both_paths_agree_and_are_cached_apart checks the two paths agree
def test_onnx_runtime_maps_equal_the_torch_maps_at_any_batch(fresh: Path) -> None:
    encoder = _tiny().module.image_encoder
    runner = ep.ort_runner(encoder, SIZE)
    with torch.inference_mode():
        for n in (1, 3):  # exported with a batch of 2: the batch dimension is dynamic
            ref, got = encoder(_pixels(n)), runner(_pixels(n))
            assert got.shape == ref.shape and got.dtype == torch.float32
            torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
    assert ep.ort_runner(encoder, SIZE) is runner  # one session per module while its weights stay the same
    assert len(list((fresh / "fairmedbench" / "onnx").glob("*/model.onnx"))) == 1


def test_changed_weights_get_a_new_runner(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A runner is bound to the weights it exported: an in-place change builds another (stub runners here)."""

    class Stub:
        def __init__(self, module: torch.nn.Module, size: int) -> None:
            self.size, self.signature = size, ep._signature(module)

    monkeypatch.setattr(ep, "OrtEncoder", Stub)
    encoder = _tiny().module.image_encoder
    runner = ep.ort_runner(encoder, SIZE)
    assert ep.ort_runner(encoder, SIZE) is runner
    with torch.no_grad():
        encoder.neck[0].weight.mul_(2)
    assert ep.ort_runner(encoder, SIZE) is not runner


def _fake_probe(monkeypatch: pytest.MonkeyPatch, torch_s: float, ort_s: float) -> list[int]:
    calls: list[int] = []

    def measure(module: torch.nn.Module, size: int, repeats: int = 2) -> dict[str, float]:
        calls.append(size)
        return {"torch": torch_s, "onnxruntime": ort_s}

    monkeypatch.setattr(ep, "measure_paths", measure)
    return calls


def test_the_choice_is_measured_once_per_machine_and_printed(fresh: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    encoder = _tiny().module.image_encoder
    calls = _fake_probe(monkeypatch, 2.0, 1.0)
    assert ep.resolve_encoder_path(encoder, SIZE, "cpu", "fp32") == "onnxruntime"
    assert ep.resolve_encoder_path(encoder, SIZE, "cpu", "fp32") == "onnxruntime"
    err = capsys.readouterr().err
    assert err.count("encoder path auto -> onnxruntime (ONNX Runtime 1.00, torch 2.00 CPU-s for one image: 2.00x "
                     "on this CPU, max abs difference ") == 1
    assert "measured in" in err and str(fresh / "fairmedbench" / "encoder_path.json") in err
    monkeypatch.setattr(ep, "_RESOLVED", {})  # a new process: the probe is read back, not measured again
    assert ep.resolve_encoder_path(encoder, SIZE, "cpu", "fp32") == "onnxruntime"
    assert "probe cached at" in capsys.readouterr().err and calls == [SIZE]


def test_torch_is_kept_where_onnx_runtime_is_not_clearly_faster_or_cannot_run(
        fresh: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    encoder = _tiny().module.image_encoder
    calls = _fake_probe(monkeypatch, 1.05, 1.0)
    assert ep.resolve_encoder_path(encoder, SIZE, "cpu", "fp32") == "torch"
    assert ep.resolve_encoder_path(encoder, SIZE, "cpu", "bf16") == "torch"
    err = capsys.readouterr().err
    assert "encoder path auto -> torch (ONNX Runtime 1.00, torch 1.05" in err
    assert "encoder path auto -> torch (ONNX Runtime not used: it runs fp32 only (--precision fp32 runs it))" in err
    assert ep.resolve_encoder_path(encoder, SIZE, "cuda", "fp32") == "torch"  # nothing to choose: silent
    assert ep.resolve_encoder_path(torch.nn.Conv2d(3, 3, 1), SIZE, "cpu", "fp32") == "torch"
    assert capsys.readouterr().err == "" and len(calls) == 1


def test_without_onnx_packages_the_torch_path_runs_and_says_so(fresh: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    encoder = _tiny().module.image_encoder
    monkeypatch.setattr(ep, "ort_versions", lambda: "")
    assert ep.resolve_encoder_path(encoder, SIZE, "cpu", "fp32") == "torch"
    assert "ONNX Runtime not used: onnxruntime, onnx or onnxscript is not installed" in capsys.readouterr().err
    monkeypatch.setenv(ep.ENV, "onnxruntime")
    monkeypatch.setattr(ep, "_RESOLVED", {})
    with pytest.raises(InputError, match="is not installed"):
        ep.resolve_encoder_path(encoder, SIZE, "cpu", "fp32")


def test_a_forced_path_is_taken_and_an_impossible_one_refused(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    encoder = _tiny().module.image_encoder
    calls = _fake_probe(monkeypatch, 2.0, 1.0)
    monkeypatch.setenv(ep.ENV, "torch")
    assert ep.resolve_encoder_path(encoder, SIZE, "cpu", "fp32") == "torch" and calls == []
    monkeypatch.setenv(ep.ENV, "onnxruntime")
    with pytest.raises(InputError, match="runs fp32 only"):
        ep.resolve_encoder_path(encoder, SIZE, "cpu", "bf16")
    with pytest.raises(InputError, match="on a CPU only"):
        ep.resolve_encoder_path(encoder, SIZE, "cuda", "fp32")
    monkeypatch.setenv(ep.ENV, "fastest")
    with pytest.raises(InputError, match="expected one of auto, torch, onnxruntime"):
        ep.resolve_encoder_path(encoder, SIZE, "cpu", "fp32")


def test_training_and_autograd_run_the_torch_module(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    encoder = _tiny().module.image_encoder
    monkeypatch.setenv(ep.ENV, "onnxruntime")
    monkeypatch.setattr(ep, "ort_runner", lambda *a: pytest.fail("ONNX Runtime used with autograd on"))
    out = ep.frozen_forward(encoder, _pixels(1).requires_grad_())
    assert out.requires_grad


class _Split:
    """Eight random gray images as a dataset split."""

    fingerprint = "eight-random"

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self.images = [rng.integers(0, 256, (SIZE, SIZE), dtype=np.uint8) for _ in range(8)]
        self.sample_ids = [f"s{i}" for i in range(8)]

    def __len__(self) -> int:
        return len(self.images)

    def load_image(self, i: int) -> np.ndarray:
        return self.images[i]


def test_features_of_both_paths_agree_and_are_cached_apart(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, split, cache = _tiny(), _Split(), fresh / "features"
    ep.check_export(model.module.image_encoder, SIZE)  # the export and its check against torch, counted apart
    runs: list[int] = []
    runner = ep.ort_runner

    def counted(module: torch.nn.Module, size: int) -> ep.OrtEncoder:
        runs.append(size)
        return runner(module, size)

    monkeypatch.setattr(ep, "ort_runner", counted)
    feats = {}
    for path in ("torch", "onnxruntime"):
        monkeypatch.setenv(ep.ENV, path)
        monkeypatch.setattr(ep, "_RESOLVED", {})
        feats[path] = extract_features(model, split, split_name="all", cache_dir=cache, batch_size=3, device="cpu")
        assert not feats[path].from_cache and feats[path].encoded == 8
        assert model.encoder_path("cpu", "fp32") == path
    assert runs == [SIZE] * 3  # batches of 3, 3, 2 through ONNX Runtime (the in-process map memo is per path)
    np.testing.assert_allclose(feats["onnxruntime"].array, feats["torch"].array, rtol=1e-4, atol=1e-6)
    assert not np.array_equal(feats["onnxruntime"].array, feats["torch"].array)  # two computations, not one
    assert feats["onnxruntime"].key != feats["torch"].key
    # the torch path keeps the key it had before paths existed; another path is a part of the key
    plain, parts = cache_key(model, split, "all", "fp32")
    assert plain == feats["torch"].key and "encoder_path" not in parts
    assert cache_key(model, split, "all", "fp32", encoder_path="onnxruntime")[1]["encoder_path"] == "onnxruntime"


def _net(seed: int = 0) -> torch.nn.Module:
    """A tiny image tower: conv, ReLU, global average (a (B, 4) embedding of (B, 3, 16, 16) pixels)."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten()).eval()


def test_the_export_is_keyed_by_weights_opset_exporter_and_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    net = _net()
    key = ep.export_key(net, 16)
    assert ep.export_key(copy.deepcopy(net), 16) == key  # the content, not the object
    assert ep.export_key(_net(seed=1), 16) != key
    assert ep.export_key(net, 32) != key
    with torch.no_grad():
        net[0].bias[0] += 1e-3
    changed = ep.export_key(net, 16)
    assert changed != key
    monkeypatch.setattr(ep, "OPSET", ep.OPSET + 1)
    assert ep.export_key(net, 16) != changed
    monkeypatch.undo()
    monkeypatch.setattr(ep, "EXPORTER", "dynamo, optimize=True")  # an export made with other options
    assert ep.export_key(net, 16) != changed
    monkeypatch.undo()
    monkeypatch.setattr(ep, "ort_versions", lambda: "onnxruntime 0.0,onnx 0.0,onnxscript 0.0")
    assert ep.export_key(net, 16) != changed


def test_the_export_tries_torchscript_then_dynamo_without_its_optimiser(fresh: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, object]] = []

    def spy(*args: object, **kwargs: object) -> None:
        calls.append(kwargs)
        raise RuntimeError("stop before exporting")

    monkeypatch.setattr(torch.onnx, "export", spy)
    with pytest.raises(RuntimeError, match="stop"):
        ep.export_onnx(_net(seed=7), 16)
    assert [(c["dynamo"], c.get("optimize")) for c in calls] == [(False, None), (True, False)]
    assert not list((fresh / "fairmedbench" / "onnx").glob(".*.tmp"))  # nothing half-written is left


class _BakedBatch(torch.nn.Module):
    """Reads its batch size as a Python int: TorchScript's trace keeps the example's batch as a constant."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(int(x.shape[0]), -1).sum(dim=1, keepdim=True)


def test_an_export_that_kept_its_example_batch_fails_its_check_and_runs_torch(
        fresh: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    net = _BakedBatch()
    ep.register_frozen(net)
    assert ep.CHECK_BATCH != ep._probe_batch(8).shape[0]
    assert ep.resolve_encoder_path(net, 8, "cpu", "fp32") == "torch"
    assert "ONNX Runtime not used" in capsys.readouterr().err
    x = torch.rand(3, 3, 8, 8)
    assert torch.equal(ep.frozen_forward(net, x), net(x))
    # the failed check's infinite difference reaches a run's environment as null, never as inf (a result file
    # written with allow_nan=False would otherwise fail to write, as every later run in the process did)
    [record] = [v for k, v in ep.ENCODER_CHOICES.items() if k.startswith("_BakedBatch|")]
    assert record["path"] == "torch" and record["max_abs_diff"] is None
    json.dumps(ep.ENCODER_CHOICES, allow_nan=False)


def test_agreement_is_bounded_by_the_output_scale() -> None:
    ref = torch.tensor([[0.5, -2.0]])
    near = ep.compare_outputs(ref, torch.tensor([[0.5, -2.0 - 2**-13]]))  # 1.22e-4 off, exact in fp32
    far = ep.compare_outputs(ref, torch.tensor([[0.5, -2.0 - 2**-12]]))  # 2.44e-4 off
    assert near.scale == 2.0 and near.bound == pytest.approx(2e-4)  # 1e-4 of the largest |output|
    assert near.max_abs_diff == 2**-13 and near.within
    assert far.max_abs_diff == 2**-12 and not far.within
    small = ep.compare_outputs(torch.tensor([0.01]), torch.tensor([0.01005]))
    assert small.bound == pytest.approx(1e-4) and small.within  # scale below 1: the bound is 1e-4 absolute
    assert not ep.compare_outputs(ref, torch.tensor([[0.5, float("nan")]])).within
    assert not ep.compare_outputs(ref, ref[:, :1]).within


def test_an_export_that_disagrees_falls_back_to_torch_and_says_why(
        fresh: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A mismatch injected into ONNX Runtime's output (+0.01 on every value): torch runs, the line says so, and the
    difference is recorded; forcing ONNX Runtime is refused."""
    monkeypatch.setattr(ep, "ENCODER_CHOICES", {})
    net = _net(seed=2)
    ep.register_frozen(net)
    run = ep.OrtEncoder.__call__
    monkeypatch.setattr(ep.OrtEncoder, "__call__", lambda self, x: run(self, x) + 0.01)
    monkeypatch.setattr(ep, "measure_paths", lambda *a: pytest.fail("timed although it disagrees"))
    assert ep.resolve_encoder_path(net, 16, "cpu", "fp32") == "torch"
    err = capsys.readouterr().err
    assert "encoder path auto -> torch (ONNX Runtime not used: its output differs from torch's: max abs " \
           "difference 1.0e-02" in err and "(bound 1.0e-04)" in err
    (record,) = ep.ENCODER_CHOICES.values()
    assert record["path"] == "torch" and record["max_abs_diff"] == pytest.approx(0.01, rel=1e-3)
    monkeypatch.setenv(ep.ENV, "onnxruntime")
    monkeypatch.setattr(ep, "_RESOLVED", {})
    with pytest.raises(InputError, match="its output differs from torch's"):
        ep.resolve_encoder_path(net, 16, "cpu", "fp32")


def test_an_encoder_that_does_not_export_runs_torch(fresh: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    net = _net(seed=3)
    ep.register_frozen(net)

    def fail(module: torch.nn.Module, size: int) -> Path:
        raise RuntimeError("unsupported operator aten::foo\nmore detail")

    monkeypatch.setattr(ep, "export_onnx", fail)
    assert ep.resolve_encoder_path(net, 16, "cpu", "fp32") == "torch"
    assert ("encoder path auto -> torch (ONNX Runtime not used: the ONNX export failed (RuntimeError: "
            "unsupported operator aten::foo))") in capsys.readouterr().err


def test_every_embedding_model_runs_its_tower_on_the_chosen_path_and_records_it(
        fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model that embeds images (here a VisionEncoder around the tiny tower) runs encode_image through ONNX
    Runtime where chosen, equal to torch's within the bound; the choice and its difference are in the run's
    environment block; a LoRA-style copy (a deep copy of the module) is never registered and runs torch."""
    from fairmedbench.engine.device import compute_settings
    from fairmedbench.registry.models.vision import VisionEncoder

    monkeypatch.setattr(ep, "ENCODER_CHOICES", {})
    monkeypatch.setattr("fairmedbench.engine.device.ENCODER_CHOICES", ep.ENCODER_CHOICES)
    base = _tiny()
    card = replace(base.card, name="tiny-tower", preprocessing=replace(base.card.preprocessing, size=16))
    model = VisionEncoder(card, base.weights, _net(seed=4))
    _fake_probe(monkeypatch, 2.0, 1.0)
    x = torch.rand(3, 3, 16, 16, generator=torch.Generator().manual_seed(5))
    assert model.encoder_path("cpu", "fp32") == "onnxruntime"
    calls: list[int] = []
    runner = ep.ort_runner
    monkeypatch.setattr(ep, "ort_runner", lambda m, size: calls.append(size) or runner(m, size))
    got = model.encode_image(x)
    with torch.inference_mode():
        ref = model.module(x)
    assert calls == [16]
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-4)
    (record,) = compute_settings(heads_pinned=True)["encoder_paths"].values()  # type: ignore[union-attr]
    assert record["path"] == "onnxruntime" and 0 <= record["max_abs_diff"] <= record["tolerance"] <= 1e-4 * 3
    clone = copy.copy(model)
    clone.module = copy.deepcopy(model.module)
    assert clone.image_tower() is not model.image_tower()
    with torch.inference_mode():
        assert ep.path_of(clone.image_tower(), x) == "torch"
        clone.encode_image(x)
    assert calls == [16]


def test_a_segmenter_with_its_own_image_path_is_not_exported(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SAM 2's image path (MedSAM2Segmenter.image_map) is not its image encoder's forward: never exported."""
    from fairmedbench.registry.models.medsam2 import MedSAM2Segmenter

    base = _tiny()
    monkeypatch.setattr(ep, "_FROZEN", weakref.WeakSet())  # the tiny LiteMedSAM's own registration forgotten
    monkeypatch.setattr(ep, "check_export", lambda *a: pytest.fail("SAM 2's image encoder exported"))
    model = MedSAM2Segmenter(base.card, base.weights, base.module)
    assert model.module.image_encoder not in ep._FROZEN
    assert model.encoder_path("cpu", "fp32") == "torch"


def test_other_weights_of_a_chosen_architecture_are_checked_before_use(
        fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The path is chosen once per architecture; a second module with other weights is checked on its first frozen
    forward, and a disagreement (injected: +0.01) stops with one line instead of serving ONNX Runtime's numbers."""
    first, second = _net(seed=6), _net(seed=7)
    for net in (first, second):
        ep.register_frozen(net)
    x = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(8))
    _fake_probe(monkeypatch, 2.0, 1.0)
    with torch.inference_mode():
        torch.testing.assert_close(ep.frozen_forward(first, x), first(x), rtol=0, atol=1e-4)
        run = ep.OrtEncoder.__call__
        monkeypatch.setattr(ep.OrtEncoder, "__call__", lambda self, x: run(self, x) + 0.01)
        with pytest.raises(InputError, match="differs from torch's .*max abs difference 1.0e-02"):
            ep.frozen_forward(second, x)
