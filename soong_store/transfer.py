"""Export and import of one session as JSON Lines.

An export is one JSON object per line. Line 1 is the header::

    {"format": "soong-store-session", "version": 1, "session_id": ..., "exported_at": ...,
     "with_artifacts": bool, "counts": {"agents": n, "runs": n, "nodes": n, "events": n,
     "artifacts": n}}

then ``{"kind": K, "row": {...}}`` lines in this order: one ``session``, its ``agent``s, ``run``s,
``node``s (by ``node_seq``), ``event``s (by ``seq``) and ``artifact`` rows; an artifact line holds
``"data_b64"`` (its bytes, base64) when the export was made with artifacts. Rows are the stored
columns exactly (``*_json`` columns as their JSON text), so a round trip is lossless. The counts
make a truncated file detectable.

An import reads and checks the whole file first (shape, types, enums, ids, content, references
between the rows; the checks are in :mod:`soong_store._transfer_checks`), then writes the
artifact files and sends every row to the writer as one job: the session is there completely or
not at all. A file that is malformed, of an unknown version, or whose session id (compared
ignoring case, as SQLite compares table names) already exists is refused with
:class:`~soong_store.errors.InvalidArgument` and nothing is written.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, TextIO

from sqlalchemy import Connection, func, select

from soong_store import _json, _reads
from soong_store._transfer_checks import (
    FORMAT,
    FORMAT_VERSION,
    JSON_COLUMNS,
    KINDS,
    Bundle,
    Progress,
    kind_tables,
    read_export,
)
from soong_store.artifacts import ArtifactFiles
from soong_store.errors import InvalidArgument
from soong_store.ids import check_session_id, new_id, new_session_id, utc_now
from soong_store.schema.models import agents_table, artifacts_table, runs_table, sessions_table
from soong_store.schema.session_tables import session_tables
from soong_store.store import SessionStore

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "KINDS",
    "Imported",
    "Progress",
    "export_session",
    "import_session",
    "read_export",
    "session_counts",
    "session_rows",
]


# -- export ---------------------------------------------------------------------------------


def session_rows(connection: Connection, session_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every stored row of one session by kind, read in one snapshot (``NotFound`` if none)."""
    session = _reads.session_row(connection, session_id)
    # Column names of the factory's tables are ``quoted_name``s, which orjson refuses.
    rows = {"session": [{str(k): v for k, v in session.items()}]}
    tables = kind_tables(session_id)
    order = {
        "agent": (agents_table.c.created_at, agents_table.c.agent_id),
        "run": (runs_table.c.created_at, runs_table.c.run_id),
        "node": (tables["node"].c.node_seq,),
        "event": (tables["event"].c.seq,),
        "artifact": (artifacts_table.c.created_at, artifacts_table.c.artifact_id),
    }
    for kind, keys in order.items():
        stmt = select(tables[kind]).order_by(*keys)
        if "session_id" in tables[kind].c:
            stmt = stmt.where(tables[kind].c.session_id == session_id)
        rows[kind] = [
            {str(k): v for k, v in row.items()} for row in connection.execute(stmt).mappings()
        ]
    return rows


def session_counts(connection: Connection, session_id: str) -> dict[str, int]:
    """How many agents, runs, nodes, events and artifacts a session has."""
    _reads.session_row(connection, session_id)
    counts: dict[str, int] = {}
    for kind, table in kind_tables(session_id).items():
        if kind == "session":
            continue
        stmt = select(func.count()).select_from(table)
        if "session_id" in table.c:
            stmt = stmt.where(table.c.session_id == session_id)
        counts[f"{kind}s"] = int(connection.execute(stmt).scalar() or 0)
    return counts


async def export_session(
    store: SessionStore,
    session_id: str,
    out: TextIO,
    *,
    with_artifacts: bool = False,
    progress: Progress | None = None,
) -> dict[str, int]:
    """Write one session as JSON Lines to ``out``; return the counts of rows written."""
    sid = check_session_id(session_id)
    rows = await store._read(partial(session_rows, session_id=sid))
    counts = {f"{kind}s": len(rows[kind]) for kind in KINDS[1:]}
    header = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "session_id": sid,
        "exported_at": utc_now(),
        "with_artifacts": with_artifacts,
        "counts": counts,
    }
    files = ArtifactFiles(store.home / "artifacts")
    total, done = sum(counts.values()) + 1, 0
    out.write(_json.dumps_text(header) + "\n")
    for kind in KINDS:
        for row in rows[kind]:
            line: dict[str, Any] = {"kind": kind, "row": row}
            if kind == "artifact" and with_artifacts:
                data = await asyncio.to_thread(files.read, row["path"])
                line["data_b64"] = base64.b64encode(data).decode("ascii")
            out.write(_json.dumps_text(line, what=f"{kind} row") + "\n")
            done += 1
            if progress is not None and done % 200 == 0:
                progress(done, total)
    if progress is not None:
        progress(total, total)
    return counts


# -- import ---------------------------------------------------------------------------------


def _renamed(bundle: Bundle) -> Bundle:
    """The bundle under a fresh session id, with fresh agent, run and artifact ids.

    Those ids are keys of global tables, so a copy next to its original needs new ones; every
    reference is rewritten: id columns, artifact paths, and JSON strings equal to a renamed id.
    """
    old_sid = bundle.session_id
    mapping = {old_sid: new_session_id()}
    for kind, prefix in (("agent", "agent"), ("run", "run"), ("artifact", "art")):
        mapping.update({r[f"{kind}_id"]: new_id(prefix) for r in bundle.rows[kind]})

    def swap(value: Any) -> Any:
        if isinstance(value, str):
            return mapping.get(value, value)
        if isinstance(value, list):
            return [swap(v) for v in value]
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        return value

    out = Bundle(mapping[old_sid], {kind: [] for kind in KINDS})
    for kind in KINDS:
        for row in bundle.rows[kind]:
            new = {}
            for column, value in row.items():
                if column in JSON_COLUMNS or column == "content_json":
                    decoded = _json.loads(value)
                    changed = swap(decoded)
                    new[column] = value if changed == decoded else _json.dumps_text(changed)
                elif column == "path":
                    folder, name = value.split("/")
                    aid = row["artifact_id"]
                    name = mapping[aid] + name[len(aid) :] if name.startswith(aid) else name
                    new[column] = f"{mapping.get(folder, folder)}/{name}"
                    out.sources[new[column]] = value
                else:
                    new[column] = swap(value) if column.endswith("_id") else value
            out.rows[kind].append(new)
    out.data = {mapping[aid]: data for aid, data in bundle.data.items()}
    return out


def _insert_bundle(connection: Connection, bundle: Bundle) -> None:
    """The writer job of an import: refuse a taken id, else insert everything."""
    sid = bundle.session_id
    taken = connection.execute(
        select(sessions_table.c.session_id).where(
            func.lower(sessions_table.c.session_id) == sid.lower()
        )
    ).scalar()
    names = [f"nodes_{sid}".lower(), f"events_{sid}".lower()]
    table = connection.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND lower(name) IN (?, ?)",
        tuple(names),
    ).scalar()
    if taken is not None or table is not None:
        raise InvalidArgument(
            f"session {taken or sid!r} already exists (ids are compared ignoring case); "
            "import with --new-id for a copy",
            session_id=sid,
        )
    tables = kind_tables(sid)
    for kind in ("agent", "run", "artifact"):
        key = tables[kind].c[f"{kind}_id"]
        wanted = [r[f"{kind}_id"] for r in bundle.rows[kind]]
        clash = connection.execute(select(key).where(key.in_(wanted)).limit(1)).scalar()
        if clash is not None:
            raise InvalidArgument(
                f"{kind} {clash!r} already exists in this database; import with --new-id",
                **{f"{kind}_id": clash},
            )
    session_tables(sid).create(connection)
    for kind in KINDS:
        rows = bundle.rows[kind]
        if kind == "agent":
            rows = _parents_first(rows)
        if rows:
            connection.execute(tables[kind].insert(), rows)


def _parents_first(agents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_id = {a["agent_id"]: a for a in agents}
    placed: dict[str, dict[str, Any]] = {}
    for agent in agents:
        chain = [agent]
        while (parent := chain[-1]["parent_agent_id"]) is not None and parent not in placed:
            if any(a["agent_id"] == parent for a in chain):
                raise InvalidArgument("bad export file: agents' parents form a cycle")
            chain.append(by_id[parent])
        for item in reversed(chain):
            placed.setdefault(item["agent_id"], item)
    return list(placed.values())


@dataclass(frozen=True, slots=True)
class Imported:
    """What an import wrote: the new session's id, the exported one's, and the rows by kind."""

    session_id: str
    source_session_id: str
    counts: dict[str, int]


async def import_session(
    store: SessionStore,
    lines: Iterable[bytes | str],
    *,
    new_id: bool = False,
    progress: Progress | None = None,
) -> Imported:
    """Recreate an exported session (same ids, or fresh ones with ``new_id``).

    Raises:
        InvalidArgument: the file is refused (malformed, unknown version, or the session, one of
            its agents, runs or artifacts exists already); nothing was written.
    """
    bundle = read_export(lines, progress)
    source = bundle.session_id
    if new_id:
        bundle = _renamed(bundle)
    files = ArtifactFiles(store.home / "artifacts")
    written: list[str] = []

    def write_files() -> None:
        try:
            for row in bundle.rows["artifact"]:
                data = bundle.data.get(row["artifact_id"])
                target = files.resolve(row["path"])
                source = bundle.sources.get(row["path"])
                if data is None and source is not None and files.resolve(source).is_file():
                    data = files.read(source)
                if data is None:
                    continue
                if target.exists():
                    if target.read_bytes() != data:
                        raise InvalidArgument(
                            f"artifact file {row['path']!r} exists with other bytes",
                            artifact_id=row["artifact_id"],
                        )
                    continue
                files.write(row["path"], data)
                written.append(row["path"])
        except BaseException:
            remove_files()
            raise

    def remove_files() -> None:
        for path in written:
            files.remove(path)

    # Files first, rows second (as the store does): a crash in between leaves orphan files for
    # gc, never a row without its file; a job that does not commit removes them (on_abort).
    await asyncio.to_thread(write_files)
    await store._write(partial(_insert_bundle, bundle=bundle), on_abort=remove_files)
    counts = {f"{k}s": len(bundle.rows[k]) for k in KINDS[1:]}
    return Imported(bundle.session_id, source, counts)
