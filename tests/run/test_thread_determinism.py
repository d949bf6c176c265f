"""A run's numbers do not depend on the thread count (so not on the launcher: a Ray worker has one intra-op thread,
a local run every core): the head trains on engine.device.HEAD_THREADS, and the result records what it computed
with outside the run's identity."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from fairmedbench.engine import device
from fairmedbench.tasks import classification

REPO = Path(__file__).resolve().parents[2]
#: the run id of RUN_ARGS as the code before the thread settings gave it: recording them did not change identity
RUN_ID = "1a072a1c42077230"
RUN_ARGS = ["run", "--model", "moco-cxr", "--weights", "random", "--dataset", "synth-control", "--usage", "lp",
            "--attribute", "sex", "--dataset-option", "n=120", "--n-boot", "20", "--hparam", "epochs=5",
            "--device", "cpu", "--precision", "fp32", "--batch-size", "8", "--mitigation", "groupdro"]
_AT_THREADS = "import sys, torch; torch.set_num_threads(int(sys.argv[1])); from fairmedbench.cli import main; " \
              "sys.exit(main(sys.argv[2:]))"


def _run_at(threads: int, out: Path, cache: Path) -> Path:
    """RUN_ARGS in a fresh process on `threads` OpenMP and torch threads; the run folder."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    proc = subprocess.run([sys.executable, "-c", _AT_THREADS, str(threads), *RUN_ARGS, "--out", str(out),
                           "--cache-dir", str(cache)], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [folder] = (out / "runs").glob("*/*/*/*/")
    return folder


# 17 s in two subprocesses; test_the_head_trains_on_one_thread_whatever_the_process_uses checks the pin in-process
@pytest.mark.slow
def test_one_and_two_threads_give_bit_identical_predictions_and_results(tmp_path: Path) -> None:
    """The encoder fills the cache on one thread, then the run is repeated on two threads (the head and scoring
    are what the thread count reached: a sweep's runs read the features its encode wrote)."""
    cache = tmp_path / "cache"
    one, two = _run_at(1, tmp_path / "one", cache), _run_at(2, tmp_path / "two", cache)
    assert one.name == two.name == RUN_ID
    pred = [pd.read_parquet(next(f.glob("*.parquet"))) for f in (one, two)]
    pd.testing.assert_frame_equal(pred[0], pred[1], check_exact=True)
    docs = [json.loads((f / "seed0.json").read_text()) for f in (one, two)]
    assert docs[0]["result"] == docs[1]["result"] and docs[0]["training"] == docs[1]["training"]
    assert all(f["from_cache"] for f in docs[1]["usage"]["features"].values())
    computed = [d["environment"]["compute"] for d in docs]
    assert [c["intra_op_threads"] for c in computed] == [1, 2]
    assert [c["head_threads"] for c in computed] == [1, 1]
    assert [c["env"]["OMP_NUM_THREADS"] for c in computed] == ["1", "2"]
    assert computed[0]["cpu"] == computed[1]["cpu"] and computed[0]["cpu"]


def test_the_head_trains_on_one_thread_whatever_the_process_uses(tmp_path: Path, monkeypatch) -> None:
    """In a process on two threads the head's training and prediction see HEAD_THREADS, and the process gets its
    two back after (the encoder keeps every core)."""
    import torch

    from fairmedbench.cli import main

    seen: list[int] = []
    train = classification.run_classification

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(torch.get_num_threads())
        return train(*args, **kwargs)

    monkeypatch.setattr(classification, "run_classification", recording)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        args = [a if a != "n=120" else "n=40" for a in RUN_ARGS]
        assert main([*args, "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")]) == 0
        assert seen == [device.HEAD_THREADS] == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_head_threads_restores_the_count_and_is_a_no_op_when_inactive() -> None:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with device.head_threads(active=False):
            assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError), device.head_threads():
            assert torch.get_num_threads() == 1
            raise RuntimeError("a failed training")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_ray_workers_get_the_drivers_kernel_choices_and_results_record_them(monkeypatch) -> None:
    """A remote Ray cluster's workers do not inherit the driver's environment: the kernel variables travel in the
    runtime environment, and a result's environment.compute names them."""
    from fairmedbench.benchmark.sweep import worker_environment

    for v in device.KERNEL_VARIABLES:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert worker_environment("/repo") == {"PYTHONPATH": "/repo", "HF_HUB_OFFLINE": "1"}
    monkeypatch.setenv("MKL_CBWR", "AUTO,STRICT")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert worker_environment("/repo")["MKL_CBWR"] == "AUTO,STRICT"
    computed = device.compute_settings(heads_pinned=True)
    assert computed["env"] == {"OMP_NUM_THREADS": "3", "MKL_CBWR": "AUTO,STRICT"}
    assert computed["head_threads"] == device.HEAD_THREADS
