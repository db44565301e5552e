"""A prototype of the session move protocol, in raw ``sqlite3``: what ``bench_move_kill`` kills.

A home is ``sessions.sqlite`` (global tables, the ``session_files`` catalog, the pairs of the hot
sessions, the ``session_moves`` journal) and ``shards/NNNN.sqlite`` (pairs only). In WAL mode a
commit that changes two attached files is atomic per file, not across them, so no transaction
here writes more than one file. Every write to the main file, and so every unit of work and every
move, holds the main file's write lock: moves are serialized with everything else.

- ``archive`` (main -> shard). T0 main: claim the move in the journal. Then, holding the main
  file's write lock (L) from before T1 to the end of T2: T1 shard, on a second connection that
  reads the main file: drop any stale copy, create the pair, copy the rows; commit. T2 main:
  point the catalog at the shard, drop the source pair, delete the journal row; commit.
- ``reactivate`` (shard -> main, before a write). T main: journal row, the pair, the rows, the
  catalog pointed at main; commit. T' shard: drop the source pair. T'' main: delete the row.
- ``recover``: for each journal row, under the main file's write lock, drop the session's pair
  from the one file of the row that the catalog does not name (a commit of that file), then
  delete the row (a commit of main). Idempotent; bounded by the moves that were under way.
- ``read_session`` (``Reader``): the catalog row and the pair in one read transaction; a pair
  dropped under the reader (``no such table``) or a catalog row that changed means: read again.

``step`` is called between every two statements that matter, so a test can die at any of them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import _common as c

JOURNAL_DDL = (
    "CREATE TABLE IF NOT EXISTS session_moves (session_id TEXT PRIMARY KEY, "
    "source TEXT NOT NULL, target TEXT NOT NULL, epoch INTEGER NOT NULL) WITHOUT ROWID"
)
Step = Callable[[str], None]


class MoveRefused(Exception):
    """The session is not where the move expects it, or another move of it is under way."""


class Unreadable(Exception):
    """A session the catalog places in a file that does not hold its pair."""


def _no_step(_name: str) -> None:
    return None


def _drop(connection: sqlite3.Connection, db: str, sid: str, *, shard: bool) -> None:
    connection.execute(f"DROP TABLE IF EXISTS {db}.events_{sid}")
    connection.execute(f"DROP TABLE IF EXISTS {db}.nodes_{sid}")
    if shard:
        connection.execute(f"DELETE FROM {db}.shard_pairs WHERE session_id = ?", (sid,))


def _counts(connection: sqlite3.Connection, db: str, sid: str) -> tuple[int, int, int, int]:
    nodes = connection.execute(f"SELECT count(*), max(node_seq) FROM {db}.nodes_{sid}")
    events = connection.execute(f"SELECT count(*), max(seq) FROM {db}.events_{sid}")
    return (*nodes.fetchone(), *events.fetchone())


class Home:
    """One writer's connection to a home, with at most one shard attached (as ``s``)."""

    def __init__(self, root: Path, step: Step = _no_step, *, broken: bool = False) -> None:
        self.root = root
        self.step = step
        self.broken = broken  # commit main before the shard copy: what the kill test must catch
        self.main = c.connect(root / "sessions.sqlite", write=True)
        self.main.execute(JOURNAL_DDL)
        self.attached: str | None = None

    def close(self) -> None:
        """Close the connection."""
        self.main.close()

    def attach(self, file: str | None) -> None:
        """Attach shard ``file`` as ``s``, or detach (outside any transaction, as SQLite says)."""
        if self.attached == file:
            return
        if self.attached is not None:
            self.main.execute("DETACH DATABASE s")
            self.attached = None
        if file is not None:
            self.main.execute("ATTACH DATABASE ? AS s", (str(self.root / file),))
            self.main.execute("PRAGMA s.synchronous = NORMAL")
            self.attached = file

    def where(self, sid: str) -> str | None:
        """The file the catalog names for ``sid`` (None: no pair yet)."""
        row = self.main.execute(
            "SELECT file FROM session_files WHERE session_id = ?", (sid,)
        ).fetchone()
        return None if row is None else str(row[0])

    def _claim(self, sid: str, source: str, target: str) -> int:
        """Inside a main write transaction: check the placement, journal the move; its epoch."""
        if self.where(sid) != source:
            raise MoveRefused(f"{sid} is not in {source}")
        if self.main.execute("SELECT 1 FROM session_moves WHERE session_id = ?", (sid,)).fetchone():
            raise MoveRefused(f"a move of {sid} is under way or unrecovered")
        epoch = self.main.execute(
            "SELECT epoch + 1 FROM session_files WHERE session_id = ?", (sid,)
        ).fetchone()[0]
        self.main.execute(
            "INSERT INTO session_moves VALUES (?, ?, ?, ?)", (sid, source, target, epoch)
        )
        return int(epoch)

    def archive(self, sid: str, shard: str) -> None:
        """Move a hot session's pair into ``shard``."""
        step = self.step
        self.attach(None)
        step("archive:start")
        self.main.execute("BEGIN IMMEDIATE")
        try:
            self._claim(sid, "main", shard)
        except MoveRefused:
            self.main.execute("ROLLBACK")
            raise
        self.main.execute("COMMIT")
        step("archive:T0 committed")
        self.main.execute("BEGIN IMMEDIATE")  # L: no other write to main until T2 commits
        claimed = self.main.execute(
            "SELECT target, epoch FROM session_moves WHERE session_id = ?", (sid,)
        ).fetchone()
        if claimed is None or claimed[0] != shard or self.where(sid) != "main":
            self.main.execute("ROLLBACK")
            raise MoveRefused(f"the claim on {sid} was recovered meanwhile")
        source = _counts(self.main, "main", sid)
        copier = c.connect(self.root / shard, write=True)
        try:
            copier.execute("ATTACH DATABASE ? AS m", (str(self.root / "sessions.sqlite"),))
            copier.execute("BEGIN")  # writes only the shard; reads main's committed state
            copier.execute(c.SHARD_DDL)
            _drop(copier, "main", sid, shard=True)
            c.create_pair(copier, "lean", sid)
            step("archive:T1 pair created")
            copier.execute(f"INSERT INTO nodes_{sid} SELECT * FROM m.nodes_{sid}")
            step("archive:T1 nodes copied")
            copier.execute(f"INSERT INTO events_{sid} SELECT * FROM m.events_{sid}")
            copier.execute("INSERT INTO shard_pairs VALUES (?, ?)", (sid, claimed[1]))
            assert _counts(copier, "main", sid) == source
            step("archive:T1 before commit")
            if self.broken:
                self._flip_to(shard, sid, claimed[1])
                step("broken: T2 committed before T1")
            copier.execute("COMMIT")
        finally:
            copier.close()
        step("archive:T1 committed")
        if not self.broken:
            self._flip_to(shard, sid, claimed[1])

    def _flip_to(self, shard: str, sid: str, epoch: int) -> None:
        """T2 of ``archive``: catalog, source pair and journal row in one commit of main."""
        step = self.step
        self.main.execute(
            "UPDATE session_files SET file = ?, epoch = ? WHERE session_id = ?", (shard, epoch, sid)
        )
        step("archive:T2 catalog flipped")
        _drop(self.main, "main", sid, shard=False)
        self.main.execute("DELETE FROM session_moves WHERE session_id = ?", (sid,))
        step("archive:T2 before commit")
        self.main.execute("COMMIT")
        step("archive:T2 committed")

    def reactivate(self, sid: str) -> None:
        """Bring an archived session's pair back into the main file (before any write to it)."""
        step = self.step
        shard = self.where(sid)
        if shard is None or shard == "main":
            return
        self.attach(shard)
        step("reactivate:start")
        self.main.execute("BEGIN IMMEDIATE")  # locks main and s; writes only main
        try:
            epoch = self._claim(sid, shard, "main")
        except MoveRefused:
            self.main.execute("ROLLBACK")
            raise
        c.create_pair(self.main, "lean", sid)
        step("reactivate:T pair created")
        self.main.execute(f"INSERT INTO main.nodes_{sid} SELECT * FROM s.nodes_{sid}")
        self.main.execute(f"INSERT INTO main.events_{sid} SELECT * FROM s.events_{sid}")
        step("reactivate:T rows copied")
        self.main.execute(
            "UPDATE session_files SET file = 'main', epoch = ? WHERE session_id = ?", (epoch, sid)
        )
        step("reactivate:T before commit")
        self.main.execute("COMMIT")
        step("reactivate:T committed")
        self._finish(sid, shard)
        step("reactivate:T'' committed")

    def _finish(self, sid: str, stale: str) -> None:
        """Drop ``sid``'s copy in ``stale`` unless the catalog names it; then the journal row."""
        self.attach(None if stale == "main" else stale)
        db = "main" if stale == "main" else "s"
        self.main.execute("BEGIN IMMEDIATE")  # the catalog is read under main's write lock
        if self.where(sid) != stale:
            _drop(self.main, db, sid, shard=stale != "main")
        self.step("drop stale copy: before commit")
        self.main.execute("COMMIT")
        self.step("drop stale copy: committed")
        self.main.execute("DELETE FROM session_moves WHERE session_id = ?", (sid,))

    def append(self, sid: str) -> int:
        """One unit of work: a node and its event, the session row moved (main file only)."""
        while True:
            self.reactivate(sid)
            self.main.execute("BEGIN IMMEDIATE")
            if self.where(sid) == "main":
                break
            self.main.execute("ROLLBACK")  # archived again meanwhile
        seq = self.main.execute(f"SELECT coalesce(max(node_seq), 0) FROM nodes_{sid}").fetchone()[0]
        eseq = self.main.execute(f"SELECT coalesce(max(seq), 0) FROM events_{sid}").fetchone()[0]
        nid = c.node_id(sid, seq + 1)
        parent = c.node_id(sid, seq) if seq else None
        self.main.execute(
            f"INSERT INTO nodes_{sid} VALUES (?, ?, ?, 'agent', NULL, 'user', 'message', ?, "
            "NULL, 1, ?)",
            (nid, seq + 1, parent, c.CONTENT, c.STAMP),
        )
        self.main.execute(
            f"INSERT INTO events_{sid} VALUES (?, ?, NULL, 'agent', NULL, 'info', "
            "'node_created', ?, NULL, NULL, ?)",
            (c.event_id(sid, eseq + 1), eseq + 1, nid, c.STAMP),
        )
        self.main.execute(
            "UPDATE sessions SET active_node_id = ?, updated_at = ? WHERE session_id = ?",
            (nid, c.STAMP, sid),
        )
        self.step("append:before commit")
        self.main.execute("COMMIT")
        return seq + 1

    def recover(self) -> int:
        """Finish or undo every move the journal names; how many journal rows it handled."""
        rows = self.main.execute("SELECT session_id, source, target FROM session_moves").fetchall()
        for sid, source, target in rows:
            where = self.where(sid)
            for file in {source, target} - {where}:
                self._finish(sid, file)
            self.main.execute("DELETE FROM session_moves WHERE session_id = ?", (sid,))
        self.attach(None)
        return len(rows)


def pairs_in(path: Path) -> set[str]:
    """The session ids that have a ``nodes_`` table in a file (what a full sweep would find)."""
    connection = sqlite3.connect(str(path))
    names = connection.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'nodes\\_%' ESCAPE '\\'"
    ).fetchall()
    connection.close()
    return {name[len("nodes_") :] for (name,) in names}


class Reader:
    """A reader in its own process: follows the catalog, attaches shards as needed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.main = c.connect(root / "sessions.sqlite")
        self.attached: str | None = None
        self.retries = 0

    def read_session(self, sid: str) -> tuple[str, str | None, list[tuple[object, ...]], int]:
        """(file, active node, nodes, event count) as of one snapshot of the catalog.

        Raises ``Unreadable`` if the catalog keeps naming a file without the pair.
        """
        for _ in range(200):
            row = self.main.execute(
                "SELECT file FROM session_files WHERE session_id = ?", (sid,)
            ).fetchone()
            file = str(row[0])
            db = "main"
            if file != "main":
                if self.attached != file:
                    if self.attached is not None:
                        self.main.execute("DETACH DATABASE s")
                    self.main.execute("ATTACH DATABASE ? AS s", (str(self.root / file),))
                    self.attached = file
                db = "s"
            try:
                self.main.execute("BEGIN")
                now = self.main.execute(
                    "SELECT f.file, se.active_node_id, f.epoch FROM session_files AS f "
                    "JOIN sessions AS se USING (session_id) WHERE session_id = ?",
                    (sid,),
                ).fetchone()
                if now[0] != file:
                    self.retries += 1
                    continue
                if db == "s":  # the shard's copy must be the one this catalog row means
                    held = self.main.execute(
                        "SELECT epoch FROM s.shard_pairs WHERE session_id = ?", (sid,)
                    ).fetchone()
                    if held != (now[2],):
                        self.retries += 1
                        continue
                nodes = self.main.execute(
                    f"SELECT node_id, node_seq FROM {db}.nodes_{sid} ORDER BY node_seq"
                ).fetchall()
                events = self.main.execute(f"SELECT count(*) FROM {db}.events_{sid}").fetchone()
                return file, now[1], nodes, int(events[0])
            except sqlite3.OperationalError as exc:
                if "no such table" not in str(exc):
                    raise
                self.retries += 1
            finally:
                if self.main.in_transaction:
                    self.main.execute("COMMIT")
        raise Unreadable(f"{sid}: the catalog names {file}, which has no pair of it")
