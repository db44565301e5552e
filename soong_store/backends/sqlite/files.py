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
the store's database attached to read from. The writer's maintenance lists the shard files on
disk (:func:`files_on_disk`) and removes those no longer used (:func:`remove_file`).

A shard's path is never a symbolic link's (:func:`shard_path`, the artifact folders' rule): the
shard folder, the file and its ``-wal``/``-shm``/``-journal`` companions must be what they say,
else the shard is refused, so that a link planted in the home never has the store read another
home's file or write this home's sessions outside it. Nor is another home's shard read: each
shard names the home that made it (``shard_home``, the id the main file keeps in
``home_identity``), and :func:`attach` refuses one that names another (:func:`foreign_shard`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.pool import NullPool

from soong_store.backends.sqlite import connect as sqlite_connect
from soong_store.errors import StorageError

ALIASES = ("s0", "s1", "s2", "s3")
"""The schema names shards are attached under; their number is the bound per connection."""
CACHE_KB = 256
"""The page cache of each attached shard, in KB."""

_COMPANIONS = ("-wal", "-shm", "-journal")
"""The files SQLite keeps beside a shard: none may be a link."""

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
    path = shard_path(folder(connection), file)
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
    reason = foreign_shard(partial(_rows, driver), alias, "main")
    if reason is not None:
        detach(connection, file)
        raise StorageError(
            f"the shard file {file} in {path.parent.parent} is not this home's ({reason}): refused",
            file=file,
        )
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
    path = shard_path(database.parent, file, create=True)
    engine = create_engine(f"sqlite:///{path}", poolclass=NullPool, **kwargs)

    @event.listens_for(engine, "connect")
    def _small_pages(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute(f"PRAGMA page_size = {SHARD_PAGE_SIZE}")

    install(engine)

    @event.listens_for(engine, "connect")
    def _attach_main(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute(f"ATTACH DATABASE ? AS {main_as}", (os.fspath(database),))

    return engine


SHARD_PAGE_SIZE = 1024
"""Bytes of a new shard file's page (the main file keeps SQLite's 4096).

A pair is seven b-trees (two tables, five indexes), each at least a page, so an idle session of
a few small nodes takes seven pages whatever their size. Shards hold idle sessions: small pages
cut their disk by about three (``bench/scale/bench_disk.py``). SQLite fixes the size at a file's
first page; a shard made with another size keeps it."""

SHARD_FOLDER = "shards"
"""The folder beside the database that shard files live in."""
_SIDE_FILES = ("-wal", "-shm", "-journal")


def files_on_disk(folder: Path, *, leftovers: bool = False, links: bool = False) -> list[str]:
    """The shard files in the database's ``folder``, named as the catalog names them, sorted.

    One listing for three callers, whose needs differ in two ways, each a keyword:

    - ``leftovers``: a file of SQLite's (``-wal``, ``-shm``, ``-journal``) left without its shard
      names that shard too. The writer's maintenance asks so (it removes such leftovers);
      whoever opens the shards must not (there is no database file to open).
    - ``links``: a link counts, where a shard file or the shard folder is one (the folder is then
      listed through it). The per-session upgrade asks so: it must meet a link and refuse it,
      not leave a shard it cannot reach at an old revision; the revision check at open asks so
      and leaves a link unread. Without it, as for the maintenance, a link is never listed (so
      never removed) and a linked shard folder lists nothing: ``check`` reports both.
    """
    found: set[str] = set()
    shards = folder / SHARD_FOLDER
    if (links or not shards.is_symlink()) and shards.is_dir():
        for path in shards.iterdir():
            if path.is_symlink() and not links:  # never ours: refused where met, reported by check
                continue
            name = path.name
            for side in _SIDE_FILES if leftovers else ():
                name = name.removesuffix(side)
            if name.endswith(".sqlite"):
                found.add(f"{SHARD_FOLDER}/{name}")
    return sorted(found)


def remove_file(database: Path, file: str) -> None:
    """Remove shard ``file`` beside ``database`` and SQLite's files of it.

    The database file first: a ``-wal`` or ``-shm`` a crash leaves is found by
    :func:`files_on_disk` again.
    """
    path = database.parent / file
    for name in (path.name, *(path.name + side for side in _SIDE_FILES)):
        (path.parent / name).unlink(missing_ok=True)


def shard_path(home: Path, file: str, *, create: bool = False) -> Path:
    """The path of shard ``file`` (``shards/NNNN.sqlite``) in the database's folder ``home``.

    Nothing on the way is followed: the shard folder must be a folder, the file a regular file,
    and neither they nor the files SQLite keeps beside it links. ``create`` makes the folder
    and an empty file (SQLite's new database) where they are missing, refusing a link there.

    Raises:
        StorageError: the name is not ``<folder>/<file>``, a link or something else stands
            there, or the file is missing (and ``create`` is false); it names the file.
    """
    parts = file.split("/")
    if len(parts) != 2 or any(p in ("", ".", "..") or "\0" in p for p in parts):
        raise StorageError(f"shard file name {file!r} is not <folder>/<file>", file=file)
    shards, path = home / parts[0], home / file
    if create:
        _create(shards, folder=True)
    mode = _mode(shards, parts[0], home)
    if mode is not None and not stat.S_ISDIR(mode):
        raise StorageError(f"{parts[0]} in {home} is not a folder: refused", file=file)
    if create:
        _create(path, folder=False)
    mode = _mode(path, file, home)
    if mode is None:  # ATTACH would create an empty file
        raise StorageError(f"the shard file {file} is missing from {home}", file=file)
    if not stat.S_ISREG(mode):
        raise StorageError(f"the shard file {file} in {home} is not a file: refused", file=file)
    for suffix in _COMPANIONS:
        _mode(Path(f"{path}{suffix}"), f"{file}{suffix}", home)
    return path


def _mode(path: Path, name: str, home: Path) -> int | None:
    """``path``'s mode as it stands, unfollowed (``None``: absent); a link is refused."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(mode):
        target = ""
        with contextlib.suppress(OSError):
            target = f" (to {os.readlink(path)})"
        raise StorageError(
            f"{name} in {home} is a symbolic link{target}: shard files are never reached "
            "through links; remove it",
            file=name,
        )
    return mode


def _create(path: Path, *, folder: bool) -> None:
    """Create a missing folder or empty file without following a link that stands there."""
    try:
        if folder:
            os.mkdir(path)
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
    except FileExistsError:  # made meanwhile, or a link: judged next
        pass


def shard_links(home: Path) -> list[str]:
    """The links where shard files live in the database's folder ``home`` (folder included)."""
    shards = home / SHARD_FOLDER
    if shards.is_symlink():
        return [SHARD_FOLDER]
    if not shards.is_dir():
        return []
    return sorted(
        f"{SHARD_FOLDER}/{entry.name}" for entry in os.scandir(shards) if entry.is_symlink()
    )


SHARD_HOME = "shard_home"
"""A shard's own table naming the home that made it (one row, ``home_id``)."""
HOME_IDENTITY = "home_identity"
"""The main file's table of the home's id (one row, ``home_id``)."""

Rows = Callable[[str], list[Any]]
"""Runs one SQL text (no parameters) and returns its rows."""


def foreign_shard(rows: Rows, shard: str, main: str) -> str | None:
    """Why the shard under schema ``shard`` is not the home's of ``main`` (``None``: it is).

    A shard names its home's id. One from before ids were kept names none: it is adopted unless
    it holds copies and none is of a session ``main`` has (or has a move of): another home's.
    A main file without an id (not upgraded yet) compares nothing.
    """
    ours = home_id(rows, main, HOME_IDENTITY)
    if ours is None:
        return None
    theirs = home_id(rows, shard, SHARD_HOME)
    if theirs is not None:
        return None if theirs == ours else f"it names home {theirs}; this home is {ours}"
    if not _has_table(rows, shard, "shard_pairs"):
        return None
    held, known = rows(
        f"SELECT count(*), coalesce(sum("
        f"EXISTS (SELECT 1 FROM {main}.sessions AS s WHERE s.session_id = p.session_id) OR "
        f"EXISTS (SELECT 1 FROM {main}.session_moves AS m WHERE m.session_id = p.session_id)"
        f"), 0) FROM {shard}.shard_pairs AS p"
    )[0]
    if int(held) == 0 or int(known) > 0:
        return None
    return f"it names no home and none of its {held} copies is of a session of this home"


def home_id(rows: Rows, schema: str, table: str) -> str | None:
    """The id in ``schema``'s one-row ``table`` (``None``: no such table, or no row)."""
    if not _has_table(rows, schema, table):
        return None
    found = rows(f"SELECT home_id FROM {schema}.{table} LIMIT 1")
    return None if not found else str(found[0][0])


def stamp_home(connection: Connection, main_as: str) -> None:
    """Write the id of the home attached as ``main_as`` into the shard ``connection`` writes.

    In a move's T1, once :func:`foreign_shard` found the shard this home's: a new shard gets
    the id, and so does one from before ids were kept. A shard that names it already is left.
    """
    rows = _sqlalchemy_rows(connection)
    ours = home_id(rows, main_as, HOME_IDENTITY)
    if ours is None or home_id(rows, "main", SHARD_HOME) is not None:
        return
    connection.exec_driver_sql(
        f"CREATE TABLE IF NOT EXISTS main.{SHARD_HOME} (home_id TEXT PRIMARY KEY) WITHOUT ROWID"
    )
    connection.exec_driver_sql(f"INSERT INTO main.{SHARD_HOME} (home_id) VALUES (?)", (ours,))


def refuse_foreign(connection: Connection, file: str, main_as: str) -> None:
    """Refuse to write shard ``file`` (``connection``'s main database) unless it is this home's.

    Raises:
        StorageError: it names another home, or holds only other sessions; it names the file.
    """
    reason = foreign_shard(_sqlalchemy_rows(connection), "main", main_as)
    if reason is not None:
        raise StorageError(
            f"the shard file {file} is not this home's ({reason}): refused", file=file
        )


def _sqlalchemy_rows(connection: Connection) -> Rows:
    return lambda sql: list(connection.exec_driver_sql(sql).all())


def _has_table(rows: Rows, schema: str, table: str) -> bool:
    found = rows(f"SELECT 1 FROM {schema}.sqlite_master WHERE type = 'table' AND name = '{table}'")
    return bool(found)


def _rows(driver: Any, sql: str) -> list[Any]:
    """Every row of ``sql`` on a DB-API connection, its cursor closed."""
    cursor = driver.cursor()
    try:
        return list(cursor.execute(sql).fetchall())
    finally:
        cursor.close()
