"""`benchmark sweep --dry-run`'s cost estimate checked against a measured sample of the same cells, in one process.

A small study (models x usages on one synthetic dataset of --n images, erm, one seed, the FairMedFM grid's n_boot
and n_perm) is planned and costed cell by cell exactly as the dry run costs it (`costs.estimate` on a plan holding
that one cell), then each cell is run (its feature encode first, where its usage caches features) and timed. Prints
estimated and measured seconds per cell and per usage with their ratio: the factor by which the dry run's hours
for the full grid (`benchmark sweep fairmedfm --dry-run`) are off on this machine.

Usage: python benchmarks/estimate_check.py [--models c2l,imagenet-vit-b16,dinov2] [--usages lp,lora]
       [--n 1000] [--device auto] [--epochs 10] [--out DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fairmedbench.adapters import USAGES  # noqa: E402
from fairmedbench.benchmark import sweep  # noqa: E402
from fairmedbench.benchmark.costs import estimate  # noqa: E402
from fairmedbench.benchmark.run import run  # noqa: E402
from fairmedbench.benchmark.studies import load_study  # noqa: E402
from fairmedbench.engine.device import describe_device, select_device  # noqa: E402
from fairmedbench.spec import RunOptions  # noqa: E402

STUDY = """description: a measured sample of the FairMedFM grid's cells (benchmarks/estimate_check.py)
models: [{models}]
datasets: [{dataset}]
attributes: [sex]
usages: [{usages}]
mitigations: [erm]
seeds: [0]
hparams: {{epochs: {epochs}}}
weights: random
n_boot: 1000
n_perm: 1000
dataset_options:
  n: {n}
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="c2l,imagenet-vit-b16,dinov2")
    ap.add_argument("--usages", default="lp,lora")
    ap.add_argument("--dataset", default="synth-control")
    ap.add_argument("--n", type=int, default=1000, help="images in the synthetic dataset (the dry run assumes 1000)")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", default=None, help="results folder (default: a temporary one)")
    args = ap.parse_args()
    device = select_device(args.device)
    out = Path(args.out or tempfile.mkdtemp(prefix="fmb-estimate-"))
    out.mkdir(parents=True, exist_ok=True)
    path = out / "estimate-sample.yaml"
    path.write_text(STUDY.format(models=", ".join(args.models.split(",")), usages=", ".join(args.usages.split(",")),
                                 dataset=args.dataset, n=args.n, epochs=args.epochs))
    study = load_study(str(path))
    opts = RunOptions(out_root=str(out / "results"), cache_dir=str(out / "cache"), device=device,
                      log=lambda message: None)
    plan = sweep.make_plan(study, opts)
    cells = [p for p in plan.cells if p.status == "planned" and p.resolved is not None]
    print(f"device {device}: {describe_device(device)}; {len(cells)} cells of {args.dataset} with n={args.n}, "
          f"{args.epochs} epochs, n_boot {study.n_boot}, n_perm {study.n_perm}", flush=True)
    rows, by_usage = [], {}
    for p in cells:
        one = dataclasses.replace(plan, cells=[p], runs={p.run_id: p} if p.run_id else {},
                                  encodes={k: v for k, v in plan.encodes.items() if k == p.encode})
        est = estimate(one, device, study.precision)
        guess = est["totals"]["measured"] + est["totals"]["assumed"]
        model, usage = p.cell.fields["model"], p.cell.fields["usage"]
        t = time.perf_counter()
        if USAGES.get(usage).caches_features and p.encode:
            sweep.encode(p.cell.spec, opts)
        run(p.cell.spec, opts)
        took = time.perf_counter() - t
        rows.append((model, usage, guess, took))
        e, m = by_usage.get(usage, (0.0, 0.0))
        by_usage[usage] = (e + guess, m + took)
        print(f"  {model:18} {usage:6} estimated {guess:8.1f} s  measured {took:8.1f} s  "
              f"measured/estimated {took / guess:6.2f}", flush=True)
    print("\nby usage (the dry run's 'by usage' line scales with these):")
    for usage, (e, m) in by_usage.items():
        print(f"  {usage:6} estimated {e:8.1f} s  measured {m:8.1f} s  measured/estimated {m / e:6.2f}")
    e, m = sum(r[2] for r in rows), sum(r[3] for r in rows)
    print(f"  all    estimated {e:8.1f} s  measured {m:8.1f} s  measured/estimated {m / e:6.2f}")
    print(f"load average {', '.join(f'{v:.1f}' for v in os.getloadavg())} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
