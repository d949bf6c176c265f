"""Device and precision selection for frozen-encoder inference (torch imported lazily)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fairmedbench.errors import InputError

if TYPE_CHECKING:
    import torch

PRECISIONS = ("auto", "fp32", "bf16")
# bf16 autocast is accepted where embeddings stay within this cosine similarity of fp32 ones
# (measured per model by benchmarks/encoder_throughput.py); otherwise use fp32.
BF16_MIN_COSINE = 0.99
# 'auto' picks bf16 on a CPU only when the probe measures bf16 at least this much faster than fp32:
# a CPU without native bf16 emulates it (about 17x slower measured on an AVX2-only CPU).
BF16_MIN_SPEEDUP = 1.2
PROBE_VERSION = 1


def select_device(device: str = "auto") -> str:
    """'auto' -> 'cuda' when available else 'cpu'; an unavailable explicit device is an InputError."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"--device {device}: CUDA is not available on this machine; use --device cpu or auto")
    if device.split(":")[0] not in {"cpu", "cuda", "mps"}:
        raise InputError(f"--device {device!r}: expected auto, cpu, cuda or cuda:N")
    return device


def describe_device(device: str) -> str:
    """The hardware a run computed on, for its provenance: 'cuda:0 NVIDIA H100 80GB HBM3' or 'cpu <model name>'."""
    if device.startswith("cuda"):
        import torch

        index = int(device.split(":")[1]) if ":" in device else torch.cuda.current_device()
        return f"cuda:{index} {torch.cuda.get_device_name(index)}"
    return f"{device} {_cpu_identity().split('|')[0]}"


def check_precision(precision: str) -> str:
    """Validate a precision name (auto, fp32 or bf16)."""
    if precision not in PRECISIONS:
        raise InputError(f"--precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    return precision


@dataclass(frozen=True)
class Bf16Probe:
    """Measured speed of bf16 relative to fp32 on this CPU (speedup > 1: bf16 is faster)."""

    matmul_speedup: float
    conv_speedup: float
    path: Path
    cached: bool

    @property
    def speedup(self) -> float:
        """The smaller of the two speedups: bf16 must be faster at both to be chosen."""
        return min(self.matmul_speedup, self.conv_speedup)

    @property
    def native(self) -> bool:
        """True when bf16 is clearly faster than fp32 here (executed natively, not emulated)."""
        return self.speedup >= BF16_MIN_SPEEDUP


def probe_cache_dir() -> Path:
    """The per-user cache folder of measurements: $XDG_CACHE_HOME/fairmedbench (default ~/.cache)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "fairmedbench"


def probe_cache_path() -> Path:
    """The per-user precision probe cache: precision.json in `probe_cache_dir()`."""
    return probe_cache_dir() / "precision.json"


def cached_probe(name: str, key: str, measure: Callable[[], dict[str, float]],
                 path: Path | None = None) -> tuple[dict[str, float], Path, bool]:
    """`measure()` once per `key`, kept in `name`.json of the cache folder (or `path`): (values, file, cached).
    An unreadable file is measured again; a read-only home keeps the values for this process only."""
    from fairmedbench.engine.store import write_json

    path = probe_cache_dir() / f"{name}.json" if path is None else Path(path)
    try:
        stored = json.loads(path.read_text())
        stored = stored if isinstance(stored, dict) else {}
    except (OSError, ValueError):
        stored = {}
    hit = stored.get(key)
    if isinstance(hit, dict) and hit:
        try:
            return {k: float(v) for k, v in hit.items() if k != "measured_at"}, path, True
        except (TypeError, ValueError):  # a hand-edited entry: measure again
            pass
    values = measure()
    stored[key] = {**values, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        write_json(path, stored)
    except OSError:
        pass
    return values, path, False


def _cpuinfo() -> dict[str, str]:
    """The first processor's entries of /proc/cpuinfo (empty where there is none)."""
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return info


def _cpu_identity() -> str:
    """CPU model name and a hash of its feature flags (from /proc/cpuinfo; the platform string elsewhere)."""
    info = _cpuinfo()
    name = info.get("model name") or platform.processor() or platform.machine()
    flags = " ".join(sorted((info.get("flags") or info.get("Features") or "").split()))
    return f"{name}|flags {hashlib.sha256(flags.encode()).hexdigest()[:12]}"


def probe_key() -> str:
    """What the probe's result depends on: probe version, torch version, CPU model and flags, ISA overrides."""
    import torch

    isa = ",".join(f"{v}={os.environ[v]}" for v in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY") if v in os.environ)
    return f"v{PROBE_VERSION}|torch {torch.__version__}|{_cpu_identity()}|{isa or 'default isa'}"


def _cpu_seconds(fn: Callable[[], object]) -> float:
    t = time.thread_time()  # this thread's CPU time: other processes sharing the cores do not distort it
    fn()
    return max(time.thread_time() - t, 1e-9)


def _speedup(layer: torch.nn.Module, x: torch.Tensor, repeats: int) -> float:
    """fp32 / bf16-autocast CPU time of `layer(x)`, least of `repeats` calls after a warm-up each; stops after
    the bf16 warm-up when that alone is 10x slower than fp32 (emulated bf16 is slow: keep the probe short)."""
    import torch

    _cpu_seconds(lambda: layer(x))
    fp32 = min(_cpu_seconds(lambda: layer(x)) for _ in range(repeats))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        first = _cpu_seconds(lambda: layer(x))
        if first > 10 * fp32:
            return fp32 / first
        bf16 = min(_cpu_seconds(lambda: layer(x)) for _ in range(repeats))
    return fp32 / bf16


def measure_bf16_speedup(repeats: int = 3) -> tuple[float, float]:
    """fp32 time / bf16-autocast time, on one thread, of a Linear layer (512 x 768 -> 768) and a 3x3 Conv2d
    (64 -> 64 channels on 64 x 64), run as inference runs them (weights cast on every call by autocast)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # per-core speed; the ratio is what differs between native and emulated bf16
    gen = torch.Generator().manual_seed(0)
    linear, conv = torch.nn.Linear(768, 768), torch.nn.Conv2d(64, 64, 3, padding=1)
    try:
        with torch.inference_mode():
            return (_speedup(linear, torch.randn(512, 768, generator=gen), repeats),
                    _speedup(conv, torch.randn(1, 64, 64, 64, generator=gen), repeats))
    finally:
        torch.set_num_threads(threads)


def bf16_probe(path: Path | None = None) -> Bf16Probe:
    """This CPU's bf16 speedup over fp32, measured once per (torch, CPU) and cached in a small JSON file."""
    def measure() -> dict[str, float]:
        matmul, conv = measure_bf16_speedup()
        return {"matmul_speedup": round(matmul, 4), "conv_speedup": round(conv, 4)}

    values, file, cached = cached_probe("precision", probe_key(), measure,
                                        probe_cache_path() if path is None else path)
    return Bf16Probe(values["matmul_speedup"], values["conv_speedup"], file, cached)


_RESOLVED: dict[str, str] = {}  # device -> what 'auto' resolved to in this process


def resolve_precision(requested: str, device: str) -> str:
    """'auto' -> 'bf16' on CUDA (with bf16 support) or on a CPU that runs bf16 natively (measured), else 'fp32';
    an explicit fp32/bf16 is returned as is. The automatic choice is made and printed on stderr once per process."""
    check_precision(requested)
    if requested != "auto":
        return requested
    if device in _RESOLVED:
        return _RESOLVED[device]
    kind = device.split(":")[0]
    if kind == "cuda":
        import torch

        choice = "bf16" if torch.cuda.is_bf16_supported() else "fp32"
        reason = "CUDA" if choice == "bf16" else "this CUDA device has no bf16"
    elif kind == "cpu":
        probe = bf16_probe()
        choice = "bf16" if probe.native else "fp32"
        reason = (f"bf16 matmul {probe.matmul_speedup:.2f}x, conv {probe.conv_speedup:.2f}x the speed of fp32 on "
                  f"this CPU, probe {'cached' if probe.cached else 'measured and cached'} at {probe.path}")
    else:
        choice, reason = "fp32", f"bf16 autocast is not used on {kind}"
    _RESOLVED[device] = choice
    print(f"precision auto -> {choice} ({reason})", file=sys.stderr)
    return choice


#: encoder batch on CPU when none is given. Measured on LiteMedSAM's bare encoder (2-core EPYC, under load, one
#: process per setting): CPU seconds per image are flat from batch 4 to 16 (fp32 3.8 vs 3.7, bf16 2.3 vs 2.1) while
#: the peak resident size grows (fp32 1.7 -> 4.5 GB; 7.9 GB at 16 with keep_freed_memory), and a batch of 16 frees
#: ~4 GiB at once, past glibc's largest trim threshold (2^31 - 1, see keep_freed_memory): that memory is returned to
#: the kernel and page-faulted back every batch. At 4 a batch's working set (~1 GiB) stays below the threshold, so
#: the heap is reused (the main job: 0.2 M minor faults, was 25.8 M).
#: measured on 2 cores, `benchmark controls`: fp32 at batch 2 vs 4 took the same time (114 vs 116 s wall, 214 vs
#: 213 CPU-s) with a peak resident size of 1.99 vs 3.07 GB; bf16 at 4 peaked at 2.35 GB. The ONNX Runtime path
#: (registry.models.encoder_path) is flat from batch 1 (1.24, 1.29, 1.27 CPU-s per image at 1, 2, 4, one process,
#: load 11 on 2 cores) while torch at batch 1 is not (3.36 vs 2.42 at 2: per-call overhead and threads waiting).
#: A constant, not a per-machine probe: the choice is the smallest batch past the flat point, which needs no
#: measurement here, and a probe (about 10 CPU-seconds per model) would measure differences below its noise.
CPU_BATCH = 2
GPU_BATCH = 16
_BATCH_SAID: set[str] = set()


def encoder_batch_size(requested: int | None, device: str) -> int:
    """The encoder batch: `requested`, else CPU_BATCH on a CPU and GPU_BATCH on an accelerator (said once)."""
    if requested is not None:
        return requested
    kind = device.split(":")[0]
    size = CPU_BATCH if kind == "cpu" else GPU_BATCH
    if kind not in _BATCH_SAID:
        _BATCH_SAID.add(kind)
        why = ("CPU seconds per image flat from 2 to 16, resident memory and page faults grow with the batch"
               if kind == "cpu" else "accelerator default")
        print(f"batch size auto -> {size} ({why}; --batch-size N to choose)", file=sys.stderr)
    return size


_HEAP_KEPT = False
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


def keep_freed_memory() -> bool:
    """Keep freed CPU memory in the process's heap instead of returning it to the kernel (glibc only).

    glibc serves every allocation above 32 MiB with a fresh mmap and unmaps it on free, so each
    activation tensor of a CPU forward pass is page-faulted in again, page by page. Measured on 2 cores,
    LiteMedSAM encoder, 12 images: 16.3 s system for 26 s user, 0.2 s system with this; `benchmark controls
    --n 20`: 30.9M -> 4.5M page faults, 72 -> 14 s system time. Heap memory is reused instead; the cost is a
    resident size that stays at its peak (that job: 3.4 -> 6.2 GB maximum). Returns whether the setting is in
    effect. Idempotent; mallopt is not wrapped by any maintained package, hence ctypes.
    """
    global _HEAP_KEPT
    if not _HEAP_KEPT and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _HEAP_KEPT = bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
        except (OSError, AttributeError):  # not glibc (musl has no mallopt)
            _HEAP_KEPT = False
    return _HEAP_KEPT


@contextlib.contextmanager
def autocast(device: str, precision: str) -> Iterator[None]:
    """Inference context: no autograd, and bf16 autocast when asked ('auto' is resolved first)."""
    import torch

    precision = resolve_precision(precision, device)
    if device.split(":")[0] == "cpu":
        keep_freed_memory()
    with torch.inference_mode():
        if precision == "bf16":
            with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16):
                yield
        else:
            yield


#: torch intra-op threads for training and predicting a head on cached features (linear probe, CLIP adapters, the
#: anomaly scorer). A float reduction's result depends on how it is split across threads: oneMKL's sgemm follows
#: the thread count on Intel AVX-512 (its documented reproducibility holds only for a fixed count), ATen sums of
#: over 32k elements too (measured here: a 300k-element sum differs by 1.2e-4 between 1 and 2 threads), so a Ray
#: worker (1 thread) and a local run (every core) trained different heads on an Intel Xeon. One fixed count makes
#: the head independent of the launcher and the machine's cores; a head on 512-d features is cheap on one.
HEAD_THREADS = 1


@contextlib.contextmanager
def head_threads(active: bool = True) -> Iterator[None]:
    """Run the block on HEAD_THREADS torch intra-op threads (restored after); a no-op unless `active` (a head
    that runs an encoder itself, LoRA or a segmentation decoder, keeps the process's threads)."""
    import torch

    before = torch.get_num_threads()
    if active and before != HEAD_THREADS:
        torch.set_num_threads(HEAD_THREADS)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


#: environment variables that choose the numeric kernels (oneMKL's code branch, oneDNN's and ATen's instruction set)
KERNEL_VARIABLES = ("MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")


def kernel_environment() -> dict[str, str]:
    """The KERNEL_VARIABLES set in this process: a launcher's workers get them (a remote Ray cluster's workers do
    not inherit the driver's environment)."""
    return {v: os.environ[v] for v in KERNEL_VARIABLES if v in os.environ}


#: each frozen encoder's path chosen in this process (registry.models.encoder_path): the path, why, and the export's
#: max abs difference from torch with its bound; provenance, not identity (a path is used only within its bound)
ENCODER_CHOICES: dict[str, dict[str, object]] = {}

_CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "amx_int8")


def compute_settings(heads_pinned: bool) -> dict[str, object]:
    """What a run computed with, for its environment block (provenance, not identity): torch's intra-op threads
    (the encoder's), the head's threads, the thread and kernel settings of the environment, the CPU, and the frozen
    encoders' paths chosen in this process."""
    import torch

    info = _cpuinfo()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    return {"intra_op_threads": torch.get_num_threads(),
            "head_threads": HEAD_THREADS if heads_pinned else torch.get_num_threads(),
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "env": {v: os.environ[v] for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", *KERNEL_VARIABLES)
                    if v in os.environ},
            "cpu": _cpu_identity().split("|")[0], "cpu_flags": [f for f in _CPU_FLAGS if f in flags],
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "encoder_paths": {k: dict(v) for k, v in ENCODER_CHOICES.items()}}


def prepare_module(module: torch.nn.Module, device: str, channels_last: bool = False) -> torch.nn.Module:
    """Move to device, eval mode, optional channels-last memory format for conv-heavy encoders."""
    import torch

    if device.split(":")[0] == "cpu":
        keep_freed_memory()
    module = module.to(device).eval()
    if channels_last:
        module = module.to(memory_format=torch.channels_last)
    return module
