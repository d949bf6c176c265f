"""Leaderboard build time: every submission's seal checked and every shown number recomputed, per submission,
against one `submit`'s validation of the same bundle measured in the same run.

Setup: one bundle of 20 results (10 entries x 2 seeds, synthetic predictions, metrics from
fairmedbench.metrics) is validated by recomputation once (timed: the cost of one `benchmark submit`), then stored
and sealed N times under different revisions (model.json rewritten, so each is a distinct, valid submission).
Measured (best of --repeat): `leaderboards.board.build` (checks every seal under the board's key, re-validates and
recomputes every number from the stored predictions, computes flags, ranks, renders HTML/MD/JSON), reported per
submission and as a ratio to one submit-time validation. Target: build per submission < 2x one validation (the
recomputation is the same work; flags, seal and rendering add the rest).
Usage: python benchmarks/leaderboard_build.py [--submissions 10] [--repeat 3]
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "leaderboards"))

from bundle_factory import model_card, write_bundle  # noqa: E402

from fairmedbench.leaderboards import board  # noqa: E402
from fairmedbench.leaderboards.seal import board_key  # noqa: E402
from fairmedbench.leaderboards.submit import revision_label, store_submission, validate_bundle  # noqa: E402
from fairmedbench.leaderboards.suites import Entry, Suite, register_suite  # noqa: E402

SUITE = register_suite(Suite("bench-20", "1.0", "benchmark suite: 10 entries x 2 seeds", tuple(
    Entry(d, ("sex", "age"), usage, seeds=(0, 1)) for d in ("synth-control", "synth-contrast", "synth-flip",
                                                             "synth-underrep", "synth-laws-control")
    for usage in ("linear_probe", "lp"))))


def populate(board_dir: Path, bundle: Path, n: int) -> float:
    """Store and seal `n` submissions derived from one validated bundle (revisions r0..r<n-1>); returns the seconds
    one validation took."""
    t = time.perf_counter()
    reasons, summary, files = validate_bundle(bundle, SUITE)
    validate_s = time.perf_counter() - t
    assert not reasons and summary is not None, reasons
    key = board_key(board_dir, create=True)
    assert key is not None
    for i in range(n):
        s = copy.deepcopy(summary)
        s["model"]["revision"] = f"r{i}"
        s["revision_label"] = revision_label(s["model"], s["weights"])
        store_submission(board_dir, s, {**files, "model.json": json.dumps(s["model"]).encode()}, key)
    return validate_s


def best(fn, repeat: int) -> float:  # noqa: ANN001
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--submissions", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fmb-board-bench-"))
    try:
        bundle = write_bundle(tmp / "bundle", SUITE, model_card("bench-model"))
        board_dir = tmp / "leaderboards" / SUITE.name
        validate_s = populate(board_dir, bundle, args.submissions)
        n_results = sum(len(e.seeds) for e in SUITE.entries)
        build_s = best(lambda: board.build(board_dir, SUITE), args.repeat)
        built = json.loads((board_dir / "board.json").read_text())
        assert not built["refused"], built["refused"][:1]
        per = build_s / args.submissions
        print(f"board: {args.submissions} submissions x {n_results} results ({len(built['rows'])} rows, "
              f"index.html {(board_dir / 'index.html').stat().st_size / 1e6:.1f} MB)")
        print(f"submit-time validation of one {n_results}-result bundle (recomputation included): {validate_s:.2f} s")
        print(f"build: {build_s:.2f} s, {per:.2f} s per submission (seal + recomputation + flags + pages)")
        print(f"ratio build per submission / one validation: {per / validate_s:.2f}x (target < 2x: "
              f"{'met' if per < 2 * validate_s else 'NOT met'})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
