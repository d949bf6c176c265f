"""How a frozen image encoder runs on a CPU: the torch module itself (the reference) or ONNX Runtime on the same
module exported by torch.onnx, chosen per machine by a cached measurement and printed once, like the precision.

Every frozen image encoder that a loader registers (`register_frozen`: a model's image tower, `ImageTower`, or a
SAM-family image encoder) is exported on its first fp32 frozen inference on a CPU, cached per weights (a sha256 of
the module's structure and every tensor, the input size, the opset, the exporter and the torch and ONNX package
versions), and checked against the torch module on a probe batch: ONNX Runtime is used only where its largest
absolute difference from torch's output is within ORT_TOLERANCE of that output's scale; an encoder that does not
export, or disagrees, runs the torch module and the printed line says why. Training, LoRA copies (never registered),
bf16 autocast and other devices run the torch module. The two paths agree to float rounding, not bit for bit
(LiteMedSAM on its real weights and real NIH images: max abs difference 3.7e-6 of maps up to 0.94), so the path
resolved here keys the feature cache (`engine.features`) and each choice with its difference is recorded in the
run's environment.
$FMB_ENCODER_PATH=torch|onnxruntime forces a path.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
import time
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np
import torch
from torch import nn

from fairmedbench.engine.device import ENCODER_CHOICES, cached_probe, probe_cache_dir, probe_key
from fairmedbench.errors import InputError

PATHS = ("auto", "torch", "onnxruntime")
ENV = "FMB_ENCODER_PATH"
#: 'auto' takes ONNX Runtime only when the probe measures its CPU seconds per image at least this much below torch's
ORT_MIN_SPEEDUP = 1.1
#: ONNX Runtime is used only where its largest absolute difference from torch's output on the probe batch is at most
#: this fraction of that output's largest magnitude (at least 1): fp32 reductions in another order differ by ~1e-6
#: of the scale (LiteMedSAM 3.7e-6 absolute on maps up to 0.94); a wrong export differs by the output's own size
ORT_TOLERANCE = 1e-4
#: the ONNX opset of every export (torch.onnx's dynamo exporter's own; part of the export's cache key)
OPSET = 18
#: how torch.onnx exports (part of the export's cache key). Its TorchScript exporter first: on LiteMedSAM's encoder
#: it took 9.1 CPU-s against the dynamo exporter's 25.8 (18.2 without its onnxscript optimiser), and ONNX Runtime
#: ran its graph at 1.34 CPU-s per image against 1.79 (1.69): its fusions match that exporter's patterns (medians
#: of 5 interleaved rounds, one thread, under load). A module it cannot trace takes the dynamo exporter, without
#: the optimiser (ONNX Runtime optimises the graph itself when it loads it).
EXPORTER = "torchscript, else dynamo without its optimiser"
PROBE_VERSION = 2
_ORT_PACKAGES = ("onnxruntime", "onnx", "onnxscript")
_FROZEN: weakref.WeakSet[nn.Module] = weakref.WeakSet()


def register_frozen(module: nn.Module) -> None:
    """Mark `module` (a loaded model's own image path) as one whose frozen inference may run on another path; copies
    made later (a LoRA-wrapped deep copy) are not marked and always run the torch module."""
    _FROZEN.add(module)


class ImageTower(nn.Module):
    """`embed(module, pixels)` as one module (what a model's encode_image computes: encoder, pooling, projection),
    so that it exports and runs as a whole; `tag` names the model and its pooling in the module's repr."""

    def __init__(self, module: nn.Module, embed: Callable[[nn.Module, torch.Tensor], torch.Tensor], tag: str) -> None:
        super().__init__()
        self.module, self.tag = module, tag
        self._embed = embed

    def extra_repr(self) -> str:
        return f"tag={self.tag}"

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self._embed(self.module, pixels)


def ort_versions() -> str:
    """The installed ONNX packages' versions, or '' when one is missing (the path is then unavailable)."""
    try:
        return ",".join(f"{p} {metadata.version(p)}" for p in _ORT_PACKAGES)
    except metadata.PackageNotFoundError:
        return ""


def _signature(module: nn.Module) -> tuple[tuple[str, int, int], ...]:
    """Name, storage address and in-place version of every parameter and buffer: changes when weights do."""
    return tuple((n, t.data_ptr(), t._version) for n, t in (*module.named_parameters(), *module.named_buffers()))


def export_key(module: nn.Module, size: int) -> str:
    """sha256 of what an export depends on: the module's structure and every parameter and buffer (names, dtypes,
    shapes, bytes), the input size, the opset, the exporter's options and the torch and ONNX package versions."""
    h = hashlib.sha256(f"{module!r}|{size}|opset {OPSET}|{EXPORTER}|torch {torch.__version__}|{ort_versions()}"
                       .encode())
    for name, t in (*module.named_parameters(), *module.named_buffers()):
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _probe_batch(size: int, n: int = 2) -> torch.Tensor:
    return torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(0))


#: the check's batch: another size than the export's example batch (2), so that an export that kept that batch size
#: as a constant fails its check instead of running
CHECK_BATCH = 3


def _export_to(module: nn.Module, size: int, target: Path) -> None:
    """Write the module's ONNX export to `target` (see EXPORTER), batch dynamic, weights in external files when the
    exporter needs them (models over 2 GB)."""
    x = _probe_batch(size)
    try:
        with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer warnings
            torch.onnx.export(module.eval(), (x,), str(target), dynamo=False, opset_version=OPSET,
                              input_names=["pixels"], output_names=["output"],
                              dynamic_axes={"pixels": {0: "batch"}, "output": {0: "batch"}})
        return
    except Exception:  # noqa: BLE001  # a module TorchScript cannot trace: the dynamo exporter below
        for leftover in target.parent.iterdir():
            leftover.unlink()
    with torch.inference_mode():
        program = torch.onnx.export(module.eval(), (x,), dynamo=True, optimize=False, verbose=False,
                                    opset_version=OPSET,
                                    dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=4096)},))
    assert program is not None, "a dynamo export returns its program"
    program.save(str(target), external_data=True)


def export_onnx(module: nn.Module, size: int) -> Path:
    """The module exported to ONNX for (batch, 3, size, size) fp32 input (`_export_to`); cached in its own folder of
    the user cache, written by a rename of the folder."""
    folder = probe_cache_dir() / "onnx" / f"{type(module).__name__}-{export_key(module, size)[:24]}"
    path = folder / "model.onnx"
    if path.is_file():
        return path
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        _export_to(module, size, tmp / "model.onnx")
        try:
            os.replace(tmp, folder)
        except OSError:  # another process exported the same weights first: keep theirs
            if not path.is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


@dataclass(frozen=True)
class Agreement:
    """ONNX Runtime's output against torch's on the probe batch: the largest absolute difference and the largest
    magnitude of torch's output."""

    max_abs_diff: float
    scale: float

    @property
    def bound(self) -> float:
        """The largest difference accepted: ORT_TOLERANCE of the output's scale (at least 1)."""
        return ORT_TOLERANCE * max(1.0, self.scale)

    @property
    def within(self) -> bool:
        """Whether the difference is within the bound."""
        return self.max_abs_diff <= self.bound

    def describe(self) -> str:
        """'max abs difference 3.7e-06 of outputs up to 0.94 (bound 1.0e-04)'."""
        return (f"max abs difference {self.max_abs_diff:.1e} of outputs up to {self.scale:.3g} "
                f"(bound {self.bound:.1e})")


def compare_outputs(reference: torch.Tensor, other: torch.Tensor) -> Agreement:
    """The Agreement of `other` with `reference` (a shape mismatch or a non-finite value is an infinite difference)."""
    ref, got = reference.detach().float(), other.detach().float()
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    if got.shape != ref.shape or not bool(torch.isfinite(got).all()):
        return Agreement(float("inf"), scale)
    return Agreement(float((got - ref).abs().max()) if ref.numel() else 0.0, scale)


def check_export(module: nn.Module, size: int) -> Agreement:
    """The module's export (cached, see `export_onnx`) run by ONNX Runtime against the torch module on a seeded probe
    batch of CHECK_BATCH random images; the result is kept beside the export (`check.json`), so it is computed once per
    weights."""
    path = export_onnx(module, size)
    record = path.with_name("check.json")
    try:
        stored = json.loads(record.read_text())
        return Agreement(float(stored["max_abs_diff"]), float(stored["scale"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    x = _probe_batch(size, CHECK_BATCH)
    with torch.inference_mode():
        agreement = compare_outputs(module.eval()(x), ort_runner(module, size)(x))
    tmp = record.with_name(f".check.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"max_abs_diff": agreement.max_abs_diff, "scale": agreement.scale}))
    os.replace(tmp, record)
    return agreement


class OrtEncoder:
    """An encoder's ONNX export run by ONNX Runtime on the CPU: fp32, torch's thread count, no spin-waiting (cores
    are shared: 1.29 vs 1.54 CPU-s per LiteMedSAM image with spinning, measured under load), no memory patterns
    (a preallocated plan per input shape: peak resident 1.64 GB with, 0.93 GB without, at batch 2 then 1, same
    speed). `ort_runner` builds one per module and builds another once the module's weights changed."""

    def __init__(self, module: nn.Module, size: int) -> None:
        import onnxruntime as ort

        self.size, self.signature = size, _signature(module)
        self.agreement: Agreement | None = None  # set by frozen_forward from check_export before the first use
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.enable_mem_pattern = False
        self.session = ort.InferenceSession(str(export_onnx(module, size)), options,
                                            providers=["CPUExecutionProvider"])

    def __call__(self, pixels: torch.Tensor) -> torch.Tensor:
        x = np.ascontiguousarray(pixels.detach().to("cpu", torch.float32).numpy())
        return torch.from_numpy(self.session.run(None, {self.session.get_inputs()[0].name: x})[0])


_RUNNERS: weakref.WeakKeyDictionary[nn.Module, OrtEncoder] = weakref.WeakKeyDictionary()


def ort_runner(module: nn.Module, size: int) -> OrtEncoder:
    """The module's ONNX Runtime runner, built on first use and again whenever its weights changed."""
    runner = _RUNNERS.get(module)
    if runner is None or runner.size != size or runner.signature != _signature(module):
        runner = _RUNNERS[module] = OrtEncoder(module, size)
    return runner


def _cpu_seconds(fn: Callable[[], object]) -> float:
    """CPU seconds of this process (every thread: torch's and ONNX Runtime's pools) spent in `fn()`."""
    t = os.times()
    fn()
    e = os.times()
    return max(e.user + e.system - t.user - t.system, 1e-9)


def measure_paths(module: nn.Module, size: int, repeats: int = 2) -> dict[str, float]:
    """CPU seconds of the torch forward and of ONNX Runtime on one random image (a batch of 1), each the least of
    `repeats` interleaved calls after a warm-up (process CPU time: other processes on the cores distort it less)."""
    x = torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(0))
    runner = ort_runner(module, size)
    with torch.inference_mode():
        module(x)
        runner(x)
        times: dict[str, list[float]] = {"torch": [], "onnxruntime": []}
        for _ in range(repeats):
            times["torch"].append(_cpu_seconds(lambda: module(x)))
            times["onnxruntime"].append(_cpu_seconds(lambda: runner(x)))
    return {k: round(min(v), 4) for k, v in times.items()}


_STRUCTURES: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()


def _architecture(module: nn.Module, size: int) -> str:
    """What the probe's result depends on besides the machine: the module's structure (its repr, hashed once per
    module: milliseconds) and the input size."""
    structure = _STRUCTURES.get(module)
    if structure is None:
        name = module.tag if isinstance(module, ImageTower) else type(module).__name__
        digest = hashlib.sha256(repr(module).encode()).hexdigest()[:12]
        structure = _STRUCTURES[module] = f"{name}|{digest}"
    return f"{structure}|{size}px"


_RESOLVED: dict[tuple[str, str, str], str] = {}  # (architecture, device, precision) -> path, in this process


def _requested() -> str:
    value = os.environ.get(ENV, "auto")
    if value not in PATHS:
        raise InputError(f"${ENV}={value!r}: expected one of {', '.join(PATHS)}")
    return value


def _checked(module: nn.Module, size: int) -> tuple[Agreement | None, str]:
    """The export's agreement with torch, and why ONNX Runtime cannot be used ('' when it can)."""
    try:
        agreement = check_export(module, size)
    except Exception as exc:  # noqa: BLE001  # any exporter or runtime failure means: run the torch module
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        return None, f"the ONNX export failed ({type(exc).__name__}: {first})"
    if not agreement.within:
        return agreement, f"its output differs from torch's: {agreement.describe()}"
    return agreement, ""


def _json_number(value: float) -> float | None:
    """A measured difference for a result's JSON: None where it is not finite (a shape mismatch or non-finite
    output is an infinite difference; the reason beside it says which), since result files hold no inf."""
    return value if math.isfinite(value) else None


def _record(arch: str, device: str, precision: str, path: str, reason: str, agreement: Agreement | None,
            measured: dict[str, float] | None = None) -> None:
    """Keep the choice for the run's environment (engine.device.compute_settings)."""
    ENCODER_CHOICES[f"{arch}|{device}|{precision}"] = {
        "path": path, "reason": reason,
        **({"max_abs_diff": _json_number(agreement.max_abs_diff), "output_scale": _json_number(agreement.scale),
            "tolerance": _json_number(agreement.bound)} if agreement is not None else {}),
        **({f"{k}_cpu_s_per_image": v for k, v in measured.items()} if measured else {})}


def resolve_encoder_path(module: nn.Module, size: int, device: str, precision: str) -> str:
    """'torch' or 'onnxruntime' for frozen inference of `module` on (batch, 3, size, size) input.

    ONNX Runtime needs a CPU, fp32, a module registered by its loader (`register_frozen`), an export that agrees with
    torch within ORT_TOLERANCE; 'auto' then takes it when the cached probe measures it ORT_MIN_SPEEDUP faster. A
    choice on a CPU is printed on stderr once per process (other devices and unregistered modules run torch,
    silently).
    """
    requested = _requested()
    arch = _architecture(module, size)
    key = (arch, device, precision)
    if key in _RESOLVED:
        return _RESOLVED[key]
    if device.split(":")[0] != "cpu" or module not in _FROZEN:  # nothing to choose: not said
        if requested == "onnxruntime":
            raise InputError(f"${ENV}=onnxruntime: it runs a loaded model's frozen image encoder on a CPU only "
                             f"(here {type(module).__name__} on {device})")
        return "torch"
    unavailable = ("it runs fp32 only (--precision fp32 runs it)" if precision != "fp32"
                   else "onnxruntime, onnx or onnxscript is not installed (pip install -e . installs them)"
                   if not ort_versions() else "")
    if requested == "onnxruntime" and unavailable:
        raise InputError(f"${ENV}=onnxruntime: {unavailable}")
    if requested == "torch":
        _RESOLVED[key] = requested
        _record(arch, device, precision, requested, f"${ENV}=torch", None)
        return requested
    agreement: Agreement | None = None
    measured: dict[str, float] | None = None
    if not unavailable:
        agreement, unavailable = _checked(module, size)
    if requested == "onnxruntime":
        if unavailable:
            raise InputError(f"${ENV}=onnxruntime: {type(module).__name__}: {unavailable}; unset it to run torch")
        choice, reason = "onnxruntime", f"${ENV}=onnxruntime"
    elif unavailable:
        choice, reason = "torch", f"ONNX Runtime not used: {unavailable}"
    else:
        assert agreement is not None
        threads = torch.get_num_threads()
        probe_id = f"encoder-path v{PROBE_VERSION}|{probe_key()}|{ort_versions()}|{arch}|threads {threads}"
        t0 = time.perf_counter()
        measured, path, cached = cached_probe("encoder_path", probe_id, lambda: measure_paths(module, size))
        speedup = measured["torch"] / measured["onnxruntime"]
        choice = "onnxruntime" if speedup >= ORT_MIN_SPEEDUP else "torch"
        how = "cached" if cached else f"measured in {time.perf_counter() - t0:.0f} s and cached"
        reason = (f"ONNX Runtime {measured['onnxruntime']:.2f}, torch {measured['torch']:.2f} CPU-s for one image: "
                  f"{speedup:.2f}x on this CPU, {agreement.describe()}, probe {how} at {path}; ${ENV}=torch to "
                  "choose")
    _RESOLVED[key] = choice
    _record(arch, device, precision, choice, reason, agreement, measured)
    if requested == "auto":
        print(f"encoder path auto -> {choice} ({reason})", file=sys.stderr)
    return choice


def path_of(module: nn.Module, pixels: torch.Tensor) -> str:
    """The path `frozen_forward(module, pixels)` takes now: the resolved one for frozen CPU inference, else torch."""
    dev = pixels.device.type
    if torch.is_grad_enabled() or module.training or dev != "cpu" or module not in _FROZEN:
        return "torch"
    dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else torch.float32
    precision = {torch.float32: "fp32", torch.bfloat16: "bf16"}.get(dtype, str(dtype))
    return resolve_encoder_path(module, pixels.shape[-1], str(pixels.device), precision)


def frozen_forward(module: nn.Module, pixels: torch.Tensor) -> torch.Tensor:
    """`module(pixels)` for frozen inference, on the path resolved for this machine, device and autocast state;
    with autograd on or in training mode, always the torch module."""
    if path_of(module, pixels) == "torch":
        return module(pixels)
    size = pixels.shape[-1]
    runner = ort_runner(module, size)
    if runner.agreement is None:  # the choice is made per architecture: these weights' export is checked here
        runner.agreement = check_export(module, size)
    if not runner.agreement.within:
        raise InputError(f"ONNX Runtime's output for these {type(module).__name__} weights differs from torch's "
                         f"({runner.agreement.describe()}); run with ${ENV}=torch")
    return runner(pixels).to(pixels.device)
