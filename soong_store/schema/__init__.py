"""Database schema: the global models (under Alembic) and the per-session table factory."""
