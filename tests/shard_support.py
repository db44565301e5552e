"""Helpers of the shard tests: small limits, waiting for the writer's moves, where pairs are.

The limits are the store's internal knob (:data:`soong_store.catalog.moves.LIMITS`): with a hot
bound of 3 and shards of 4, ten sessions fill the main file, two shards and part of a third.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore
from soong_store.catalog import lookup as catalog
from soong_store.catalog import moves
from soong_store.catalog import placement as pair_files
from soong_store.schema import session_tables
from soong_store.store import run_read, run_write
from tests.conftest import connect_raw

SMALL = moves.Limits(hot=3, shard=4, batch=2)


@contextmanager
def limited(limits: moves.Limits = SMALL) -> Iterator[moves.Limits]:
    """The store's move limits set to ``limits`` for the block."""
    kept = moves.LIMITS
    moves.LIMITS = limits
    try:
        yield limits
    finally:
        moves.LIMITS = kept


def _state(connection: Any) -> tuple[dict[str, tuple[str, int]], dict[str, set[str]]]:
    return pair_files.placements(connection), pair_files.journaled_files(connection)


async def placements(store: SessionStore) -> dict[str, tuple[str, int]]:
    """File and epoch of every pair, as the catalog says."""
    return (await run_read(store, _state))[0]


def _nothing(_connection: Any) -> None:
    """A write job that writes nothing."""


async def settle(store: SessionStore, timeout: float = 30.0) -> dict[str, tuple[str, int]]:
    """Wait until the writer has moved what it moves: the hot bound kept, the journal empty.

    An empty write first: the store's first write starts its writer (and so its maintenance).
    """
    await run_write(store, _nothing)
    deadline = time.monotonic() + timeout
    while True:
        placed, journaled = await run_read(store, _state)
        hot = sum(1 for file, _ in placed.values() if file == catalog.MAIN)
        if hot <= moves.LIMITS.hot and not journaled:
            return placed
        if time.monotonic() > deadline:
            pytest.fail(f"moves did not settle: {hot} hot pairs, journal {journaled}")
        await asyncio.sleep(0.02)


def raw_layout(home: Path) -> dict[str, Any]:
    """Behind the store's back: the catalog, the journal, and each file's pairs and copies."""
    main = connect_raw(home / "sessions.sqlite")
    try:
        placed = {
            sid: (file, epoch)
            for sid, file, epoch in main.execute(
                "SELECT session_id, file, epoch FROM session_files"
            )
        }
        journal = main.execute("SELECT * FROM session_moves").fetchall()
        files: dict[str, set[str]] = {"main": _pairs(main)}
        copies: dict[str, dict[str, int]] = {}
    finally:
        main.close()
    for path in sorted((home / "shards").glob("*.sqlite")):
        name = f"shards/{path.name}"
        shard = connect_raw(path)
        try:
            files[name] = _pairs(shard)
            found = shard.execute(
                "SELECT name FROM sqlite_master WHERE name = 'shard_pairs'"
            ).fetchone()
            copies[name] = (
                dict(shard.execute("SELECT session_id, epoch FROM shard_pairs").fetchall())
                if found
                else {}
            )
        finally:
            shard.close()
    return {"placed": placed, "journal": journal, "files": files, "copies": copies}


def _pairs(connection: Any) -> set[str]:
    """Sessions with both tables in this file (a lone table counts too: it is a leftover)."""
    names = [r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    return {owner for name in names if (owner := session_tables.table_owner(name)) is not None}


def assert_each_pair_in_one_file(home: Path) -> None:
    """After recovery: no journal row, each pair in exactly the file the catalog names, once."""
    layout = raw_layout(home)
    assert layout["journal"] == [], layout["journal"]
    placed = layout["placed"]
    for file, sids in layout["files"].items():
        wanted = {sid for sid, (where, _) in placed.items() if where == file}
        assert sids == wanted, (file, sids ^ wanted)
    for file, copies in layout["copies"].items():
        assert {sid: placed[sid][1] for sid in copies if placed.get(sid, ("",))[0] == file} == (
            copies
        ), file


def stray_shard_files(home: Path) -> list[str]:
    """The files in ``shards/`` (SQLite's ``-wal``/``-shm`` too) of no ``shard_files`` row."""
    main = connect_raw(home / "sessions.sqlite")
    try:
        listed = {str(f) for (f,) in main.execute("SELECT file FROM shard_files")}
    finally:
        main.close()
    folder = home / "shards"
    found = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    return [n for n in found if f"shards/{n.split('-')[0]}" not in listed]


def assert_no_stray_shard_file(home: Path) -> None:
    """After the writer's maintenance: every file in ``shards/`` belongs to a listed shard."""
    stray = stray_shard_files(home)
    assert stray == [], stray
