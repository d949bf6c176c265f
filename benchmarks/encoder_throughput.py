"""Encoder throughput, printed as ratios measured in one run (LiteMedSAM, the embedded default FM).

1. Harness end-to-end images/s (PNG decode + model preprocessing in a DataLoader + batched forward, via
   fairmedbench.engine.features.extract_features) vs the bare encoder forward on tensors of the same shape.
2. LiteMedSAM encoder achieved GFLOP/s (FLOPs counted by torch's FlopCounterMode) as a fraction of this
   machine's matmul peak measured in the same run, for fp32, bf16 autocast and channels-last variants,
   with each variant's output tolerance against fp32 (min cosine similarity of embeddings, max relative
   error of the 64x64x256 feature map).

Usage: python benchmarks/encoder_throughput.py [--n 24] [--batch-size 8] [--num-workers N] [--device auto]
Real PNGs: $FMB_REAL_DATA/nih-cxr14/images (default ../shared/real next to the project).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fairmedbench.engine.device import BF16_MIN_COSINE, autocast, select_device  # noqa: E402
from fairmedbench.engine.features import default_workers, extract_features  # noqa: E402
from fairmedbench.registry.models import load_model  # noqa: E402


class PngSplit:
    """The real NIH ChestX-ray14 PNGs as a dataset split."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self.sample_ids = [p.stem for p in paths]
        self.fingerprint = "nih-cxr14-png-" + str(len(paths))

    def __len__(self) -> int:
        return len(self.paths)

    def load_image(self, i: int) -> np.ndarray:
        from PIL import Image

        with Image.open(self.paths[i]) as im:
            return np.asarray(im.convert("L"))


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def matmul_peak(device: str, dtype: torch.dtype, n: int = 2048, reps: int = 5) -> float:
    """Best-of-`reps` GFLOP/s of an n x n matmul on this machine."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    best = 0.0
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        a @ b
        sync(device)
        best = max(best, 2 * n**3 / (time.perf_counter() - t) / 1e9)
    return best


def timed_forward(encoder: torch.nn.Module, batches: list[torch.Tensor], device: str, precision: str,
                  channels_last: bool) -> tuple[float, torch.Tensor]:
    """Seconds for all batches (after one warm-up batch) and the concatenated feature maps."""
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    encoder.to(memory_format=fmt)
    xs = [b.to(device).contiguous(memory_format=fmt) for b in batches]
    with autocast(device, precision):
        encoder(xs[0])
        sync(device)
        t = time.perf_counter()
        outs = [encoder(x).float() for x in xs]
        sync(device)
    encoder.to(memory_format=torch.contiguous_format)
    return time.perf_counter() - t, torch.cat(outs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=24, help="number of real PNGs (default 24)")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--num-workers", type=int, default=None, help="default: the harness's own choice")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--rounds", type=int, default=2, help="alternating timing rounds; best is kept")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile variant")
    args = ap.parse_args()

    root = Path(os.environ.get("FMB_REAL_DATA", Path(__file__).resolve().parents[2] / "shared" / "real"))
    png_dir = root / "nih-cxr14" / "images"
    paths = sorted(png_dir.glob("*.png"))[: args.n]
    if not paths:
        print(f"no PNGs under {png_dir}: set FMB_REAL_DATA to the shared/real folder", file=sys.stderr)
        return 2
    device = select_device(args.device)
    model = load_model("litemedsam", device=device)
    encoder = model.module.image_encoder
    split = PngSplit(paths)
    n, bs = len(paths), args.batch_size
    print(f"device={device} torch={torch.__version__} threads={torch.get_num_threads()} "
          f"images={n} batch={bs} "
          f"workers={args.num_workers if args.num_workers is not None else default_workers(device)} "
          f"weights={model.weights.identity[:12]}")

    # 1. harness end-to-end vs bare forward on tensors of the same shape (alternating, best of rounds)
    extract_features(model, PngSplit(paths[:bs]), split_name="warmup", cache_dir=None, batch_size=bs,
                     device=device)
    shape = (3, model.card.preprocessing.size, model.card.preprocessing.size)
    gen = torch.Generator().manual_seed(0)
    batches = [torch.rand((min(bs, n - i),) + shape, generator=gen) for i in range(0, n, bs)]
    harness_s = bare_s = float("inf")
    for _ in range(args.rounds):
        t = time.perf_counter()
        feats = extract_features(model, split, split_name="bench", cache_dir=None, batch_size=bs,
                                 num_workers=args.num_workers, device=device)
        harness_s = min(harness_s, time.perf_counter() - t)
        with autocast(device, "fp32"):
            sync(device)
            t = time.perf_counter()
            for b in batches:
                model.encode_image(b.to(device))
            sync(device)
            bare_s = min(bare_s, time.perf_counter() - t)
    print(f"\n[1] harness end-to-end {n / harness_s:7.2f} img/s | bare forward {n / bare_s:7.2f} img/s | "
          f"ratio {bare_s / harness_s:.1%} (best of {args.rounds}; features {feats.array.shape})")

    # 2. achieved GFLOP/s as a fraction of measured matmul peak
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        encoder(batches[0][:1].to(device))
    flops_per_image = counter.get_total_flops()
    peak32 = matmul_peak(device, torch.float32)
    peak16 = matmul_peak(device, torch.bfloat16)
    print(f"\n[2] LiteMedSAM encoder {flops_per_image / 1e9:.2f} GFLOP/image; matmul peak fp32 "
          f"{peak32:.1f} GFLOP/s, bf16 {peak16:.1f} GFLOP/s")
    m = min(n, bs)  # variants are timed on one batch of real images
    pixels = torch.cat([torch.from_numpy(model.preprocess(split.load_image(i)))[None] for i in range(m)])
    real_batches = [pixels]
    ref_s, ref = timed_forward(encoder, real_batches, device, "fp32", False)
    ref_emb = ref.mean(dim=(2, 3))
    print(f"{'variant (' + str(m) + ' real images)':<26}{'img/s':>8}{'GFLOP/s':>9}{'of fp32 peak':>14}"
          f"{'of own peak':>13}{'min cos':>9}{'max rel err':>13}")
    variants = [("fp32", "fp32", False, encoder), ("fp32 channels-last", "fp32", True, encoder),
                ("bf16 autocast", "bf16", False, encoder), ("bf16 channels-last", "bf16", True, encoder)]
    if not args.no_compile:
        compiled = torch.compile(encoder)
        t = time.perf_counter()
        timed_forward(compiled, real_batches, device, "bf16", True)  # compiles (and warms up)
        print(f"(torch.compile took {time.perf_counter() - t:.0f} s)")
        variants.append(("bf16 channels-last compile", "bf16", True, compiled))
    for name, precision, cl, enc in variants:
        secs, out = (ref_s, ref) if name == "fp32" else timed_forward(enc, real_batches, device, precision, cl)
        gflops = flops_per_image * m / secs / 1e9
        own = peak16 if precision == "bf16" else peak32
        cos = torch.nn.functional.cosine_similarity(out.mean(dim=(2, 3)), ref_emb).min().item()
        rel = ((out - ref).abs().max() / ref.abs().max()).item()
        ok = "" if cos >= BF16_MIN_COSINE else "  (outside tolerance)"
        print(f"{name:<26}{m / secs:8.2f}{gflops:9.1f}{gflops / peak32:14.1%}{gflops / own:13.1%}"
              f"{cos:9.5f}{rel:13.2e}{ok}")
    print(f"\ntolerance: embeddings' cosine similarity to fp32 >= {BF16_MIN_COSINE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
