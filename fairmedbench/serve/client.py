"""The submitter's side: `benchmark submit BUNDLE --to URL --token-file FILE` uploads a bundle (a tar archive of its
folder, with progress) and prints the submission's id, page and state; `benchmark submit --status ID --to URL`
follows it. Every refusal arrives as one line, the server's."""

from __future__ import annotations

import os
import stat
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from fairmedbench.errors import InputError, MissingResourceError

FINAL_STATES = ("rejected", "verified", "verification failed", "withdrawn")  # where a submission ends
CHUNK = 1 << 20


def read_token(path: Path | str) -> str:
    """The token in `path` (one line), refused when others may read the file."""
    path = Path(path)
    try:
        st = path.stat()
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise MissingResourceError(f"token file {path} not found; save the token `benchmark serve token add` "
                                   "printed there (chmod 600)") from None
    if os.name == "posix" and st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InputError(f"token file {path} may be read by others (mode {stat.S_IMODE(st.st_mode):o}); "
                         f"chmod 600 {path}")
    if not text or "\n" in text:
        raise InputError(f"token file {path} must hold the token on one line")
    return text


def pack(bundle: Path | str, out: IO[bytes]) -> None:
    """A tar archive of the bundle folder's files (paths relative to it) written to `out`."""
    bundle = Path(bundle)
    if not (bundle / "model.json").is_file():
        raise MissingResourceError(f"{bundle}: not a bundle folder (no model.json); `benchmark run-suite` writes one")
    with tarfile.open(fileobj=out, mode="w") as tar:
        tar.add(bundle, arcname=".", recursive=True)


class _Progress:
    """A file read in chunks by the HTTP client, reporting bytes sent (and giving its length for Content-Length)."""

    def __init__(self, f: IO[bytes], size: int, report: Callable[[int, int], None]) -> None:
        self.f, self.size, self.sent, self.report = f, size, 0, report

    def __len__(self) -> int:
        return self.size

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(CHUNK if n is None or n < 0 else n)
        if data:
            self.sent += len(data)
            self.report(self.sent, self.size)
        return data


def _detail(resp: Any) -> str:
    try:
        return str(resp.json()["detail"])
    except (ValueError, KeyError, TypeError):
        return resp.text[:300] or resp.reason


def _url(base: str, path: str) -> str:
    if not base.startswith(("http://", "https://")):
        raise InputError(f"--to {base!r}: give the board server's URL, e.g. http://127.0.0.1:8000")
    return base.rstrip("/") + path


def upload(bundle: Path | str, to: str, token: str, board: str | None = None,
           progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """POST the bundle to the server; the submission's record (id, state, reasons, page). A refusal raises
    InputError with the server's line."""
    import requests

    with tempfile.TemporaryFile() as tmp:
        pack(bundle, tmp)
        size = tmp.tell()
        tmp.seek(0)
        body = _Progress(tmp, size, progress or (lambda sent, total: None))
        try:
            resp = requests.post(_url(to, "/api/submissions"), data=body, params={"board": board} if board else None,
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-tar"},
                                 timeout=(10, 3600))
        except requests.RequestException as err:
            raise InputError(f"cannot reach {to}: {type(err).__name__}") from None
    if resp.status_code not in (200, 201):
        raise InputError(f"{_detail(resp)} (HTTP {resp.status_code})")
    return resp.json()


def status(sid: str, to: str) -> dict[str, Any]:
    """A submission's record from the server."""
    import requests

    try:
        resp = requests.get(_url(to, f"/api/submissions/{sid}"), timeout=30)
    except requests.RequestException as err:
        raise InputError(f"cannot reach {to}: {type(err).__name__}") from None
    if resp.status_code != 200:
        raise InputError(f"{_detail(resp)} (HTTP {resp.status_code})")
    return resp.json()


def lines(sub: dict[str, Any], to: str) -> list[str]:
    """What the CLI prints for a submission: id and page, state and tier, one line per reason and per flag."""
    out = [f"submission {sub['id']}: {sub['state']}" + (f" ({sub['tier']})" if sub.get("tier") else ""),
           f"page: {to.rstrip('/')}/submissions/{sub['id']}"]
    prefix = "rejected" if sub["state"] == "rejected" else "reason"
    out += [f"{prefix}: {r}" for r in sub.get("reasons", [])] + [f"flag: {f}" for f in sub.get("flags", [])]
    if sub.get("withdrawn_reason"):
        out.append(str(sub["withdrawn_reason"]))
    return out


def follow(sid: str, to: str, wait: bool, poll_s: float = 5.0, say: Callable[[str], None] = print
           ) -> dict[str, Any]:
    """The submission's record; with `wait`, its events printed as they happen until it reaches an end state."""
    seen = 0
    while True:
        sub = status(sid, to)
        for e in sub["events"][seen:]:
            say(f"{e['state']}: {e['reason']}")
        seen = len(sub["events"])
        if not wait or sub["state"] in FINAL_STATES:
            return sub
        time.sleep(poll_s)


def bar(sent: int, total: int) -> None:
    """An upload progress line on stderr."""
    pct = 100.0 * sent / total if total else 100.0
    print(f"\ruploading: {sent / 1e6:.1f} / {total / 1e6:.1f} MB ({pct:.0f}%)", end="" if sent < total else "\n",
          file=sys.stderr, flush=True)
