"""The real audit at the defaults: `benchmark evaluate` on the 14-finding NIH ChestX-ray14 file (the CheXNet test
predictions joined to the official metadata: 22,433 rows, patients resampled), by sex, age bins and sex*age, with
n_boot 2000 and n_perm 1000. Prints CPU (user + sys), peak RSS, wall and the machine's load, and where the CPU
went: bootstrap and permutations (the CPU between the engine's progress ticks, attributed to the phase each tick
names), the rest (imports, reading, point metrics, tests, reports, writing), and the costliest findings.

    FMB_REAL_DATA=../shared/real python benchmarks/nih_audit.py [--n-boot 2000] [--n-perm 1000] [--findings 14] \
        [--out nih.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _child(argv: list[str], report: Path) -> None:
    """Run `benchmark evaluate ARGV` in this process, recording the CPU between the engine's progress ticks."""
    sys.path.insert(0, str(ROOT))
    from fairmedbench.cli import main
    from fairmedbench.engine import progress

    cpu: dict[str, float] = {}
    last = [time.process_time()]
    plain = progress.StageProgress.labelled

    def labelled(self: progress.StageProgress, stage: str):  # type: ignore[no-untyped-def]
        step = plain(self, stage)

        def record(done: int, total: int, label: str) -> None:
            now = time.process_time()
            cpu[label] = cpu.get(label, 0.0) + now - last[0]
            last[0] = now
            step(done, total, label)

        return record

    progress.StageProgress.labelled = labelled  # type: ignore[method-assign]
    code = main(argv)
    report.write_text(json.dumps({"code": code, "cpu": cpu}))


def main() -> None:
    """Build the joined file, run the audit in a child process, print its costs."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--n-perm", type=int, default=1000)
    ap.add_argument("--findings", type=int, default=14, help="the first N findings only (a cheaper check)")
    ap.add_argument("--out", type=Path, help="keep the evaluation's result JSON here (to compare versions' numbers)")
    ap.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child[1:], Path(args.child[0]))
        return
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from outputs_digest import REAL, _nih_file  # the one join of the NIH predictions to their labels

    if not (REAL / "nih-cxr14" / "preds.csv").exists():
        sys.exit(f"no NIH predictions under {REAL}: set FMB_REAL_DATA")
    with tempfile.TemporaryDirectory() as tmp:
        nih, report = Path(tmp) / "nih.csv", Path(tmp) / "cpu.json"
        findings = _nih_file(nih)[:args.findings]
        argv = ["evaluate", "--predictions", str(nih), "--label", ",".join(findings),
                "--score", ",".join(f"prob_{f}" for f in findings),
                "--attribute", "Patient Gender,Patient Age,Patient Gender*Patient Age",
                "--bins", "Patient Age=0,40,60,200", "--n-boot", str(args.n_boot), "--n-perm", str(args.n_perm),
                "--out", str(args.out.resolve() if args.out else Path(tmp) / "nih.json"), "--json"]
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--child", str(report), *argv], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
        wall = time.perf_counter() - t0
        use = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = json.loads(report.read_text())["cpu"]
    total = use.ru_utime + use.ru_stime
    print(f"NIH audit: {len(findings)} findings x (sex, age, sex*age), n_boot {args.n_boot}, n_perm {args.n_perm}, "
          f"patients resampled (load average {load:.1f} at start, {os.getloadavg()[0]:.1f} at end)")
    print(f"  CPU {total:.1f} s ({use.ru_utime:.1f} user + {use.ru_stime:.1f} sys), peak RSS "
          f"{use.ru_maxrss / 1024:.0f} MB, wall {wall:.0f} s")
    phases: dict[str, float] = {}
    per_finding: dict[str, float] = {}
    for label, s in cpu.items():
        phase = label.rsplit(": ", 1)[1] if ": " in label else "resampling"
        phases[phase] = phases.get(phase, 0.0) + s
        finding = label.split(" / ", 1)[0]
        per_finding[finding] = per_finding.get(finding, 0.0) + s
    phases["the rest (imports, reading, point metrics, tests, reports, writing)"] = total - sum(phases.values())
    for phase, s in phases.items():
        print(f"  {phase:<70} {s:7.1f} CPU-s  {100 * s / total:5.1f}%")
    top = sorted(per_finding.items(), key=lambda kv: -kv[1])[:3]
    print("  costliest findings: " + ", ".join(f"{f} {s:.1f} s" for f, s in top))


if __name__ == "__main__":
    main()
