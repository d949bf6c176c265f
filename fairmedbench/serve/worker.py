"""`benchmark serve worker`: take verification jobs by lease, run today's `benchmark verify` on each in a subprocess,
record the outcome. A worker that dies loses its lease when it expires and another takes the job again; only the
lease holder can record an outcome, so a job ends exactly once."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fairmedbench.serve.service import Job, Service

Runner = Callable[[Sequence[str], float], tuple[int, str]]


def verify_command(service: Service, job: Job) -> list[str]:
    """`benchmark verify` of the job's stored submission, in this interpreter."""
    return [sys.executable, "-m", "fairmedbench", "verify", str(service.boards / job.folder), "--board", job.board]


def run_command(cmd: Sequence[str], timeout: float) -> tuple[int, str]:
    """(exit code, stdout and stderr together) of a subprocess; a timeout is exit code 124."""
    try:
        done = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return 124, f"verification ran past {timeout:g} s and was stopped"
    return done.returncode, done.stdout


def worker_name() -> str:
    """host:pid:random, unique per worker process."""
    return f"{platform.node()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def outcome_reasons(code: int, output: str, record: dict[str, Any] | None = None) -> list[str]:
    """The lines a verification outcome records: each entry's reasons from `verify`'s MAC-checked record when there
    is one (or that every entry passed), else `verify`'s error line (or its last line, or its exit code)."""
    if record is not None:
        entries = record.get("entries", {})
        lines = [f"{key}: {r}" for key, rec in entries.items() for r in rec.get("reasons", [])]
        if lines or not record.get("passed"):
            return lines or ["verification did not pass (no entry compared a score)"]
        return [f"{key}: passed ({rec.get('n_compared')} scores compared, max |diff| {rec.get('max_abs_diff')}, "
                f"tolerance {rec.get('tolerance')})" for key, rec in entries.items()]
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("benchmark: error:")]
    return errors or lines[-1:] or ([] if code == 0 else [f"verify exited with code {code}"])


def read_record(service: Service, job: Job) -> dict[str, Any] | None:
    """`verify`'s record beside the stored submission, if its MAC checks under the board's key (else None)."""
    from fairmedbench.leaderboards import seal
    from fairmedbench.leaderboards.tiers import read_verification

    sub = service.boards / job.folder
    key = seal.board_key(sub.parent.parent.parent)
    if key is None:
        return None
    content, _ = seal.check(sub, key)
    if content is None:
        return None
    record, _ = read_verification(sub, key, content)
    return record


def run_one(service: Service, worker: str, lease_s: float, timeout: float,
            runner: Runner = run_command) -> Job | None:
    """Lease one job, verify it while a heartbeat keeps the lease, record the outcome; the job, or None when the
    queue is empty."""
    job = service.lease(worker, lease_s)
    if job is None:
        return None
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(lease_s / 3):
            if not service.heartbeat(job, worker, lease_s):
                return

    keeper = threading.Thread(target=beat, daemon=True)
    keeper.start()
    try:
        if not job.folder or not (service.boards / job.folder).is_dir():
            code, output = 2, "the stored submission is gone (withdrawn)"
        else:
            code, output = runner(verify_command(service, job), timeout)
    finally:
        stop.set()
        keeper.join()
    record = read_record(service, job) if job.folder and (service.boards / job.folder).is_dir() else None
    passed = code == 0 and (record is None or bool(record.get("passed")))
    service.finish(job, worker, passed, outcome_reasons(code, output, record))
    return job


def work(boards: Path | str, url: str | None = None, lease_s: float = 900.0, timeout: float = 3600.0,
         poll_s: float = 5.0, once: bool = False, say: Callable[[str], None] = print) -> int:
    """Verify queued submissions until interrupted (or, with `once`, until the queue is empty); jobs done."""
    service = Service(boards, url)
    me = worker_name()
    say(f"worker {me}: taking verification jobs from {service.engine.url.render_as_string(hide_password=True)}")
    done = 0
    while True:
        job = run_one(service, me, lease_s, timeout)
        if job is not None:
            done += 1
            say(f"worker {me}: {job.submission_id} ({job.board}): {service.submission(job.submission_id)['state']}")
            continue
        if once:
            return done
        time.sleep(poll_s)
