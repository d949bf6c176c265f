"""`benchmark evaluate` start-up and batch throughput, measured in the same run, printed as ratios.

1. Start-up: wall time of `benchmark evaluate` on a 100-row CSV (--n-boot 0), median of --repeat fresh
   processes, against `python -c "import numpy"` (the floor any numpy tool pays) measured alternately.
2. Batch: files/s of one `benchmark evaluate --predictions f1 f2 ...` call against one call per file.
The machine's load moves absolute times; compare the ratios. Usage: python benchmarks/evaluate_speed.py
[--files 20] [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EVAL = [sys.executable, "-m", "fairmedbench", "evaluate", "--label", "y", "--score", "p", "--attribute", "sex",
        "--n-boot", "0"]


def write_file(path: Path, n: int = 100, seed: int = 0) -> None:
    """A prediction CSV: label y, score p, sex, split (one third validation)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    p = 1 / (1 + np.exp(-(1.5 * (2 * y - 1) + rng.normal(0, 1, n))))
    sex = rng.choice(["F", "M"], n)
    rows = ["y,p,sex,split"] + [f"{a},{b:.6f},{c},{'val' if i % 3 == 0 else 'test'}"
                                for i, (a, b, c) in enumerate(zip(y, p, sex))]
    path.write_text("\n".join(rows) + "\n")


def wall(cmd: list[str]) -> float:
    """Seconds one command takes, from process start to exit (it must succeed)."""
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=20, help="files in the batch comparison")
    ap.add_argument("--repeat", type=int, default=7, help="fresh processes per start-up measurement")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        write_file(d / "p100.csv")
        numpy_t, eval_t = [], []
        for _ in range(args.repeat):  # alternate, so both see the same machine load
            numpy_t.append(wall([sys.executable, "-c", "import numpy"]))
            eval_t.append(wall([*EVAL, "--predictions", str(d / "p100.csv"), "--out", str(d / "one.json")]))
        t_np, t_ev = statistics.median(numpy_t), statistics.median(eval_t)
        print(f"start-up, 100-row CSV, --n-boot 0 (median of {args.repeat}):")
        print(f"  python -c 'import numpy'   {t_np:.3f} s")
        print(f"  benchmark evaluate         {t_ev:.3f} s   = {t_ev / t_np:.2f}x numpy's import "
              f"(+{t_ev - t_np:.3f} s)")
        files = [d / f"f{i:03d}.csv" for i in range(args.files)]
        for i, f in enumerate(files):
            write_file(f, seed=i)
        t_batch = wall([*EVAL, "--predictions", *map(str, files), "--out", str(d / "batch")])
        t_each = sum(wall([*EVAL, "--predictions", str(f), "--out", str(d / "each" / f"{f.stem}.json")])
                     for f in files)
        print(f"batch throughput, {args.files} files of 100 rows:")
        print(f"  one call per file          {args.files / t_each:.2f} files/s ({t_each:.2f} s)")
        print(f"  one batch call             {args.files / t_batch:.2f} files/s ({t_batch:.2f} s)   "
              f"= {t_each / t_batch:.1f}x")


if __name__ == "__main__":
    main()
