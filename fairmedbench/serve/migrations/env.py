"""Alembic environment: runs the migrations on the connection `db.upgrade` hands over (no alembic.ini)."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None)
with context.begin_transaction():
    context.run_migrations()
