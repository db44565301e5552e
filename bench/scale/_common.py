"""Shared pieces of the scale experiments: the two pair shapes, home builders, timing helpers.

Everything here is raw ``sqlite3`` (the standard library's), so the figures are SQLite's own cost
and none of SQLAlchemy's. Homes are built once under a cache folder (``--dir``, default a folder
in the system's temporary directory) and reused by every experiment; a builder leaves a marker
file only when it finished, so an interrupted build is redone, never half used.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from _ddl import GLOBAL_DDL, SEED_PAIR_DDL

NODES_PER_SESSION = 5
CONTENT = '[{"type":"text","text":"a short message of an ordinary length, one block"}]'
STAMP = "2026-01-01T00:00:00.000000+00:00"

LEAN_PAIR_DDL: tuple[str, ...] = (
    "CREATE TABLE nodes_{sid} (node_id TEXT PRIMARY KEY, node_seq INTEGER NOT NULL, "
    "parent_id TEXT, agent_id TEXT NOT NULL, run_id TEXT, role TEXT NOT NULL, "
    "node_type TEXT NOT NULL, content_json TEXT NOT NULL, metadata_json TEXT, "
    "token_count INTEGER, created_at TEXT NOT NULL) WITHOUT ROWID",
    "CREATE UNIQUE INDEX nodes_{sid}_seq ON nodes_{sid} (node_seq)",
    "CREATE INDEX nodes_{sid}_parent ON nodes_{sid} (parent_id)",
    "CREATE TABLE events_{sid} (event_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, "
    "run_seq INTEGER, agent_id TEXT, run_id TEXT, level TEXT NOT NULL, "
    "event_type TEXT NOT NULL, node_id TEXT, tool_call_id TEXT, payload_json TEXT, "
    "created_at TEXT NOT NULL) WITHOUT ROWID",
    "CREATE UNIQUE INDEX events_{sid}_seq ON events_{sid} (seq)",
    "CREATE UNIQUE INDEX events_{sid}_run_seq ON events_{sid} (run_id, run_seq)",
    "CREATE INDEX events_{sid}_node ON events_{sid} (node_id)",
)
# The lean pair with the seed's named CHECKs and deferred foreign keys put back: what the
# constraint text alone costs.
CHECKED_PAIR_DDL: tuple[str, ...] = (
    LEAN_PAIR_DDL[0].replace(
        "created_at TEXT NOT NULL) WITHOUT ROWID",
        "created_at TEXT NOT NULL, "
        "CONSTRAINT ck_role CHECK (role IN ('user', 'assistant', 'tool', 'system')), "
        "CONSTRAINT ck_node_type CHECK (node_type IN ('message', 'skill_context', "
        "'memory_context', 'compaction', 'child_result', 'plan_instruction', "
        "'task_instruction', 'task_board', 'system_note')), "
        "CONSTRAINT ck_node_seq CHECK (node_seq >= 1), "
        "CONSTRAINT ck_token_count CHECK (token_count IS NULL OR token_count >= 0), "
        "FOREIGN KEY(parent_id) REFERENCES nodes_{sid} (node_id) DEFERRABLE INITIALLY DEFERRED"
        ") WITHOUT ROWID",
    ),
    *LEAN_PAIR_DDL[1:3],
    LEAN_PAIR_DDL[3].replace(
        "created_at TEXT NOT NULL) WITHOUT ROWID",
        "created_at TEXT NOT NULL, "
        "CONSTRAINT ck_level CHECK (level IN ('debug', 'info', 'warning', 'error')), "
        "CONSTRAINT ck_seq CHECK (seq >= 1), "
        "CONSTRAINT ck_run_seq CHECK ((run_id IS NULL) = (run_seq IS NULL)), "
        "FOREIGN KEY(node_id) REFERENCES nodes_{sid} (node_id) DEFERRABLE INITIALLY DEFERRED"
        ") WITHOUT ROWID",
    ),
    *LEAN_PAIR_DDL[4:],
)
PAIRS = {"seed": SEED_PAIR_DDL, "lean": LEAN_PAIR_DDL, "checked": CHECKED_PAIR_DDL}

# Where a session's pair lives: no row means no pair yet (a lazily created session). ``epoch``
# grows with every move; a shard names the epoch of each copy it holds, so a reader can tell the
# copy its catalog row means from one written by a later move into the same shard.
CATALOG_DDL = (
    "CREATE TABLE session_files (session_id TEXT PRIMARY KEY, file TEXT NOT NULL, "
    "epoch INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE INDEX session_files_file ON session_files (file)",
)
SHARD_DDL = (
    "CREATE TABLE IF NOT EXISTS shard_pairs (session_id TEXT PRIMARY KEY, "
    "epoch INTEGER NOT NULL) WITHOUT ROWID"
)

ACTIVE_PATH = """
WITH RECURSIVE path(node_id, parent_id, node_seq, depth) AS (
  SELECT node_id, parent_id, node_seq, 0 FROM {db}nodes_{sid} WHERE node_id = ?
  UNION ALL
  SELECT n.node_id, n.parent_id, n.node_seq, path.depth + 1
  FROM {db}nodes_{sid} AS n JOIN path ON n.node_id = path.parent_id
  WHERE n.node_seq < path.node_seq
)
SELECT n.* FROM {db}nodes_{sid} AS n JOIN path ON n.node_id = path.node_id
ORDER BY path.depth DESC
"""


def sid_of(index: int, prefix: str = "sess_20260101_000000_") -> str:
    """A session id of the store's shape, unique per index."""
    return f"{prefix}{index:08x}"


def node_id(sid: str, seq: int) -> str:
    """A node id unique across the home (the store's are random; only uniqueness matters)."""
    return f"node_{sid[-8:]}{seq:018d}"


def event_id(sid: str, seq: int) -> str:
    """An event id unique across the home."""
    return f"evt_{sid[-8:]}{seq:018d}"


def cache_dir(args: argparse.Namespace) -> Path:
    """The folder where built homes are kept between runs."""
    path = Path(args.dir)
    path.mkdir(parents=True, exist_ok=True)
    return path


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """The options every experiment takes."""
    default = Path(tempfile.gettempdir()) / "soong-scale"
    parser.add_argument("--dir", default=str(default), help="cache folder for built homes")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per figure (median)")


def connect(path: Path | str, *, write: bool = False) -> sqlite3.Connection:
    """A connection set up as the store sets up its own (autocommit, busy timeout, WAL)."""
    connection = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA busy_timeout = 30000")
    if write:
        connection.execute("PRAGMA synchronous = NORMAL")
        connection.execute("PRAGMA foreign_keys = ON")
    return connection


def create_globals(connection: sqlite3.Connection) -> None:
    """The global tables of revision 0001 and the catalog table of the recommended design."""
    for ddl in GLOBAL_DDL + CATALOG_DDL:
        connection.execute(ddl)
    connection.execute("INSERT INTO alembic_version VALUES ('0001')")


def stamp_of(index: int) -> str:
    """A distinct timestamp per session index, in the store's format (later index, later time)."""
    day, rest = divmod(index, 86_400)
    hours, minutes, seconds = rest // 3600, rest // 60 % 60, rest % 60
    date = f"2026-{1 + day // 28:02d}-{1 + day % 28:02d}"
    return f"{date}T{hours:02d}:{minutes:02d}:{seconds:02d}.000000+00:00"


def insert_session_rows(
    connection: sqlite3.Connection, sid: str, active: str | None, stamp: str = STAMP
) -> None:
    """The ``sessions`` row and the root agent's row of one session."""
    connection.execute(
        "INSERT INTO sessions VALUES (?, '/proj', ?, ?, NULL, 'active', NULL, ?, ?)",
        (sid, "agent_" + sid[-8:], active, stamp, stamp),
    )
    connection.execute(
        "INSERT INTO agents VALUES (?, ?, NULL, 'main', NULL, NULL, 'idle', NULL, NULL, ?, ?)",
        ("agent_" + sid[-8:], sid, STAMP, STAMP),
    )


def create_pair(connection: sqlite3.Connection, shape: str, sid: str, db: str = "") -> None:
    """Create one session's two tables in the attached database ``db`` (default: main)."""
    for ddl in PAIRS[shape]:
        statement = ddl.format(sid=sid)
        if db:  # qualify the created object, never the table an index is on
            statement = statement.replace("TABLE ", f"TABLE {db}.", 1)
            statement = statement.replace("INDEX ", f"INDEX {db}.", 1)
        connection.execute(statement)


def fill_pair(connection: sqlite3.Connection, sid: str, nodes: int, db: str = "") -> str | None:
    """Write ``nodes`` chained nodes, a ``session_created`` event and one event per node."""
    q = f"{db}." if db else ""
    connection.execute(
        f"INSERT INTO {q}events_{sid} VALUES (?, 1, NULL, ?, NULL, 'info', 'session_created', "
        "NULL, NULL, '{}', ?)",
        (event_id(sid, 1), "agent_" + sid[-8:], STAMP),
    )
    parent = None
    for seq in range(1, nodes + 1):
        nid = node_id(sid, seq)
        role = "user" if seq % 2 else "assistant"
        connection.execute(
            f"INSERT INTO {q}nodes_{sid} VALUES (?, ?, ?, ?, NULL, ?, 'message', ?, NULL, 12, ?)",
            (nid, seq, parent, "agent_" + sid[-8:], role, CONTENT, STAMP),
        )
        connection.execute(
            f"INSERT INTO {q}events_{sid} VALUES (?, ?, NULL, ?, NULL, 'info', 'node_created', "
            "?, NULL, NULL, ?)",
            (event_id(sid, seq + 1), seq + 1, "agent_" + sid[-8:], nid, STAMP),
        )
        parent = nid
    return parent


def build_file(
    path: Path, make: Callable[[sqlite3.Connection], None], page_size: int = 4096
) -> float:
    """Build a database file once (fast pragmas, then WAL as the store leaves it); seconds taken.

    Skipped when the file and its ``.done`` marker exist; a file without a marker is rebuilt.
    """
    marker = path.with_name(path.name + ".done")
    if path.exists() and marker.exists():
        return 0.0
    for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        stale.unlink(missing_ok=True)
    started = time.perf_counter()
    connection = sqlite3.connect(str(path), isolation_level=None)
    connection.execute(f"PRAGMA page_size = {page_size}")
    connection.execute("PRAGMA journal_mode = OFF")
    connection.execute("PRAGMA synchronous = OFF")
    connection.execute("BEGIN")
    make(connection)
    connection.execute("COMMIT")
    connection.execute("PRAGMA journal_mode = WAL")
    connection.close()
    took = time.perf_counter() - started
    marker.write_text(json.dumps({"seconds": round(took, 1)}))
    return took


def build_home(path: Path, shape: str, sessions: int, nodes: int, page_size: int = 4096) -> float:
    """A single-file home: global tables and ``sessions`` pairs of ``shape`` in ``path``."""

    def make(connection: sqlite3.Connection) -> None:
        create_globals(connection)
        for index in range(sessions):
            sid = sid_of(index)
            create_pair(connection, shape, sid)
            active = fill_pair(connection, sid, nodes) if nodes else None
            insert_session_rows(connection, sid, active)
            connection.execute("INSERT INTO session_files VALUES (?, 'main', 1)", (sid,))

    return build_file(path, make, page_size)


def build_shard(path: Path, first: int, sessions: int, nodes: int, page_size: int = 4096) -> float:
    """A shard file: lean pairs of sessions ``first`` .. ``first + sessions - 1``, nothing else."""

    def make(connection: sqlite3.Connection) -> None:
        connection.execute("PRAGMA user_version = 1")
        connection.execute(SHARD_DDL)
        for index in range(first, first + sessions):
            sid = sid_of(index)
            create_pair(connection, "lean", sid)
            fill_pair(connection, sid, nodes)
            connection.execute("INSERT INTO shard_pairs VALUES (?, 1)", (sid,))

    return build_file(path, make, page_size)


def active_path(connection: sqlite3.Connection, sid: str, db: str = "") -> list[tuple[object, ...]]:
    """The session row, then the active path's nodes: the store's first read of a session."""
    row = connection.execute(
        "SELECT s.active_node_id, f.file FROM sessions AS s "
        "LEFT JOIN session_files AS f ON f.session_id = s.session_id WHERE s.session_id = ?",
        (sid,),
    ).fetchone()
    if row is None or row[0] is None or row[1] is None:
        return []
    prefix = f"{db}." if db else ""
    return connection.execute(ACTIVE_PATH.format(db=prefix, sid=sid), (row[0],)).fetchall()


_CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
import _common, _layout
started = time.perf_counter()
if sys.argv[2] == "plain":
    rows = _common.active_path(_common.connect(sys.argv[3]), sys.argv[4])
else:
    rows = _layout.ShardedReader(_common.Path(sys.argv[3])).active_path(sys.argv[4])
print(time.perf_counter() - started, len(rows))
"""


def open_in_child(path: Path, sid: str, *, sharded: bool = False) -> tuple[float, int]:
    """Seconds a new process takes to open ``path`` and read ``sid``'s active path; its length.

    A new process, as the issue's figure is: opening and closing a connection in this process
    would also slow this process's other connections for a while (the freed schema memory).
    ``sharded``: ``path`` is a home folder read through the catalog (``_layout.ShardedReader``).
    """
    here = str(Path(__file__).resolve().parent)
    mode = "sharded" if sharded else "plain"
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, here, mode, str(path), sid],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return float(out[0]), int(out[1])


@contextmanager
def timer(out: list[float]) -> Iterator[None]:
    """Append the seconds the block took to ``out``."""
    started = time.perf_counter()
    yield
    out.append(time.perf_counter() - started)


def med_ms(values: list[float]) -> float:
    """Median of ``values`` (seconds) in milliseconds."""
    return statistics.median(values) * 1000


def file_bytes(path: Path) -> int:
    """Size of a database with its WAL (the WAL is part of what the home takes on disk)."""
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def rss_kb() -> int:
    """This process's resident set size in KB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    """A Markdown table, so the output can go into docs/scaling.md as it is."""
    print(f"\n{title}\n")
    print("| " + " | ".join(header) + " |")
    print("| " + " | ".join("---" for _ in header) + " |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def environment() -> str:
    """The versions the figures were taken with."""
    return f"SQLite {sqlite3.sqlite_version}, pid {os.getpid()}"
