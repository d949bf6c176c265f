"""The main job (`benchmark controls`) profiled, in one process, against measurements taken in the same run.

Prints, for a fresh run of the main job (empty results and feature cache under a temporary folder):
- the whole job: wall, user and system CPU seconds, CPU utilisation (100% = one core busy), peak resident size,
  minor and major page faults;
- per stage (model load, resolving data, encoder forward passes, feature extraction around them, head training,
  prompting and mask decoding, metrics with their bootstrap, writing results, the rest): wall, CPU seconds, %CPU,
  page faults, the growth of the peak resident size during the stage, and images encoded. Stages are exclusive
  (an encode inside segmentation counts as encoding only);
- images encoded, distinct contents among them, and encodes per content (1.00: no image encoded twice);
- LiteMedSAM's encoder FLOPs per image (torch.utils.flop_counter.FlopCounterMode), this machine's fp32 matmul rate
  (2048^3, best of 5, all threads) per wall second and per CPU second, a bare forward pass of the same encoder at
  the job's precision, encoder path ($FMB_ENCODER_PATH, else the machine's measured choice) and batch, and the
  encoder stage's achieved rate as a fraction of the matmul rate;
- ratios of the job's encoder stage to the bare forward pass (CPU seconds per image).

Usage: python benchmarks/main_job.py [--precision auto|fp32|bf16] [--n 100] [--batch-size N] [--keep DIR] [--bare-only]
The CPU flags that decide bf16 are printed first. Timings on a shared machine are noisy: CPU seconds and the
ratios measured in this one process are the figures to compare.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FIELDS = ("wall", "user", "sys", "minflt", "majflt")


def snapshot() -> dict[str, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"wall": time.perf_counter(), "user": r.ru_utime, "sys": r.ru_stime, "minflt": r.ru_minflt,
            "majflt": r.ru_majflt, "maxrss": r.ru_maxrss / 1e6}  # ru_maxrss is in KiB on Linux: GB here


class Profiler:
    """Exclusive per-stage totals of wall, CPU, page faults, peak-RSS growth, calls and images."""

    def __init__(self) -> None:
        self.stages: dict[str, dict[str, float]] = {}
        self.stack: list[dict[str, float]] = []

    def wrap(self, stage: str, fn: Callable[..., Any], images: Callable[..., int] | None = None) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = snapshot()
            self.stack.append({k: 0.0 for k in (*FIELDS, "maxrss")})
            try:
                return fn(*args, **kwargs)
            finally:
                end = snapshot()
                child = self.stack.pop()
                row = self.stages.setdefault(stage, {k: 0.0 for k in (*FIELDS, "maxrss", "calls", "images")})
                for k in FIELDS:
                    total = end[k] - start[k]
                    row[k] += total - child[k]
                    if self.stack:
                        self.stack[-1][k] += total
                grow = end["maxrss"] - start["maxrss"]
                row["maxrss"] += grow - child["maxrss"]
                if self.stack:
                    self.stack[-1]["maxrss"] += grow
                row["calls"] += 1
                if images is not None:
                    row["images"] += images(*args, **kwargs)
        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        return timed


def patch_everywhere(original: Any, replacement: Any) -> int:
    """Replace `original` in every loaded fairmedbench module that holds it (by identity); how many were patched."""
    n = 0
    for name, mod in list(sys.modules.items()):
        if not name.startswith("fairmedbench") or mod is None:
            continue
        for attr, value in list(vars(mod).items()):
            if value is original:
                setattr(mod, attr, replacement)
                n += 1
    return n


def cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), [])
    keep = sorted(f for f in flags if f.startswith(("avx", "amx", "fma")))
    return f"{model}, {os.cpu_count()} logical CPUs; {' '.join(keep)}"


def matmul_rate(n: int = 2048, reps: int = 5) -> tuple[float, float]:
    """Best GFLOP per wall second and per CPU second of an fp32 n x n matmul (all threads)."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best_wall = best_cpu = 0.0
    for _ in range(reps):
        s = snapshot()
        a @ b
        e = snapshot()
        flop = 2 * n**3 / 1e9
        best_wall = max(best_wall, flop / (e["wall"] - s["wall"]))
        best_cpu = max(best_cpu, flop / max(1e-9, e["user"] + e["sys"] - s["user"] - s["sys"]))
    return best_wall, best_cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    ap.add_argument("--n", type=int, default=100, help="images per control dataset (the job's default)")
    ap.add_argument("--batch-size", type=int, default=None, help="encoder batch (default: the job's own choice)")
    ap.add_argument("--keep", metavar="DIR", help="write results and cache here and keep them (default: a temp folder)")
    ap.add_argument("--bare-only", action="store_true", help="only the measurements (matmul rate, FLOPs, bare forward)")
    args = ap.parse_args()

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    import fairmedbench.adapters  # noqa: F401  (registers usages, imports their modules before patching)
    import fairmedbench.benchmark.controls  # noqa: F401
    import fairmedbench.metrics.classification as mcls
    import fairmedbench.metrics.seg_fairness as mseg
    import fairmedbench.tasks.classification as tclass
    import fairmedbench.tasks.common as tcommon
    import fairmedbench.tasks.segmentation as tseg
    from fairmedbench import cli
    from fairmedbench.benchmark import resolve as resolve_mod
    from fairmedbench.engine import features as feats_mod
    from fairmedbench.engine import store
    from fairmedbench.engine.device import autocast, encoder_batch_size, resolve_precision
    from fairmedbench.registry import models as models_mod
    from fairmedbench.registry.models import runtime
    from fairmedbench.registry.models.encoder_path import frozen_forward

    print(f"cpu: {cpu_flags()}")
    print(f"torch {torch.__version__}: {torch.get_num_threads()} intra-op threads, "
          f"{torch.get_num_interop_threads()} inter-op threads")
    precision = resolve_precision(args.precision, "cpu")
    batch = encoder_batch_size(args.batch_size, "cpu")

    # -- measurements in the same process: matmul rate, encoder FLOPs, a bare forward pass --------------------------
    peak_wall, peak_cpu = matmul_rate()
    model = models_mod.load_model("litemedsam", None, device="cpu")
    enc, size = model.module.image_encoder, model.card.preprocessing.size
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        enc(torch.randn(1, 3, size, size))
    flops = counter.get_total_flops()
    path = model.encoder_path("cpu", precision)
    x = torch.randn(batch, 3, size, size)
    with autocast("cpu", precision):
        frozen_forward(enc, x[:1])
        s = snapshot()
        frozen_forward(enc, x)
        e = snapshot()
    bare_wall = (e["wall"] - s["wall"]) / batch
    bare_cpu = (e["user"] + e["sys"] - s["user"] - s["sys"]) / batch
    del model, enc, x
    if args.bare_only:
        r = snapshot()
        print(f"process: peak RSS {r['maxrss']:.2f} GB, {r['minflt']:.0f} minor page faults")
    print(f"fp32 matmul 2048^3: {peak_wall:.0f} GFLOP/s wall, {peak_cpu:.0f} GFLOP per CPU-second")
    print(f"LiteMedSAM encoder: {flops / 1e9:.1f} GFLOP per {size}x{size} image; bare forward ({precision}, {path}, "
          f"batch {batch}): {bare_wall:.2f} s wall, {bare_cpu:.2f} CPU-s per image = "
          f"{flops / 1e9 / bare_wall:.0f} GFLOP/s "
          f"({100 * flops / 1e9 / bare_wall / peak_wall:.0f}% of the matmul rate), "
          f"{flops / 1e9 / bare_cpu:.0f} GFLOP per CPU-s ({100 * flops / 1e9 / bare_cpu / peak_cpu:.0f}%)")

    if args.bare_only:
        return 0

    # -- the job, with every stage timed ------------------------------------------------------------------------
    prof = Profiler()
    stages = [
        (models_mod.load_model, "model load", None),
        (resolve_mod.resolve_run, "resolve (data, fingerprints)", None),
        (feats_mod.extract_features, "feature extraction (load, cache)", None),
        (tcommon.fit_epochs, "head training", None),
        (tclass.fit_head, "head training", None),
        (tseg.run_segmentation, "prompting + mask decoding", None),
        (mcls.evaluate_classification, "metrics + bootstrap", None),
        (mseg.evaluate_segmentation, "metrics + bootstrap", None),
    ] + [(getattr(store, f), "writing results", None) for f in ("write_json", "write_parquet", "write_columns",
                                                               "write_table", "write_text")]
    for fn, stage, images in stages:
        patch_everywhere(fn, prof.wrap(stage, fn, images))
    image_map = runtime.PromptableSegmenter.image_map
    runtime.PromptableSegmenter.image_map = prof.wrap("encoder forward", image_map, lambda self, px: px.shape[0])
    runtime.MAP_MEMO.clear()

    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="fmb-mainjob-"))
    argv = ["controls", "--out", str(tmp / "results"), "--cache-dir", str(tmp / "cache"), "--precision", args.precision,
            "--n", str(args.n)] + (["--batch-size", str(args.batch_size)] if args.batch_size else [])
    print(f"job: benchmark {' '.join(argv)}", flush=True)
    start = snapshot()
    try:
        rc = cli.main(argv)
    finally:
        end = snapshot()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    # -- report -----------------------------------------------------------------------------------------------
    wall = end["wall"] - start["wall"]
    user, sys_ = end["user"] - start["user"], end["sys"] - start["sys"]
    print(f"\nmain job exit {rc}: wall {wall:.1f} s, user {user:.1f} s, sys {sys_:.1f} s "
          f"(sys/user {100 * sys_ / max(user, 1e-9):.0f}%), CPU {100 * (user + sys_) / wall:.0f}%, "
          f"peak RSS {end['maxrss']:.2f} GB (process, incl. the measurements above), "
          f"page faults {end['minflt'] - start['minflt']:.0f} minor, {end['majflt'] - start['majflt']:.0f} major")
    accounted = {k: sum(r[k] for r in prof.stages.values()) for k in FIELDS}
    rest = {k: (end[k] - start[k]) - accounted[k] for k in FIELDS}
    rows = list(prof.stages.items()) + [("other", {**rest, "maxrss": 0.0, "calls": 0, "images": 0})]
    print(f"{'stage':34s} {'wall s':>8s} {'CPU s':>8s} {'%CPU':>6s} {'minflt':>9s} {'RSS+GB':>7s} {'images':>7s}")
    for name, r in rows:
        cpu = r["user"] + r["sys"]
        print(f"{name:34s} {r['wall']:8.1f} {cpu:8.1f} {100 * cpu / max(r['wall'], 1e-9):6.0f} {r['minflt']:9.0f} "
              f"{r['maxrss']:7.2f} {int(r['images']):7d}")
    encoded = runtime.MAP_MEMO.encoded
    n_enc, n_distinct = sum(encoded.values()), len(encoded)
    print(f"images encoded: {n_enc}, distinct contents {n_distinct}, "
          f"{n_enc / max(n_distinct, 1):.2f} encodes per content")
    enc_row = prof.stages.get("encoder forward")
    if enc_row and enc_row["images"]:
        per_wall = enc_row["wall"] / enc_row["images"]
        per_cpu = (enc_row["user"] + enc_row["sys"]) / enc_row["images"]
        rate = flops / 1e9 / per_wall
        print(f"encoder stage: {per_wall:.2f} s wall, {per_cpu:.2f} CPU-s per image "
              f"({per_cpu / bare_cpu:.2f}x the bare forward's CPU-s), {rate:.0f} GFLOP/s = "
              f"{100 * rate / peak_wall:.0f}% of the fp32 matmul rate measured above; "
              f"{flops / 1e9 / per_cpu:.0f} GFLOP per CPU-s = {100 * flops / 1e9 / per_cpu / peak_cpu:.0f}% "
              f"(precision {precision}, encoder path {path}, batch {batch})")
        print(f"job / encoder: the encoder forward is {100 * (enc_row['user'] + enc_row['sys']) / (user + sys_):.0f}% "
              "of the job's CPU seconds")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
