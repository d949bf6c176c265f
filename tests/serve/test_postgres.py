"""The same service on PostgreSQL (a throwaway cluster; skipped with the reason where it cannot start): the same
migration, submissions idempotent by content hash, owners, leases finishing once, the append-only audit log, and
the server answering again after PostgreSQL restarted without losing an accepted submission."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from bundle_factory import model_card, write_bundle
from serve_support import Clock, Postgres, auth, serving, tar_of

from fairmedbench.leaderboards.suites import Suite
from fairmedbench.serve import db
from fairmedbench.serve.service import Service, Settings


def _client(service: Service) -> Any:
    from fastapi.testclient import TestClient

    from fairmedbench.serve.app import asgi

    return TestClient(asgi(service))


def test_the_service_on_postgresql(pg_url: str, postgres: Postgres, tmp_path: Path, clock: Clock,
                                   bundles: dict[str, Path]) -> None:
    service = Service(tmp_path / "boards", pg_url, Settings(), now=clock)
    assert service.engine.dialect.name == "postgresql"
    db.upgrade(service.engine)  # a second run is a no-op
    client = _client(service)
    alice, bob = service.add_token("alice"), service.add_token("bob")
    first = client.post("/api/submissions", content=tar_of(bundles["a"]), headers=auth(alice))
    assert first.status_code == 201 and first.json()["state"] == "queued"
    again = client.post("/api/submissions", content=tar_of(bundles["a"]), headers=auth(alice))
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert client.post("/api/submissions", content=tar_of(bundles["a2"]), headers=auth(bob)).status_code == 403
    job = service.lease("w1", 60)
    assert job is not None and service.lease("w2", 60) is None
    clock.advance(61)
    taken = service.lease("w2", 60)
    assert taken is not None and taken.attempts == 2
    assert not service.finish(job, "w1", True, []) and service.finish(taken, "w2", True, [])
    assert service.submission(first.json()["id"])["state"] == "verified"
    with service.engine.begin() as conn, pytest.raises(sa.exc.DatabaseError, match="append-only"):
        conn.execute(db.audit.update().values(actor="someone else"))

    postgres.restart()  # the pool's connections are dead now; the server answers again
    r = client.get(f"/api/submissions/{first.json()['id']}")
    assert r.status_code == 200 and r.json()["state"] == "verified"
    assert client.post("/api/submissions", content=tar_of(bundles["b"]), headers=auth(bob)).status_code == 201
    service.engine.dispose()


DOWN = "the board's database did not answer"


def test_postgresql_restarted_under_load(pg_url: str, postgres: Postgres, tmp_path: Path, suite: Suite,
                                         caplog: pytest.LogCaptureFixture) -> None:
    """Three submitters (two bundles each, resending on 503) and two readers run while PostgreSQL is stopped (fast
    shutdown) and started again: every answer is 2xx or a one-line 503, a request during the outage is a 503, the
    server answers again, every accepted id is in the database and each bundle is one queued submission."""
    import requests

    service = Service(tmp_path / "boards", pg_url, Settings(daily_cap=50))
    plan: list[tuple[str, list[bytes]]] = []
    for k in range(3):
        bodies = [tar_of(write_bundle(tmp_path / f"b{k}{j}", suite, {**model_card(f"pg-{k}", quality=0.6),
                                                                      "revision": f"r{j}"})) for j in range(2)]
        plan.append((service.add_token(f"sub{k}"), bodies))
    lock, stop = threading.Lock(), threading.Event()
    answers: list[tuple[int, Any]] = []
    posted: list[tuple[int, Any]] = []
    final: dict[tuple[int, int], Any] = {}

    def record(r: requests.Response) -> None:
        with lock:
            answers.append((r.status_code, r.json() if r.headers.get("content-type") == "application/json" else None))

    def submitter(k: int) -> None:
        token, bodies = plan[k]
        session = requests.Session()
        for j, body in enumerate(bodies):
            for _ in range(300):  # bounded: 30 s of resending at most
                r = session.post(url + "/api/submissions", data=body, headers=auth(token), timeout=120)
                record(r)
                with lock:
                    posted.append((r.status_code, r.json()))
                if r.status_code != 503:
                    break
                time.sleep(0.1)
            final[(k, j)] = (r.status_code, r.json())

    def reader() -> None:
        session = requests.Session()
        paths = ["/", "/boards/test-pinned", "/api/boards", "/api/queue", "/api/boards/test-pinned/rows"]
        i = 0
        while not stop.is_set() and i < 2000:
            record(session.get(url + paths[i % len(paths)], timeout=120))
            i += 1

    with caplog.at_level(logging.WARNING), serving(service) as url:
        threads = [threading.Thread(target=submitter, args=(k,)) for k in range(3)]
        threads += [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        for _ in range(1200):  # until the first submission was accepted
            if any(code == 201 for code, _ in list(posted)):
                break
            time.sleep(0.05)
        postgres.stop()
        try:
            during = [requests.get(url + "/api/boards", timeout=60),
                      requests.post(url + "/api/submissions", data=b"x", headers=auth(plan[0][0]), timeout=60)]
        finally:
            postgres.start()
        for t in threads[:3]:
            t.join(timeout=600)
        stop.set()
        for t in threads[3:]:
            t.join(timeout=600)
        after = requests.get(url + "/api/boards", timeout=60)
    for r in during:
        assert r.status_code == 503 and r.json()["detail"].startswith(DOWN) and r.headers["retry-after"] == "5"
    assert after.status_code == 200
    codes = {code for code, _ in answers}
    assert codes <= {200, 201, 503}, codes
    assert all(body["detail"].startswith(DOWN) and "\n" not in body["detail"] for code, body in answers
               if code == 503)
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert sorted(final) == [(k, j) for k in range(3) for j in range(2)]
    assert all(code in (200, 201) and body["state"] == "queued" for code, body in final.values()), final
    accepted = {body["id"] for code, body in posted if code in (200, 201)}
    rows = service.submissions_of("test-pinned")
    assert accepted == {body["id"] for _, body in final.values()} == {r["id"] for r in rows}
    assert len(rows) == 6 and len({(r["model"], r["revision"]) for r in rows}) == 6
    assert len(list((service.boards / "test-pinned" / "submissions").glob("*/*"))) == 6
    assert len(service.queue()) == 6
    service.engine.dispose()
