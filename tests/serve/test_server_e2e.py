"""A real uvicorn on 127.0.0.1: `benchmark submit --to` uploads and `--status` follows; an over-cap upload is
answered 413 before its body is sent; a server killed with SIGKILL mid-upload leaves no partial submission."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_support import free_port, tar_of

from fairmedbench.cli import main
from fairmedbench.serve.service import Service, Settings


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Service]]:
    """uvicorn serving a fresh boards folder on a loopback port, in a thread of this process (so the test suite it
    registered is known); its URL and service."""
    import uvicorn

    from fairmedbench.serve.app import asgi

    service = Service(tmp_path / "boards", settings=Settings(max_upload=2 << 20))
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(asgi(service), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    for _ in range(200):  # readiness, not timing: wait until it listens
        if srv.started:
            break
        time.sleep(0.05)
    assert srv.started
    yield f"http://127.0.0.1:{port}", service
    srv.should_exit = True
    thread.join(timeout=30)


def _raw(port: int, head: str, body: bytes = b"") -> str:
    """Send a request head (and some body) on a socket; the status line the server answers without the rest."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head.encode() + body)
        return s.recv(65536).decode(errors="replace").split("\r\n")[0]


def test_submit_to_a_server_and_follow_it(server: tuple[str, Service], bundles: dict[str, Path], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    url, service = server
    token_file = tmp_path / "token"
    token_file.write_text(service.add_token("alice") + "\n")
    token_file.chmod(0o644)
    assert main(["submit", str(bundles["a"]), "--to", url, "--token-file", str(token_file)]) == 2
    assert "chmod 600" in capsys.readouterr().err
    token_file.chmod(0o600)
    assert main(["submit", str(bundles["a"]), "--to", url, "--token-file", str(token_file)]) == 0
    out, err = capsys.readouterr()
    sid = out.split()[1].rstrip(":")
    assert out.startswith(f"submission {sid}: queued (self-reported)") and f"page: {url}/submissions/{sid}" in out
    assert "uploading:" in err and "100%" in err
    assert main(["submit", "--status", sid, "--to", url]) == 0
    assert "received: uploaded by alice" in capsys.readouterr().out
    other = tmp_path / "other"
    other.write_text(service.add_token("bob"))
    other.chmod(0o600)
    assert main(["submit", str(bundles["a2"]), "--to", url, "--token-file", str(other)]) == 2
    assert capsys.readouterr().err.strip().endswith("submit under a new name (HTTP 403)")
    port = int(url.rsplit(":", 1)[1])
    token = token_file.read_text().strip()
    # Content-Length over the cap: 413 arrives although not one byte of the body was sent
    head = (f"POST /api/submissions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Length: {3 << 20}\r\n\r\n")
    assert _raw(port, head).endswith("413 Request Entity Too Large")
    # chunked, no length: 413 as soon as the cap is passed, the rest never sent
    chunked = (f"POST /api/submissions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
               "Transfer-Encoding: chunked\r\n\r\n")
    piece = b"x" * (1 << 20)
    body = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for _ in range(3))
    assert _raw(port, chunked, body).endswith("413 Request Entity Too Large")
    assert len(service.submissions_of()) == 1


SERVER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[3])
    import uvicorn
    from bundle_factory import pinned_suite
    from fairmedbench.serve.app import asgi
    from fairmedbench.serve.service import Service
    pinned_suite()
    uvicorn.run(asgi(Service(sys.argv[1])), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
""")


@pytest.mark.slow
def test_a_server_killed_mid_upload_leaves_no_partial_submission(tmp_path: Path, bundles: dict[str, Path]) -> None:
    boards, port = tmp_path / "boards", free_port()
    token = Service(boards).add_token("alice")
    factory = str(Path(__file__).resolve().parents[1] / "leaderboards")
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(boards), str(port), factory],
                            env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    try:
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        body = tar_of(bundles["a"])
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall((f"POST /api/submissions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                       f"Content-Length: {len(body)}\r\n\r\n").encode() + body[:len(body) // 2])
            for _ in range(600):  # until the upload is being written to disk
                if any((boards / ".serve-work").glob("*.part")):
                    break
                time.sleep(0.05)
            assert any((boards / ".serve-work").glob("*.part"))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    again = Service(boards)
    from fairmedbench.serve.app import create_app

    create_app(again)  # a restarted server clears what the killed one left half-uploaded
    assert again.submissions_of() == [] and not (boards / ".serve-work").exists()
    assert not (boards / "test-pinned" / "submissions").exists()
    assert json.loads(json.dumps(again.audit_log()))[0]["action"] == "token add"


def test_a_half_upload_is_never_a_submission_and_a_restart_clears_it(tmp_path: Path) -> None:
    """The cheap sibling of the SIGKILL test: a half-written upload has no row, and starting the app removes it."""
    from fairmedbench.serve.app import create_app

    service = Service(tmp_path / "boards")
    part = service.work_dir() / "0123.part"
    part.write_bytes(b"half a bundle")
    create_app(service)
    assert not part.exists() and service.submissions_of() == []
