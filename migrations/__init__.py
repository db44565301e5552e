"""Alembic revisions of soong_store (installed as ``soong_store._migrations``)."""
