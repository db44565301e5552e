"""Export and import of one session as JSON Lines.

An export is one JSON object per line. Line 1 is the header::

    {"format": "soong-store-session", "version": 1, "session_id": ..., "exported_at": ...,
     "with_artifacts": bool, "counts": {"agents": n, "runs": n, "nodes": n, "events": n,
     "artifacts": n}}

then ``{"kind": K, "row": {...}}`` lines in this order: one ``session``, its ``agent``s, ``run``s,
``node``s (by ``node_seq``), ``event``s (by ``seq``) and ``artifact`` rows; an artifact line holds
``"data_b64"`` (its bytes, base64) unless the export was made without artifacts. Rows are the
stored columns (``*_json`` columns as their JSON text), so a round trip is lossless; an artifact
row's path is the session's own (``<session_id>/<artifact_id>[.ext]``) even where a fork made by
an earlier version names its parent's file. The counts make a truncated file detectable.

An export is written on a reader thread in one snapshot, its rows fetched a page at a time and
each line written as it is made. An import reads and checks the whole file first, a line at a
time (:mod:`soong_store.transfer.format`: the format, then the one rule set ``check`` applies),
keeping the nodes and events in a temporary file (but for the first MiB of them) and only
their shape in memory, stages the artifact files under names of its own, and then writes
everything in one writer job: the session's id is checked free under its lock, the files are
put in place, and the rows go through the session writer's one insert path, a page at a time.
So the session is there completely or not at all, and two imports of one file never share a
file. A refused file writes nothing; an import that fails after staging removes what it staged.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TextIO

from sqlalchemy import Connection, Select, func, select

from soong_store.backends.base import lock_files, lock_session
from soong_store.catalog.lookup import create_pair, tables_of
from soong_store.errors import InvalidArgument, StorageError
from soong_store.files.folder import ArtifactFiles
from soong_store.model import codec
from soong_store.model.checks import check_session_id
from soong_store.model.content import content_to_json, decode_stored_content, map_artifact_refs
from soong_store.model.first_event import created_event_row
from soong_store.model.ids import new_id, new_session_id, utc_now
from soong_store.read import record_reads
from soong_store.read.session_reads import session_counts
from soong_store.rules.row import KINDS
from soong_store.schema.session_tables import pair_exists
from soong_store.schema.tables import agents_table, artifacts_table, runs_table, sessions_table
from soong_store.store import SessionStore, artifact_files, run_read, run_write, scrub_of
from soong_store.transfer.format import (
    FORMAT,
    FORMAT_VERSION,
    Bundle,
    Line,
    Progress,
    Spool,
    read_export,
    spool_export,
)
from soong_store.write import session_keys
from soong_store.write.file_jobs import named_paths, remove_unreferenced
from soong_store.write.lifecycle import claim_key
from soong_store.write.session_writer import SessionWriter
from soong_store.write.usage_ledger import enter_usage

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

_GLOBAL = {"agent": agents_table, "run": runs_table, "artifact": artifacts_table}
_ORDER = {"agent": ("created_at", "agent_id"), "run": ("created_at", "run_id")}
_ORDER.update(artifact=("created_at", "artifact_id"))


# -- export ---------------------------------------------------------------------------------


PAGE = 500
"""Rows an export fetches at a time (it never holds more than a page of one table), and the
most nodes an import's search index rows wait for."""
_INDEX_BYTES = 2**20
"""The most content an import's pending search index rows are made of."""
_HOLD_BYTES = 2**20
"""The most text of node and event rows an import holds in memory rather than on disk (a
short session's, which then never touches the disk: :class:`~.format.Spool`)."""
_PAGE_BYTES = 2**18
"""The most content of the nodes written in one driver call (their rows are held until then)."""


def session_rows(connection: Connection, session_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every stored row of one session by kind, read in one snapshot (``NotFound`` if none)."""
    rows: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    for kind, row in iter_session_rows(connection, session_id):
        rows[kind].append(row)
    return rows


def iter_session_rows(
    connection: Connection, session_id: str, page: int = PAGE
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every stored row of one session as (kind, row), in export order, fetched ``page`` at a time.

    Read on ``connection``'s one snapshot (``NotFound`` if there is no such session).
    """
    session = record_reads.session_row(connection, session_id)
    # Column names of the factory's tables are ``quoted_name``s, which orjson refuses.
    first = {str(k): v for k, v in session.items()}
    yield "session", first
    pair = tables_of(connection, session_id)
    for kind in ("agent", "run"):
        yield from _paged(connection, kind, _global_rows(kind, session_id), page)
    if pair is None:  # never written: what an eager empty pair held
        yield "event", created_event_row(first)
    else:
        for kind, table, key in (("node", pair.nodes, "node_seq"), ("event", pair.events, "seq")):
            yield from _paged(connection, kind, select(table).order_by(table.c[key]), page)
    yield from _paged(connection, "artifact", _global_rows("artifact", session_id), page)


def _global_rows(kind: str, session_id: str) -> Select[Any]:
    table = _GLOBAL[kind]
    stmt = select(table).where(table.c.session_id == session_id)
    return stmt.order_by(*(table.c[name] for name in _ORDER[kind]))


def _paged(
    connection: Connection, kind: str, stmt: Select[Any], page: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The rows of ``stmt``, streamed (a server-side cursor where the backend has one)."""
    result = connection.execute(stmt.execution_options(yield_per=page))
    for row in result.mappings():
        yield kind, {str(k): v for k, v in row.items()}


def own_path(session_id: str, artifact_id: str, stored_path: str) -> str:
    """``<session_id>/<artifact_id>[.ext]``, keeping the extension of the stored file's name."""
    name = stored_path.partition("/")[2]
    dot = name.find(".")
    return f"{session_id}/{artifact_id}{name[dot:] if dot >= 0 else ''}"


async def export_session(
    store: SessionStore,
    session_id: str,
    out: TextIO,
    *,
    with_artifacts: bool = True,
    progress: Progress | None = None,
) -> dict[str, int]:
    """Write one session as JSON Lines to ``out``; return the counts of rows written.

    The artifact files' bytes are embedded unless ``with_artifacts`` is false.
    """
    sid = check_session_id(session_id)
    job = _ExportJob(sid, out, artifact_files(store), with_artifacts, progress)
    return await run_read(store, job)


@dataclass(slots=True)
class _ExportJob:
    """An export written line by line on a reader thread, in the read's one snapshot.

    Rows are streamed from the database and each line is written as it is made, so an export
    holds a page of rows (and one artifact's bytes) at a time, whatever the session's size.
    """

    sid: str
    out: TextIO
    files: ArtifactFiles
    with_artifacts: bool
    progress: Progress | None
    started: bool = False

    def __call__(self, connection: Connection) -> dict[str, int]:
        if self.started:  # a retried read would write its lines twice
            raise StorageError(f"the export of session {self.sid!r} was interrupted; run it again")
        counts = session_counts(connection, self.sid)
        header = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "session_id": self.sid,
            "exported_at": utc_now(),
            "with_artifacts": self.with_artifacts,
            "counts": counts,
        }
        total = sum(counts.values()) + 1
        self.started = True
        self.out.write(codec.dumps_text(header) + "\n")
        for done, (kind, row) in enumerate(iter_session_rows(connection, self.sid, PAGE), 1):
            self.out.write(codec.dumps_text(self._line(kind, row), what=f"{kind} row") + "\n")
            if self.progress is not None and done % 200 == 0:
                self.progress(done, total)
        if self.progress is not None:
            self.progress(total, total)
        return counts

    def _line(self, kind: str, row: dict[str, Any]) -> dict[str, Any]:
        line: dict[str, Any] = {"kind": kind, "row": row}
        if kind == "artifact":
            stored = row["path"]
            line["row"] = {**row, "path": own_path(self.sid, row["artifact_id"], stored)}
            if self.with_artifacts:
                line["data_b64"] = base64.b64encode(self.files.read(stored)).decode("ascii")
        return line


# -- a copy under fresh ids -----------------------------------------------------------------

_AGENT_COLUMNS = {"root_agent_id", "agent_id", "parent_agent_id"}
_RUN_COLUMNS = {"run_id", "created_by_run_id"}
_OWN_EVENTS = {
    "artifact_created": ("artifact_id", "artifact"),
    "agent_created": ("parent_agent_id", "agent"),
}
"""Payload fields of the store's own events that hold a renamed id: (field, kind)."""


def renamed(bundle: Bundle, spooled: bool = False) -> Bundle:
    """The bundle under a fresh session id, with fresh agent, run and artifact ids.

    Those ids are keys of global tables, so a copy beside its original needs new ones. Only
    fields that hold ids change: id columns, artifact paths, the artifact references of content
    blocks, and the id fields of the store's own event payloads; free text never does.
    ``spooled``: the bundle's nodes and events are compact (:func:`.format.compact`), their
    whole rows in a spool, renamed as they are written (:attr:`Bundle.renaming`).
    """
    sid = new_session_id()
    ids: dict[str, dict[str, str]] = {
        kind: {r[f"{kind}_id"]: new_id(prefix) for r in bundle.rows[kind]}
        for kind, prefix in (("agent", "agent"), ("run", "run"), ("artifact", "art"))
    }
    renaming = _Renaming(sid, ids)
    out = Bundle(sid, {kind: [] for kind in KINDS}, lines=dict(bundle.lines))
    for kind in KINDS:
        if spooled and kind in ("node", "event"):
            out.rows[kind] = bundle.rows[kind]
            continue
        out.rows[kind] = [renaming(kind, row) for row in bundle.rows[kind]]
    out.data = {ids["artifact"][aid]: data for aid, data in bundle.data.items()}
    out.renaming = renaming
    return out


@dataclass(frozen=True, slots=True)
class _Renaming:
    """A row's copy under the fresh session id and the fresh ids of :func:`renamed`."""

    sid: str
    ids: dict[str, dict[str, str]]

    def __call__(self, kind: str, row: dict[str, Any]) -> dict[str, Any]:
        sid, ids = self.sid, self.ids
        new = dict(row)
        for column, value in row.items():
            if value is None:
                continue
            if column == "session_id":
                new[column] = sid
            elif column in _AGENT_COLUMNS:
                new[column] = ids["agent"][value]
            elif column in _RUN_COLUMNS:
                new[column] = ids["run"][value]
        if kind == "artifact":
            new["artifact_id"] = ids["artifact"][row["artifact_id"]]
            new["path"] = own_path(sid, new["artifact_id"], row["path"])
        elif kind == "node":
            blocks = decode_stored_content(row["content_json"])
            new["content_json"] = content_to_json(map_artifact_refs(blocks, ids["artifact"]))
        elif kind == "event" and row["event_type"] in _OWN_EVENTS:
            new["payload_json"] = _renamed_payload(row, ids)
        return new


def _renamed_payload(row: dict[str, Any], ids: dict[str, dict[str, str]]) -> str | None:
    payload = codec.loads(row["payload_json"])
    key, kind = _OWN_EVENTS[row["event_type"]]
    if isinstance(payload, dict) and payload.get(key) in ids[kind]:
        payload = {**payload, key: ids[kind][payload[key]]}
        return codec.dumps_text(payload)
    return row["payload_json"]  # type: ignore[no-any-return]


# -- import ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Imported:
    """What an import wrote: the new session's id, the exported one's, and the rows by kind.

    ``missing_files`` counts the artifacts whose bytes the file did not hold (an export made
    without artifacts): their rows are there, their files are not.
    """

    session_id: str
    source_session_id: str
    counts: dict[str, int]
    missing_files: int = 0


@dataclass(slots=True)
class _Staged:
    """The files an import staged (stored path -> temporary name) and those it put in place."""

    names: dict[str, str] = field(default_factory=dict)
    published: list[str] = field(default_factory=list)


def _insert_bundle(
    connection: Connection,
    bundle: Bundle,
    spool: Spool,
    files: ArtifactFiles,
    staged: _Staged,
    name: tuple[str, str] | None = None,
    more_names: tuple[tuple[str, str], ...] = (),
) -> None:
    """The writer job of an import: refuse a taken id, put the files in place, insert the rows.

    Nodes and events come from ``spool`` a row at a time, and the search index takes the
    nodes a page at a time, so the job holds a page, not the session.

    ``name`` (a session key) names the session in the same transaction (``KeyTaken`` if
    another holds it), and so do ``more_names``.
    """
    sid = bundle.session_id
    lock_session(connection, sid)
    taken = connection.execute(
        select(sessions_table.c.session_id).where(
            func.lower(sessions_table.c.session_id) == sid.lower()
        )
    ).scalar()
    if taken is not None or pair_exists(connection, sid):
        raise InvalidArgument(
            f"session {taken or sid!r} already exists (ids are compared ignoring case); "
            "import with --new-id for a copy",
            session_id=sid,
        )
    for kind, table in _GLOBAL.items():
        key = table.c[f"{kind}_id"]
        wanted = [r[f"{kind}_id"] for r in bundle.rows[kind]]
        clash = connection.execute(select(key).where(key.in_(wanted)).limit(1)).scalar()
        if clash is not None:
            raise InvalidArgument(
                f"{kind} {clash!r} already exists in this database; import with --new-id",
                **{f"{kind}_id": clash},
            )
    session = bundle.rows["session"][0]
    if session["key"] is not None:  # refused before a file is put in place
        claim_key(connection, session["owner"], session["key"])
    _publish(connection, files, staged)
    connection.execute(sessions_table.insert(), bundle.rows["session"])
    for each in (name, *more_names) if name is not None else more_names:
        session_keys.claim(connection, *each, sid)
    for agent in _parents_first(bundle.rows["agent"]):
        connection.execute(agents_table.insert(), agent)
    if bundle.rows["run"]:
        connection.execute(runs_table.insert(), bundle.rows["run"])
        enter_usage(connection, bundle.rows["run"], new=True)
    create_pair(connection, sid)
    writer = SessionWriter.open(connection, sid)
    rename = bundle.renaming
    nodes: list[dict[str, Any]] = []  # nodes go a page at a time: one driver call each
    held = waiting = count = 0
    for node in spool.rows("node"):
        nodes.append(node if rename is None else rename("node", node))
        size = len(node["content_json"])
        del node
        held, waiting, count = held + size, waiting + size, count + 1
        index_due = count == PAGE or waiting >= _INDEX_BYTES  # the index's text waits a page
        if index_due or len(nodes) == PAGE or held >= _PAGE_BYTES:
            _restore_nodes(writer, nodes)
            nodes, held = [], 0
        if index_due:
            writer.index_written()
            waiting = count = 0
    _restore_nodes(writer, nodes)
    page: list[dict[str, Any]] = []  # events go a page at a time: one driver call each
    held = 0
    for event in spool.rows("event"):
        page.append(event if rename is None else rename("event", event))
        held += len(event["payload_json"] or "")
        if len(page) == PAGE or held >= _INDEX_BYTES:
            _restore_events(writer, page)
            page, held = [], 0
    _restore_events(writer, page)
    for artifact in bundle.rows["artifact"]:
        writer.restore_artifact(artifact)
    writer.index_written()


def _restore_nodes(writer: SessionWriter, page: list[dict[str, Any]]) -> None:
    if not page:
        return
    for stored, node in zip(writer.restore_nodes(page), page, strict=True):
        _same(stored, node, ("node_seq",))


def _restore_events(writer: SessionWriter, page: list[dict[str, Any]]) -> None:
    if not page:
        return
    for stored, event in zip(writer.restore_events(page), page, strict=True):
        _same(stored, event, ("seq", "run_seq"))


def _publish(connection: Connection, files: ArtifactFiles, staged: _Staged) -> None:
    """Put the staged files in place, under the file lock, unless a row names the path."""
    lock_files(connection)
    named = named_paths(connection, staged.names)
    for rel, name in staged.names.items():
        if rel in named:  # a file of another session (a fork made by an earlier version)
            raise InvalidArgument(f"artifact file {rel!r} belongs to another session's row")
        files.publish(rel, name)
        staged.published.append(rel)


def _same(stored: dict[str, Any], row: dict[str, Any], columns: tuple[str, ...]) -> None:
    if any(stored[c] != row[c] for c in columns):
        raise StorageError(f"import numbered a row differently from its file: {row}")


def _parents_first(agents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Agents ordered so that each comes after its parent (the rules refused cycles)."""
    by_id = {a["agent_id"]: a for a in agents}
    placed: dict[str, dict[str, Any]] = {}
    for agent in agents:
        chain = [agent]
        while (parent := chain[-1]["parent_agent_id"]) is not None and parent not in placed:
            chain.append(by_id[parent])
        for item in reversed(chain):
            placed.setdefault(item["agent_id"], item)
    return list(placed.values())


async def import_session(
    store: SessionStore,
    lines: Iterable[Line],
    *,
    new_id: bool = False,
    progress: Progress | None = None,
    key: tuple[str, str] | None = None,
    more_keys: tuple[tuple[str, str], ...] = (),
) -> Imported:
    """Recreate an exported session (same ids, or fresh ones with ``new_id``).

    A store made with ``scrub=`` scrubs every row's content, metadata and payloads first.

    ``key`` (namespace, key) names the new session in the transaction that writes it, and so
    does each of ``more_keys``.

    Raises:
        InvalidArgument: the file is refused (malformed, unknown version, anything the store
            would refuse or ``check`` would report, or the session, one of its agents, runs or
            artifacts exists already); nothing was written.
    """
    spool = Spool(_HOLD_BYTES)
    try:
        return await _import(store, lines, spool, new_id, progress, key, more_keys)
    finally:
        spool.close()


async def _import(
    store: SessionStore,
    lines: Iterable[Line],
    spool: Spool,
    new_id: bool,
    progress: Progress | None,
    key: tuple[str, str] | None,
    more_keys: tuple[tuple[str, str], ...] = (),
) -> Imported:
    """:func:`import_session` with its spool: the file's nodes and events are kept there."""
    bundle = await asyncio.to_thread(spool_export, lines, spool, progress, scrub_of(store))
    source = bundle.session_id
    if new_id:
        bundle = renamed(bundle, spooled=True)
    files = artifact_files(store)
    staged = _Staged()

    def stage() -> None:
        try:
            for row in bundle.rows["artifact"]:
                data = bundle.data.get(row["artifact_id"])
                if data is not None:
                    staged.names[row["path"]] = files.stage(row["path"], data)
        except BaseException:
            drop()
            raise

    def drop() -> None:
        files.discard([f"{rel.partition('/')[0]}/{name}" for rel, name in staged.names.items()])

    await asyncio.to_thread(stage)
    job = partial(
        _insert_bundle,
        bundle=bundle,
        spool=spool,
        files=files,
        staged=staged,
        name=key,
        more_names=more_keys,
    )
    try:
        await run_write(store, job, on_abort=drop)
    except BaseException:
        if staged.published:  # in place but not committed: gone again, under the write lock
            cleanup = partial(remove_unreferenced, files=files, paths=staged.published)
            await run_write(store, cleanup)
        raise
    counts = {f"{k}s": len(bundle.rows[k]) for k in KINDS[1:]}
    missing = sum(1 for r in bundle.rows["artifact"] if r["artifact_id"] not in bundle.data)
    return Imported(bundle.session_id, source, counts, missing)
