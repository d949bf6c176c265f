"""Content identity of data files: a BLAKE2b digest of each file's bytes, cached by (path, size, mtime, inode, ctime).

The run identity and the feature cache are keyed by what the files contain, not by their names or dates: a changed
image with the same size and mtime is a new run, and a dataset copied to another folder hashes the same. The digest
cache is a small SQLite table (stdlib; its transactions make concurrent processes safe without a lock of our own) in
`$FMB_HASH_CACHE`, default `~/.cache/fairmedbench/content-hashes.sqlite`; a rerun re-reads only files whose
(size, mtime_ns, inode, ctime_ns) changed. The ctime is in the key because size and mtime can be kept while the bytes
change (an in-place edit followed by `os.utime`, or a copy tool preserving dates): the kernel sets ctime on every
change and no user call can set it back, so such an edit is re-hashed. A cache that cannot be opened or written is
skipped (every file is hashed again).
Torch-free: the results store and resolve read it.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path

DIGEST_BYTES = 16  # 128-bit BLAKE2b: collisions are out of reach for any dataset
_LOCK = threading.Lock()
_MEMO: dict[tuple[str, int, int, int, int], str] = {}  # this process's digests (the same key as the table's)


def cache_path() -> Path:
    """Where digests are cached: $FMB_HASH_CACHE, else ~/.cache/fairmedbench/content-hashes.sqlite."""
    env = os.environ.get("FMB_HASH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "fairmedbench" / "content-hashes.sqlite"


def hash_file(path: str | os.PathLike[str]) -> str:
    """BLAKE2b-128 hex digest of a file's bytes (read in 1 MiB chunks; no cache)."""
    digest = hashlib.blake2b(digest_size=DIGEST_BYTES)
    with open(path, "rb") as fh:  # (hashlib.file_digest would do this from Python 3.11 on)
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def hash_bytes(data: bytes | memoryview) -> str:
    """BLAKE2b-128 hex digest of bytes in memory (generated pixels)."""
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).hexdigest()


def _connect() -> sqlite3.Connection | None:
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(path, timeout=30)
        con.execute("CREATE TABLE IF NOT EXISTS digest (path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, "
                    "inode INTEGER, ctime_ns INTEGER, blake2b TEXT)")
        return con
    except (OSError, sqlite3.Error):  # read-only or full home: hash without a cache
        return None


def file_digests(files: Iterable[str | os.PathLike[str]]) -> dict[str, str]:
    """Digest of each path's bytes (path as given -> hex), read from the cache where (size, mtime_ns, inode,
    ctime_ns) match, else computed and stored. A missing file is FileNotFoundError naming it."""
    paths = list(dict.fromkeys(str(p) for p in files))
    stats: dict[str, tuple[str, int, int, int, int]] = {}
    for p in paths:
        st = os.stat(p)
        stats[p] = (os.path.realpath(p), st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
    out: dict[str, str] = {}
    todo = []
    with _LOCK:
        for p in paths:
            if stats[p] in _MEMO:
                out[p] = _MEMO[stats[p]]
            else:
                todo.append(p)
    if not todo:
        return out
    con = _connect()
    known: dict[str, tuple[int, int, int, int, str]] = {}
    if con is not None:
        try:
            for start in range(0, len(todo), 500):
                chunk = [stats[p][0] for p in todo[start:start + 500]]
                rows = con.execute(f"SELECT path, size, mtime_ns, inode, ctime_ns, blake2b FROM digest WHERE path IN "
                                   f"({','.join('?' * len(chunk))})", chunk).fetchall()
                known.update({r[0]: tuple(r[1:]) for r in rows})
        except sqlite3.Error:
            known = {}
    new = []
    for p in todo:
        hit = known.get(stats[p][0])
        if hit is not None and tuple(hit[:4]) == stats[p][1:]:
            out[p] = hit[4]
        else:
            out[p] = hash_file(p)
            new.append((*stats[p], out[p]))
    if con is not None:
        try:
            if new:
                with con:  # one transaction: atomic, and serialised against other processes by SQLite
                    con.executemany("INSERT OR REPLACE INTO digest VALUES (?, ?, ?, ?, ?, ?)", new)
        except sqlite3.Error:
            pass  # a locked or read-only cache costs a rehash next time, never a wrong digest
        finally:
            con.close()
    with _LOCK:
        for p in todo:
            _MEMO[stats[p]] = out[p]
    return out
