"""The tolerance within which a run's numbers agree across CPU kernels, and the comparison that applies it."""

from __future__ import annotations

from typing import Any

#: how far any number of a result may move between CPU kernels (oneMKL's code branch, ATen's and oneDNN's
#: instruction set); measured on a 2-core AMD EPYC (avx512_bf16) with the tiny moco-cxr run of
#: tests/run/test_kernel_determinism.py: oneMKL's branch moves head scores by 6e-8 and results by 2.4e-8 (the Intel
#: report: 3.3e-9), ATen's `default` or oneDNN's AVX2 kernels move features by up to 1.7e-5 and results by up to
#: 1.8e-6; threads (1, 2, 4) move nothing. 1e-5 is 100x below the 3 decimals any number is shown with.
KERNEL_TOLERANCE = 1e-5


def differences(a: Any, b: Any, tolerance: float = KERNEL_TOLERANCE, where: str = "") -> list[str]:
    """Where two JSON documents differ: floats by more than `tolerance`, anything else at all (NaN equals NaN)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{where}: keys {sorted(a.keys() ^ b.keys())}"]
        return [d for k in a for d in differences(a[k], b[k], tolerance, f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, tolerance, f"{where}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        same = abs(a - b) <= tolerance or (a != a and b != b)
        return [] if same else [f"{where}: {a!r} vs {b!r}"]
    return [] if type(a) is type(b) and a == b else [f"{where}: {a!r} vs {b!r}"]
