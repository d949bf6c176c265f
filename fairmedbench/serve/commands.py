"""`benchmark serve` (the board server, its tokens, workers and audit log) and `benchmark submit --to` (the
submitter's side), as argparse commands. Nothing heavy (FastAPI, SQLAlchemy) is imported until a command runs."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fairmedbench.errors import InputError

DEFAULT_ROOT = "leaderboards"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--boards", default=DEFAULT_ROOT, help="the boards folder (the one `submit` and `leaderboard "
                                                          "build` use; created when absent)")
    p.add_argument("--db", default=None, metavar="URL", help="database URL (default: an SQLite file beside the "
                                                             "boards; postgresql+psycopg://user@host/db for a "
                                                             "public deployment)")


def add_serve(sub: Any) -> None:
    """Register `benchmark serve` and its actions."""
    p = sub.add_parser("serve", help="serve the boards: pages, a JSON API, authenticated submissions, a queue",
                       description="Serve every board of the boards folder over HTTP: the live board pages, each "
                                   "submission's page and a JSON API (OpenAPI at /openapi.json); token-authenticated "
                                   "submissions are checked exactly as `benchmark submit` checks them and queued "
                                   "for `benchmark serve worker`.")
    _common(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--max-upload-mb", type=float, default=256.0, help="largest upload accepted (default 256 MB)")
    p.add_argument("--daily-cap", type=int, default=20, help="submissions per submitter per 24 hours (default 20)")
    p.add_argument("--max-queue", type=int, default=200, help="open verification jobs before new submissions are "
                                                              "turned away (default 200)")
    p.set_defaults(handler=_cmd_serve)
    actions = p.add_subparsers(dest="serve_action", metavar="ACTION")
    token = actions.add_parser("token", help="submitter tokens").add_subparsers(dest="token_action", required=True)
    add = token.add_parser("add", help="a token for a submitter (printed once; only a salted hash is stored)")
    add.add_argument("name")
    _common(add)
    add.add_argument("--maintainer", action="store_true", help="may withdraw any row and read the audit log")
    add.add_argument("--expires", type=float, default=None, metavar="DAYS", help="days until the token expires")
    add.set_defaults(handler=_cmd_token_add)
    revoke = token.add_parser("revoke", help="revoke a submitter's token")
    revoke.add_argument("name")
    _common(revoke)
    revoke.set_defaults(handler=_cmd_token_revoke)
    listing = token.add_parser("list", help="submitters (never their tokens)")
    _common(listing)
    listing.set_defaults(handler=_cmd_token_list)
    worker = actions.add_parser("worker", help="verify queued submissions (leases; `benchmark verify` per job)")
    _common(worker)
    worker.add_argument("--lease", type=float, default=900.0, help="lease seconds, renewed while a job runs; a dead "
                                                                  "worker's job is taken again after it (default 900)")
    worker.add_argument("--timeout", type=float, default=3600.0, help="seconds one verification may run")
    worker.add_argument("--once", action="store_true", help="stop when the queue is empty")
    worker.add_argument("--launcher", choices=("local", "ray"), default="local",
                        help="local: one verification at a time in this process; ray: each as a Ray task, several "
                             "at once (every Ray node must see the boards folder at the same path)")
    worker.add_argument("--address", default=None, help="a Ray cluster (HOST:PORT or ray://HOST:10001) for "
                                                        "--launcher ray (default: start a local Ray)")
    worker.add_argument("--max-parallel", type=int, default=None, metavar="N",
                        help="verifications at once with --launcher ray (default: the cluster's CPUs)")
    worker.set_defaults(handler=_cmd_worker)
    log = actions.add_parser("audit", help="print the audit log (newest first, JSON lines)")
    _common(log)
    log.set_defaults(handler=_cmd_audit)


def add_remote_submit(p: argparse.ArgumentParser) -> None:
    """`benchmark submit`'s options for a board server."""
    p.add_argument("--to", default=None, metavar="URL", help="a board server (`benchmark serve`): upload there")
    p.add_argument("--token-file", default=None, metavar="FILE", help="file holding your token (with --to)")
    p.add_argument("--status", default=None, metavar="ID", help="show a submission's state on the server (--to)")
    p.add_argument("--wait", action="store_true", help="with --to: follow the submission until it ends")


def route_submit(args: argparse.Namespace) -> int | None:
    """`benchmark submit BUNDLE --to URL --token-file FILE` or `benchmark submit --status ID --to URL`: its exit
    code; None for a local submit (after checking it names a bundle and a board)."""
    from fairmedbench.serve import client

    if not args.to and not args.status:
        if not args.bundle or not args.board:
            raise InputError("benchmark submit needs a BUNDLE and --board NAME (or --to URL for a board server)")
        return None
    if not args.to:
        raise InputError("--status ID needs --to URL (the board server)")
    if args.status:
        sub = client.follow(args.status, args.to, args.wait)
    else:
        if not args.bundle or not args.token_file:
            raise InputError("benchmark submit --to URL needs a BUNDLE and --token-file FILE")
        token = client.read_token(args.token_file)
        sub = client.upload(args.bundle, args.to, token, args.board, client.bar)
        if args.wait:
            sub = client.follow(sub["id"], args.to, True)
    ok = sub["state"] not in ("rejected", "verification failed", "withdrawn")
    for line in client.lines(sub, args.to):
        print(line, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


def _service(args: argparse.Namespace, **kw: Any) -> Any:
    from fairmedbench.serve.service import Service

    return Service(args.boards, args.db, **kw)


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from fairmedbench.serve.app import asgi
    from fairmedbench.serve.service import Settings

    if args.max_upload_mb <= 0 or args.daily_cap < 1 or args.max_queue < 1:
        raise InputError("--max-upload-mb must be above 0, --daily-cap and --max-queue at least 1")
    service = _service(args, settings=Settings(int(args.max_upload_mb * (1 << 20)), args.daily_cap, args.max_queue))
    print(f"serving the boards of {args.boards} at http://{args.host}:{args.port}/ (database "
          f"{service.engine.url.render_as_string(hide_password=True)})", file=sys.stderr, flush=True)
    uvicorn.run(asgi(service), host=args.host, port=args.port, log_level="info")
    return 0


def _cmd_token_add(args: argparse.Namespace) -> int:
    token = _service(args).add_token(args.name, args.maintainer, args.expires)
    print(f"token for {args.name} (shown once; store it in a file only you can read):", file=sys.stderr)
    print(token)
    return 0


def _cmd_token_revoke(args: argparse.Namespace) -> int:
    _service(args).revoke(args.name)
    print(f"revoked the token of {args.name}")
    return 0


def _cmd_token_list(args: argparse.Namespace) -> int:
    for s in _service(args).submitters():
        print(json.dumps(s))
    return 0


def _cmd_worker(args: argparse.Namespace) -> int:
    from fairmedbench.serve.worker import work

    if args.lease < 3 or args.timeout <= 0:
        raise InputError("--lease must be at least 3 seconds and --timeout above 0")
    if args.launcher != "ray" and (args.address or args.max_parallel is not None):
        raise InputError("--address and --max-parallel are options of --launcher ray")
    if args.max_parallel is not None and args.max_parallel < 1:
        raise InputError(f"--max-parallel must be at least 1, got {args.max_parallel}")
    work(args.boards, args.db, args.lease, args.timeout, once=args.once, launcher=args.launcher,
         address=args.address, max_parallel=args.max_parallel)
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    for line in _service(args).audit_log():
        print(json.dumps(line))
    return 0
