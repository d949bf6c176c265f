"""Encoder throughput, printed as ratios measured in one run (LiteMedSAM, the embedded default FM).

1. Harness end-to-end images/s (PNG decode + model preprocessing in a DataLoader + batched forward, via
   fairmedbench.engine.features.extract_features) vs the bare encoder forward on tensors of the same shape.
2. LiteMedSAM's encoder FLOPs per image (torch's FlopCounterMode), this machine's fp32 matmul peak, and each
   execution path (torch fp32, the reference; ONNX Runtime fp32; torch bf16 autocast;
   torch.compile with --compile) in CPU-seconds and wall seconds per image, GFLOP/s and % of the peak, with its
   maps' max abs difference from the reference path's; timed in interleaved rounds, medians printed with the load
   average; then the paths `auto` chooses here (precision and encoder path).

3. With --families: every frozen encoder family on random weights through its real loader (ViT-B, ViT-L, ViT-H,
   ResNet, the SAM image encoders: see FAMILIES; ViT-H's ONNX path scaled from depth-reduced copies: see
   DEPTH_SCALED), each path (torch fp32, ONNX Runtime fp32 after its check against
   torch, torch bf16 autocast) in CPU-seconds per image against this machine's fp32 and bf16 matmul peaks measured
   in the same rounds, and the path `auto` picks for fp32 (a CPU without native bf16) and here.

Usage: python benchmarks/encoder_throughput.py [--n 8] [--batch-size 2] [--num-workers N] [--device auto]
       [--rounds 5] [--compile]
       python benchmarks/encoder_throughput.py --families [vit-b,vit-l,...] [--batch-size 2] [--rounds 3]
Real PNGs: $FMB_REAL_DATA/nih-cxr14/images (default ../shared/real next to the project).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fairmedbench.engine.device import (  # noqa: E402
    BF16_MIN_COSINE,
    autocast,
    describe_device,
    resolve_precision,
    select_device,
)
from fairmedbench.engine.features import default_workers, extract_features  # noqa: E402
from fairmedbench.registry.models import encoder_path, get_card, load_model, runtime  # noqa: E402
from fairmedbench.registry.models.card import loader_function  # noqa: E402
from fairmedbench.registry.models.weights import resolve_weights  # noqa: E402


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


def cpu_seconds() -> float:
    """CPU seconds of this process so far, every thread (torch's and ONNX Runtime's pools)."""
    t = os.times()
    return t.user + t.system


def matmul_peak(device: str, dtype: torch.dtype, n: int = 2048, reps: int = 3) -> tuple[float, float]:
    """Best-of-`reps` GFLOP per wall second and per CPU second of an n x n matmul on this machine (all threads)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    wall = cpu = 0.0
    for _ in range(reps):
        sync(device)
        t, c = time.perf_counter(), cpu_seconds()
        a @ b
        sync(device)
        wall = max(wall, 2 * n**3 / (time.perf_counter() - t) / 1e9)
        cpu = max(cpu, 2 * n**3 / max(cpu_seconds() - c, 1e-9) / 1e9)
    return wall, cpu


#: family -> (card, batch): random weights through the card's own loader, at the card's input size
FAMILIES: dict[str, tuple[str, int]] = {
    "vit-b": ("imagenet-vit-b16", 2), "vit-l": ("retfound-mae", 2), "vit-h": ("uni2-h", 1),
    "resnet": ("imagenet-resnet50", 2), "tinyvit-sam": ("litemedsam", 2), "sam-vit-b-256": ("sam-med2d", 2),
    "sam-vit-b": ("sam-vit-b", 1),
}
#: families whose ONNX path is measured on two depth-reduced copies (the card's own width, heads and MLP, fewer
#: blocks) and scaled to the card's depth: UNI2-h's full export needs ~10 GB more than a shared 24 GB machine has free
DEPTH_SCALED: dict[str, tuple[int, int]] = {"vit-h": (2, 4)}
PATHS = {"torch fp32": "fp32", "onnxruntime fp32": "fp32", "torch bf16": "bf16"}


def family_tower(card_name: str, depth: int | None = None) -> tuple[torch.nn.Module, int, int]:
    """The card's frozen image path on random weights (with `depth` blocks when given), its input size and depth."""
    card = get_card(card_name)
    full = int(card.loader_options.get("kwargs", {}).get("depth", 0))
    if depth is not None:
        options = card.loader_options
        card = dataclasses.replace(card, loader_options={**options, "kwargs": {**options["kwargs"], "depth": depth}})
    model = loader_function(card)(card, resolve_weights(card, "random"))
    tower: torch.nn.Module = model.image_tower() if model._embeds() else model.module.get_submodule("image_encoder")
    return tower, card.preprocessing.size, full


def scaled(t_lo: float, t_hi: float, lo: int, hi: int, depth: int) -> float:
    """A cost linear in the number of blocks, measured at `lo` and `hi` blocks, at `depth` blocks."""
    return t_hi + (depth - hi) * (t_hi - t_lo) / (hi - lo)


def families(names: list[str], batch_size: int | None, rounds: int) -> int:
    """Section 3: each family's paths in CPU-s per image and as a fraction of the fp32 (and bf16) matmul peak."""
    unknown = [f for f in names if f not in FAMILIES]
    if unknown:
        print(f"--families: unknown {', '.join(unknown)}; expected some of {', '.join(FAMILIES)}", file=sys.stderr)
        return 2
    print(f"CPU: {describe_device('cpu')}; torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{encoder_path.ort_versions()}")
    rows, notes = [], []
    for family in names:
        card, default_batch = FAMILIES[family]
        m = batch_size or default_batch
        tower, size, depth = family_tower(card)
        pixels = torch.rand(m, 3, size, size, generator=torch.Generator().manual_seed(0))
        with FlopCounterMode(display=False) as counter, torch.inference_mode():
            tower(pixels[:1])
        gf = counter.get_total_flops() / 1e9
        t = time.perf_counter()
        # variant (None: the card's depth, else a depth-reduced copy) -> its tower and the paths timed on it
        variants: dict[int | None, tuple[torch.nn.Module, dict[str, Callable[[torch.Tensor], torch.Tensor]]]] = {}
        reduced: tuple[int, ...] = DEPTH_SCALED.get(family, ())
        variants[None] = (tower, {"torch fp32": tower, "torch bf16": tower} if reduced else {})
        agreement: encoder_path.Agreement | None = None
        for d in (*reduced,) or (None,):
            module = family_tower(card, d)[0] if d is not None else tower
            paths = {"torch fp32": module, "torch bf16": module}
            try:
                agreement = encoder_path.check_export(module, size)
                paths["onnxruntime fp32"] = encoder_path.ort_runner(module, size)
            except Exception as exc:  # noqa: BLE001  # reported, and the family is timed on torch only
                print(f"{family}: the ONNX export failed ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})")
            variants[d] = (module, paths)
        export_s = time.perf_counter() - t
        outs: dict[str, torch.Tensor] = {}
        for name, fn in variants[None][1].items():
            with autocast("cpu", PATHS[name]):
                outs[name] = fn(pixels).float()
        for d in reduced:  # warm-up of the reduced copies
            for name, fn in variants[d][1].items():
                with autocast("cpu", PATHS[name]):
                    fn(pixels)
        cpu_s: dict[tuple[int | None, str], list[float]] = {(d, k): [] for d, v in variants.items() for k in v[1]}
        peaks: list[tuple[float, float]] = []
        for _ in range(rounds):  # interleaved with the peaks, so that other processes' load falls on all alike
            peaks.append((matmul_peak("cpu", torch.float32)[1], matmul_peak("cpu", torch.bfloat16)[1]))
            for d, (_, paths) in variants.items():
                for name, fn in paths.items():
                    with autocast("cpu", PATHS[name]):
                        c = cpu_seconds()
                        fn(pixels)
                        cpu_s[d, name].append((cpu_seconds() - c) / m)
        med = {k: statistics.median(v) for k, v in cpu_s.items()}
        per_image = {name: med[None, name] for name in PATHS if (None, name) in med}
        if reduced:
            lo, hi = reduced
            estimate = {name: scaled(med[lo, name], med[hi, name], lo, hi, depth)
                        for name in PATHS if (lo, name) in med}
            per_image.setdefault("onnxruntime fp32", estimate.get("onnxruntime fp32", float("nan")))
            notes.append(f"{family}: ONNX Runtime scaled to {depth} blocks from copies of {lo} and {hi} blocks "
                         f"({', '.join(f'{med[d, n]:.2f}' for d in reduced for n in PATHS if (d, n) in med)} CPU-s "
                         f"per image, {'/'.join(PATHS)} at {lo} then {hi}); the same scaling gives torch fp32 "
                         f"{estimate['torch fp32']:.2f} and bf16 {estimate['torch bf16']:.2f} against "
                         f"{per_image['torch fp32']:.2f} and {per_image['torch bf16']:.2f} measured at {depth} "
                         f"blocks; ORT diff and the auto choice: of the {hi}-block copy")
        peak32, peak16 = (statistics.median(p[i] for p in peaks) for i in (0, 1))
        chosen_on = variants[reduced[-1]][0] if reduced else tower
        chosen32 = encoder_path.resolve_encoder_path(chosen_on, size, "cpu", "fp32")
        here = resolve_precision("auto", "cpu")
        rows.append((family, card, size, gf, peak32, peak16, per_image, agreement, export_s,
                     f"{'onnxruntime' if chosen32 == 'onnxruntime' else 'torch'} fp32",
                     f"{encoder_path.resolve_encoder_path(chosen_on, size, 'cpu', here)} {here}",
                     (outs["torch bf16"] - outs["torch fp32"]).abs().max().item()))
        del variants, tower, outs
        print(f"{family} done ({time.perf_counter() - t:.0f} s)", file=sys.stderr, flush=True)
    print(f"\n[3] frozen encoder families, random weights, CPU-s per image (median of {rounds} interleaved rounds); "
          "'of peak': GFLOP per CPU-s over the fp32 matmul peak (bf16: over the bf16 peak) measured in the same rounds")
    print(f"{'family':<14}{'card':<18}{'px':>5}{'GFLOP':>7}{'peak32':>8}{'peak16':>8}  "
          f"{'torch fp32':>13}  {'ORT fp32':>13}  {'torch bf16':>13}  {'ORT diff':>16}{'bf16 diff':>10}  "
          "auto: no-bf16 CPU / here")
    for family, card, size, gf, p32, p16, med, agr, export_s, chosen32, here, bf16_diff in rows:
        cells = "".join(f"{med[name]:7.2f} {gf / med[name] / peak:5.0%}  " if name in med else f"{'-':>13}  "
                        for name, peak in (("torch fp32", p32), ("onnxruntime fp32", p32), ("torch bf16", p16)))
        diff = f"{agr.max_abs_diff:.1e}/{agr.bound:.0e}" if agr else "no export"
        print(f"{family:<14}{card:<18}{size:5d}{gf:7.1f}{p32:8.0f}{p16:8.0f}  {cells}{diff:>16}{bf16_diff:10.1e}  "
              f"{chosen32} / {here}  (export+check {export_s:.0f} s)")
    print("(peaks in GFLOP per CPU-s, 2048^3 matmul; ORT diff: max abs difference from torch fp32 on the export's "
          "probe batch / its bound; bf16 diff: on the timed batch)")
    for note in notes:
        print(note)
    print(f"load average (1, 5, 15 min): {', '.join(f'{v:.1f}' for v in os.getloadavg())} on {os.cpu_count()} CPUs")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8, help="number of real PNGs (default 8)")
    ap.add_argument("--batch-size", type=int, default=2, help="encoder batch; [2] times one batch (default 2)")
    ap.add_argument("--num-workers", type=int, default=None, help="default: the harness's own choice")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds; medians are printed")
    ap.add_argument("--compile", action="store_true",
                    help="also time torch.compile (inductor; minutes of compiling on a cold cache)")
    ap.add_argument("--families", nargs="?", const=",".join(FAMILIES), default=None,
                    help=f"only section 3, for these families (default all: {','.join(FAMILIES)})")
    args = ap.parse_args()
    if args.families is not None:
        return families(args.families.split(","), args.batch_size if "--batch-size" in sys.argv else None,
                        args.rounds)

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
    for _ in range(min(args.rounds, 2)):
        runtime.MAP_MEMO.clear()  # encode every image again (the memo would serve the maps of the round before)
        t = time.perf_counter()
        feats = extract_features(model, split, split_name="bench", cache_dir=None, batch_size=bs,
                                 num_workers=args.num_workers, device=device)
        harness_s = min(harness_s, time.perf_counter() - t)
        runtime.MAP_MEMO.clear()
        with autocast(device, "fp32"):
            sync(device)
            t = time.perf_counter()
            for b in batches:
                model.encode_image(b.to(device))
            sync(device)
            bare_s = min(bare_s, time.perf_counter() - t)
    print(f"\n[1] harness end-to-end {n / harness_s:7.2f} img/s | bare forward {n / bare_s:7.2f} img/s | "
          f"ratio {bare_s / harness_s:.1%} (best of {min(args.rounds, 2)}; features {feats.array.shape})")

    # 2. each path's achieved GFLOP per CPU-second (and per wall second) as a fraction of the fp32 matmul peak
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        encoder(batches[0][:1].to(device))
    flops = counter.get_total_flops()
    size = model.card.preprocessing.size
    m = min(n, bs)  # the runs are timed on one batch of real images
    pixels = torch.cat([torch.from_numpy(model.preprocess(split.load_image(i)))[None] for i in range(m)]).to(device)
    runs: dict[str, tuple[str, Callable[[torch.Tensor], torch.Tensor]]] = {"torch fp32 (reference)": ("fp32", encoder)}
    if device == "cpu":
        runs["onnxruntime fp32"] = ("fp32", encoder_path.ort_runner(encoder, size))
    runs["torch bf16 autocast"] = ("bf16", encoder)
    if args.compile:
        compiled = torch.compile(encoder)
        t = time.perf_counter()
        with autocast(device, "fp32"):
            compiled(pixels)
        print(f"(torch.compile: first call {time.perf_counter() - t:.0f} s wall)")
        runs["torch.compile fp32"] = ("fp32", compiled)
    outs: dict[str, torch.Tensor] = {}
    cpu_s: dict[str, list[float]] = {k: [] for k in runs}
    wall_s: dict[str, list[float]] = {k: [] for k in runs}
    peaks: list[tuple[float, float]] = []
    for name, (precision, fn) in runs.items():  # warm-up, and the maps compared below
        with autocast(device, precision):
            outs[name] = fn(pixels).float()
    for _ in range(args.rounds):  # interleaved, so that other processes' load falls on every path alike
        peaks.append(matmul_peak(device, torch.float32))
        for name, (precision, fn) in runs.items():
            with autocast(device, precision):
                sync(device)
                t, c = time.perf_counter(), cpu_seconds()
                fn(pixels)
                sync(device)
                wall_s[name].append((time.perf_counter() - t) / m)
                cpu_s[name].append((cpu_seconds() - c) / m)
    peak_wall = statistics.median(p[0] for p in peaks)
    peak_cpu = statistics.median(p[1] for p in peaks)
    gf = flops / 1e9
    print(f"\n[2] LiteMedSAM encoder: {gf:.2f} GFLOP per {size}x{size} image (FlopCounterMode, torch graph)")
    print(f"fp32 matmul peak (2048^3, {torch.get_num_threads()} threads, median of {args.rounds} rounds of best of 3): "
          f"{peak_wall:.1f} GFLOP/s wall, {peak_cpu:.1f} GFLOP per CPU-s")
    print(f"{'path (' + str(m) + ' real images)':<28}{'CPU-s/img':>10}{'GFLOP/CPU-s':>12}{'of peak':>9}"
          f"{'s/img wall':>11}{'GFLOP/s':>9}{'of peak':>9}{'max abs diff':>14}{'min cos':>9}")
    ref = outs["torch fp32 (reference)"]
    for name in runs:
        c, w = statistics.median(cpu_s[name]), statistics.median(wall_s[name])
        diff = (outs[name] - ref).abs().max().item()
        cos = torch.nn.functional.cosine_similarity(outs[name].mean(dim=(2, 3)), ref.mean(dim=(2, 3))).min().item()
        print(f"{name:<28}{c:10.2f}{gf / c:12.1f}{gf / c / peak_cpu:9.0%}{w:11.2f}{gf / w:9.1f}"
              f"{gf / w / peak_wall:9.0%}{diff:14.1e}{cos:9.5f}")
    print(f"(medians of {args.rounds} interleaved rounds; max abs diff of the {'x'.join(map(str, ref.shape[1:]))} "
          f"maps from the torch fp32 path's, maps up to {ref.abs().max().item():.2f}; min cos of the pooled "
          f"embeddings; bf16 is accepted at min cos >= {BF16_MIN_COSINE})")
    chosen = resolve_precision("auto", device)
    print(f"chosen: precision auto -> {chosen}; encoder path auto -> "
          f"{encoder_path.resolve_encoder_path(encoder, size, device, chosen)} (the lines above on stderr say why)")
    print(f"load average (1, 5, 15 min): {', '.join(f'{v:.1f}' for v in os.getloadavg())} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
