"""Fixtures of the board server's tests: a fake clock, a service over a temporary boards folder, bundles of the
test suite as tar archives, tokens, and a throwaway PostgreSQL cluster (skipped with the reason when it cannot
start)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "leaderboards"))

from bundle_factory import model_card, pinned_suite, write_bundle  # noqa: E402
from serve_support import Clock, Postgres, free_port  # noqa: E402

from fairmedbench.leaderboards.suites import Suite  # noqa: E402
from fairmedbench.serve.service import Service, Settings  # noqa: E402


@pytest.fixture(scope="session")
def suite() -> Suite:
    """The registered test suite with pinned test sets (classification over two seeds, segmentation)."""
    return pinned_suite()


@pytest.fixture(scope="session")
def bundles(tmp_path_factory: pytest.TempPathFactory, suite: Suite) -> dict[str, Path]:
    """Valid bundle folders: 'a' and 'b' (models m-a, m-b), 'a2' (m-a, revision r2), 'xss' (a card description
    bearing a script); quality 0.6 keeps them free of the near-perfect flags."""
    root = tmp_path_factory.mktemp("bundles")
    out = {}
    for key, name, rev, desc in (("a", "m-a", "r1", "model A"), ("b", "m-b", "r1", "model B"),
                                 ("a2", "m-a", "r2", "model A again"),
                                 ("xss", "m-xss", "r1", "<script>alert('pwned')</script><img src=x onerror=alert(1)>")):
        card = {**model_card(name, quality=0.6), "revision": rev}
        out[key] = write_bundle(root / key, suite, card, description=desc)
    return out


@pytest.fixture
def clock() -> Clock:
    """A fake clock starting at T0."""
    return Clock()


@pytest.fixture
def service(tmp_path: Path, clock: Clock) -> Service:
    """A service over an empty boards folder (SQLite beside it), small caps."""
    return Service(tmp_path / "boards", settings=Settings(max_upload=8 << 20, daily_cap=5, max_queue=10), now=clock)


@pytest.fixture
def client(service: Service) -> Any:
    """FastAPI's TestClient over the application (security headers included)."""
    from fastapi.testclient import TestClient

    from fairmedbench.serve.app import asgi

    return TestClient(asgi(service))


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """The URL of a throwaway PostgreSQL cluster (Debian's postgresql: initdb and pg_ctl on a loopback port in a
    temporary folder, as user nobody when running as root); skips with the reason when it cannot start."""
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'psycopg[binary]')")
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not bins:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql; .ci/run installs it when root)")
    bindir = Path(bins[-1]).parent
    as_user: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="fmb-pg-"))
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: PostgreSQL refuses to run as root")
        as_user = ["runuser", "-u", "nobody", "--"]
        os.chmod(folder, 0o755)
        shutil.chown(folder, "nobody")
    data, port = folder / "data", free_port()
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
    try:
        subprocess.run([*as_user, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "fmb", "-E", "UTF8",
                        "--no-sync"], check=True, capture_output=True, timeout=120)
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(folder / "log"), "-w", "-t", "60",
                        "-o", options, "start"],
                       check=True, capture_output=True, timeout=120)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as err:
        shutil.rmtree(folder, ignore_errors=True)
        detail = getattr(err, "stderr", b"") or b""
        pytest.skip(f"a throwaway PostgreSQL cluster did not start: {err} {detail.decode(errors='replace')[-300:]}")
    try:
        yield Postgres(f"postgresql+psycopg://fmb@127.0.0.1:{port}/postgres",
                       [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(folder / "log")], options)
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pg_url(postgres: Postgres, request: pytest.FixtureRequest) -> str:
    """A fresh database in the throwaway cluster, for one test."""
    import sqlalchemy as sa

    name = "t_" + "".join(c if c.isalnum() else "_" for c in request.node.name)[:50].lower()
    admin = sa.create_engine(postgres.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return postgres.url.rsplit("/", 1)[0] + "/" + name
