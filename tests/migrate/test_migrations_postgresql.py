"""The same Alembic revisions upgrade PostgreSQL, and the models never drift from them there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import soong_store

pytestmark = pytest.mark.postgresql

ROOT = Path(__file__).resolve().parents[2]


def test_the_cli_upgrades_and_alembic_finds_no_drift(pg_database_url: str, tmp_path: Path) -> None:
    assert soong_store.current_revision(pg_database_url) is None
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "soong_store",
            "--home",
            str(tmp_path / "h"),
            "--url",
            pg_database_url,
            "upgrade",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    head = soong_store.current_revision(pg_database_url)
    assert head is not None
    soong_store.upgrade(pg_database_url)  # at head already: nothing to do, nothing refused
    assert soong_store.current_revision(pg_database_url) == head
    check = subprocess.run(
        [sys.executable, "-m", "alembic", "-x", f"url={pg_database_url}", "check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr
    assert "No new upgrade operations detected" in check.stdout


def downgrade_to(url: str, revision: str) -> None:
    """Alembic's downgrade of the database at ``url`` to ``revision``, in one transaction."""
    from alembic import command
    from sqlalchemy import create_engine

    from soong_store.migrate.upgrade import alembic_config

    engine = create_engine(url)
    try:
        with engine.connect() as connection, connection.begin():
            command.downgrade(alembic_config(connection), revision)
    finally:
        engine.dispose()


def test_revision_0009_goes_down_and_up_again(pg_database_url: str) -> None:
    from sqlalchemy import create_engine, inspect

    soong_store.upgrade(pg_database_url)
    downgrade_to(pg_database_url, "0008")

    def shape() -> tuple[set[str], set[str]]:
        engine = create_engine(pg_database_url)
        try:
            found = inspect(engine)
            columns = {c["name"] for c in found.get_columns("sessions")}
            return columns, {i["name"] or "" for i in found.get_indexes("sessions")}
        finally:
            engine.dispose()

    columns, indexes = shape()
    assert not {"owner", "key"} & columns
    assert not any("owner" in name or "key" in name for name in indexes)
    soong_store.upgrade(pg_database_url)
    columns, indexes = shape()
    assert {"owner", "key"} <= columns
    assert {"uq_sessions_owner_key", "uq_sessions_key_without_owner"} <= indexes


def test_revision_0011_stores_the_vector_and_goes_down_and_up_again(pg_database_url: str) -> None:
    import asyncio

    from sqlalchemy import create_engine, inspect, text

    from soong_store import SessionStore

    async def write_and_search() -> list[str]:
        async with SessionStore(url=pg_database_url) as store:
            sid = (await store.create_session(cwd="/p")).session_id
            await store.append_node(sid, "user", "message", [{"type": "text", "text": "blue fox"}])
            return [hit.node_id for hit in await store.search('"blue fox"')]

    assert len(asyncio.run(write_and_search())) == 1

    def shape() -> tuple[set[str], set[str], list[str]]:
        engine = create_engine(pg_database_url)
        try:
            found = inspect(engine)
            columns = {c["name"] for c in found.get_columns("search_text")}
            indexes = {i["name"] or "" for i in found.get_indexes("search_text")}
            vectors: list[str] = []
            if "body_vector" in columns:
                with engine.connect() as connection:
                    found_vectors = connection.execute(text("SELECT body_vector FROM search_text"))
                    vectors = [str(vector) for vector in found_vectors.scalars()]
            return columns, indexes, vectors
        finally:
            engine.dispose()

    columns, indexes, vectors = shape()
    assert "body_vector" in columns and "ix_search_text_vector" in indexes
    assert "ix_search_text_tsv" not in indexes
    assert vectors == ["'blue':1 'fox':2"]  # generated from the text the store wrote
    downgrade_to(pg_database_url, "0010")
    columns, indexes, _ = shape()
    assert "body_vector" not in columns and "ix_search_text_vector" not in indexes
    assert "ix_search_text_tsv" in indexes
    soong_store.upgrade(pg_database_url)
    columns, indexes, vectors = shape()
    assert "body_vector" in columns and "ix_search_text_vector" in indexes
    assert len(vectors) == 1
