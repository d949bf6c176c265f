"""`benchmark serve worker`: take verification jobs by lease, run today's `benchmark verify` on each in a subprocess,
record the outcome. A worker that dies loses its lease when it expires and another takes the job again; only the
lease holder can record an outcome, so a job ends exactly once.

With `--launcher ray` one worker holds several leases at once: each job's `verify` runs as a Ray task (on any node
that sees the boards folder), the worker renews every held lease while the tasks run and records each outcome as
its task returns."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

from fairmedbench.serve.service import DB_DOWN, Job, Service

Runner = Callable[[Sequence[str], float], tuple[int, str]]
Submit = Callable[[Sequence[str], float], "futures.Future[tuple[int, str]]"]


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


def record_outcome(service: Service, worker: str, job: Job, code: int, output: str) -> bool:
    """Record a finished verification (passed when `verify` exited 0 and its record passed); False when `worker`
    no longer held the lease (the outcome is then another worker's to record)."""
    record = read_record(service, job) if job.folder and (service.boards / job.folder).is_dir() else None
    passed = code == 0 and (record is None or bool(record.get("passed")))
    return service.finish(job, worker, passed, outcome_reasons(code, output, record))


def _gone(job: Job, service: Service) -> bool:
    return not job.folder or not (service.boards / job.folder).is_dir()


GONE = (2, "the stored submission is gone (withdrawn)")


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
            try:
                if not service.heartbeat(job, worker, lease_s):
                    return
            except DB_DOWN:
                continue  # the database is restarting: renew at the next beat

    keeper = threading.Thread(target=beat, daemon=True)
    keeper.start()
    try:
        code, output = GONE if _gone(job, service) else runner(verify_command(service, job), timeout)
    finally:
        stop.set()
        keeper.join()
    record_outcome(service, worker, job, code, output)
    return job


def dispatch(service: Service, worker: str, lease_s: float, timeout: float, slots: int, submit: Submit, *,
             once: bool = False, poll_s: float = 5.0, say: Callable[[str], None] = print) -> int:
    """Keep up to `slots` leased jobs running at once through `submit` (a future of `verify`'s exit code and output
    per command), renew every held lease each lease_s/3 while they run and record each outcome as its future
    completes (a task that raised is a failed verification with the error); until interrupted, or with `once`
    until the queue is empty. Jobs whose outcome this worker recorded."""
    running: dict[futures.Future[tuple[int, str]], Job] = {}
    done = 0
    while True:
        try:
            while len(running) < slots:
                job = service.lease(worker, lease_s)
                if job is None:
                    break
                if _gone(job, service):
                    ready: futures.Future[tuple[int, str]] = futures.Future()
                    ready.set_result(GONE)
                    running[ready] = job
                else:
                    running[submit(verify_command(service, job), timeout)] = job
        except DB_DOWN as err:
            say(f"worker {worker}: the database did not answer ({_first_line(err)}); trying again")
        if not running:
            if once:
                return done
            time.sleep(poll_s)
            continue
        finished, _ = futures.wait(running, timeout=lease_s / 3, return_when=futures.FIRST_COMPLETED)
        unrecorded = False
        for fut in finished:
            job = running.pop(fut)
            try:
                code, output = fut.result()
            except Exception as err:  # noqa: BLE001 - a task's crash (a dead Ray worker) is this job's outcome
                code, output = 1, f"the verification task died: {type(err).__name__}: {_first_line(err)}"
            try:
                kept = record_outcome(service, worker, job, code, output)
            except DB_DOWN as err:
                running[fut], unrecorded = job, True  # recorded at a later round, while the lease is renewed
                say(f"worker {worker}: the database did not answer ({_first_line(err)}); trying again")
                continue
            if kept:
                done += 1
                say(f"worker {worker}: {job.submission_id} ({job.board}): {_state(service, job)}")
            else:
                say(f"worker {worker}: {job.submission_id}: the lease passed to another worker; its outcome is theirs")
        for fut, job in list(running.items()):
            try:
                held = service.heartbeat(job, worker, lease_s)
            except DB_DOWN:
                continue  # renewed at the next round, within the lease while the outage is shorter than 2/3 of it
            if not held:
                running.pop(fut)
                fut.cancel()  # a task already running goes on; only its outcome is not ours
                say(f"worker {worker}: {job.submission_id}: the lease passed to another worker")
        if unrecorded:
            time.sleep(min(poll_s, lease_s / 3))


def _state(service: Service, job: Job) -> str:
    """The job's submission's state now, for the worker's log line."""
    try:
        return str(service.submission(job.submission_id)["state"])
    except DB_DOWN:
        return "outcome recorded (the database did not answer when asked for the state)"


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else ""


def ray_launcher(address: str | None, max_parallel: int | None, runner: Runner = run_command
                 ) -> tuple[Submit, int, Callable[[], None]]:
    """Ray's side of `--launcher ray`: (submit, slots, shutdown). Each command runs as a Ray task of one CPU calling
    `runner` (a module-level function: the workers import it by name from this checkout and $PYTHONPATH); slots is
    `max_parallel`, else the cluster's CPUs. A local Ray is started (with `max_parallel` CPUs) when no `address`."""
    import ray

    from fairmedbench.benchmark.sweep import ray_start

    started_here = ray_start(address, max_parallel)
    slots = max_parallel or max(1, int(ray.cluster_resources().get("CPU", 1)))
    task = ray.remote(num_cpus=1)(runner)

    def submit(cmd: Sequence[str], timeout: float) -> futures.Future[tuple[int, str]]:
        return task.remote(list(cmd), timeout).future()

    return submit, slots, ray.shutdown if started_here else (lambda: None)


def work(boards: Path | str, url: str | None = None, lease_s: float = 900.0, timeout: float = 3600.0,
         poll_s: float = 5.0, once: bool = False, say: Callable[[str], None] = print, launcher: str = "local",
         address: str | None = None, max_parallel: int | None = None) -> int:
    """Verify queued submissions until interrupted (or, with `once`, until the queue is empty), one at a time or,
    with the `ray` launcher, as Ray tasks; jobs done."""
    service = Service(boards, url)
    me = worker_name()
    say(f"worker {me}: taking verification jobs from {service.engine.url.render_as_string(hide_password=True)}")
    if launcher == "ray":
        submit, slots, shutdown = ray_launcher(address, max_parallel)
        say(f"worker {me}: running up to {slots} verifications at once as Ray tasks")
        try:
            return dispatch(service, me, lease_s, timeout, slots, submit, once=once, poll_s=poll_s, say=say)
        finally:
            shutdown()
    done = 0
    while True:
        try:
            job = run_one(service, me, lease_s, timeout)
        except DB_DOWN as err:
            say(f"worker {me}: the database did not answer ({_first_line(err)}); trying again")
            job = None
        if job is not None:
            done += 1
            say(f"worker {me}: {job.submission_id} ({job.board}): {_state(service, job)}")
            continue
        if once:
            return done
        time.sleep(poll_s)
