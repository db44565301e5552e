"""Export and import of one session as JSON Lines, and a Markdown rendering of its active path.

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
between the rows), then writes the artifact files and sends every row to the writer as one job:
the session is there completely or not at all. A file that is malformed, of an unknown version,
or whose session id (compared ignoring case, as SQLite compares table names) already exists is
refused with :class:`~soong_store.errors.InvalidArgument` and nothing is written.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import PurePosixPath
from typing import Any, TextIO

from pydantic import ValidationError
from sqlalchemy import Connection, Integer, Table, func, select

from soong_store import _json, _reads
from soong_store.artifacts import ArtifactFiles
from soong_store.content import content_from_json
from soong_store.enums import (
    AgentStatus,
    AgentType,
    EndReason,
    EventLevel,
    NodeType,
    Role,
    RunStatus,
    SessionStatus,
)
from soong_store.errors import InvalidArgument, SoongStoreError
from soong_store.ids import check_id, check_session_id, new_id, new_session_id, utc_now
from soong_store.schema.models import agents_table, artifacts_table, runs_table, sessions_table
from soong_store.schema.session_tables import session_tables
from soong_store.store import SessionStore

FORMAT = "soong-store-session"
FORMAT_VERSION = 1
KINDS = ("session", "agent", "run", "node", "event", "artifact")
Progress = Callable[[int, int], None]
"""Called with (items done, items in all) while a long export or import runs."""

_ENUMS: dict[tuple[str, str], type[Any]] = {
    ("session", "status"): SessionStatus,
    ("agent", "agent_type"): AgentType,
    ("agent", "status"): AgentStatus,
    ("run", "status"): RunStatus,
    ("run", "end_reason"): EndReason,
    ("node", "role"): Role,
    ("node", "node_type"): NodeType,
    ("event", "level"): EventLevel,
}
_REFERENCES: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "session": (("root_agent_id", "agent", False), ("active_node_id", "node", True)),
    "agent": (
        ("parent_agent_id", "agent", True),
        ("created_by_run_id", "run", True),
        ("fork_from_node_id", "node", True),
    ),
    "run": (
        ("agent_id", "agent", False),
        ("start_node_id", "node", True),
        ("end_node_id", "node", True),
    ),
    "node": (("parent_id", "node", True), ("agent_id", "agent", False), ("run_id", "run", True)),
    "event": (("node_id", "node", True), ("agent_id", "agent", True), ("run_id", "run", True)),
}
"""Columns that must name a row of the same file: (column, kind named, may be null)."""
_JSON_COLUMNS = ("metadata_json", "result_json", "usage_json", "error_json", "payload_json")


def _tables(session_id: str) -> dict[str, Table]:
    pair = session_tables(session_id)
    return {
        "session": sessions_table,
        "agent": agents_table,
        "run": runs_table,
        "node": pair.nodes,
        "event": pair.events,
        "artifact": artifacts_table,
    }


# -- export ---------------------------------------------------------------------------------


def session_rows(connection: Connection, session_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every stored row of one session by kind, read in one snapshot (``NotFound`` if none)."""
    session = _reads.session_row(connection, session_id)
    # Column names of the factory's tables are ``quoted_name``s, which orjson refuses.
    rows = {"session": [{str(k): v for k, v in session.items()}]}
    tables = _tables(session_id)
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
    for kind, table in _tables(session_id).items():
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


# -- import: reading and checking -----------------------------------------------------------


@dataclass
class Bundle:
    """A checked export: the rows by kind and the artifact bytes that came with it."""

    session_id: str
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    data: dict[str, bytes] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    """For a renamed copy: new artifact path -> the original's path (copied if it is here)."""


def _refuse(lineno: int, message: str) -> InvalidArgument:
    return InvalidArgument(f"bad export file, line {lineno}: {message}", line=lineno)


def read_export(lines: Iterable[bytes | str], progress: Progress | None = None) -> Bundle:
    """Parse and check an export completely, before anything is written.

    Raises:
        InvalidArgument: the file is malformed, truncated, inconsistent or of an unknown
            format version; the message names the line.
    """
    bundle: Bundle | None = None
    counts: dict[str, int] = {}
    seen_kind = 0
    lineno = 0
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            item = _json.loads(raw)
        except ValueError as exc:
            raise _refuse(lineno, f"not JSON ({exc})") from None
        if not isinstance(item, dict):
            raise _refuse(lineno, "expected a JSON object")
        if bundle is None:
            bundle, counts = _read_header(item, lineno)
            continue
        kind = item.get("kind")
        if kind not in KINDS or not set(item) <= {"kind", "row", "data_b64"}:
            raise _refuse(lineno, "expected an object with kind, row (and data_b64)")
        if KINDS.index(kind) < seen_kind or (kind == "session" and bundle.rows["session"]):
            raise _refuse(lineno, f"a {kind} row is out of order")
        seen_kind = KINDS.index(kind)
        if kind != "session" and not bundle.rows["session"]:
            raise _refuse(lineno, "the session row must come first")
        row = _check_row(bundle.session_id, kind, item.get("row"), lineno)
        bundle.rows[kind].append(row)
        if "data_b64" in item:
            bundle.data[row.get("artifact_id", "")] = _decode_data(kind, item, row, lineno)
        if progress is not None and lineno % 500 == 0:
            progress(lineno, sum(counts.values()) + 2)
    if bundle is None:
        raise InvalidArgument("bad export file: it is empty")
    for kind in KINDS:
        want = 1 if kind == "session" else counts[f"{kind}s"]
        if len(bundle.rows[kind]) != want:
            raise _refuse(
                lineno, f"expected {want} {kind} rows, found {len(bundle.rows[kind])} (truncated?)"
            )
    _check_references(bundle)
    return bundle


def _read_header(item: dict[str, Any], lineno: int) -> tuple[Bundle, dict[str, int]]:
    if item.get("format") != FORMAT:
        raise _refuse(lineno, f"not a {FORMAT} export (no header)")
    if item.get("version") != FORMAT_VERSION:
        raise _refuse(
            lineno, f"unknown format version {item.get('version')!r} (this reads {FORMAT_VERSION})"
        )
    counts = item.get("counts")
    names = {f"{kind}s" for kind in KINDS[1:]}
    if (
        not isinstance(counts, dict)
        or set(counts) != names
        or not all(type(v) is int and v >= 0 for v in counts.values())
    ):
        raise _refuse(lineno, "header counts are missing or invalid")
    sid = check_session_id(item.get("session_id"))
    return Bundle(sid, {kind: [] for kind in KINDS}), counts


def _check_row(sid: str, kind: str, row: Any, lineno: int) -> dict[str, Any]:
    table = _tables(sid)[kind]
    if not isinstance(row, dict) or set(row) != set(table.c.keys()):
        raise _refuse(lineno, f"a {kind} row must hold exactly {', '.join(table.c.keys())}")
    for column in table.c:
        value = row[column.name]
        want: type = int if isinstance(column.type, Integer) else str
        if value is None and (column.nullable and not column.primary_key):
            continue
        if type(value) is not want:
            raise _refuse(lineno, f"{kind}.{column.name} must be {want.__name__}, got {value!r}")
    try:
        _check_values(sid, kind, row)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise _refuse(lineno, f"{kind} content at {where}: {first['msg']}") from None
    except (SoongStoreError, ValueError) as exc:
        raise _refuse(lineno, f"{kind} row: {exc}") from None
    return row


def _check_values(sid: str, kind: str, row: dict[str, Any]) -> None:
    for (enum_kind, column), enum in _ENUMS.items():
        if enum_kind == kind and row[column] is not None:
            enum(row[column])
    for column, value in row.items():
        if value is None:
            continue
        if column == "session_id" and value != sid:
            raise ValueError(f"session_id {value!r} is not the exported session {sid!r}")
        if column == "parent_session_id":
            check_session_id(value)
        elif column.endswith("_id") and column not in ("session_id", "tool_call_id"):
            check_id(value, column)
        if column in _JSON_COLUMNS:
            _json.loads(value)
        if column in ("created_at", "updated_at"):
            datetime.fromisoformat(value)
        low = 1 if column.endswith("seq") else 0
        if isinstance(value, int) and value < low:
            raise ValueError(f"{column} {value} is out of range")
    if kind == "node":
        content_from_json(row["content_json"])
    if kind == "artifact":
        _check_artifact_path(row["path"])


def _check_artifact_path(path: str) -> None:
    parts = PurePosixPath(path).parts
    if (
        len(parts) != 2
        or "\\" in path
        or "\x00" in path
        or any(p in (".", "..") or p.startswith(".") for p in parts)
    ):
        raise ValueError(f"artifact path {path!r} is not <session_id>/<file>")
    check_session_id(parts[0])


def _decode_data(kind: str, item: dict[str, Any], row: dict[str, Any], lineno: int) -> bytes:
    if kind != "artifact" or not isinstance(item["data_b64"], str):
        raise _refuse(lineno, "only an artifact line holds data_b64, as a string")
    try:
        data = base64.b64decode(item["data_b64"], validate=True)
    except (binascii.Error, ValueError):
        raise _refuse(lineno, "data_b64 is not base64") from None
    if row["size_bytes"] is not None and row["size_bytes"] != len(data):
        raise _refuse(lineno, f"artifact holds {len(data)} bytes, its row says {row['size_bytes']}")
    return data


def _check_references(bundle: Bundle) -> None:
    rows = bundle.rows
    ids = {
        kind: [r[f"{kind}_id"] for r in rows[kind]]
        for kind in ("agent", "run", "node", "event", "artifact")
    }
    for kind, values in ids.items():
        if len(set(values)) != len(values):
            raise InvalidArgument(f"bad export file: a {kind} id appears twice")
    for kind, column in (("node", "node_seq"), ("event", "seq")):
        values = [r[column] for r in rows[kind]]
        if len(set(values)) != len(values):
            raise InvalidArgument(f"bad export file: a {kind} {column} appears twice")
    run_seqs = [(r["run_id"], r["run_seq"]) for r in rows["event"] if r["run_id"] is not None]
    if len(set(run_seqs)) != len(run_seqs) or any(
        (r["run_id"] is None) != (r["run_seq"] is None) for r in rows["event"]
    ):
        raise InvalidArgument("bad export file: events' run_seq are not unique per run")
    known = {kind: set(values) for kind, values in ids.items()}
    for kind, references in _REFERENCES.items():
        for row in rows[kind]:
            for column, target, optional in references:
                value = row[column]
                if (value is None and not optional) or (
                    value is not None and value not in known[target]
                ):
                    raise InvalidArgument(
                        f"bad export file: {kind} {column} {value!r} names no {target} of the file"
                    )


# -- import: writing ------------------------------------------------------------------------


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
                if column in _JSON_COLUMNS or column == "content_json":
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
    tables = _tables(sid)
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


# -- markdown -------------------------------------------------------------------------------


async def export_markdown(store: SessionStore, session_id: str, out: TextIO) -> None:
    """Render the active path for humans: one section per node, the context cut marked."""
    session = await store.get_session(session_id)
    path = await store.active_path(session_id)
    context = await store.context(session_id)
    first_kept = context.nodes[0].node_id if context.nodes else None
    out.write(f"# Session {session.session_id}\n\n")
    out.write(f"- cwd: `{session.cwd}`\n- status: {session.status}\n")
    out.write(f"- created: {session.created_at.isoformat()}\n")
    out.write(f"- active path: {len(path)} nodes; context: {len(context.nodes)} nodes, ")
    out.write(f"{context.token_count} tokens\n\n")
    for node in path:
        if node.node_id == first_kept and node is not path[0]:
            out.write("---\n\n*The context the model gets starts here (compaction).*\n\n")
        out.write(f"## #{node.node_seq} {node.role} · {node.node_type}\n\n")
        for block in node.content:
            out.write(_block_markdown(block.model_dump(mode="json")) + "\n\n")


def _block_markdown(block: dict[str, Any]) -> str:
    kind = block["type"]
    if kind == "text":
        return str(block["text"])
    if kind == "tool_call":
        args = _json.dumps_text(block["arguments"])
        return (
            f"**tool call** `{block['name']}` (`{block['tool_call_id']}`)\n\n```json\n{args}\n```"
        )
    if kind == "tool_result":
        title = "tool error" if block["is_error"] else "tool result"
        inner = "\n\n".join(_block_markdown(item) for item in block["content"])
        return f"**{title}** (`{block['tool_call_id']}`)\n\n{inner}"
    if kind == "json":
        if "artifact_ref" in block:
            return f"*JSON in artifact `{block['artifact_ref']}`*: {block['summary']}"
        return f"```json\n{_json.dumps_text(block['data'])}\n```"
    summary = f": {block['summary']}" if block.get("summary") else ""
    return f"*attachment `{block['artifact_id']}`*{summary}"
