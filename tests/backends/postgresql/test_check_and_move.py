"""``check`` with the server's own tools, and moving a session from SQLite onto PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import make_url

from soong_store.demo import write_demo
from tests.backends import Backend, PostgreSQLKind, SQLiteKind
from tests.helpers import events_table, nodes_table, rows

pytestmark = pytest.mark.postgresql

COMMAND = [sys.executable, "-m", "soong_store"]


def cli(*args: str, stdin: Any = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, stdin=stdin)


def demo_session(backend: Backend) -> str:
    async def build() -> str:
        async with backend.store() as store:
            return await write_demo(store, backend.home / "project")

    return asyncio.run(build())


def test_check_says_what_amcheck_verified(pg_url: str, tmp_path: Path) -> None:
    with PostgreSQLKind().use(pg_url).fresh(tmp_path / "home") as backend:  # amcheck installed
        demo_session(backend)
        done = cli(*backend.cli, "check")
        assert done.returncode == 0, done.stderr
        notes = [line for line in done.stdout.splitlines() if line.startswith("note: ")]
        assert len(notes) == 1
        assert "B-tree indexes and" in notes[0] and "tables" in notes[0]
        assert notes[0].startswith("note: amcheck 1.")
        assert done.stdout.splitlines()[-1] == "checked 1 session(s): no problems"


def test_check_without_amcheck_says_nothing_was_verified_and_installs_nothing(
    pg_database_url: str, tmp_path: Path
) -> None:
    backend = Backend("postgresql", tmp_path / "home", pg_database_url)
    demo_session(backend)
    done = cli(*backend.cli, "check", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True and report["problems"] == []
    assert len(report["notes"]) == 1
    assert report["notes"][0].startswith("amcheck is not installed in this database")
    installed = rows(backend, "pg_extension", {"extname": "amcheck"})
    assert installed == []


@pytest.mark.slow
def test_a_session_moves_from_sqlite_to_postgresql_whole(pg_url: str, tmp_path: Path) -> None:
    with (
        SQLiteKind().fresh(tmp_path / "laptop") as laptop,
        PostgreSQLKind().use(pg_url).fresh(tmp_path / "team") as team,
    ):
        sid = demo_session(laptop)
        dump = tmp_path / "session.jsonl"
        assert cli(*laptop.cli, "export", sid, "-o", str(dump)).returncode == 0
        assert cli(*team.cli, "upgrade").returncode == 0
        with dump.open("rb") as source:
            done = cli(*team.cli, "import", "-", stdin=source)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"imported session {sid}:")
        for name in ("sessions", "agents", "runs", "artifacts"):
            assert sorted(rows(team, name, {"session_id": sid})) == sorted(
                rows(laptop, name, {"session_id": sid})
            )
        for name in (nodes_table(sid), events_table(sid)):
            assert sorted(rows(team, name)) == sorted(rows(laptop, name))
        for command in (["path", sid], ["timeline", sid]):
            on_laptop, on_team = cli(*laptop.cli, *command), cli(*team.cli, *command)
            assert on_team.returncode == 0, on_team.stderr
            assert on_team.stdout == on_laptop.stdout
        back = tmp_path / "again.jsonl"
        assert cli(*team.cli, "export", sid, "-o", str(back)).returncode == 0
        header, *lines = back.read_text().splitlines()
        first, *expected = dump.read_text().splitlines()
        assert lines == expected  # the header differs only in when it was written
        assert {**json.loads(header), "exported_at": None} == {
            **json.loads(first),
            "exported_at": None,
        }
        assert cli(*team.cli, "check").returncode == 0


def test_a_read_command_on_an_empty_database_exits_2_and_creates_nothing(
    pg_database_url: str, tmp_path: Path
) -> None:
    backend = Backend("postgresql", tmp_path / "home", pg_database_url)
    done = cli(*backend.cli, "sessions")
    assert done.returncode == 2
    line = " ".join(done.stderr.split())
    assert "no soong_store schema in" in line and "run `soong-store" in line, line
    assert "upgrade`" in line and "does not exist" not in line
    assert line.count(make_url(pg_database_url).database or "") == 1  # the URL, once
    assert rows(backend, "pg_tables", {"schemaname": "public"}) == []
    assert not backend.home.exists()


def test_a_read_command_on_a_database_the_server_lacks_says_to_create_it(
    pg_url: str, tmp_path: Path
) -> None:
    url = make_url(pg_url).set(database="soong_test_never_made")
    done = cli("--home", str(tmp_path / "home"), "--url", url.render_as_string(False), "sessions")
    assert done.returncode == 2
    line = " ".join(done.stderr.split())
    assert 'the server has no database "soong_test_never_made"' in line, line
    assert "upgrade`" in line and line.count("soong_test_never_made") == 2  # URL and name
    assert not (tmp_path / "home").exists()
