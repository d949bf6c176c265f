"""How a frozen image encoder runs on a CPU: the torch module itself (the reference) or ONNX Runtime on the same
module exported by torch.onnx, chosen per machine by a cached measurement and printed once, like the precision.

ONNX Runtime (the optional `fast` extra: onnxruntime, onnx, onnxscript) runs fp32 frozen inference only
(`frozen_forward` without autograd or autocast) of the encoders in `EXPORTABLE`; training, LoRA copies, bf16
autocast and other devices run the torch module. The two paths agree to float rounding, not bit for bit (LiteMedSAM
on its real weights and real NIH images: max abs difference 3.7e-6 of maps up to 0.94, printed by
benchmarks/encoder_throughput.py), so the path resolved here keys the feature cache (`engine.features`).
$FMB_ENCODER_PATH=torch|onnxruntime forces a path. The exported file (26 MB for LiteMedSAM) is kept in the user
cache, keyed by the module's structure, weights and exporter versions.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
import weakref
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import numpy as np
import torch
from torch import nn

from fairmedbench.engine.device import cached_probe, probe_cache_dir, probe_key
from fairmedbench.errors import InputError
from fairmedbench.registry.models.tinyvit import TinyViTSAM

PATHS = ("auto", "torch", "onnxruntime")
ENV = "FMB_ENCODER_PATH"
#: encoder classes whose ONNX export is tested (tests/models/test_encoder_path.py) against their torch forward
EXPORTABLE: tuple[type[nn.Module], ...] = (TinyViTSAM,)
#: 'auto' takes ONNX Runtime only when the probe measures its CPU seconds per image at least this much below torch's
ORT_MIN_SPEEDUP = 1.1
PROBE_VERSION = 1
_ORT_PACKAGES = ("onnxruntime", "onnx", "onnxscript")


def ort_versions() -> str:
    """The installed ONNX packages' versions, or '' when one is missing (the path is then unavailable)."""
    try:
        return ",".join(f"{p} {metadata.version(p)}" for p in _ORT_PACKAGES)
    except metadata.PackageNotFoundError:
        return ""


def _signature(module: nn.Module) -> tuple[tuple[str, int, int], ...]:
    """Name, storage address and in-place version of every parameter and buffer: changes when weights do."""
    return tuple((n, t.data_ptr(), t._version) for n, t in (*module.named_parameters(), *module.named_buffers()))


def _module_digest(module: nn.Module, size: int) -> str:
    """sha256 of the module's structure, every parameter and buffer, the input size and the exporter versions."""
    h = hashlib.sha256(f"{module!r}|{size}|torch {torch.__version__}|{ort_versions()}".encode())
    for name, t in (*module.named_parameters(), *module.named_buffers()):
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def export_onnx(module: nn.Module, size: int) -> Path:
    """The module exported to ONNX for (batch, 3, size, size) fp32 input, batch dynamic; cached in the user cache."""
    path = probe_cache_dir() / "onnx" / f"{type(module).__name__}-{_module_digest(module, size)[:24]}.onnx"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    example = torch.rand(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        program = torch.onnx.export(module.eval(), (example,), dynamo=True, optimize=True, verbose=False,
                                    dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=4096)},))
    assert program is not None, "a dynamo export returns its program"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    program.save(str(tmp))
    os.replace(tmp, path)
    return path


class OrtEncoder:
    """An encoder's ONNX export run by ONNX Runtime on the CPU: fp32, torch's thread count, no spin-waiting (cores
    are shared: 1.29 vs 1.54 CPU-s per LiteMedSAM image with spinning, measured under load), no memory patterns
    (a preallocated plan per input shape: peak resident 1.64 GB with, 0.93 GB without, at batch 2 then 1, same
    speed). `ort_runner` builds one per module and builds another once the module's weights changed."""

    def __init__(self, module: nn.Module, size: int) -> None:
        import onnxruntime as ort

        self.size, self.signature = size, _signature(module)
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
    runner = ort_runner(module, size)  # exports the module on the first probe of its weights
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
        digest = hashlib.sha256(repr(module).encode()).hexdigest()[:12]
        structure = _STRUCTURES[module] = f"{type(module).__name__}|{digest}"
    return f"{structure}|{size}px"


_RESOLVED: dict[tuple[str, str, str], str] = {}  # (architecture, device, precision) -> path, in this process


def _requested() -> str:
    value = os.environ.get(ENV, "auto")
    if value not in PATHS:
        raise InputError(f"${ENV}={value!r}: expected one of {', '.join(PATHS)}")
    return value


def resolve_encoder_path(module: nn.Module, size: int, device: str, precision: str) -> str:
    """'torch' or 'onnxruntime' for frozen inference of `module` on (batch, 3, size, size) input.

    ONNX Runtime needs a CPU, fp32, an encoder class in EXPORTABLE and the `fast` extra; 'auto' then takes it when
    the cached probe measures it ORT_MIN_SPEEDUP faster. A choice on a CPU is printed on stderr once per process
    (other devices and classes have only the torch path, silently).
    """
    requested = _requested()
    arch = _architecture(module, size)
    key = (arch, device, precision)
    if key in _RESOLVED:
        return _RESOLVED[key]
    if device.split(":")[0] != "cpu" or not isinstance(module, EXPORTABLE):  # nothing to choose: not said
        if requested == "onnxruntime":
            raise InputError(f"${ENV}=onnxruntime: it runs {', '.join(c.__name__ for c in EXPORTABLE)} on a CPU "
                             f"only (here {type(module).__name__} on {device})")
        return "torch"
    unavailable = ("it runs fp32 only (--precision fp32 runs it)" if precision != "fp32"
                   else "the `fast` extra is not installed (pip install 'fairmedbench[fast]')" if not ort_versions()
                   else "")
    if requested == "onnxruntime" and unavailable:
        raise InputError(f"${ENV}=onnxruntime: {unavailable}")
    if requested != "auto":
        _RESOLVED[key] = requested
        return requested
    if unavailable:
        choice, reason = "torch", f"ONNX Runtime not used: {unavailable}"
    else:
        threads = torch.get_num_threads()
        probe_id = f"encoder-path v{PROBE_VERSION}|{probe_key()}|{ort_versions()}|{arch}|threads {threads}"
        t0 = time.perf_counter()
        measured, path, cached = cached_probe("encoder_path", probe_id, lambda: measure_paths(module, size))
        speedup = measured["torch"] / measured["onnxruntime"]
        choice = "onnxruntime" if speedup >= ORT_MIN_SPEEDUP else "torch"
        how = "cached" if cached else f"measured in {time.perf_counter() - t0:.0f} s and cached"
        reason = (f"ONNX Runtime {measured['onnxruntime']:.2f}, torch {measured['torch']:.2f} CPU-s for one image: "
                  f"{speedup:.2f}x on this CPU, probe {how} at {path}; ${ENV}=torch to choose")
    _RESOLVED[key] = choice
    print(f"encoder path auto -> {choice} ({reason})", file=sys.stderr)
    return choice


def path_of(module: nn.Module, pixels: torch.Tensor) -> str:
    """The path `frozen_forward(module, pixels)` takes now: the resolved one for frozen CPU inference, else torch."""
    dev = pixels.device.type
    if torch.is_grad_enabled() or module.training or dev != "cpu":
        return "torch"
    dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else torch.float32
    precision = {torch.float32: "fp32", torch.bfloat16: "bf16"}.get(dtype, str(dtype))
    return resolve_encoder_path(module, pixels.shape[-1], str(pixels.device), precision)


def frozen_forward(module: nn.Module, pixels: torch.Tensor) -> torch.Tensor:
    """`module(pixels)` for frozen inference, on the path resolved for this machine, device and autocast state;
    with autograd on or in training mode, always the torch module."""
    if path_of(module, pixels) == "torch":
        return module(pixels)
    return ort_runner(module, pixels.shape[-1])(pixels).to(pixels.device)
