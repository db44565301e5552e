"""Moving sessions' pairs between the main database and shard files (``docs/scaling.md``).

In WAL mode a transaction over several attached files commits atomically per file only, so
every transaction here writes one file, and the catalog (``session_files``) always names a file
holding a whole copy of the epoch it names; ``session_moves`` journals each move under way.

- :func:`archive` (main -> shard, the writer's maintenance between batches): T0 journals a
  batch; L takes the main file's write lock and holds it while T1 (a connection of its own on
  the shard, the main file attached to read from) copies the batch into the shard and commits,
  and T2 points the catalog at the shard, drops the main pairs and the journal rows, commits.
- :func:`bring_back` (shard -> main, inside the first write's own transaction, the shard
  attached before ``BEGIN``): the journal row, the pair copied back, the catalog pointed at
  main; the copy left in the shard is dropped later by :func:`recover`.
- :func:`recover` (at the writer's start, and for the rows this writer left): drop the pair
  from the files of the row the catalog does not name, one file per transaction, then the row.
- :func:`reclaim` (the writer's maintenance once nothing is left to archive): a shard that
  holds no pair loses its ``shard_files`` row (one commit), then its file, under the main
  file's write lock, with any file on disk no row names (left by a crash between the two); a
  shard less than half full has its pairs brought back, a batch per commit, for archiving to
  move them on into the shard being filled. The shard being filled (the last) is never
  reclaimed, so no shard's name is ever used twice: a reader may hold a removed file attached.

Only SQLite moves pairs (:attr:`~soong_store.backends.base.Capabilities.places_pairs`); on every
other backend the catalog names the main database for every session and nothing here runs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy import Connection, Select, delete, func, inspect, select, update

from soong_store.backends.base import Backend, shard_files
from soong_store.backends.values import BeforeBegin
from soong_store.catalog import lookup as catalog
from soong_store.catalog import pair_text
from soong_store.catalog import placement as pair_files
from soong_store.catalog.lookup import MAIN
from soong_store.catalog.placement import shard_pairs
from soong_store.catalog.shard_connection import HOT_AS, ShardConnection
from soong_store.errors import StorageError
from soong_store.schema.tables import (
    session_files_table,
    session_moves_table,
    sessions_table,
    shard_files_table,
)

PAIR_REV = 1
"""The revision of the pair shape shards hold (``shard_files.rev``)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """How many pairs the main database keeps, how many a shard takes, how many move at once."""

    hot: int = 150
    shard: int = 500
    batch: int = 10


LIMITS = Limits()
"""The limits in force (internal: tests make them small)."""

step_hook: Callable[[str], None] | None = None
"""Called with the name of each protocol step as it is reached (internal: the kill tests)."""

_files = session_files_table.c
_moves = session_moves_table.c


def _step(name: str) -> None:
    if step_hook is not None:
        step_hook(name)


def _journal(connection: Connection, session_id: str, source: str, target: str, epoch: int) -> None:
    connection.execute(
        session_moves_table.insert(),
        {"session_id": session_id, "source": source, "target": target, "epoch": epoch},
    )


def _attach(connection: Connection, file: str) -> None:
    pair_files.attach(connection, file)


# -- reactivate: shard -> main, in the first write's transaction ---------------------------


def bring_back(connection: Connection, session_id: str) -> None:
    """Bring a session's pair from its shard into the main database, in this transaction.

    The unit of work that needs it writes right after, in the same commit of the main file.
    Raises :class:`~soong_store.backends.values.BeforeBegin` while the shard is not attached to
    the writer's connection, or while an earlier move of the session is still journaled.
    """
    place = pair_files.placement(connection, session_id)
    if place is None or place[0] == MAIN:
        return
    file, epoch = place
    alias = pair_files.shards_of(connection).attached_as(connection, file)
    if alias is None:
        raise BeforeBegin(partial(_attach, file=file), f"attach {file}")
    if pair_files.move_of(connection, session_id) is not None:
        raise BeforeBegin(partial(_settle_first, session_id=session_id), f"recover {session_id}")
    if pair_files.copy_epoch(connection, alias, session_id) != epoch:
        raise StorageError(
            f"shard {file} holds no copy of session {session_id!r} at epoch {epoch}: run check",
            session_id=session_id,
        )
    _journal(connection, session_id, file, MAIN, epoch + 1)
    _step("reactivate:journaled")
    pair_text.create(connection, session_id)
    pair_text.copy(connection, session_id, alias, MAIN)
    _step("reactivate:copied")
    connection.execute(
        update(session_files_table)
        .where(_files.session_id == session_id)
        .values(file=MAIN, epoch=epoch + 1)
    )
    pair_files.note_journaled(connection, session_id)
    connection.info[pair_files.HOT_GREW] = True


def _settle_first(connection: Connection, session_id: str) -> None:
    """Settle an earlier move of ``session_id`` (a ``BeforeBegin``'s preparation)."""
    recover(connection, [session_id])


# -- recover: settle journal rows ----------------------------------------------------------


def recover(connection: Connection, session_ids: Iterable[str] | None = None) -> set[str]:
    """Settle the journal rows of ``session_ids`` (all of them: ``None``), outside a transaction.

    For each row: the pair is dropped from whichever of its files the catalog does not name
    (a transaction of that file alone, under the main file's write lock), then the row goes.
    Idempotent, and safe against moves in other processes: each step checks, under the lock,
    that the row is the one it read. Returns the shards a pair left (to :func:`reclaim`).
    """
    if session_ids is None:
        with connection.begin():
            session_ids = list(connection.execute(select(_moves.session_id)).scalars())
    left: set[str] = set()
    for session_id in session_ids:
        left |= _settle(connection, session_id)
    return left


def _where(connection: Connection, session_id: str) -> str | None:
    place = pair_files.placement(connection, session_id)
    return None if place is None else place[0]


def _settle(connection: Connection, session_id: str) -> set[str]:
    """Settle one journal row; the shards it named that the pair is not in."""
    with connection.begin():
        row = pair_files.move_of(connection, session_id)
        if row is None:
            return set()
        where = _where(connection, session_id)
    stale = [f for f in dict.fromkeys((str(row["source"]), str(row["target"]))) if f != where]
    left = {f for f in stale if f != MAIN}
    for file in stale:
        if file != MAIN and not _drop_copy(connection, session_id, file, row):
            return left  # the row changed meanwhile: whoever changed it settles it
    with connection.begin():
        if pair_files.move_of(connection, session_id) != row:
            return left
        if MAIN in stale and _where(connection, session_id) != MAIN:
            pair_text.drop(connection, session_id, MAIN)
            catalog.forget_pair(connection.engine, session_id)
        connection.execute(delete(session_moves_table).where(_moves.session_id == session_id))
    _step("recover:settled")
    return left


def _drop_copy(connection: Connection, session_id: str, file: str, row: dict[str, Any]) -> bool:
    """Drop the copy of a session's pair in shard ``file`` (one commit of that file)."""
    shards = pair_files.shards_of(connection)
    try:
        shards.attach(connection, file)
    except StorageError:  # no such file: nothing to drop there
        return True
    with connection.begin():
        if pair_files.move_of(connection, session_id) != row:
            return False
        if _where(connection, session_id) == file:
            return True
        alias = shards.attached_as(connection, file)
        assert alias is not None
        pair_text.drop(connection, session_id, alias)
        pairs = shard_pairs(alias)
        if inspect(connection).has_table(pairs.name, schema=alias):  # a T1 that never committed
            connection.execute(delete(pairs).where(pairs.c.session_id == session_id))
        _step("recover:copy dropped")
    return True


# -- archive: main -> shard, between batches -----------------------------------------------


def hot_pairs(connection: Connection) -> int:
    """How many pairs the main database holds."""
    count = select(func.count()).select_from(session_files_table).where(_files.file == MAIN)
    return int(connection.execute(count).scalar() or 0)


def _current_shard(connection: Connection, limits: Limits) -> tuple[str, int]:
    """The shard being filled and how many pairs it was given (a new one when it is full)."""
    last = connection.execute(
        select(shard_files_table.c.file, shard_files_table.c.sessions)
        .order_by(shard_files_table.c.file.desc())
        .limit(1)
    ).first()
    if last is not None and int(last[1]) < limits.shard:
        return str(last[0]), int(last[1])
    number = 1 if last is None else int(str(last[0]).split("/")[-1].split(".")[0]) + 1
    return f"shards/{number:04d}.sqlite", 0


def _claim(connection: Connection, limits: Limits) -> tuple[str, list[str]]:
    """T0: journal a batch of the least recently updated main pairs, for one shard.

    A whole batch once the bound is passed (not just the excess), so that a file growing by
    one pair at a time pays a shard's open once per batch.
    """
    hot = hot_pairs(connection)
    if hot <= limits.hot:
        return "", []
    file, given = _current_shard(connection, limits)
    found = connection.execute(
        select(_files.session_id, _files.epoch, sessions_table.c.updated_at)
        .join(sessions_table, sessions_table.c.session_id == _files.session_id)
        .where(_files.file == MAIN)
        .where(~select(_moves.session_id).where(_moves.session_id == _files.session_id).exists())
    ).all()
    rows = sorted(found, key=lambda r: (r[2], r[0]))
    take = rows[: min(limits.batch, limits.shard - given)]
    for session_id, epoch, _updated in take:
        _journal(connection, session_id, MAIN, file, int(epoch) + 1)
    return file, [str(r[0]) for r in take]


def archive(
    connection: Connection,
    backend: Backend,
    limits: Limits | None = None,
    shard: ShardConnection | None = None,
) -> bool:
    """Move one batch of idle pairs out of the main database; whether more are to move.

    ``shard`` keeps T1's connection for the next batch; without it one is opened and closed.
    """
    limits = limits or LIMITS
    with connection.begin():
        file, claimed = _claim(connection, limits)
    if not claimed:
        return False
    _step("archive:T0")
    kept = shard or ShardConnection(backend)
    try:
        _move_out(connection, kept, file, claimed, limits)
    except BaseException:
        kept.close()
        if connection.in_transaction():
            connection.rollback()
        recover(connection, claimed)
        raise
    finally:
        if shard is None:
            kept.close()
    return True


def _move_out(
    connection: Connection, shard: ShardConnection, file: str, claimed: list[str], limits: Limits
) -> None:
    pair_files.shards_of(connection).detach(connection, file)  # L must not hold the shard's lock
    with connection.begin():  # L: the main file's write lock, held until T2 commits
        moving: list[tuple[str, int]] = []
        for session_id in claimed:
            row = pair_files.move_of(connection, session_id)
            place = pair_files.placement(connection, session_id)
            if (
                row is not None
                and (row["source"], row["target"]) == (MAIN, file)
                and place == (MAIN, int(row["epoch"]) - 1)
            ):
                moving.append((session_id, int(row["epoch"])))
        if not moving:
            return
        _step("archive:L")
        _copy_into_shard(shard.to(file), file, moving)
        _step("archive:T1")
        for session_id, epoch in moving:
            connection.execute(
                update(session_files_table)
                .where(_files.session_id == session_id)
                .values(file=file, epoch=epoch)
            )
            pair_text.drop(connection, session_id, MAIN)
            connection.execute(delete(session_moves_table).where(_moves.session_id == session_id))
            catalog.forget_pair(connection.engine, session_id)
        given = connection.execute(
            select(shard_files_table.c.sessions).where(shard_files_table.c.file == file)
        ).scalar()
        if (given or 0) + len(moving) >= limits.shard:
            shard.close()  # full: no batch goes there again
        if given is None:
            connection.execute(
                shard_files_table.insert(),
                {"file": file, "sessions": len(moving), "rev": PAIR_REV},
            )
        else:
            connection.execute(
                update(shard_files_table)
                .where(shard_files_table.c.file == file)
                .values(sessions=int(given) + len(moving))
            )
        _step("archive:T2 before commit")
    _step("archive:T2")


def _copy_into_shard(shard: Connection, file: str, moving: list[tuple[str, int]]) -> None:
    """T1: the batch's pairs copied into the shard, with their epochs, in one commit of it.

    Never into another home's shard, nor one whose pairs have another shape than the main file's.
    """
    with shard.begin():
        pairs = shard_pairs(MAIN)
        pair_files.stamp_new_shard(shard, HOT_AS)
        pair_files.claim_shard(shard, HOT_AS, file)
        pairs.create(shard, checkfirst=True)
        for session_id, epoch in moving:
            pair_text.drop(shard, session_id, MAIN)  # a stale copy a crash left
            shard.execute(delete(pairs).where(pairs.c.session_id == session_id))
            pair_text.create(shard, session_id)
            pair_text.copy(shard, session_id, HOT_AS, MAIN)
            shard.execute(pairs.insert(), {"session_id": session_id, "epoch": epoch})
            _step("archive:T1 copied")
        _step("archive:T1 before commit")


# -- reclaim: shards that hold nothing go, sparse ones are emptied ------------------------


def _is_named(file: Any) -> Any:
    """Whether a catalog row or a journal row names ``file`` (a SQL expression)."""
    placed = select(_files.session_id).where(_files.file == file)
    moving = select(_moves.session_id).where((_moves.source == file) | (_moves.target == file))
    return placed.exists() | moving.exists()


def _candidates(among: Collection[str] | None) -> Select[tuple[str]]:
    """The shards of ``among`` (``None``: every one) but the last (the one being filled)."""
    files = shard_files_table.c.file
    found = select(files).where(files != select(func.max(files)).scalar_subquery())
    return found if among is None else found.where(files.in_(sorted(among)))


def _unused(connection: Connection, among: Collection[str] | None) -> list[str]:
    """The shards of ``among`` no catalog or journal row names, but the last."""
    files = shard_files_table.c.file
    found = connection.execute(_candidates(among).where(~_is_named(files)).order_by(files))
    return [str(f) for f in found.scalars()]


def _sparse(connection: Connection, limits: Limits, among: Collection[str] | None) -> str | None:
    """A shard of ``among``, not the last, less than half full and with no move under way."""
    files = shard_files_table.c.file
    moving = select(_moves.session_id).where((_moves.source == files) | (_moves.target == files))
    held = (
        select(func.count())
        .select_from(session_files_table)
        .where(_files.file == files)
        .scalar_subquery()
    )
    found = connection.execute(
        _candidates(among)
        .where(~moving.exists())
        .where(held > 0)
        .where(held * 2 < limits.shard)
        .order_by(files)
        .limit(1)
    ).scalar()
    return None if found is None else str(found)


def _remove_strays(connection: Connection, backend: Backend) -> None:
    """R2: remove the shard files on disk that no row names, under the main file's write lock.

    The lock keeps any move (its T1 creates a file, under that lock, once journaled) out
    meanwhile; nothing is written, so the transaction ends in a rollback.
    """
    files = shard_files(backend)
    assert files is not None  # the maintenance runs only where pairs are placed
    on_disk = files.files_on_disk()
    if not on_disk:
        return
    for file in files.attached_files(connection):
        files.detach(connection, file)
    with connection.begin() as transaction:
        listed = set(connection.execute(select(shard_files_table.c.file)).scalars())
        for file in on_disk:
            if file in listed:
                continue
            if connection.execute(select(_is_named(file))).scalar():
                continue  # a move's T1 left it: recovery settles that row first
            files.remove_file(file)
            _step("reclaim:removed")
        transaction.rollback()


def _empty_sparse(connection: Connection, file: str, limits: Limits) -> None:
    """Bring a batch of a sparse shard's pairs back to the main file (one main commit)."""
    pair_files.attach(connection, file)
    if pair_files.shards_of(connection).attached_as(connection, file) is None:
        return  # gone meanwhile
    journaled = select(_moves.session_id).where(_moves.session_id == _files.session_id)
    with connection.begin():
        found = connection.execute(
            select(_files.session_id)
            .where(_files.file == file)
            .where(~journaled.exists())
            .order_by(_files.session_id)
            .limit(limits.batch)
        )
        for session_id in list(found.scalars()):
            bring_back(connection, session_id)
        _step("reclaim:brought back")


def reclaim(
    connection: Connection,
    backend: Backend,
    limits: Limits | None = None,
    among: Collection[str] | None = None,
    *,
    sweep: bool = True,
) -> bool:
    """Remove the shards of ``among`` (``None``: all) that hold nothing; empty a sparse one.

    ``sweep`` also removes the files on disk no row names (a crash's leftovers). Returns
    whether a batch was brought back (the writer then archives it and calls again). Run
    outside any transaction.
    """
    limits = limits or LIMITS
    with connection.begin():  # R1: the rows of unused shards go, in one main commit
        unused = _unused(connection, among)
        if unused:
            files = shard_files_table.c.file
            connection.execute(delete(shard_files_table).where(files.in_(unused)))
        sparse = _sparse(connection, limits, among)
    if unused:
        _step("reclaim:forgotten")
    if unused or sweep:
        _remove_strays(connection, backend)
    if sparse is None:
        return False
    _empty_sparse(connection, sparse, limits)
    return True


def _read_all(driver: Any, sql: str, *parameters: object) -> list[Any]:
    """Every row of a query on a DB-API connection, its statement finished and closed."""
    cursor = driver.cursor()
    try:
        return list(cursor.execute(sql, parameters).fetchall())
    finally:
        cursor.close()


class Maintenance:
    """The writer's work between batches: recovery at start, settling rows, archiving.

    Whether there is work is asked on the writer's connection outside any transaction: SQLite
    reads a snapshot there without the write lock, so a writer with nothing to move never
    takes it; a read connection would re-read the main file's schema after each pair created.
    """

    def __init__(self, backend: Backend, limits: Limits | None = None) -> None:
        self._backend = backend
        self._limits = limits
        self._started = False
        self._shard = ShardConnection(backend)
        self.failed = False
        """Whether the last round failed (the next round, after the next batch, archives again)."""
        self.marks = frozenset({pair_files.JOURNALED, pair_files.HOT_GREW})
        """A journal row to settle, or pairs to count: what a job leaves for a round."""
        self._left: set[str] | None = None  # shards pairs left since the last reclaim (None: all)
        self._last: str | None = None  # the last shard at the last reclaim

    def close(self) -> None:
        """Close the shard connection kept between batches (after the writer has stopped)."""
        self._shard.close()

    def _note_left(self, files: set[str]) -> None:
        if self._left is not None:
            self._left |= files

    def _reclaim(self, connection: Connection, limits: Limits) -> bool:
        """Reclaim the shards pairs left, and the one that stopped being filled; whether more."""
        driver: Any = connection.connection.driver_connection  # autocommit: a read, no lock
        found = _read_all(driver, "SELECT max(file) FROM shard_files")[0][0]
        last = None if found is None else str(found)
        among, sweep = self._left, self._left is None
        if among is not None and self._last is not None and self._last != last:
            among = among | {self._last}
        self._left, self._last = set(), last
        if among is not None and not among - {last}:
            return False
        try:
            more = reclaim(connection, self._backend, limits, among, sweep=sweep)
        except BaseException:
            self._left = among  # tried again after the next batch
            raise
        if more:
            self._left = among  # the same shards again, once the batch is archived
        return more

    def _look(self, connection: Connection) -> tuple[bool, int]:
        """Whether the journal holds rows, and how many pairs the main database holds."""
        if connection.in_transaction():  # never between batches; then its snapshot will do
            journaled = connection.execute(select(_moves.session_id).limit(1)).first()
            return journaled is not None, hot_pairs(connection)
        driver: Any = connection.connection.driver_connection  # autocommit: a read, no lock
        journal = _read_all(driver, "SELECT 1 FROM session_moves LIMIT 1")
        hot = _read_all(driver, "SELECT count(*) FROM session_files WHERE file = ?", MAIN)
        return bool(journal), int(hot[0][0])

    def settle(self, connection: Connection) -> None:
        """Settle the journal rows the last batches or rounds left (the writer is stopping).

        A round that brought pairs back leaves their rows for the next round, which a closing
        writer never runs: without this, a clean close would leave rows for the next open.
        """
        settle = connection.info.pop(pair_files.JOURNALED, None)
        if settle:
            self._note_left(recover(connection, sorted(settle)))

    def __call__(self, connection: Connection) -> bool:
        """One round; whether more is left (the writer calls again while no job waits)."""
        try:
            return self._round(connection)
        except BaseException:
            self._shard.close()
            self.failed = True  # the next round (after the next batch) archives again
            raise

    def _round(self, connection: Connection) -> bool:
        info = connection.info
        limits = self._limits or LIMITS
        if not self._started:
            self._started = True
            self._left = None
            journaled, hot = self._look(connection)
            if journaled:
                recover(connection)
            if hot > limits.hot:
                info[pair_files.HOT_GREW] = True
        settle = info.pop(pair_files.JOURNALED, None)
        if settle:
            self._note_left(recover(connection, sorted(settle)))
        grew = info.pop(pair_files.HOT_GREW, False) or self.failed
        self.failed = False
        if (
            grew
            and self._look(connection)[1] > limits.hot
            and archive(connection, self._backend, limits, self._shard)
        ):
            info[pair_files.HOT_GREW] = True
            return True
        if (grew or self._left is None or self._left) and self._reclaim(connection, limits):
            return True
        shards = pair_files.shards_of(connection)
        for file in shards.attached_files(connection):
            shards.detach(connection, file)
        return False
