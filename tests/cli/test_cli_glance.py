"""``soong-store sessions`` read without a store (:mod:`soong_store.cli.glance`), and when not.

The quick look must print exactly what the store's listing prints, load neither SQLAlchemy nor
an event loop, write nothing to a home its store closed, see what is committed to the log, and
hand every home it cannot read as it is to the store.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore, StorageError
from soong_store.cli import glance, main
from soong_store.home import SQLITE_MODULE_ENV
from soong_store.model.enums import SessionStatus
from tests.conftest import db_path, text

PROBE = """
import sys
from soong_store.cli import main
code = main(["--home", sys.argv[1], "sessions"])
print("exit", code, "loaded:", *[n for n in ("sqlalchemy", "asyncio") if n in sys.modules])
"""


async def made(home: Path) -> list[str]:
    """Seven sessions: two archived, three sharing one ``updated_at`` (the tie is by id)."""
    async with SessionStore(home=home) as store:
        ids = [(await store.create_session(cwd=f"project-{i}")).session_id for i in range(7)]
        await store.append_node(ids[3], "user", "message", text("hello"))
        for sid in ids[:2]:
            await store.archive_session(sid)
    with sqlite3.connect(db_path(home)) as con:
        con.executemany(
            "UPDATE sessions SET updated_at = '2026-01-01T00:00:00.000000+00:00'"
            " WHERE session_id = ?",
            [(sid,) for sid in ids[4:]],
        )
    con.close()
    return ids


@pytest.fixture(autouse=True)
def no_driver_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """The look reads with the standard library only: a driver named by the environment (the
    SQLite matrix names one) sends every listing to the store (tested below)."""
    monkeypatch.delenv(SQLITE_MODULE_ENV, raising=False)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def printed(
    home: Path, capsys: pytest.CaptureFixture[str], *args: str, code: int = 0
) -> tuple[str, str]:
    assert main(["--home", str(home), "sessions", *args]) == code
    captured = capsys.readouterr()
    return captured.out, captured.err


LISTINGS = [
    (),
    ("--json",),
    ("--limit", "2"),
    ("--limit", "2", "--offset", "3", "--json"),
    ("--status", "archived", "--json"),
    ("--status", "active", "--limit", "1"),
    ("--offset", "50"),
]


@pytest.mark.parametrize("args", LISTINGS)
def test_the_look_prints_what_the_store_prints(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, args: Any
) -> None:
    asyncio.run(made(home))
    calls: list[Any] = []
    look = glance.sessions_page

    def counted(*given: Any) -> Any:
        calls.append(look(*given))
        return calls[-1]

    monkeypatch.setattr(glance, "sessions_page", counted)
    quick = printed(home, capsys, *args)
    assert len(calls) == 1 and calls[0] is not None  # the look answered

    monkeypatch.setattr(glance, "sessions_page", lambda *_: None)
    assert printed(home, capsys, *args) == quick
    assert quick[1] == ""


async def test_the_look_orders_and_filters_as_list_sessions(home: Path) -> None:
    ids = await made(home)
    async with SessionStore(home=home) as store:
        for status in (None, SessionStatus.ACTIVE, SessionStatus.ARCHIVED):
            for limit in (1, 3, 100):
                listed = await store.list_sessions(status=status, limit=limit)
                looked = glance.sessions_page(home, status, limit)
                assert looked == listed
    assert len(glance.sessions_page(home, None, 100) or []) == len(ids)


def test_the_look_writes_nothing(home: Path) -> None:
    asyncio.run(made(home))
    before = digest(db_path(home))
    names = sorted(p.name for p in home.iterdir())

    assert glance.sessions_page(home, None, 10) is not None
    assert digest(db_path(home)) == before
    assert sorted(p.name for p in home.iterdir()) == names


def test_the_look_reads_what_another_connection_committed_to_the_log(home: Path) -> None:
    ids = asyncio.run(made(home))
    other = sqlite3.connect(db_path(home), isolation_level=None)
    try:
        other.execute("PRAGMA wal_autocheckpoint = 0")  # the commit stays in the -wal file
        other.execute(
            "UPDATE sessions SET updated_at = '2099-01-01T00:00:00.000000+00:00', cwd = 'moved'"
            " WHERE session_id = ?",
            (ids[2],),
        )
        looked = glance.sessions_page(home, None, 1)
    finally:
        other.close()
    assert looked is not None and [(s.session_id, s.cwd) for s in looked] == [(ids[2], "moved")]


def test_sessions_in_a_new_process_loads_neither_sqlalchemy_nor_asyncio(home: Path) -> None:
    asyncio.run(made(home))
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(home)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].split() == ["exit", "0", "loaded:"], done.stdout


def test_a_file_not_in_wal_mode_goes_to_the_store_which_switches_it(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = asyncio.run(made(home))
    with sqlite3.connect(db_path(home)) as con:
        assert con.execute("PRAGMA journal_mode = DELETE").fetchone() == ("delete",)
    con.close()

    assert glance.sessions_page(home, None, 10) is None
    out, _ = printed(home, capsys, "--json")
    assert len(json.loads(out)["sessions"]) == len(ids)
    with sqlite3.connect(db_path(home)) as con:
        assert con.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    con.close()


def test_a_damaged_row_is_reported_by_the_store(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = asyncio.run(made(home))
    with sqlite3.connect(db_path(home)) as con:
        con.execute("UPDATE sessions SET metadata_json = '{oops' WHERE session_id = ?", (ids[5],))
    con.close()

    assert glance.sessions_page(home, None, 10) is None
    _, err = printed(home, capsys, code=1)
    assert "stored metadata_json is damaged" in err and err.count("\n") == 1
    with pytest.raises(StorageError, match="metadata_json is damaged"):
        asyncio.run(_listed(home))


async def _listed(home: Path) -> None:
    async with SessionStore(home=home) as store:
        await store.list_sessions()


@pytest.mark.parametrize("content", [b"", b"not a database at all" * 100])
def test_a_file_sqlite_cannot_read_goes_to_the_store(
    home: Path, capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    home.mkdir()
    db_path(home).write_bytes(content)
    looked = glance.sessions_page(home, None, 10)
    assert looked is None
    out, err = printed(home, capsys, code=0 if not content else 1)
    if content:
        assert err.count("\n") == 1 and out == ""
    else:  # an empty file is an empty database: the store makes its schema
        assert out == "(no sessions)\n"


def test_a_url_or_a_driver_named_always_goes_to_the_store(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(made(home))
    looked: list[Any] = []
    monkeypatch.setattr(glance, "sessions_page", lambda *given: looked.append(given))
    url = f"sqlite:///{db_path(home)}"
    for options in (["--url", url], ["--home", str(home), "--sqlite-module", "sqlite3"]):
        assert main([*options, "sessions", "--limit", "1"]) == 0
        assert capsys.readouterr().out.count("\n") == 2
    monkeypatch.setenv(SQLITE_MODULE_ENV, "sqlite3")
    assert main(["--home", str(home), "sessions", "--limit", "1"]) == 0
    assert capsys.readouterr().out.count("\n") == 2
    assert looked == []
