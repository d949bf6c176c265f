"""Device and precision selection for frozen-encoder inference (torch imported lazily)."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from fairmedbench.errors import InputError

PRECISIONS = ("fp32", "bf16")
REQUESTS = ("auto", *PRECISIONS)
# bf16 autocast is accepted where embeddings stay within this cosine similarity of fp32 ones
# (measured per model by benchmarks/encoder_throughput.py); otherwise use fp32.
BF16_MIN_COSINE = 0.99


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


def resolve_precision(requested: str, device: str) -> str:
    """'auto' -> bf16 on CUDA, fp32 elsewhere; an explicit fp32 or bf16 is kept."""
    if requested not in REQUESTS:
        raise InputError(f"--precision {requested!r}: expected one of {', '.join(REQUESTS)}")
    if requested != "auto":
        return requested
    return "bf16" if device.startswith("cuda") else "fp32"


def check_precision(precision: str) -> str:
    """Validate a precision name (fp32 or bf16)."""
    if precision not in PRECISIONS:
        raise InputError(f"--precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    return precision


@contextlib.contextmanager
def autocast(device: str, precision: str) -> Iterator[None]:
    """Inference context: no autograd, and bf16 autocast when asked."""
    import torch

    check_precision(precision)
    with torch.inference_mode():
        if precision == "bf16":
            with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16):
                yield
        else:
            yield


def prepare_module(module: Any, device: str, channels_last: bool = False) -> Any:
    """Move to device, eval mode, optional channels-last memory format for conv-heavy encoders."""
    import torch

    module = module.to(device).eval()
    if channels_last:
        module = module.to(memory_format=torch.channels_last)
    return module
