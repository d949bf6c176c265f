"""The verification queue: leases taken by a conditional UPDATE, a dead worker's job taken again after its lease
expired and finished exactly once (also with a worker process killed by SIGKILL), outcomes recorded and shown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bundle_factory import passed_record, record_verification
from serve_support import Clock, auth, tar_of

from fairmedbench.leaderboards.suites import Suite
from fairmedbench.serve.service import Service
from fairmedbench.serve.worker import outcome_reasons, run_one, verify_command


def _submit(service: Service, client: Any, bundle: Path) -> str:
    token = service.add_token("alice")
    r = client.post("/api/submissions", content=tar_of(bundle), headers=auth(token))
    assert r.json()["state"] == "queued"
    return str(r.json()["id"])


def test_an_expired_lease_is_taken_again_and_the_job_finishes_once(service: Service, client: Any, clock: Clock,
                                                                   bundles: dict[str, Path]) -> None:
    sid = _submit(service, client, bundles["a"])
    a = service.lease("worker-a", lease_s=60)
    assert a is not None and a.submission_id == sid and a.attempts == 1
    assert service.lease("worker-b", lease_s=60) is None  # held
    clock.advance(30)
    assert service.heartbeat(a, "worker-a", 60)  # renewed to T0 + 90
    clock.advance(59)
    assert service.lease("worker-b", lease_s=60) is None
    clock.advance(2)  # worker-a went silent: its lease (T0 + 90) has expired
    b = service.lease("worker-b", lease_s=60)
    assert b is not None and b.id == a.id and b.attempts == 2
    assert not service.heartbeat(a, "worker-a", 60)
    assert not service.finish(a, "worker-a", True, [])  # the old holder can no longer record an outcome
    assert service.finish(b, "worker-b", False, ["seed 0: scores differ by up to 0.3 (tolerance 0.0001)"])
    assert not service.finish(b, "worker-b", True, [])  # exactly once
    sub = service.submission(sid)
    assert sub["state"] == "verification failed" and sub["reasons"] == [
        "seed 0: scores differ by up to 0.3 (tolerance 0.0001)"]
    assert [e["state"] for e in sub["events"]] == ["received", "accepted", "queued", "verifying", "verifying",
                                                   "verification failed"]
    assert "the lease of worker-a expired; attempt 2" in sub["events"][4]["reason"]
    assert service.queue() == [] and service.lease("worker-c", 60) is None


def test_a_verified_submission_is_ranked_on_the_live_board(service: Service, client: Any, suite: Suite,
                                                           bundles: dict[str, Path]) -> None:
    sid = _submit(service, client, bundles["a"])
    calls: list[list[str]] = []

    def verify_ok(cmd: Sequence[str], timeout: float) -> tuple[int, str]:  # what `benchmark verify` records
        calls.append(list(cmd))
        record_verification(Path(cmd[4]), passed_record(suite))
        return 0, "verified: every entry passed\n"

    assert "ranked" not in [r.get("rank") for r in client.get("/api/boards/test-pinned/rows").json()["rows"]]
    job = run_one(service, "w1", 60, 600, verify_ok)
    assert job is not None and calls == [verify_command(service, job)]
    assert calls[0][1:4] == ["-m", "fairmedbench", "verify"] and calls[0][-2:] == ["--board", "test-pinned"]
    assert service.submission(sid)["state"] == "verified" and service.submission(sid)["tier"] == "verified"
    rows = client.get("/api/boards/test-pinned/rows").json()["rows"]
    assert {r["tier"] for r in rows} == {"verified"} and 1 in {r["rank"] for r in rows}
    assert run_one(service, "w1", 60, 600, verify_ok) is None and len(calls) == 1


def test_outcome_reasons_come_from_the_record_else_the_error_line() -> None:
    progress = "features m/d test: 30/60 (8.0 it/s, eta 4s)\n"
    failed = {"passed": False, "entries": {"e1": {"reasons": ["seed 0: scores differ by up to 0.284 (tolerance 0.05)"]},
                                           "e2": {"reasons": []}}}
    assert outcome_reasons(1, progress, failed) == ["e1: seed 0: scores differ by up to 0.284 (tolerance 0.05)"]
    passed = {"passed": True, "entries": {"e1": {"reasons": [], "n_compared": 10, "max_abs_diff": 1e-07,
                                                 "tolerance": 0.0001}}}
    assert outcome_reasons(0, progress, passed) == [
        "e1: passed (10 scores compared, max |diff| 1e-07, tolerance 0.0001)"]
    assert outcome_reasons(2, progress + "benchmark: error: model 'x' has no registered card\n") == [
        "benchmark: error: model 'x' has no registered card"]
    assert outcome_reasons(1, "") == ["verify exited with code 1"]


def test_a_withdrawn_submission_leaves_the_queue(service: Service, client: Any, bundles: dict[str, Path]) -> None:
    sid = _submit(service, client, bundles["a"])
    boss = service.add_token("boss", maintainer=True)
    assert client.post(f"/api/submissions/{sid}/withdraw", json={"reason": "duplicate"},
                       headers=auth(boss)).status_code == 200
    assert service.lease("w", 60) is None


WORKER = textwrap.dedent("""
    import sys, time
    from fairmedbench.serve.service import Service
    from fairmedbench.serve.worker import run_one

    def hang(cmd, timeout):
        print("verifying", flush=True)
        time.sleep(600)
        return 0, ""

    run_one(Service(sys.argv[1], sys.argv[2]), "doomed", 30.0, 900.0, hang)
""")


def test_a_worker_killed_mid_verify_is_re_leased_and_its_job_ends_once(tmp_path: Path, service: Service,
                                                                       client: Any, bundles: dict[str, Path]) -> None:
    sid = _submit(service, client, bundles["b"])
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(service.boards), service.url], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "verifying"
        assert service.submission(sid)["state"] == "verifying"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    later = Service(service.boards, service.url, now=lambda: 4e9)  # long after the dead worker's lease
    job = run_one(later, "w2", 60, 600, lambda cmd, timeout: (0, "verified"))
    assert job is not None and job.submission_id == sid and job.attempts == 2
    assert run_one(later, "w3", 60, 600, lambda cmd, timeout: (0, "again")) is None
    states = [e["state"] for e in later.submission(sid)["events"]]
    assert states == ["received", "accepted", "queued", "verifying", "verifying", "verified"]
