"""The first schema: submitters, model owners, submissions with their state history, verification jobs, audit log.

The audit log is append-only in the database itself: a trigger refuses UPDATE and DELETE (SQLite and PostgreSQL).

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create every table of serve/db.py and the audit log's append-only triggers."""
    op.create_table(
        "submitters",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("token_id", sa.String(32), nullable=False, unique=True),
        sa.Column("token_hash", sa.String(255), nullable=False),
        sa.Column("maintainer", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=True),
        sa.Column("revoked_at", sa.Float, nullable=True))
    op.create_table(
        "model_owners",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("submitter_id", sa.Integer, sa.ForeignKey("submitters.id"), nullable=False),
        sa.Column("claimed_at", sa.Float, nullable=False))
    op.create_table(
        "submissions",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("board", sa.String(128), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("submitter_id", sa.Integer, sa.ForeignKey("submitters.id"), nullable=False),
        sa.Column("model", sa.String(64), nullable=True),
        sa.Column("revision", sa.String(256), nullable=True),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("tier", sa.String(32), nullable=True),
        sa.Column("reasons", sa.Text, nullable=False),
        sa.Column("flags", sa.Text, nullable=False),
        sa.Column("folder", sa.String(1024), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("withdrawn_reason", sa.Text, nullable=True),
        sa.UniqueConstraint("board", "content_hash", name="uq_submissions_board_content"))
    op.create_index("ix_submissions_submitter_created", "submissions", ["submitter_id", "created_at"])
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("submission_id", sa.String(32), sa.ForeignKey("submissions.id"), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("at", sa.Float, nullable=False))
    op.create_index("ix_events_submission_id", "events", ["submission_id"])
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("submission_id", sa.String(32), sa.ForeignKey("submissions.id"), nullable=False, unique=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("lease_owner", sa.String(128), nullable=True),
        sa.Column("lease_expires_at", sa.Float, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float, nullable=True))
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("actor", sa.String(64), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("board", sa.String(128), nullable=True),
        sa.Column("submission_id", sa.String(32), nullable=True),
        sa.Column("bundle_hash", sa.String(64), nullable=True),
        sa.Column("detail", sa.Text, nullable=False))
    if op.get_bind().dialect.name == "sqlite":
        for what in ("UPDATE", "DELETE"):
            op.execute(f"CREATE TRIGGER audit_no_{what.lower()} BEFORE {what} ON audit "
                       "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END")
    else:
        op.execute("CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS "
                   "$$ BEGIN RAISE EXCEPTION 'the audit log is append-only'; END $$")
        op.execute("CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit "
                   "FOR EACH ROW EXECUTE FUNCTION audit_append_only()")
