"""The service behind `benchmark serve`: submitters and tokens, submissions and their states, the verification
queue with leases, withdrawals and the audit log. HTTP-free (app.py maps its errors to status codes).

A submission's states: received -> accepted (recomputed; self-reported) or rejected (with every reason) -> queued
-> verifying -> verified or verification failed; a maintainer (or its submitter) may withdraw it. Every change is
an event (state, reason, time) and every action an audit line (who, what, when, bundle hash)."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from fairmedbench.errors import InputError
from fairmedbench.serve import db, tokens
from fairmedbench.serve.db import audit, events, jobs, model_owners, submissions, submitters

if TYPE_CHECKING:
    from fairmedbench.leaderboards.seal import BoardKey

DAY = 86400.0
WORK_DIR = ".serve-work"  # uploads and unpacked bundles, under the boards folder; emptied at start
OPEN_JOB_STATES = ("queued", "leased")
# the database did not answer (PostgreSQL restarting, a dropped connection, SQLite busy past its timeout): the request
# is answered 503 and may be sent again; the pool's pre-ping replaces dead connections once it is back
DB_DOWN = (sa.exc.OperationalError, sa.exc.InterfaceError)


class ServeError(Exception):
    """A refused request: an HTTP status and one line saying what is wrong and what to do."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Submitter:
    """An authenticated submitter (never holds the token)."""

    id: int
    name: str
    maintainer: bool


@dataclass(frozen=True)
class Settings:
    """The service's bounds: upload size (bytes), submissions per submitter per day, open verification jobs."""

    max_upload: int = 256 << 20
    daily_cap: int = 20
    max_queue: int = 200


@dataclass(frozen=True)
class Job:
    """A leased verification job."""

    id: int
    submission_id: str
    board: str
    folder: str
    attempts: int


def _loads(text: str | None) -> Any:
    return json.loads(text) if text else []


class Service:
    """One boards folder and its database; `now` is the clock (POSIX seconds), injectable for tests."""

    def __init__(self, boards: Path | str, url: str | None = None, settings: Settings | None = None,
                 now: Callable[[], float] = time.time) -> None:
        self.boards = Path(boards)
        self.boards.mkdir(parents=True, exist_ok=True)
        self.url = url or db.default_url(self.boards)
        self.engine = db.make_engine(self.url)
        db.upgrade(self.engine)
        self.settings = settings or Settings()
        self.now = now
        self._pages: dict[str, tuple[tuple[int, int], dict[str, Any], str]] = {}
        self._page_lock = threading.Lock()
        self._checked: dict[tuple[str, str, bytes], tuple[dict[str, Any] | None, str | None, list[str]]] = {}

    # --- identity -------------------------------------------------------------------------------------------
    def add_token(self, name: str, maintainer: bool = False, expires_days: float | None = None) -> str:
        """A new token for submitter `name` (created when new; an existing one's old token stops working); the
        token is returned once and only its salted hash is stored."""
        from fairmedbench.leaderboards.submit import SAFE_NAME_RE

        if not SAFE_NAME_RE.match(name):
            raise InputError(f"submitter name {name!r} is refused: 1-64 characters of a-z, 0-9, '.', '_' and '-'")
        if expires_days is not None and expires_days <= 0:
            raise InputError(f"--expires is a number of days above 0, got {expires_days}")
        token_id, token = tokens.new_token()
        now = self.now()
        values = {"token_id": token_id, "token_hash": tokens.hash_token(token), "maintainer": maintainer,
                  "expires_at": None if expires_days is None else now + expires_days * DAY, "revoked_at": None}
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(submitters.c.id).where(submitters.c.name == name)).first()
            if row is None:
                conn.execute(submitters.insert().values(name=name, created_at=now, **values))
            else:
                conn.execute(submitters.update().where(submitters.c.id == row.id).values(**values))
            self._audit(conn, name, "token add", detail=f"maintainer={maintainer} expires_days={expires_days}")
        return token

    def revoke(self, name: str) -> None:
        """Revoke submitter `name`'s token."""
        with self.engine.begin() as conn:
            done = conn.execute(submitters.update().where(submitters.c.name == name)
                                .values(revoked_at=self.now())).rowcount
            if not done:
                raise InputError(f"no submitter named {name!r}; `benchmark serve token list` shows them")
            self._audit(conn, name, "token revoke")

    def submitters(self) -> list[dict[str, Any]]:
        """Every submitter: name, maintainer, created, expires, revoked (no token, no hash)."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(submitters).order_by(submitters.c.name)).mappings().all()
        return [{k: r[k] for k in ("name", "maintainer", "created_at", "expires_at", "revoked_at")} for r in rows]

    def authenticate(self, authorization: str | None) -> Submitter:
        """The submitter of an 'Authorization: Bearer <token>' header; ServeError 401 when missing, wrong, revoked
        or expired."""
        if not authorization or not authorization.startswith("Bearer "):
            raise ServeError(401, "no token: send 'Authorization: Bearer <token>' (a maintainer gives you one with "
                                  "`benchmark serve token add NAME`)")
        token = authorization[len("Bearer "):].strip()
        tid = tokens.token_id(token)
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(submitters).where(submitters.c.token_id == tid)).first() if tid else None
        if row is None or not tokens.check_token(token, row.token_hash):
            raise ServeError(401, "token not recognised; check the token file, or ask a maintainer for a new token")
        if row.revoked_at is not None:
            raise ServeError(401, "token revoked; ask a maintainer for a new one")
        if row.expires_at is not None and row.expires_at <= self.now():
            raise ServeError(401, "token expired; ask a maintainer for a new one")
        return Submitter(row.id, row.name, bool(row.maintainer))

    # --- submissions ----------------------------------------------------------------------------------------
    def admit(self, who: Submitter, content_length: int | None) -> None:
        """Checks made before a byte of the body is read: size (413), the submitter's daily cap (429), the queue
        bound (503)."""
        cap = self.settings.max_upload
        if content_length is not None and content_length > cap:
            raise ServeError(413, f"upload of {content_length} bytes is over this server's cap of {cap} bytes")
        with self.engine.connect() as conn:
            today = conn.execute(sa.select(sa.func.count()).select_from(submissions).where(
                submissions.c.submitter_id == who.id, submissions.c.created_at > self.now() - DAY)).scalar_one()
            queued = conn.execute(sa.select(sa.func.count()).select_from(jobs).where(
                jobs.c.state.in_(OPEN_JOB_STATES))).scalar_one()
        if today >= self.settings.daily_cap:
            raise ServeError(429, f"{who.name} has made {today} submissions in the last 24 hours, this server's cap "
                                  f"is {self.settings.daily_cap}; try again later")
        if queued >= self.settings.max_queue:
            raise ServeError(503, f"the verification queue is full ({queued} jobs); try again later")

    def work_dir(self) -> Path:
        """Where uploads are streamed and unpacked (removed when done)."""
        path = self.boards / WORK_DIR
        path.mkdir(parents=True, exist_ok=True)
        return path

    def clean_work_dir(self) -> None:
        """Remove what a killed server left half-uploaded (no submission row was ever written for it)."""
        shutil.rmtree(self.boards / WORK_DIR, ignore_errors=True)

    def ingest(self, who: Submitter, archive: Path, board: str | None = None) -> tuple[bool, dict[str, Any]]:
        """Unpack an uploaded bundle (a tar archive), then run exactly `submit`'s checks and recomputation on it;
        (new, the submission's record). The same bundle (by content hash) on the same board is one submission."""
        from fairmedbench.leaderboards import seal
        from fairmedbench.leaderboards.suites import get_suite

        folder = Path(str(archive) + ".d")
        try:
            bundle = unpack(archive, folder)
            try:
                suite_doc = json.loads((bundle / "suite.json").read_text(encoding="utf-8"))
                name = board or suite_doc["name"]
                if not isinstance(name, str):
                    raise TypeError
            except (OSError, ValueError, KeyError, TypeError):
                raise ServeError(400, "suite.json: missing or unreadable; a bundle names its board in suite.json "
                                      "{\"name\", \"version\"}") from None
            try:
                suite = get_suite(name)
            except InputError as err:
                raise ServeError(404, str(err)) from None
            try:
                digest = seal.content_hash(seal.listing(bundle))
            except InputError as err:
                raise ServeError(400, f"rejected: {err}") from None
            existing = self._by_hash(suite.name, digest)
            if existing is not None:
                self._audit_once(who, "resubmit (same bundle)", suite.name, existing["id"], digest)
                if existing["state"] == "received" and existing["submitter"] == who.name:
                    # an earlier upload of it was cut off (the database went away) before its checks ended
                    self._recompute(who, existing["id"], suite, bundle, digest)
                    return False, self.submission(existing["id"])
                return False, existing
            model = _model_name(bundle)
            if model is not None:
                self._check_owner(who, model)
            sid = uuid.uuid4().hex
            try:
                with self.engine.begin() as conn:
                    conn.execute(submissions.insert().values(
                        id=sid, board=suite.name, content_hash=digest, submitter_id=who.id, model=model,
                        state="received", reasons="[]", flags="[]", created_at=self.now(), updated_at=self.now()))
                    self._event(conn, sid, "received", f"uploaded by {who.name}")
                    self._audit(conn, who.name, "submit", suite.name, sid, digest)
            except sa.exc.IntegrityError:
                again = self._by_hash(suite.name, digest)
                if again is None:
                    raise
                return False, again
            self._recompute(who, sid, suite, bundle, digest)
            return True, self.submission(sid)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _recompute(self, who: Submitter, sid: str, suite: Any, bundle: Path, digest: str) -> None:
        from fairmedbench.leaderboards import seal
        from fairmedbench.leaderboards.submit import store_submission, validate_bundle

        board_dir = self.boards / suite.name
        try:
            seal.board_key(board_dir)
            reasons, summary, files = validate_bundle(bundle, suite)
        except InputError as err:
            reasons, summary, files = [str(err)], None, {}
        if reasons or summary is None:
            self._set(sid, "rejected", "rejected by submit's checks", reasons=reasons)
            return
        model = summary["model"]
        try:
            with self.engine.begin() as conn:
                self._claim(conn, who, model["name"])
        except ServeError as err:
            self._set(sid, "rejected", err.message, reasons=[err.message])
            raise
        key = seal.board_key(board_dir, create=True)
        assert key is not None, "created when absent"
        path = _stored_before(board_dir, model, files, key)
        if path is None:
            try:
                path = store_submission(board_dir, summary, files, key)
            except InputError as err:
                self._set(sid, "rejected", "rejected", reasons=[str(err)])
                return
        with self.engine.begin() as conn:
            if not conn.execute(submissions.update().where(submissions.c.id == sid, submissions.c.state == "received")
                                .values(state="accepted", tier="self-reported", model=model["name"],
                                        revision=model["revision"], flags=json.dumps(summary["flags"]),
                                        folder=path.relative_to(self.boards).as_posix(), updated_at=self.now())
                                ).rowcount:
                return  # another request finished this submission's checks first
            self._event(conn, sid, "accepted", "every number recomputed from the predictions; self-reported")
            conn.execute(jobs.insert().values(submission_id=sid, state="queued", attempts=0, created_at=self.now()))
            conn.execute(submissions.update().where(submissions.c.id == sid).values(state="queued"))
            self._event(conn, sid, "queued", "queued for verification (the model re-run on a sample of test items)")
            self._audit(conn, who.name, "accepted", suite.name, sid, digest)

    def _check_owner(self, who: Submitter, model: str) -> None:
        with self.engine.connect() as conn:
            owner = conn.execute(sa.select(submitters.c.name).join(
                model_owners, model_owners.c.submitter_id == submitters.c.id).where(
                model_owners.c.name == model)).scalar_one_or_none()
        if owner is not None and owner != who.name:
            raise ServeError(403, f"model {model!r} belongs to another submitter (its first); submit under a new name")

    def _claim(self, conn: Connection, who: Submitter, model: str) -> None:
        owner = conn.execute(sa.select(model_owners.c.submitter_id).where(model_owners.c.name == model)
                             ).scalar_one_or_none()
        if owner is None:
            conn.execute(model_owners.insert().values(name=model, submitter_id=who.id, claimed_at=self.now()))
        elif owner != who.id:
            raise ServeError(403, f"model {model!r} belongs to another submitter (its first); submit under a new name")

    def _by_hash(self, board: str, digest: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            sid = conn.execute(sa.select(submissions.c.id).where(
                submissions.c.board == board, submissions.c.content_hash == digest)).scalar_one_or_none()
        return None if sid is None else self.submission(sid)

    def submission(self, sid: str) -> dict[str, Any]:
        """A submission's record: board, model, revision, state, tier, flags, reasons, withdrawal, every event."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(submissions, submitters.c.name.label("submitter")).join(
                submitters, submitters.c.id == submissions.c.submitter_id).where(submissions.c.id == sid)).first()
            if row is None:
                raise ServeError(404, f"no submission {sid!r}")
            history = conn.execute(sa.select(events).where(events.c.submission_id == sid).order_by(events.c.id)
                                   ).mappings().all()
        return {"id": row.id, "board": row.board, "submitter": row.submitter, "model": row.model,
                "revision": row.revision, "state": row.state, "tier": row.tier, "flags": _loads(row.flags),
                "reasons": _loads(row.reasons), "content_hash": row.content_hash, "created_at": row.created_at,
                "updated_at": row.updated_at, "withdrawn_reason": row.withdrawn_reason,
                "events": [{"state": e["state"], "reason": e["reason"], "at": e["at"]} for e in history]}

    def submissions_of(self, board: str | None = None) -> list[dict[str, Any]]:
        """Every submission (newest first), optionally of one board: id, board, model, revision, state, tier."""
        q = sa.select(submissions.c.id, submissions.c.board, submissions.c.model, submissions.c.revision,
                      submissions.c.state, submissions.c.tier, submissions.c.created_at)
        if board is not None:
            q = q.where(submissions.c.board == board)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q.order_by(submissions.c.created_at.desc())).mappings()]

    def queue(self) -> list[dict[str, Any]]:
        """Open verification jobs, oldest first: submission, board, model, state, attempts, lease expiry."""
        q = sa.select(jobs.c.submission_id, jobs.c.state, jobs.c.attempts, jobs.c.lease_expires_at,
                      submissions.c.board, submissions.c.model, submissions.c.revision).join(
            submissions, submissions.c.id == jobs.c.submission_id).where(
            jobs.c.state.in_(OPEN_JOB_STATES)).order_by(jobs.c.id)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]

    def withdraw(self, who: Submitter, sid: str, reason: str) -> dict[str, Any]:
        """Withdraw a submission (a maintainer, or its own submitter): its folder leaves the board, the reason is
        shown on the board page."""
        reason = " ".join(reason.split())
        if not reason or len(reason) > 500:
            raise ServeError(422, "a withdrawal needs a reason of 1-500 characters")
        sub = self.submission(sid)
        if not who.maintainer and sub["submitter"] != who.name:
            raise ServeError(403, "only a maintainer or the submitter may withdraw a submission")
        if sub["state"] == "withdrawn":
            return sub
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(submissions.c.folder).where(submissions.c.id == sid)).first()
            folder = row.folder if row is not None else None
            if folder:
                target = self.boards / sub["board"] / "withdrawn" / sid
                target.parent.mkdir(parents=True, exist_ok=True)
                os.rename(self.boards / folder, target)
            conn.execute(submissions.update().where(submissions.c.id == sid).values(
                state="withdrawn", withdrawn_reason=f"withdrawn by {who.name}: {reason}", updated_at=self.now(),
                folder=None))
            conn.execute(jobs.update().where(jobs.c.submission_id == sid, jobs.c.state == "queued").values(
                state="done", finished_at=self.now()))
            self._event(conn, sid, "withdrawn", f"by {who.name}: {reason}")
            self._audit(conn, who.name, "withdraw", sub["board"], sid, sub["content_hash"], reason)
        return self.submission(sid)

    # --- verification queue ---------------------------------------------------------------------------------
    def lease(self, worker: str, lease_s: float) -> Job | None:
        """Take the oldest open job (queued, or leased with an expired lease) by a conditional UPDATE; None when
        there is none. A job taken again after its worker's lease expired counts its attempts."""
        for _ in range(5):
            now = self.now()
            takeable = sa.or_(jobs.c.state == "queued",
                              sa.and_(jobs.c.state == "leased", jobs.c.lease_expires_at < now))
            with self.engine.begin() as conn:
                cand = conn.execute(sa.select(jobs.c.id, jobs.c.lease_owner).where(takeable).order_by(jobs.c.id)
                                    .limit(1)).first()
                if cand is None:
                    return None
                got = conn.execute(jobs.update().where(jobs.c.id == cand.id, takeable).values(
                    state="leased", lease_owner=worker, lease_expires_at=now + lease_s,
                    attempts=jobs.c.attempts + 1)).rowcount
                if got != 1:
                    continue  # another worker took it between the two statements
                row = conn.execute(sa.select(jobs.c.submission_id, jobs.c.attempts, submissions.c.board,
                                             submissions.c.folder).join(
                    submissions, submissions.c.id == jobs.c.submission_id).where(jobs.c.id == cand.id)).one()
                note = f"taken by worker {worker}" + (
                    f" (the lease of {cand.lease_owner} expired; attempt {row.attempts})" if cand.lease_owner else "")
                conn.execute(submissions.update().where(submissions.c.id == row.submission_id).values(
                    state="verifying", updated_at=now))
                self._event(conn, row.submission_id, "verifying", note)
                return Job(cand.id, row.submission_id, row.board, row.folder or "", row.attempts)
        return None

    def heartbeat(self, job: Job, worker: str, lease_s: float) -> bool:
        """Extend a held lease; False when the lease was lost (another worker holds the job now)."""
        with self.engine.begin() as conn:
            return conn.execute(jobs.update().where(jobs.c.id == job.id, jobs.c.state == "leased",
                                                    jobs.c.lease_owner == worker).values(
                lease_expires_at=self.now() + lease_s)).rowcount == 1

    def finish(self, job: Job, worker: str, passed: bool, reasons: list[str]) -> bool:
        """Record a job's outcome if `worker` still holds its lease (exactly once); False when it does not."""
        with self.engine.begin() as conn:
            done = conn.execute(jobs.update().where(jobs.c.id == job.id, jobs.c.state == "leased",
                                                    jobs.c.lease_owner == worker).values(
                state="done", finished_at=self.now())).rowcount
            if done != 1:
                return False
            state = conn.execute(sa.select(submissions.c.state).where(submissions.c.id == job.submission_id)
                                 ).scalar_one()
            if state == "withdrawn":
                return True
            new = "verified" if passed else "verification failed"
            conn.execute(submissions.update().where(submissions.c.id == job.submission_id).values(
                state=new, tier="verified" if passed else "self-reported", updated_at=self.now(),
                reasons=json.dumps(reasons)))
            self._event(conn, job.submission_id, new, "; ".join(reasons)[:4000] or new)
            digest = conn.execute(sa.select(submissions.c.content_hash).where(
                submissions.c.id == job.submission_id)).scalar_one()
            self._audit(conn, f"worker:{worker}", new, job.board, job.submission_id, digest)
        return True

    # --- pages and log --------------------------------------------------------------------------------------
    def board_document(self, name: str) -> dict[str, Any]:
        """The board's content as `leaderboard build` computes it, plus its withdrawn submissions among the refused
        (with the maintainer's reason)."""
        from fairmedbench.leaderboards import board as pages
        from fairmedbench.leaderboards.suites import get_suite

        try:
            suite = get_suite(name)
        except InputError as err:
            raise ServeError(404, str(err)) from None
        doc = pages.document(self.boards / suite.name, suite, checker=self._check_submission)
        with self.engine.connect() as conn:
            gone = conn.execute(sa.select(submissions.c.model, submissions.c.revision, submissions.c.id,
                                          submissions.c.withdrawn_reason).where(
                submissions.c.board == suite.name, submissions.c.state == "withdrawn")).all()
        doc["refused"] += [{"folder": f"withdrawn/{g.id}", "model": g.model, "revision": g.revision,
                            "reasons": [g.withdrawn_reason]} for g in gone]
        return doc

    def _check_submission(self, sub: Path, suite: Any, key: Any
                          ) -> tuple[dict[str, Any] | None, str | None, list[str]]:
        """`board.check_submission`, remembered per folder, suite and exact files (a folder whose files or seal
        changed is checked again)."""
        from fairmedbench.leaderboards import board as pages
        from fairmedbench.leaderboards import seal

        seal_file = sub / seal.SEAL_FILE
        memo = (f"{sub}|{suite.name}|{suite.version}", seal.content_hash(seal.listing(sub)),
                seal_file.read_bytes() if seal_file.is_file() else b"")
        if memo not in self._checked:
            self._checked[memo] = pages.check_submission(sub, suite, key)
        return self._checked[memo]

    def board(self, name: str) -> tuple[dict[str, Any], str]:
        """The board's content and live page (leaderboards/render.py's template), rebuilt only when a submission
        of the board changed state since the last build (reads in between get the last build)."""
        from fairmedbench.leaderboards import render

        with self.engine.connect() as conn:
            stamp = conn.execute(sa.select(sa.func.coalesce(sa.func.max(events.c.id), 0), sa.func.count()).select_from(
                events.join(submissions, submissions.c.id == events.c.submission_id)).where(
                submissions.c.board == name)).one()
        key = (int(stamp[0]), int(stamp[1]))
        with self._page_lock:
            cached = self._pages.get(name)
            if cached is None or cached[0] != key:
                doc = self.board_document(name)
                cached = self._pages[name] = (key, doc, render.html_page(doc))
            return cached[1], cached[2]

    def audit_log(self, limit: int = 1000) -> list[dict[str, Any]]:
        """The newest `limit` audit lines (who, what, when, board, submission, bundle hash, detail)."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(audit).order_by(audit.c.id.desc()).limit(limit)).mappings().all()
        return [dict(r) for r in rows]

    # --- helpers --------------------------------------------------------------------------------------------
    def _set(self, sid: str, state: str, note: str, reasons: list[str]) -> None:
        """A received submission's end in `state` (a rejection); nothing when another request already moved it on."""
        with self.engine.begin() as conn:
            if conn.execute(submissions.update().where(submissions.c.id == sid, submissions.c.state == "received")
                            .values(state=state, reasons=json.dumps(reasons), updated_at=self.now())).rowcount:
                self._event(conn, sid, state, note if not reasons else "; ".join(reasons)[:4000])

    def _event(self, conn: Connection, sid: str, state: str, reason: str) -> None:
        conn.execute(events.insert().values(submission_id=sid, state=state, reason=reason, at=self.now()))

    def _audit(self, conn: Connection, actor: str, action: str, board: str | None = None, sid: str | None = None,
               digest: str | None = None, detail: str = "") -> None:
        conn.execute(audit.insert().values(at=self.now(), actor=actor, action=action, board=board, submission_id=sid,
                                           bundle_hash=digest, detail=detail))

    def _audit_once(self, who: Submitter, action: str, board: str, sid: str, digest: str) -> None:
        with self.engine.begin() as conn:
            self._audit(conn, who.name, action, board, sid, digest)


def _stored_before(board_dir: Path, model: dict[str, Any], files: dict[str, bytes], key: BoardKey) -> Path | None:
    """The folder where an earlier, cut-off attempt of this very submission already stored it (the same files, its
    seal intact), else None."""
    from fairmedbench.leaderboards import seal
    from fairmedbench.leaderboards.submit import slug

    final = board_dir / "submissions" / slug(model["name"]) / slug(model["revision"])
    if not final.is_dir() or seal.check(final, key)[1] is not None:
        return None
    try:
        same = all((final / rel).read_bytes() == data for rel, data in files.items())
    except OSError:
        return None
    return final if same else None


def _model_name(bundle: Path) -> str | None:
    try:
        name = json.loads((bundle / "model.json").read_text(encoding="utf-8")).get("name")
    except (OSError, ValueError, AttributeError):
        return None  # submit's checks name what is wrong with model.json
    return name if isinstance(name, str) and len(name) <= 64 else None


def unpack(archive: Path, folder: Path, max_files: int = 5000) -> Path:
    """Unpack a bundle's uncompressed tar archive into `folder` (so it unpacks to at most the upload's size, which the
    server capped), refusing anything but regular files and folders with plain relative names; the bundle folder
    (the archive's root, or its only top folder)."""
    try:
        with tarfile.open(archive, mode="r:") as tar:
            members = tar.getmembers()
            if len(members) > max_files:
                raise ServeError(400, f"rejected: the archive holds {len(members)} entries, at most {max_files}")
            for m in members:
                parts = PurePosixPath(m.name).parts
                if m.name.startswith("/") or ".." in parts or "\\" in m.name or (not parts and not m.isdir()):
                    raise ServeError(400, f"rejected: archive entry {m.name[:200]!r} is not a plain relative path")
                if not (m.isfile() or m.isdir()):
                    raise ServeError(400, f"rejected: archive entry {m.name[:200]!r} is not a regular file or folder")
            if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12: the stdlib's own refusals on top of the above
                tar.extractall(folder, members=members, filter="data")
            else:
                tar.extractall(folder, members=members)
    except (tarfile.TarError, EOFError, OSError) as err:
        if isinstance(err, OSError) and err.errno is not None:
            raise
        raise ServeError(400, "rejected: the upload is not an uncompressed tar archive of a bundle folder; "
                              "`benchmark submit BUNDLE --to URL` sends one") from None
    if not (folder / "model.json").exists():
        tops = [p for p in folder.iterdir()] if folder.is_dir() else []
        if len(tops) == 1 and tops[0].is_dir():
            return tops[0]
    return folder
