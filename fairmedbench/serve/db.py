"""The service's database: SQLAlchemy Core tables, the engine for a URL, and Alembic's upgrade to the newest schema.

The same tables (and the same migrations, serve/migrations/) serve an embedded SQLite file (the default, beside the
boards) and PostgreSQL (`postgresql+psycopg://...`). Times are POSIX seconds (floats), the same on both."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

metadata = sa.MetaData()

submitters = sa.Table(
    "submitters", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(64), nullable=False, unique=True),
    sa.Column("token_id", sa.String(32), nullable=False, unique=True),
    sa.Column("token_hash", sa.String(255), nullable=False),
    sa.Column("maintainer", sa.Boolean, nullable=False, default=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=True),
    sa.Column("revoked_at", sa.Float, nullable=True),
)
model_owners = sa.Table(
    "model_owners", metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("submitter_id", sa.Integer, sa.ForeignKey("submitters.id"), nullable=False),
    sa.Column("claimed_at", sa.Float, nullable=False),
)
submissions = sa.Table(
    "submissions", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("board", sa.String(128), nullable=False),
    sa.Column("content_hash", sa.String(64), nullable=False),
    sa.Column("submitter_id", sa.Integer, sa.ForeignKey("submitters.id"), nullable=False),
    sa.Column("model", sa.String(64), nullable=True),
    sa.Column("revision", sa.String(256), nullable=True),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("tier", sa.String(32), nullable=True),
    sa.Column("reasons", sa.Text, nullable=False, default="[]"),
    sa.Column("flags", sa.Text, nullable=False, default="[]"),
    sa.Column("folder", sa.String(1024), nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Column("withdrawn_reason", sa.Text, nullable=True),
    sa.UniqueConstraint("board", "content_hash", name="uq_submissions_board_content"),
)
events = sa.Table(
    "events", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("submission_id", sa.String(32), sa.ForeignKey("submissions.id"), nullable=False, index=True),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("reason", sa.Text, nullable=False, default=""),
    sa.Column("at", sa.Float, nullable=False),
)
jobs = sa.Table(
    "jobs", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("submission_id", sa.String(32), sa.ForeignKey("submissions.id"), nullable=False, unique=True),
    sa.Column("state", sa.String(16), nullable=False),  # queued | leased | done
    sa.Column("lease_owner", sa.String(128), nullable=True),
    sa.Column("lease_expires_at", sa.Float, nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False, default=0),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("finished_at", sa.Float, nullable=True),
)
audit = sa.Table(
    "audit", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("actor", sa.String(64), nullable=False),
    sa.Column("action", sa.String(64), nullable=False),
    sa.Column("board", sa.String(128), nullable=True),
    sa.Column("submission_id", sa.String(32), nullable=True),
    sa.Column("bundle_hash", sa.String(64), nullable=True),
    sa.Column("detail", sa.Text, nullable=False, default=""),
)

DB_FILE = ".serve.sqlite3"


def default_url(boards: Path | str) -> str:
    """The embedded SQLite file beside the boards: BOARDS/.serve.sqlite3."""
    return f"sqlite:///{(Path(boards) / DB_FILE).resolve()}"


def make_engine(url: str) -> Engine:
    """An engine for `url`; SQLite gets WAL mode and a busy timeout so that a server and workers share the file."""
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    if not url.startswith("sqlite"):
        return sa.create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
    engine = sa.create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

    @sa.event.listens_for(engine, "connect")
    def _pragmas(conn: Any, _record: Any) -> None:
        cur = conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    return engine


# Alembic's migration context is a module-level proxy: two threads upgrading at once (two Services built side by
# side, e.g. a worker's thread-pool tasks) remove each other's proxy (KeyError 'config'). One upgrade at a time.
_UPGRADING = threading.Lock()


def upgrade(engine: Engine) -> None:
    """Bring the database to the newest schema with Alembic (serve/migrations); a no-op when it is current."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    with _UPGRADING, engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
