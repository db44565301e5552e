"""One rule set: an import refuses a file exactly when ``check`` finds a problem in its rows.

A valid export is mutated at random (a value of one column of one row, a row dropped or
repeated). The import side reads the mutated file; the check side writes the same rows into the
database by force (a raw connection, CHECK constraints and foreign keys off, the artifact files
put where the rows say) and runs ``check`` on the session. The two must agree: the import
refuses if and only if the forced write was impossible (the database itself refused the rows)
or ``check`` reports a problem.

SQLite-only: the forced write needs ``PRAGMA ignore_check_constraints``, which SQLite alone has
(a server database cannot take a row its CHECK constraints refuse without dropping them).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import io
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, event
from sqlalchemy.exc import SQLAlchemyError

from soong_store import InvalidArgument, NotFound, SessionStore
from soong_store.check.run import check_store
from soong_store.demo import write_demo
from soong_store.errors import StorageError
from soong_store.files.folder import split_path
from soong_store.rules.row import columns
from soong_store.schema.session_tables import session_tables
from soong_store.schema.tables import (
    agents_table,
    artifacts_table,
    run_usage_table,
    runs_table,
    session_files_table,
    sessions_table,
)
from soong_store.search.index import node_text, search_text_table
from soong_store.transfer import export_session, read_export
from soong_store.write.usage_ledger import ledger_rows
from tests.conftest import db_path

pytestmark = pytest.mark.sqlite

GLOBAL = {"session": sessions_table, "agent": agents_table, "run": runs_table}
GLOBAL["artifact"] = artifacts_table
INTEGER_COLUMNS = {"node_seq", "seq", "run_seq", "token_count", "turn_count", "size_bytes"}


class Export(list[dict[str, Any]]):
    """The lines of an export, shown short in a falsifying example."""

    def __repr__(self) -> str:
        return f"<export of {len(self)} lines>"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    home = tmp_path_factory.mktemp("property") / "source"

    async def build() -> str:
        out = io.StringIO()
        async with SessionStore(home=home) as store:
            sid = await write_demo(store, home / "demo-project")
            await export_session(store, sid, out)
        return out.getvalue()

    return Export(orjson.loads(line) for line in asyncio.run(build()).splitlines())


def text_values(lines: list[dict[str, Any]]) -> list[str]:
    """Text a mutation may put in a TEXT column: ids of the file, near misses, hostile text."""
    sid = lines[0]["session_id"]
    ids = sorted(
        {
            value
            for line in lines[1:]
            for name, value in line["row"].items()
            if name.endswith("_id") and isinstance(value, str)
        }
    )
    return [
        *ids[:: max(1, len(ids) // 12)],
        "node_nowhere",
        "agent_nobody",
        "",
        "x",
        "a\x00b",
        "../x",
        "project",
        "/elsewhere",
        "wizard",
        "running",
        "completed",
        "sub",
        "fork",
        "user",
        "assistant",
        "compaction",
        "error",
        "2026-01-01T00:00:00.000000+00:00",
        "2026-01-01T00:00:00.000000",
        "2026-01-01T01:00:00.000000+01:00",
        "yesterday",
        "null",
        "{}",
        '{"a":NaN}',
        "[1e400]",
        "18446744073709551616",
        '{"a":1,"a":2}',
        '{"imported_from":{"format":"test"}}',
        '[{"type":"text","text":"hello"}]',
        '[{"type": "text", "text": "hello"}]',
        '[{"type":"artifact_ref","artifact_id":"art_elsewhere","summary":null,"mime_type":null}]',
        f"{sid}/art_elsewhere.txt",
        f"sess_other/{sid}.txt",
    ]


INT_VALUES = [-1, 0, 1, 2, 3, 5, 26, 27, 28, 53, 54, 2**63 - 1, 2**63]


CHANGES = st.tuples(
    st.sampled_from(["set"] * 8 + ["drop", "repeat"]),
    st.integers(0, 1_000),
    st.integers(0, 1_000),
    st.integers(0, 1_000),
)
"""A change as plain numbers, mapped onto the export by :func:`change_of` (so that the draws do
not depend on the export, whose ids differ from run to run)."""


def change_of(lines: list[dict[str, Any]], drawn: tuple[str, int, int, int]) -> tuple[str, Any]:
    """One change to the export: ("set", (index, column, value)), ("drop", i) or ("repeat", i)."""
    how, row, col, val = drawn
    index = 1 + row % (len(lines) - 1)
    if how != "set":
        return how, index
    kind = lines[index]["kind"]
    names = [c for c in columns(kind) if c != "session_id"]
    column = names[col % len(names)]
    pool: list[Any] = INT_VALUES if column in INTEGER_COLUMNS else text_values(lines)
    choices = [None, *pool]
    return how, (index, column, choices[val % len(choices)])


def mutated(lines: list[dict[str, Any]], change: tuple[str, Any]) -> list[dict[str, Any]]:
    out = copy.deepcopy(lines)
    how, what = change
    if how == "set":
        index, column, value = what
        out[index]["row"][column] = value
        return out
    kind = out[what]["kind"]
    if how == "drop":
        del out[what]
        delta = -1
    else:
        out.insert(what, copy.deepcopy(out[what]))
        delta = 1
    if kind != "session":
        out[0]["counts"][f"{kind}s"] += delta
    return out


def import_refuses(lines: list[dict[str, Any]]) -> bool:
    try:
        read_export([orjson.dumps(line) for line in lines])
    except InvalidArgument:
        return True
    return False


def forced_write(home: Path, lines: list[dict[str, Any]]) -> bool:
    """Write the rows as they are, past every guard the store has; False if SQLite refuses."""
    sid = lines[0]["session_id"]
    engine = create_engine(f"sqlite:///{db_path(home)}")

    @event.listens_for(engine, "connect")
    def _unguarded(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute("PRAGMA ignore_check_constraints = ON")
        dbapi_connection.execute("PRAGMA foreign_keys = OFF")

    pair = session_tables(sid)
    tables = {**GLOBAL, "node": pair.nodes, "event": pair.events}
    try:
        with engine.begin() as connection:
            pair.create(connection)
            connection.execute(
                session_files_table.insert(), {"session_id": sid, "file": "main", "epoch": 0}
            )
            for line in lines[1:]:
                connection.execute(tables[line["kind"]].insert(), line["row"])
                if line["kind"] == "node":
                    index_forced(connection, sid, line["row"])
                if line["kind"] == "run":
                    ledger_forced(connection, line["row"])
    except (SQLAlchemyError, OverflowError):
        return False
    finally:
        engine.dispose()
    for line in lines[1:]:
        if line["kind"] == "artifact" and "data_b64" in line:
            try:
                folder, name = split_path(str(line["row"]["path"]))
            except StorageError:
                continue
            target = home / "artifacts" / folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(base64.b64decode(line["data_b64"]))
    return True


def index_forced(connection: Any, sid: str, row: dict[str, Any]) -> None:
    """Index a node written past the store as the store indexes one (what check expects)."""
    try:
        body = node_text(row["content_json"])
    except (ValueError, TypeError, KeyError):
        return
    if body:
        keys = ("node_id", "node_seq", "agent_id", "role", "node_type", "created_at")
        values = {key: row.get(key) for key in keys}
        connection.execute(search_text_table.insert(), {**values, "session_id": sid, "body": body})


def ledger_forced(connection: Any, row: dict[str, Any]) -> None:
    """Enter a run written past the store in the usage ledger, as the store does (check expects)."""
    try:
        rows = ledger_rows(row)
    except (ValueError, TypeError, KeyError):
        return
    if rows:
        connection.execute(run_usage_table.insert(), rows)


def clean(home: Path, sid: str) -> None:
    engine = create_engine(f"sqlite:///{db_path(home)}")
    with engine.begin() as connection:
        pair = session_tables(sid)
        for table in (pair.events, pair.nodes):
            table.drop(connection, checkfirst=True)
        tables = (
            search_text_table,
            session_files_table,
            artifacts_table,
            run_usage_table,
            runs_table,
            agents_table,
            sessions_table,
        )
        for table in tables:
            connection.execute(table.delete())
    engine.dispose()
    shutil.rmtree(home / "artifacts", ignore_errors=True)


def check_reports(home: Path, sid: str) -> bool:
    async def run() -> bool:
        async with SessionStore(home=home) as store:
            try:
                return not (await check_store(store, sid)).ok
            except NotFound:  # the session row itself was dropped
                return True

    return asyncio.run(run())


def test_the_unmutated_export_passes_both(exported: list[dict[str, Any]], tmp_path: Path) -> None:
    home = tmp_path / "home"
    asyncio.run(_open_and_close(home))
    assert not import_refuses(exported)
    assert forced_write(home, exported)
    assert not check_reports(home, exported[0]["session_id"])


@settings(
    max_examples=150,
    database=None,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(drawn=CHANGES)
def test_import_refuses_exactly_what_check_reports(
    exported: list[dict[str, Any]], tmp_path: Path, drawn: tuple[str, int, int, int]
) -> None:
    home = tmp_path / "home"
    if not db_path(home).exists():
        asyncio.run(_open_and_close(home))
    change = change_of(exported, drawn)
    lines = mutated(exported, change)
    sid = lines[0]["session_id"]
    refused = import_refuses(lines)
    try:
        reported = not forced_write(home, lines) or check_reports(home, sid)
    finally:
        clean(home, sid)
    assert refused == reported, f"import refuses: {refused}, check reports: {reported}: {change}"


async def _open_and_close(home: Path) -> None:
    async with SessionStore(home=home):
        pass
