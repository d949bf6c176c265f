"""`benchmark serve worker --launcher ray`: one worker holds several leases at once, renews each while its task
runs and records every outcome exactly once. The dispatch is checked on a thread pool (cheap) and on a local Ray
with two CPUs (slow: Ray's start)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest
from serve_support import auth, tar_of, verify_passes_once_renewed

from fairmedbench.serve.service import Service, Settings
from fairmedbench.serve.worker import dispatch


def _queue_three(tmp_path: Path, bundles: dict[str, Path]) -> tuple[Service, list[str]]:
    """A service (real clock) with three queued submissions of two submitters."""
    from fastapi.testclient import TestClient

    from fairmedbench.serve.app import asgi

    service = Service(tmp_path / "boards", settings=Settings(daily_cap=10))
    client = TestClient(asgi(service))
    alice, bob = service.add_token("alice"), service.add_token("bob")
    ids = []
    for key, token in (("a", alice), ("b", bob), ("a2", alice)):
        r = client.post("/api/submissions", content=tar_of(bundles[key]), headers=auth(token))
        assert r.status_code == 201 and r.json()["state"] == "queued"
        ids.append(r.json()["id"])
    return service, ids


def _ended_once(service: Service, sid: str) -> list[str]:
    return [e["state"] for e in service.submission(sid)["events"]]


def test_dispatch_runs_jobs_side_by_side_renews_their_leases_and_records_each_once(
        tmp_path: Path, bundles: dict[str, Path]) -> None:
    service, ids = _queue_three(tmp_path, bundles)
    lock, now, most = threading.Lock(), [0], [0]

    def counted(cmd: Sequence[str], timeout: float) -> tuple[int, str]:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        try:
            return verify_passes_once_renewed(list(cmd), timeout)
        finally:
            with lock:
                now[0] -= 1

    said: list[str] = []
    with futures.ThreadPoolExecutor(2) as pool:
        done = dispatch(service, "w1", 3.0, 120.0, 2, lambda cmd, t: pool.submit(counted, cmd, t), once=True,
                        poll_s=0.1, say=said.append)
    assert done == 3 and most[0] == 2  # two at a time (slots), each renewed while it ran (else exit 1: failed)
    for sid in ids:
        assert service.submission(sid)["state"] == "verified"
        assert _ended_once(service, sid) == ["received", "accepted", "queued", "verifying", "verified"]
    assert service.queue() == [] and len(said) == 3


def test_a_task_that_died_is_a_failed_verification_with_its_error(tmp_path: Path, service: Service, client: Any,
                                                                   bundles: dict[str, Path]) -> None:
    token = service.add_token("alice")
    sid = client.post("/api/submissions", content=tar_of(bundles["a"]), headers=auth(token)).json()["id"]

    def died(cmd: Sequence[str], timeout: float) -> futures.Future[tuple[int, str]]:
        fut: futures.Future[tuple[int, str]] = futures.Future()
        fut.set_exception(RuntimeError("worker node lost\nmore detail"))
        return fut

    assert dispatch(service, "w1", 60.0, 60.0, 2, died, once=True, say=lambda _: None) == 1
    sub = service.submission(sid)
    assert sub["state"] == "verification failed"
    assert sub["reasons"] == ["the verification task died: RuntimeError: worker node lost"]


@pytest.mark.slow
def test_ray_tasks_verify_three_queued_jobs_exactly_once(tmp_path: Path, bundles: dict[str, Path],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'ray[default]')")
    from fairmedbench.serve.worker import ray_launcher

    here = Path(__file__).resolve().parent
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(here), str(here.parent / "leaderboards"),
                                                      os.environ.get("PYTHONPATH", "")]))
    service, ids = _queue_three(tmp_path, bundles)
    assert not ray.is_initialized()
    submit, slots, shutdown = ray_launcher(None, 2, verify_passes_once_renewed)
    try:
        assert slots == 2 and ray.cluster_resources()["CPU"] == 2
        done = dispatch(service, "ray-worker", 3.0, 120.0, slots, submit, once=True, poll_s=0.1, say=lambda _: None)
    finally:
        shutdown()
    assert done == 3 and not ray.is_initialized()
    for sid in ids:
        assert service.submission(sid)["state"] == "verified"
        assert _ended_once(service, sid) == ["received", "accepted", "queued", "verifying", "verified"]
    assert service.queue() == []


def test_services_built_side_by_side_in_threads_both_upgrade(tmp_path: Path) -> None:
    """Alembic's context is process-global: eight Services built at once in threads all come up (none loses its
    migration context to another: KeyError 'config' before the upgrade lock)."""
    def build(i: int) -> str:
        return Service(tmp_path / f"boards{i}").boards.name

    with futures.ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(build, range(8))) == [f"boards{i}" for i in range(8)]
