"""Schema migrations: the open-time upgrade (Alembic), and per-session changes in every file."""
