"""`benchmark serve`: boards that people elsewhere submit to. One ASGI application (app.py, FastAPI on uvicorn)
over a service (service.py) that keeps submitters, submissions, their states, verification jobs and an append-only
audit log in a database (db.py: SQLAlchemy Core, Alembic migrations in migrations/; SQLite beside the boards by
default, PostgreSQL by URL). Bundles are checked by `leaderboards.submit`'s own checks and recomputation and stored
sealed exactly as `benchmark submit` stores them; the live board page is `leaderboards.render`'s; workers
(worker.py) run `benchmark verify` on each accepted submission under a lease. client.py is the submitter's side."""
