"""Files beside a SQLite database: shards attached on demand, and a connection of their own.

A session's pair may live in a shard file (``shards/0001.sqlite``, named relative to the
database's folder, so every process resolves it the same way). A connection reads one by
attaching it: outside any transaction (SQLite refuses ``ATTACH`` inside one), under one of
:data:`ALIASES`, at most ``len(ALIASES)`` at a time, the least recently used detached to make
room. Which files a connection holds is kept with its DB-API connection (its pool record's
``info``), since an attachment lasts as long as that connection does. SQLite reads an attached
file's schema at ``ATTACH``, and gives each its own page cache: kept small
(:data:`CACHE_KB`), since four of them per connection add up.

A move writes a shard in a transaction of its own while the writer's connection holds the main
file's write lock: :func:`file_engine` opens the shard as a connection's main database, with
the store's database attached to read from.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.pool import NullPool

from soong_store.backends import sqlite_connect
from soong_store.errors import StorageError

ALIASES = ("s0", "s1", "s2", "s3")
"""The schema names shards are attached under; their number is the bound per connection."""
CACHE_KB = 256
"""The page cache of each attached shard, in KB."""

_HELD = "soong_store.attached"
_FOLDER = "soong_store.folder"


def _driver(connection: Connection) -> Any:
    return connection.connection.driver_connection


def _held(connection: Connection) -> OrderedDict[str, str]:
    info = connection.connection.info
    held: OrderedDict[str, str] | None = info.get(_HELD)
    if held is None:
        held = info[_HELD] = OrderedDict()
    return held


def folder(connection: Connection) -> Path:
    """The folder of the connection's main database file (what shard names are relative to)."""
    info = connection.connection.info
    found: Path | None = info.get(_FOLDER)
    if found is None:
        rows = _driver(connection).execute("PRAGMA database_list").fetchall()
        main = next(str(row[2]) for row in rows if row[1] == "main")
        found = info[_FOLDER] = Path(main).parent
    return found


def attached_as(connection: Connection, file: str) -> str | None:
    """The alias ``file`` is attached under on ``connection`` (marked as just used), or ``None``."""
    held = _held(connection)
    alias = held.get(file)
    if alias is not None:
        held.move_to_end(file)
    return alias


def attached_files(connection: Connection) -> list[str]:
    """The files attached to ``connection``, least recently used first."""
    held: OrderedDict[str, str] | None = connection.connection.info.get(_HELD)
    return [] if held is None else list(held)


def attach(connection: Connection, file: str) -> str:
    """Attach an existing ``file`` (outside a transaction), detaching the least recently used."""
    held = _held(connection)
    if file in held:
        held.move_to_end(file)
        return held[file]
    path = folder(connection) / file
    if not path.is_file():  # ATTACH would create an empty file
        raise StorageError(f"the shard file {file} is missing from {path.parent}", file=file)
    driver = _driver(connection)
    if len(held) >= len(ALIASES):
        oldest, alias = held.popitem(last=False)
        driver.execute(f"DETACH DATABASE {alias}")
    else:
        alias = next(a for a in ALIASES if a not in held.values())
    synchronous = driver.execute("PRAGMA main.synchronous").fetchone()[0]
    read_only = connection.connection.info.get(sqlite_connect.READ_ONLY, False)
    target = sqlite_connect.read_only_uri(path) if read_only else os.fspath(path)
    driver.execute(f"ATTACH DATABASE ? AS {alias}", (target,))
    held[file] = alias
    driver.execute(f"PRAGMA {alias}.cache_size = -{CACHE_KB}")
    driver.execute(f"PRAGMA {alias}.synchronous = {int(synchronous)}")
    return alias


def detach(connection: Connection, file: str) -> None:
    """Detach ``file`` if it is attached (outside a transaction)."""
    alias = _held(connection).pop(file, None)
    if alias is not None:
        _driver(connection).execute(f"DETACH DATABASE {alias}")


def file_engine(
    database: Path,
    file: str,
    main_as: str,
    kwargs: dict[str, Any],
    install: Callable[[Engine], None],
) -> Engine:
    """An engine (no pool) whose main database is ``file`` beside ``database``.

    ``install`` sets the store's connection hooks (busy timeout, WAL, a deferred ``BEGIN``).
    The database itself is attached as ``main_as`` on every connection, to be read from: a
    transaction of this engine writes the file only, so it never waits for the main file's
    write lock, which the writer holds meanwhile.
    """
    path = database.parent / file
    path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(f"sqlite:///{path}", poolclass=NullPool, **kwargs)
    install(engine)

    @event.listens_for(engine, "connect")
    def _attach_main(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute(f"ATTACH DATABASE ? AS {main_as}", (os.fspath(database),))

    return engine
