"""A long value written is not kept by SQLite's cached statements once it is in the database.

SQLite keeps a copy of every value bound to a statement until the statement is bound again, and
the driver caches its statements: without a release, a 100 MB node held 100 MB in the node
insert and 100 MB more in the search index's insert for as long as the process lives.
"""

from __future__ import annotations

import ctypes
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import Column, MetaData, Table, Text, create_engine, func, select

from soong_store import SessionStore
from soong_store.backends.prepared import LARGE_VALUE, Prepared, Runner
from soong_store.model import codec


def _memory_used() -> ctypes._CFuncPtr:
    import _sqlite3

    try:
        used = ctypes.CDLL(_sqlite3.__file__).sqlite3_memory_used
    except (OSError, AttributeError):
        pytest.skip("the driver's SQLite library does not show its memory use")
    used.restype = ctypes.c_int64
    return used


LONG = 8 * LARGE_VALUE

metadata = MetaData()
pairs = Table("pairs", metadata, Column("key", Text, primary_key=True), Column("value", Text))


def test_release_lets_sqlite_free_a_bound_value_and_writes_nothing(tmp_path: Path):
    used = _memory_used()
    engine = create_engine(f"sqlite:///{tmp_path / 'r.sqlite'}")
    metadata.create_all(engine)
    insert = Prepared.written(
        "INSERT INTO pairs (value, key) VALUES (:value, :key)", engine.dialect
    )
    with engine.begin() as connection:
        db = Runner(connection)
        before = used()
        db.execute(insert, {"key": "long", "value": "x" * LONG})
        assert used() - before >= LONG  # the statement holds its copy of the value
        db.release(insert)
        assert used() - before < LONG // 2
        db.execute(insert, {"key": "short", "value": "y"})  # the transaction goes on
    with engine.connect() as connection:
        assert connection.execute(select(func.count()).select_from(pairs)).scalar() == 2
        lengths = connection.execute(select(func.length(pairs.c.value)).order_by(pairs.c.key))
        assert lengths.scalars().all() == [LONG, 1]
    engine.dispose()


def test_release_leaves_a_statement_of_one_parameter_alone(tmp_path: Path):
    engine = create_engine(f"sqlite:///{tmp_path / 'r.sqlite'}")
    metadata.create_all(engine)
    insert = Prepared.written("INSERT INTO pairs (key) VALUES (:key)", engine.dialect)
    with engine.begin() as connection:
        db = Runner(connection)
        db.execute(insert, {"key": "k"})
        db.release(insert)
        assert connection.execute(select(func.count()).select_from(pairs)).scalar() == 1
    engine.dispose()


@pytest.mark.asyncio
async def test_a_long_node_is_not_held_by_the_statements_that_wrote_it(tmp_path: Path):
    used = _memory_used()
    text = "needle " + "x" * LONG  # two words: a search takes no time
    async with SessionStore(home=tmp_path / "home") as store:
        sid = (await store.create_session(cwd=tmp_path)).session_id
        await store.append_node(sid, "user", "message", [{"type": "text", "text": "warm up"}])
        before = used()
        node = await store.append_node(sid, "user", "message", [{"type": "text", "text": text}])
        assert used() - before < LONG // 2  # neither the node's insert nor the index's holds it
        stored = await store.get_node(sid, node.node_id)
        assert stored.content[0].text == text  # type: ignore[union-attr]
        hits = await store.search("needle", session_id=sid)
        assert [hit.node_id for hit in hits] == [node.node_id]


@pytest.mark.parametrize(
    "text",
    ["", "short", "é" * (3 * LARGE_VALUE // 2), "a" * (2 * LARGE_VALUE + 5)],
)
def test_is_text_compares_a_long_text_piece_by_piece(text: str):
    out = text.encode()
    assert codec.is_text(out, text)
    assert not codec.is_text(out + b" ", text)
    assert not codec.is_text(out[:-1], text) or not text
    if text:
        changed = out[:-1] + (b"b" if out[-1:] != b"b" else b"c")
        assert not codec.is_text(changed, text)
        assert not codec.is_text(out, text[:-1] + "\ud800")


def test_loads_stored_refuses_a_long_text_in_another_spacing():
    value = ["x" * (2 * LARGE_VALUE)]
    assert codec.loads_stored(codec.dumps_text(value)) == value
    with pytest.raises(ValueError, match="not the store's JSON encoding"):
        codec.loads_stored(codec.dumps_text(value).replace("[", "[ "))
    assert sqlite3.sqlite_version  # the driver's library is the one whose memory is read above
