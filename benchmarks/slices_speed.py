"""2.5D slice encoding (issue 32): the journey's extraction stages before and after, measured in one process.

The journey: `benchmark --model c2l --weights random --dataset synth3d-contrast --usage lp --hparam slices=all`,
whose features are every slice of every volume through c2l (ResNet-18). Both paths encode the same slices of the
first --volumes volumes through engine.features.extract_features, in interleaved rounds (medians printed):
- before: each gray slice replicated to three planes before preprocessing (three PIL resizes and three planes of
  float work, as preprocessing did before), encoder batch 2 (the runner's CPU default, as the 2.5D path used);
- after: the gray plane preprocessed once, the slice batch of adapters.volumes.slice_batch (32 for c2l).
Per stage (index: SliceView reading each volume to list its slices; read, preprocess, collate, encode, store) in CPU-ms
per slice (extract_features' stage clock read as this process's CPU time, time.process_time: every thread),
wall-ms per slice, slices per wall second, GFLOP per CPU-second (against this machine's matmul GFLOP per CPU-second
at the run's precision) and per wall second (FLOPs counted by FlopCounterMode), and the features' max abs
difference between the paths. On a shared machine CPU time is the steadier measure; the load average is printed.

Usage: python benchmarks/slices_speed.py [--volumes 2] [--rounds 3] [--precision auto] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fairmedbench.adapters.base import RunContext  # noqa: E402
from fairmedbench.adapters.volumes import SliceView, slice_batch  # noqa: E402
from fairmedbench.benchmark.costs import model_flops  # noqa: E402
from fairmedbench.engine.device import CPU_BATCH, resolve_precision  # noqa: E402
from fairmedbench.engine.features import extract_features  # noqa: E402
from fairmedbench.registry.datasets import load_dataset  # noqa: E402
from fairmedbench.registry.models import load_model  # noqa: E402
from fairmedbench.tasks.common import SplitView  # noqa: E402

MODEL, DATASET = "c2l", "synth3d-contrast"
STAGES = ("index", "read", "preprocess", "collate", "encode", "store")


class ThreePlanes:
    """The model with the former preprocessing: a gray slice replicated to three planes first."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def preprocess(self, image: np.ndarray) -> np.ndarray:
        return self.model.preprocess(np.repeat(np.asarray(image)[:, :, None], 3, axis=2))


def cpu_name() -> str:
    """The CPU's model name and its bf16 / AVX-512 flags, from /proc/cpuinfo where there is one."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags")), [])
    return f"{name}, {os.cpu_count()} cores, " + ", ".join(f for f in ("avx512f", "avx512_bf16", "amx_bf16")
                                                           if f in flags)


def matmul_peak(dtype: torch.dtype, n: int = 2048, reps: int = 3) -> float:
    """Best-of-`reps` GFLOP per CPU-second of an n x n matmul (all threads; CPU time: other processes on the
    cores distort it less than wall time)."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    best = 0.0
    for _ in range(reps):
        t = time.process_time()
        a @ b
        best = max(best, 2 * n**3 / (time.process_time() - t) / 1e9)
    return best


def run_path(model: Any, volumes: SplitView, batch: int, precision: str
             ) -> tuple[dict[str, float], float, np.ndarray]:
    """One extraction of every slice of `volumes`, no cache: the stage CPU seconds (`index`: SliceView reading each
    volume to list its slices; then extract_features' stages, its clock read as process CPU time), wall seconds and
    features."""
    wall, cpu = time.monotonic(), time.process_time()
    view = SliceView(volumes, "all")
    index = time.process_time() - cpu
    real_clock, time.perf_counter = time.perf_counter, time.process_time  # type: ignore[assignment]
    try:
        feats = extract_features(model, view, split_name="bench", cache_dir=None, batch_size=batch, device="cpu",
                                 precision=precision)
    finally:
        time.perf_counter = real_clock  # type: ignore[assignment]
    return {"index": index, **feats.stages}, time.monotonic() - wall, np.asarray(feats.array)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--volumes", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, every core)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    precision = resolve_precision(args.precision, "cpu")
    ds = load_dataset(DATASET)
    volumes = SplitView(ds, np.arange(args.volumes), f"slices-speed-{args.volumes}")
    model = load_model(MODEL, "random")
    gflops = float(model_flops(MODEL)["gflops"])
    paths = {"before": (ThreePlanes(model), CPU_BATCH),
             "after": (model, slice_batch(model, RunContext(device="cpu", batch_size=CPU_BATCH)))}
    peak = matmul_peak(torch.bfloat16 if precision == "bf16" else torch.float32)
    n = len(SliceView(volumes, 'all'))
    print(f"CPU: {cpu_name()}; torch {torch.__version__}, {torch.get_num_threads()} threads, {precision}; "
          f"{MODEL} {gflops:.2f} GFLOP per slice; {precision} matmul peak {peak:.0f} GFLOP per CPU-s; "
          f"{args.volumes} volumes = {n} slices, {args.rounds} rounds")
    for m, batch in paths.values():  # warm-up: first-call allocations and kernel choices
        run_path(m, SplitView(ds, np.arange(1), "warm"), batch, precision)
    stages: dict[str, list[dict[str, float]]] = {p: [] for p in paths}
    walls: dict[str, list[float]] = {p: [] for p in paths}
    features: dict[str, np.ndarray] = {}
    for _ in range(args.rounds):
        for path, (m, batch) in paths.items():
            st, wall, features[path] = run_path(m, volumes, batch, precision)
            stages[path].append(st)
            walls[path].append(wall)
    print(f"{'path':8s} {'batch':>5s} " + " ".join(f"{s:>10s}" for s in STAGES)
          + f" {'CPU total':>10s} {'wall':>8s} {'slices/s':>8s} {'GFLOP/CPU-s':>11s} {'GFLOP/s':>8s} {'% peak':>6s}")
    med: dict[str, float] = {}
    for path, (_, batch) in paths.items():
        per = {s: statistics.median(r.get(s, 0.0) for r in stages[path]) * 1000 / n for s in STAGES}
        cpu = sum(per.values())
        wall = statistics.median(walls[path]) * 1000 / n
        med[path] = cpu
        print(f"{path:8s} {batch:5d} " + " ".join(f"{per[s]:8.2f}ms" for s in STAGES)
              + f" {cpu:8.2f}ms {wall:6.1f}ms {1000 / wall:8.1f} {gflops * 1000 / cpu:11.1f} "
              f"{gflops * 1000 / wall:8.1f} {100 * gflops * 1000 / cpu / peak:5.1f}%")
    print(f"after vs before: {med['before'] / med['after']:.2f}x less CPU per slice, "
          f"{statistics.median(walls['before']) / statistics.median(walls['after']):.2f}x less wall; features max "
          f"abs difference {float(np.abs(features['before'] - features['after']).max()):.2e} (scale "
          f"{float(np.abs(features['before']).max()):.2f}); load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
