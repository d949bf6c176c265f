"""Start-up cost of the CLI in CPU time (user + sys of each fresh process), as ratios to a bare `import numpy`
measured alternately in the same job: `benchmark --help`, `list models` and `evaluate` on a 100-row CSV
(defaults, so bootstrap and permutations included; and with --n-boot 0 --n-perm 0). Median of --repeat runs.
CPU time, unlike wall time, does not grow with the other work on a shared machine. The bar (issue 29): evaluate on
100 rows at most 4x numpy's import. Every command runs once untimed first, with PYTHONDONTWRITEBYTECODE unset, so
that the timed starts read compiled bytecode as every start after a user's first does (a shell that sets that
variable would otherwise recompile the package's modules at every start).

    python benchmarks/startup.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def cpu(cmd: list[str]) -> float:
    """CPU seconds (user + sys) one command costs in a fresh process (it must succeed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    """Print each command's median CPU and its ratio to numpy's import."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per command")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "p100.csv"
        csv.write_text("y,p,sex\n" + "".join(f"{i % 2},{(i * 37 % 100) / 100:.2f},{'FM'[i % 3 == 0]}\n"
                                             for i in range(100)))
        ev = [sys.executable, "-m", "fairmedbench", "evaluate", "--predictions", str(csv), "--label", "y",
              "--score", "p", "--attribute", "sex", "--out", str(Path(tmp) / "r.json"), "--force"]
        commands = {"python -c 'import numpy'": [sys.executable, "-c", "import numpy"],
                    "benchmark --help": [sys.executable, "-m", "fairmedbench", "--help"],
                    "benchmark list models": [sys.executable, "-m", "fairmedbench", "list", "models"],
                    "evaluate, 100 rows (defaults)": ev,
                    "evaluate, 100 rows, --n-boot 0 --n-perm 0": [*ev, "--n-boot", "0", "--n-perm", "0"]}
        times: dict[str, list[float]] = {k: [] for k in commands}
        for cmd in commands.values():  # untimed: writes the bytecode cache a user's first start writes
            cpu(cmd)
        for _ in range(args.repeat):  # alternate, so every command sees the same machine
            for name, cmd in commands.items():
                times[name].append(cpu(cmd))
    base = statistics.median(times["python -c 'import numpy'"])
    print(f"CPU time (user + sys), median of {args.repeat}; load average {os.getloadavg()[0]:.1f}")
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"  {name:<45} {t:6.3f} s   {t / base:5.1f}x numpy's import")


if __name__ == "__main__":
    main()
