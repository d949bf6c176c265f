"""The ASGI application of `benchmark serve` (FastAPI): board pages, submission pages and the JSON API.

Every response carries a Content-Security-Policy (the board page's own, which allows only its inline script; no
script at all elsewhere); every submitted text is escaped by the templates (autoescape). Tokens arrive only in the
Authorization header and are never logged or shown."""

from __future__ import annotations

import datetime as _dt
import errno
import logging
import uuid
from pathlib import Path
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fairmedbench.serve.service import DB_DOWN, ServeError, Service

LOG = logging.getLogger("fairmedbench.serve")
PAGE_CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'")
TEMPLATES = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                        autoescape=select_autoescape(["html", "j2"], default=True))


def when(t: float | None) -> str:
    """POSIX seconds as an ISO time in UTC ('' for none)."""
    return "" if t is None else _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="seconds")


TEMPLATES.globals["when"] = when


class SecurityHeaders:
    """ASGI middleware: a Content-Security-Policy (unless the route set its own), nosniff and no referrer on every
    response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                for name, value in ((b"content-security-policy", PAGE_CSP.encode()),
                                    (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer")):
                    if name not in names:
                        headers.append((name, value))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def _thread(fn: Any, *args: Any) -> Any:
    """`fn(*args)` in a worker thread, so a database or disk call does not block the event loop."""
    return await anyio.to_thread.run_sync(fn, *args)


def _boards(service: Service) -> list[dict[str, Any]]:
    """Every board: name, version, description, number of submissions, page."""
    from fairmedbench.leaderboards.suites import SUITES

    counts: dict[str, int] = {}
    for s in service.submissions_of():
        counts[s["board"]] = counts.get(s["board"], 0) + 1
    return [{"name": n, "version": SUITES.get(n).version, "description": SUITES.get(n).description,
             "submissions": counts.get(n, 0), "page": f"/boards/{n}"} for n in SUITES.names()]


def _add_error_handlers(app: FastAPI, service: Service) -> None:
    """A refusal answers its own status; a database that does not answer 503 (retry); a full disk 507."""
    @app.exception_handler(ServeError)
    async def _refused(_: Request, err: ServeError) -> JSONResponse:
        return JSONResponse({"detail": err.message}, status_code=err.status)

    async def _db_down(_: Request, err: Exception) -> JSONResponse:
        LOG.warning("database did not answer: %s", str(err).strip().splitlines()[0][:200] if str(err).strip() else
                    type(err).__name__)
        return JSONResponse({"detail": "the board's database did not answer (restarting?); try again in a few "
                                       "seconds (sending the same bundle again is safe: it stays one submission)"},
                            status_code=503, headers={"Retry-After": "5"})

    for kind in DB_DOWN:
        app.add_exception_handler(kind, _db_down)

    @app.exception_handler(OSError)
    async def _disk(_: Request, err: OSError) -> JSONResponse:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            LOG.error("disk full under %s", service.boards)
            return JSONResponse({"detail": "the server's disk is full; nothing was stored, try again later"},
                                status_code=507)
        raise err


def _add_pages(app: FastAPI, service: Service) -> None:
    """The HTML pages: the index of boards, a board's live page, a submission's page."""
    from fairmedbench.leaderboards import render

    @app.get("/", response_class=HTMLResponse, summary="index of the boards")
    async def index() -> HTMLResponse:
        return HTMLResponse(TEMPLATES.get_template("index.html.j2").render(boards=await _thread(_boards, service)))

    @app.get("/boards/{name}", response_class=HTMLResponse, summary="a board's live page")
    async def board_page(name: str) -> HTMLResponse:
        _, page = await _thread(service.board, name)
        return HTMLResponse(page, headers={"Content-Security-Policy": render._csp()})

    @app.get("/submissions/{sid}", response_class=HTMLResponse, summary="a submission's page")
    async def submission_page(sid: str) -> HTMLResponse:
        sub = await _thread(service.submission, sid)
        return HTMLResponse(TEMPLATES.get_template("submission.html.j2").render(s=sub))


def _add_read_api(app: FastAPI, service: Service) -> None:
    """The public JSON reads: boards, a board's rows, a submission, the queue."""
    @app.get("/api/boards", summary="every board: name, version, description, submissions, page")
    async def api_boards() -> list[dict[str, Any]]:
        return await _thread(_boards, service)

    @app.get("/api/boards/{name}/rows", summary="a board's rows as `leaderboard build` computes them")
    async def api_rows(name: str) -> dict[str, Any]:
        doc, _ = await _thread(service.board, name)
        return {"board": name, "rows": doc["rows"], "models": doc["models"], "refused": doc["refused"]}

    @app.get("/api/submissions/{sid}", summary="a submission: state, tier, flags, reasons, every event")
    async def api_submission(sid: str) -> dict[str, Any]:
        return await _thread(service.submission, sid)

    @app.get("/api/queue", summary="open verification jobs")
    async def api_queue() -> list[dict[str, Any]]:
        return await _thread(service.queue)


async def _receive_upload(request: Request, path: Path, cap: int) -> None:
    """Stream the request body into `path`, refusing (413) once it passes `cap` bytes."""
    total = 0
    with open(path, "wb") as out:
        async for chunk in request.stream():
            total += len(chunk)
            if total > cap:
                raise ServeError(413, f"upload is over this server's cap of {cap} bytes")
            out.write(chunk)


def _add_submission_api(app: FastAPI, service: Service, limiter: anyio.CapacityLimiter) -> None:
    """The authenticated writes: submit a bundle (at most `limiter`'s slots ingested at once), withdraw one."""
    @app.post("/api/submissions", status_code=201, summary="submit a bundle (a tar archive of its folder)",
              responses={200: {"description": "the same bundle was submitted before: that submission"},
                         401: {"description": "no, wrong, revoked or expired token"},
                         403: {"description": "the model belongs to another submitter"},
                         413: {"description": "over the upload cap"}, 429: {"description": "over the daily cap"},
                         503: {"description": "the verification queue is full"}})
    async def post_submission(request: Request, board: str | None = None) -> JSONResponse:
        who = await _thread(service.authenticate, request.headers.get("authorization"))
        length = request.headers.get("content-length")
        await _thread(service.admit, who, int(length) if length and length.isdigit() else None)
        path = service.work_dir() / f"{uuid.uuid4().hex}.part"
        try:
            await _receive_upload(request, path, service.settings.max_upload)
            async with limiter:
                new, sub = await _thread(service.ingest, who, path, board)
        finally:
            path.unlink(missing_ok=True)
        LOG.info("submission %s on %s by %s: %s", sub["id"], sub["board"], who.name, sub["state"])
        return JSONResponse({**sub, "page": f"/submissions/{sub['id']}"}, status_code=201 if new else 200)

    @app.post("/api/submissions/{sid}/withdraw", summary="withdraw a submission (maintainers, or its submitter)")
    async def withdraw(sid: str, request: Request) -> dict[str, Any]:
        who = await _thread(service.authenticate, request.headers.get("authorization"))
        try:
            reason = str((await request.json())["reason"])
        except (ValueError, KeyError, TypeError):
            raise ServeError(422, "send JSON {\"reason\": \"...\"}") from None
        return await _thread(service.withdraw, who, sid, reason)


def _add_maintenance(app: FastAPI, service: Service) -> None:
    """The audit log (maintainers only) and the health check."""
    @app.get("/api/audit", summary="the audit log (maintainers)")
    async def api_audit(request: Request) -> list[dict[str, Any]]:
        who = await _thread(service.authenticate, request.headers.get("authorization"))
        if not who.maintainer:
            raise ServeError(403, "the audit log is readable by maintainers")
        return await _thread(service.audit_log)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> Response:
        return Response("ok", media_type="text/plain")


def create_app(service: Service, recompute_slots: int = 2) -> FastAPI:
    """The application over `service`; at most `recompute_slots` bundles are unpacked and recomputed at once."""
    app = FastAPI(title="fairmedbench boards", version="1", docs_url=None, redoc_url=None)
    limiter = anyio.CapacityLimiter(recompute_slots)
    service.clean_work_dir()
    _add_error_handlers(app, service)
    _add_pages(app, service)  # in this order: the OpenAPI document lists the routes as they were added
    _add_read_api(app, service)
    _add_submission_api(app, service, limiter)
    _add_maintenance(app, service)
    return app


def asgi(service: Service) -> ASGIApp:
    """The application wrapped in the security headers."""
    return SecurityHeaders(create_app(service))
