"""The same service on PostgreSQL (a throwaway cluster; skipped with the reason where it cannot start): the same
migration, submissions idempotent by content hash, owners, leases finishing once, the append-only audit log, and
the server answering again after PostgreSQL restarted without losing an accepted submission."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from serve_support import Clock, Postgres, auth, tar_of

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
