"""Load on `benchmark serve` against 127.0.0.1 only, bounded in count and time: N concurrent submitters sending
small valid bundles (one model each, one revision per bundle) while readers fetch pages and API answers.

Reports submissions lost (a 201 whose id the database lacks) or duplicated (two rows or folders for one model and
revision), 5xx answers, p50/p95 latency of the reads and of the uploads, and the server's peak resident memory
(VmHWM). The server runs in a child process (uvicorn, one worker) on a fresh boards folder; the suite is a one-entry
test suite (tests/leaderboards/bundle_factory.py's rows, 60 test items, one seed).

With `--restart-db CMD` (e.g. "pg_ctl -D DATA -m fast -w restart" of the PostgreSQL cluster behind --db), the
command is run once when `--restart-after` submissions were accepted: submitters send a bundle again after a 503
(up to 300 times, 0.1 s apart), and the report adds the restart's seconds, the 503 answers and whether each said in
one line that the database did not answer; every bundle must still end accepted, none lost or duplicated.

Usage: python benchmarks/serve_load.py [--db URL] [--submitters 20] [--bundles 200] [--reads 2000]
       [--limit-s 900] [--restart-db CMD [--restart-after N]] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import io
import json
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "leaderboards"))

from bundle_factory import model_card, pinned, write_bundle  # noqa: E402

from fairmedbench.leaderboards.suites import SUITES, Entry, Suite, register_suite  # noqa: E402

BOARD = "serve-load"


def load_suite() -> Suite:
    """The one-entry board the load runs against (registered in this process)."""
    if BOARD in SUITES:
        return SUITES.get(BOARD)
    return register_suite(Suite(BOARD, "1.0", "load test board: one classification entry, one seed", (
        pinned(Entry("synth-control", ("sex",), "linear_probe", seeds=(0,))),)))


def child(boards: str, port: int, url: str) -> None:
    """The server process: the load board registered, then uvicorn on 127.0.0.1."""
    import uvicorn

    from fairmedbench.serve.app import asgi
    from fairmedbench.serve.service import Service, Settings

    load_suite()
    service = Service(boards, url, Settings(max_upload=16 << 20, daily_cap=10_000, max_queue=10_000))
    uvicorn.run(asgi(service), host="127.0.0.1", port=port, log_level="warning")


def _tar(folder: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(folder, arcname=".")
    return buf.getvalue()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) in milliseconds, None when empty."""
    if not values:
        return None
    return round(1000 * statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1], 1) \
        if len(values) > 1 else round(1000 * values[0], 1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", default=None, help="database URL (default: SQLite beside the boards)")
    p.add_argument("--submitters", type=int, default=20)
    p.add_argument("--bundles", type=int, default=200)
    p.add_argument("--reads", type=int, default=2000)
    p.add_argument("--readers", type=int, default=8)
    p.add_argument("--limit-s", type=float, default=900.0)
    p.add_argument("--restart-db", default=None, metavar="CMD", help="a command restarting the database, run once "
                                                                      "under load")
    p.add_argument("--restart-after", type=int, default=None, metavar="N",
                   help="accepted submissions before --restart-db runs (default: a quarter of --bundles)")
    p.add_argument("--out", default=None)
    p.add_argument("--child", nargs=3, metavar=("BOARDS", "PORT", "URL"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child[0], int(a.child[1]), a.child[2])
        return 0
    import requests

    from fairmedbench.serve.service import Service

    suite = load_suite()
    work = Path(tempfile.mkdtemp(prefix="fmb-serve-load-"))
    boards = work / "boards"
    service = Service(boards, a.db)
    url = service.url
    t = time.time()
    per = -(-a.bundles // a.submitters)
    plan: list[tuple[str, list[bytes]]] = []
    for k in range(a.submitters):
        base = write_bundle(work / f"base{k}", suite, model_card(f"load-{k:02d}", quality=0.6))
        bodies = []
        for j in range(min(per, a.bundles - k * per)):
            model = json.loads((base / "model.json").read_text())
            (base / "model.json").write_text(json.dumps({**model, "revision": f"r{j}"}))
            bodies.append(_tar(base))
        plan.append((service.add_token(f"sub{k:02d}"), bodies))
    prep_s = time.time() - t
    service.engine.dispose()
    port = _port()
    proc = subprocess.Popen([sys.executable, __file__, "--child", str(boards), str(port), url])
    base_url = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        try:
            if requests.get(base_url + "/healthz", timeout=2).status_code == 200:
                break
        except requests.RequestException:
            time.sleep(0.05)
    deadline = time.time() + a.limit_s
    lock = threading.Lock()
    created: list[str] = []
    codes: dict[int, int] = {}
    upload_s: list[float] = []
    read_s: list[float] = []
    errors: list[str] = []

    unclear_503: list[str] = []
    unfinished: list[int] = []
    restart_after = a.restart_after if a.restart_after is not None else max(1, a.bundles // 4)
    restart: dict[str, Any] = {}

    def tally(r: requests.Response, latencies: list[float], seconds: float) -> None:
        """One answer counted (the caller holds `lock`): its latency, its status, an unclear 503's body."""
        latencies.append(seconds)
        codes[r.status_code] = codes.get(r.status_code, 0) + 1
        if r.status_code == 503 and not _clear_503(r):
            unclear_503.append(r.text[:200])

    def restarter() -> None:
        while len(created) < restart_after and time.time() < deadline:
            time.sleep(0.05)
        t0 = time.time()
        # not captured: a server the command starts would inherit the pipes and keep them open
        try:
            code = subprocess.run(shlex.split(a.restart_db), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  timeout=300, check=False).returncode
        except subprocess.TimeoutExpired:
            code = 124
        restart.update(seconds=round(time.time() - t0, 2), exit_code=code, at_accepted=len(created))

    def submitter(token: str, bodies: list[bytes]) -> None:
        s = requests.Session()
        for body in bodies:
            last = 0  # the last answer's status (0: none)
            for _ in range(300 if a.restart_db else 1):
                if time.time() > deadline:
                    return
                t0 = time.time()
                try:
                    r = s.post(base_url + "/api/submissions", data=body, timeout=600,
                               headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-tar"})
                except requests.RequestException as err:
                    with lock:
                        errors.append(f"upload: {type(err).__name__}")
                    break
                with lock:
                    tally(r, upload_s, time.time() - t0)
                    if r.status_code == 201:
                        created.append(r.json()["id"])
                last = r.status_code
                if last != 503:
                    break
                time.sleep(0.1)
            if last not in (200, 201):
                with lock:
                    unfinished.append(last)

    paths = ["/", f"/boards/{BOARD}", "/api/boards", "/api/queue", f"/api/boards/{BOARD}/rows", "/healthz"]

    def reader(n: int, k: int) -> None:
        s = requests.Session()
        for i in range(n):
            if time.time() > deadline:
                return
            path = paths[(i + k) % len(paths)]
            with lock:
                if created and i % 7 == 0:
                    path = f"/api/submissions/{created[-1]}"
            t0 = time.time()
            try:
                r = s.get(base_url + path, timeout=600)
            except requests.RequestException as err:
                with lock:
                    errors.append(f"read: {type(err).__name__}")
                continue
            with lock:
                tally(r, read_s, time.time() - t0)

    t = time.time()
    threads = [threading.Thread(target=submitter, args=plan[k]) for k in range(a.submitters)]
    threads += [threading.Thread(target=reader, args=(a.reads // a.readers, k)) for k in range(a.readers)]
    if a.restart_db:
        threads.append(threading.Thread(target=restarter))
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.time() - t
    peak_kb = None
    for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak_kb = int(line.split()[1])
    proc.terminate()
    proc.wait(timeout=60)
    check = Service(boards, url)
    rows = check.submissions_of(BOARD)
    ids = {r["id"] for r in rows}
    pairs = [(r["model"], r["revision"]) for r in rows]
    folders = list((boards / BOARD / "submissions").glob("*/*")) if (boards / BOARD / "submissions").exists() else []
    report: dict[str, Any] = {
        "database": check.engine.dialect.name, "submitters": a.submitters, "bundles_planned": a.bundles,
        "bundle_bytes": len(plan[0][1][0]), "reads_planned": a.reads, "prep_s": round(prep_s, 1),
        "wall_s": round(wall, 1), "status_codes": dict(sorted(codes.items())), "client_errors": errors[:10],
        "accepted_201": len(created), "rows_in_db": len(rows),
        "lost": len(set(created) - ids), "duplicated": len(pairs) - len(set(pairs)) + max(0, len(folders) - len(rows)),
        "stored_folders": len(folders), "http_5xx": sum(n for c, n in codes.items() if c >= 500),
        "reads_done": len(read_s), "read_p50_ms": pct(read_s, 0.5), "read_p95_ms": pct(read_s, 0.95),
        "upload_p50_ms": pct(upload_s, 0.5), "upload_p95_ms": pct(upload_s, 0.95),
        "server_peak_rss_mb": round(peak_kb / 1024, 1) if peak_kb else None}
    if a.restart_db:
        report.update(db_restart=restart, http_503=codes.get(503, 0), unclear_503=unclear_503[:5],
                      bundles_not_accepted=len(unfinished))
    check.engine.dispose()
    print(json.dumps(report, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    expected_5xx = report.get("http_503", 0) if a.restart_db and not unclear_503 else 0
    ok = report["lost"] == 0 and report["duplicated"] == 0 and report["http_5xx"] == expected_5xx
    return 0 if ok and not unfinished and restart.get("exit_code", 0) == 0 else 1


def _clear_503(r: Any) -> bool:
    """A 503 answered by the server's database-outage handler: one line saying so."""
    try:
        detail = r.json()["detail"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(detail, str) and detail.startswith("the board's database did not answer") and "\n" not in detail


if __name__ == "__main__":
    raise SystemExit(main())
