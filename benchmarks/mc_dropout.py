"""MC dropout on a LoRA head: time of T full passes (the encoder re-run every pass, as before the encoder memo)
against `mc_predict` (the eval-mode encoder once per batch, then T passes of head dropout + linear), measured
in the same run on a random-weight ViT-B/16 LoRA head, printed as ratios old/new with the passes' max
difference (the two must give the same passes).

Usage: python benchmarks/mc_dropout.py [--sizes 64 224] [--n 4] [--samples 10] [--batch-size 4] [--reps 1]
       [--device cpu]   (times: the best of --reps, each path after a warm-up pass)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fairmedbench.adapters import RunContext  # noqa: E402
from fairmedbench.adapters.lora import lora_settings, make_lora_head  # noqa: E402
from fairmedbench.registry.models import load_model  # noqa: E402
from fairmedbench.tasks.classification import mc_predict  # noqa: E402


def full_passes(head: torch.nn.Module, x: np.ndarray, samples: int, seed: int) -> np.ndarray:
    """The old path: T passes of the whole model with the head dropout sampling, seeded as mc_predict is."""
    head.eval()
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        head.mc_dropout.train()
        out = [torch.sigmoid(head(torch.as_tensor(x))).numpy().astype(np.float64) for _ in range(samples)]
    head.eval()
    return np.stack(out)


def timed(fn, *args) -> tuple[float, np.ndarray]:
    t0 = time.perf_counter()
    out = fn(*args)  # numpy on the CPU: the device's work is done
    return time.perf_counter() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 224])
    parser.add_argument("--n", type=int, default=4, help="test images")
    parser.add_argument("--samples", type=int, default=10, help="T, MC passes")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--reps", type=int, default=1, help="repeats; the best time of each path is kept")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {args.device}, {torch.get_num_threads()} CPU threads; n={args.n} images, "
          f"T={args.samples}, batch {args.batch_size}, best of {args.reps}; random ViT-B/16 + LoRA (r 8) + head "
          "dropout 0.2")
    for size in args.sizes:
        model = load_model("imagenet-vit-b16", "random", image_size=size, device=args.device)
        x = np.random.default_rng(0).normal(size=(args.n, 3, size, size)).astype(np.float32)
        torch.manual_seed(0)
        head = make_lora_head(model, RunContext(batch_size=args.batch_size), lora_settings({"dropout": 0.2}), 1, x)
        full_passes(head, x, 1, 0)  # warm-up
        runs = [(timed(full_passes, head, x, args.samples, 0), timed(mc_predict, head, x, args.samples, 0))
                for _ in range(args.reps)]
        (t_old, old), (t_new, new) = (min((r[i] for r in runs), key=lambda t: t[0]) for i in (0, 1))
        print(f"{size:4d} px: old {t_old:7.2f} s ({args.n * args.samples / t_old:6.2f} img-passes/s)  "
              f"new {t_new:6.2f} s  old/new {t_old / t_new:5.2f}x  max |diff| {np.abs(old - new).max():.1e}")
        del head, model


if __name__ == "__main__":
    main()
