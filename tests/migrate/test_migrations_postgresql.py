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


def test_revision_0009_goes_down_and_up_again(pg_database_url: str) -> None:
    from alembic import command
    from sqlalchemy import create_engine, inspect

    from soong_store.migrate.upgrade import alembic_config

    soong_store.upgrade(pg_database_url)
    engine = create_engine(pg_database_url)
    try:
        with engine.connect() as connection, connection.begin():
            command.downgrade(alembic_config(connection), "0008")
    finally:
        engine.dispose()

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
