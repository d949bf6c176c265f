"""Helpers the serve tests import by name (a module name of their own: `from conftest import ...` resolves to
whichever conftest.py was imported first when several test folders run together)."""

from __future__ import annotations

import contextlib
import io
import socket
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

T0 = 1_800_000_000.0


class Clock:
    """A clock the test moves by hand (POSIX seconds)."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def tar_of(folder: Path) -> bytes:
    """A bundle folder as the tar archive `benchmark submit --to` sends."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(folder, arcname=".")
    return buf.getvalue()


def auth(token: str) -> dict[str, str]:
    """The Authorization header of a token."""
    return {"Authorization": f"Bearer {token}"}


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Postgres:
    """A running throwaway cluster: its URL, a restart (fast shutdown, then start again on the same port), and the
    two halves of one (stop, start) for an outage a test can observe."""

    def __init__(self, url: str, pg_ctl: list[str], options: str) -> None:
        self.url, self.pg_ctl, self.options = url, pg_ctl, options

    def restart(self) -> None:
        subprocess.run([*self.pg_ctl, "-m", "fast", "-w", "-t", "60", "restart"], check=True, capture_output=True,
                       timeout=120)

    def stop(self) -> None:
        subprocess.run([*self.pg_ctl, "-m", "fast", "-w", "-t", "60", "stop"], check=True, capture_output=True,
                       timeout=120)

    def start(self) -> None:
        subprocess.run([*self.pg_ctl, "-w", "-t", "60", "-o", self.options, "start"], check=True,
                       capture_output=True, timeout=120)


def verify_passes_once_renewed(cmd: list[str], timeout: float) -> tuple[int, str]:
    """A stand-in for `benchmark verify` that also runs inside a Ray worker (imported by name): waits until the
    worker has renewed this job's lease (the expiry moves later), then records a passed verification; exit code 1
    when the lease was never renewed within `timeout` seconds."""
    import time

    import sqlalchemy as sa
    from bundle_factory import passed_record, pinned_suite, record_verification

    from fairmedbench.serve.db import jobs, submissions
    from fairmedbench.serve.service import Service

    folder = Path(cmd[4])
    service = Service(folder.parents[3])
    rel = folder.relative_to(service.boards).as_posix()
    query = sa.select(jobs.c.lease_expires_at).join(submissions, submissions.c.id == jobs.c.submission_id).where(
        submissions.c.folder == rel)

    def expiry() -> float:
        with service.engine.connect() as conn:
            return float(conn.execute(query).scalar_one())

    first, deadline = expiry(), time.monotonic() + timeout
    while expiry() <= first:
        if time.monotonic() > deadline:
            return 1, "the lease was never renewed while the verification ran"
        time.sleep(0.05)
    service.engine.dispose()
    record_verification(folder, passed_record(pinned_suite()))
    return 0, "verified: every entry passed\n"


@contextlib.contextmanager
def serving(service: Any) -> Iterator[str]:
    """uvicorn serving `service` on a free loopback port in a thread of this process (its log records reach the
    root logger, so caplog sees any traceback); the base URL while it runs."""
    import threading
    import time

    import uvicorn

    from fairmedbench.serve.app import asgi

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(asgi(service), host="127.0.0.1", port=port, log_config=None,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(600):  # readiness, not timing: wait until it listens
        if server.started:
            break
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=60)
