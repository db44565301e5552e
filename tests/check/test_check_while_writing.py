"""The database's own check while another connection writes: FTS5 that could not look is no damage.

SQLite 3.44's ``quick_check`` asks FTS5 to validate its index, and FTS5 of that release
answers "unable to validate ... database is locked" while any other connection holds the write
lock. Later releases validate it; earlier ones do not ask.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from soong_store import SessionStore
from soong_store.backends.sqlite.backend import SQLiteBackend
from soong_store.check.run import check_store
from soong_store.store import run_read
from soong_store.store.core import backend_of
from tests.conftest import RAW_SQLITE, connect_raw, db_path, text

_LOCKED = "unable to validate the inverted index for FTS5 table main.search_fts: database is locked"


class _Rows:
    """A connection whose ``quick_check`` gives fixed lines (the rest of the method is plain)."""

    def __init__(self, *lines: str) -> None:
        self.lines = lines

    def exec_driver_sql(self, statement: str) -> list[tuple[str]]:
        assert statement == "PRAGMA quick_check"
        return [(line,) for line in self.lines]


def test_fts5_unable_to_look_for_a_lock_is_a_note_and_damage_stays_a_problem() -> None:
    damaged = "malformed inverted index for FTS5 table main.search_fts"
    failed = "unable to validate the inverted index for FTS5 table main.search_fts: disk I/O error"
    found = SQLiteBackend.integrity(_Rows(_LOCKED, damaged, failed))  # type: ignore[arg-type]
    assert found.problems == [damaged, failed]
    assert len(found.notes) == 1 and _LOCKED in found.notes[0]
    assert SQLiteBackend.integrity(_Rows("ok")).problems == []  # type: ignore[arg-type]


async def test_the_database_check_with_the_write_lock_held_elsewhere_finds_no_problem(
    store: SessionStore, home: Path
) -> None:
    made = await store.create_session("/p")
    await store.append_node(made.session_id, "user", "message", text("words to index"))
    raw = connect_raw(db_path(home), isolation_level=None)
    raw.execute("BEGIN IMMEDIATE")
    try:
        found = await run_read(store, backend_of(store).integrity)
    finally:
        raw.execute("ROLLBACK")
        raw.close()
    assert found.problems == []
    if tuple(int(p) for p in RAW_SQLITE.sqlite_version.split(".")[:2]) == (3, 44):
        assert any(_LOCKED in note for note in found.notes)  # the release this is about


async def test_check_of_the_whole_home_while_another_connection_writes_is_clean(
    store: SessionStore, home: Path
) -> None:
    for number in range(3):
        made = await store.create_session("/p")
        await store.append_node(made.session_id, "user", "message", text(f"note {number}"))
    stop = threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        raw: Any = connect_raw(db_path(home), isolation_level=None, timeout=30)
        try:
            while not stop.is_set():
                raw.execute("BEGIN IMMEDIATE")
                raw.execute("UPDATE sessions SET cwd = cwd WHERE 0")
                stop.wait(0.002)
                raw.execute("COMMIT")
                stop.wait(0.003)  # the store's own writer gets its turns
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            failures.append(exc)
        finally:
            raw.close()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        reports = [await check_store(store) for _ in range(5)]
    finally:
        stop.set()
        writer.join()
    assert failures == []
    assert [report.problems for report in reports] == [[]] * 5
