"""A conversation the store holds already, continued from a new reading of its source.

:func:`held` reads what the store has of an imported session: each node's source identity
(:func:`soong_store.importers._rows.identity`, from its ``imported_from``), each imported
agent's, and how far each transcript was read. :func:`diff` lays a fresh reading of the
source over it: the records the store holds keep their nodes, and must read the same as they
did (else the source's history changed: a :class:`Conflict`, nothing written); the others are
new. :func:`append` writes the new ones in one writer transaction through the store's path for
recorded history (the one an import and a fork write through), with the import's keys claimed
in it, so a conversation is continued whole or not at all. Two imports that read the session
at once and both append find out under the session's lock: the second is told to read again
(:class:`Moved`).

Runs grow with their turns: a run the store holds takes the new nodes of its turn, its usage,
end and times as the new reading has them; held nodes of a turn that now has a run (its first
usage came after the cut) are linked to it. So a transcript imported in parts holds the runs
of the one-shot import. Likewise the session and its held agents start at the earliest time a
reading gives them (a conversation's own file that comes after a sub-agent's starts earlier).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, func, select

from soong_store.backends.base import lock_files
from soong_store.catalog.lookup import tables_of
from soong_store.errors import InvalidArgument
from soong_store.files.folder import ArtifactFiles
from soong_store.importers._read import format_time
from soong_store.importers._rows import Known, Rows, agent_identity, identity
from soong_store.model import codec
from soong_store.model.content import RedactedBlock, encode_content
from soong_store.model.global_records import RunRecord
from soong_store.model.records import NodeRecord
from soong_store.schema.tables import agents_table, runs_table, sessions_table
from soong_store.store import SessionStore, artifact_files, run_write
from soong_store.transfer.format import scrub_row
from soong_store.write import session_keys
from soong_store.write.file_jobs import named_paths, remove_unreferenced
from soong_store.write.session_writer import SessionWriter
from soong_store.write.usage_ledger import enter_usage, refresh_usage

if TYPE_CHECKING:
    from soong_store.scrub.values import Scrub


class Conflict(InvalidArgument):
    """The source's earlier records differ from those the store holds: nothing was written."""


class Moved(Exception):
    """Another writer changed the session since it was read: read it again."""


@dataclass(slots=True)
class Held:
    """What the store holds of an imported session, by source identity."""

    known: Known
    agent_sources: dict[str, Any] = field(default_factory=dict)
    """The ``imported_from`` of each imported agent, by id."""
    records: dict[str, NodeRecord] = field(default_factory=dict)
    """The imported nodes by id."""
    by_transcript: dict[str, set[str]] = field(default_factory=dict)
    """The ids of each transcript's nodes."""
    last_node_seq: int = 0
    last_seq: int = 0
    active: str | None = None
    """The session's active node."""
    runs: dict[str, RunRecord] = field(default_factory=dict)
    """The imported runs by id."""
    created: dict[str, str] = field(default_factory=dict)
    """The ``created_at`` of the session (by its id) and of each agent, by id."""


def _source(metadata: Any) -> dict[str, Any] | None:
    source = metadata.get("imported_from") if isinstance(metadata, dict) else None
    return source if isinstance(source, dict) else None


async def held(store: SessionStore, session_id: str) -> Held:
    """Read what the store holds of an imported session."""
    session = await store.get_session(session_id)
    known = Known(session_id, session.root_agent_id)
    found = Held(known, active=session.active_node_id)
    found.created[session_id] = format_time(session.created_at)
    sub_files: dict[str, str] = {}
    for agent in await store.list_agents(session_id):
        found.created[agent.agent_id] = format_time(agent.created_at)
        source = _source(agent.metadata)
        if source is not None:
            known.agents[agent_identity(source)] = agent.agent_id
            found.agent_sources[agent.agent_id] = source
            if isinstance(source.get("file"), str):
                sub_files[agent.agent_id] = source["file"].removesuffix(".jsonl")
            elif isinstance(source.get("file_agent"), str):  # a thread in a sub-agent's file
                sub_files[agent.agent_id] = source["file_agent"]
    seen: dict[str, int] = {}
    for node in await store.list_nodes(session_id):
        found.last_node_seq = max(found.last_node_seq, node.node_seq)
        source = _source(node.metadata)
        if source is None:
            continue
        ident = identity(source)
        seen[ident] = seen.get(ident, 0) + 1
        known.nodes[f"{ident}#{seen[ident]}"] = node.node_id
        found.records[node.node_id] = node
        transcript = str(source.get("file_agent") or "")
        found.by_transcript.setdefault(transcript, set()).add(node.node_id)
        line = source.get("line")
        if isinstance(line, int):
            known.lines[transcript] = max(known.lines.get(transcript, 0), line)
        else:
            known.lines.setdefault(transcript, 0)
    for run in await store.list_runs(session_id):
        source = _source(run.metadata)
        if source is not None and isinstance(source.get("turn"), str):
            known.runs[source["turn"]] = run.run_id
            found.runs[run.run_id] = run
    for event in await store.timeline(session_id):
        found.last_seq = max(found.last_seq, event.seq)
        payload = event.payload
        if event.event_type != "imported_record" or not isinstance(payload, dict):
            continue
        transcript = sub_files.get(event.agent_id or "", "")
        line = payload.get("line")
        if isinstance(line, int):
            known.lines[transcript] = max(known.lines.get(transcript, 0), line)
    return found


def lacks_own_file(found: Held) -> bool:
    """Whether the held session was made from sub-agents' transcripts only (none of its own)."""
    return "" not in found.by_transcript


def scrubbed(rows: Rows, scrub: Scrub) -> Rows:
    """``rows`` with the store's scrubber applied, as an import of them all applies it.

    So the held records, stored scrubbed, compare equal to a new reading of their source.
    """
    return replace(
        rows,
        session=scrub_row("session", rows.session, scrub),
        agents=[scrub_row("agent", row, scrub) for row in rows.agents],
        runs=[scrub_row("run", row, scrub) for row in rows.runs],
        nodes=(scrub_row("node", row, scrub) for row in rows.nodes),
        events=(scrub_row("event", row, scrub) for row in rows.events),
        artifacts=(
            {**item, "row": scrub_row("artifact", item["row"], scrub)} for item in rows.artifacts
        ),
    )


@dataclass(slots=True)
class Increment:
    """The rows a new reading adds to a held session."""

    agents: list[dict[str, Any]]
    renewed: dict[str, str]
    """The metadata (JSON) of held agents the source now says more about, by id."""
    nodes: list[dict[str, Any]]
    events: list[dict[str, Any]]
    artifacts: list[dict[str, Any]]
    active: str | None
    move_active: bool
    runs: list[dict[str, Any]] = field(default_factory=list)
    """The runs the store does not hold."""
    grown: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The changed columns of held runs, by id."""
    linked: dict[str, str] = field(default_factory=dict)
    """The run of held nodes that had none, by node id."""
    earlier: dict[str, str] = field(default_factory=dict)
    """The new ``created_at`` of the session and the held agents the source now starts
    earlier (its own file came after a sub-agent's), by id."""
    metadata: str | None = None
    """The session's new metadata (JSON): its own file came after a sub-agent's, and is named."""

    @property
    def empty(self) -> bool:
        """Whether there is nothing to write."""
        return not (
            self.agents
            or self.renewed
            or self.nodes
            or self.events
            or self.artifacts
            or self.runs
            or self.grown
            or self.linked
            or self.earlier
            or self.metadata
        )


def diff(rows: Rows, found: Held, transcripts: Iterable[str], has_main: bool) -> Increment:
    """The rows of ``rows`` the store does not hold.

    ``transcripts`` are those this reading read whole; ``has_main`` whether the conversation's
    own file was among them (then the active node follows the source).

    Raises:
        Conflict: a record the store holds reads differently now, or is gone from its file.
    """
    made: list[dict[str, Any]] = []
    matched: set[str] = set()
    for row in rows.nodes:
        node_id = row["node_id"]
        if node_id in rows.new_nodes:
            made.append(row)
            continue
        matched.add(node_id)
        _same_record(found.records[node_id], row)
    for transcript in transcripts:
        gone = found.by_transcript.get(transcript, set()) - matched
        if gone:
            where = transcript or "the conversation's own file"
            raise Conflict(f"{len(gone)} record(s) of {where} are no longer in the source")
    held_agents = set(found.known.agents.values()) | {found.known.root_agent_id}
    agents = [row for row in rows.agents if row["agent_id"] not in held_agents]
    renewed = {  # a sidechain's agent id, say, is named by a line after its first
        row["agent_id"]: row["metadata_json"]
        for row in rows.agents
        if row["agent_id"] in found.agent_sources
        and codec.loads(row["metadata_json"])["imported_from"]
        != found.agent_sources[row["agent_id"]]
    }
    events = list(rows.events)
    artifacts = list(rows.artifacts)
    active = rows.session["active_node_id"]
    move = has_main and active is not None
    runs, grown, linked = _runs(rows, found, made)
    starts = [
        (rows.session["session_id"], rows.session),
        *((a["agent_id"], a) for a in rows.agents),
    ]
    earlier = {
        row_id: row["created_at"]
        for row_id, row in starts
        if row_id in found.created and row["created_at"] < found.created[row_id]
    }
    return Increment(
        agents, renewed, made, events, artifacts, active, move, runs, grown, linked, earlier
    )


_GROWS = ("start_node_id", "end_node_id", "usage_json", "created_at", "updated_at")


def _runs(
    rows: Rows, found: Held, made: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]], dict[str, str]]:
    """The new runs, the held runs' changes and the held nodes to link, after ``made`` is written.

    A run starts and ends at its first and last node by ``node_seq``: the held nodes keep
    theirs, the new ones take the next numbers in the order they are written.
    """
    seq = {node_id: record.node_seq for node_id, record in found.records.items()}
    seq.update((row["node_id"], found.last_node_seq + i) for i, row in enumerate(made, 1))
    members: dict[str, list[str]] = {}
    for node_id, run_id in rows.run_of.items():
        members.setdefault(run_id, []).append(node_id)
    new: list[dict[str, Any]] = []
    grown: dict[str, dict[str, Any]] = {}
    for row in rows.runs:
        mine = sorted(members[row["run_id"]], key=seq.__getitem__)
        want = dict(row, start_node_id=mine[0], end_node_id=mine[-1])
        held = found.runs.get(row["run_id"])
        if held is None:
            new.append(want)
            continue
        has = {
            "start_node_id": held.start_node_id,
            "end_node_id": held.end_node_id,
            "usage_json": codec.dumps_text(held.usage),
            "created_at": format_time(held.created_at),
            "updated_at": format_time(held.updated_at),
        }
        changed = {k: want[k] for k in _GROWS if has[k] != want[k]}
        if changed:
            grown[row["run_id"]] = changed
    linked = {
        node_id: run_id
        for node_id, run_id in rows.run_of.items()
        if node_id in found.records and found.records[node_id].run_id != run_id
    }
    return new, grown, linked


def _same_record(stored: NodeRecord, row: dict[str, Any]) -> None:
    """Refuse a held node that the source now reads differently (its parent, role, content)."""
    source = _source(stored.metadata) or {}
    what = f"record {source.get('id') or source.get('line')!r}"
    if stored.parent_id != row["parent_id"] or stored.role.value != row["role"]:
        raise Conflict(f"{what} has another place or role in the source than in the store")
    if "artifact_ref" in row["content_json"]:
        return  # its artifacts were stored under ids of the store's own
    if any(isinstance(block, RedactedBlock) for block in stored.content):
        return  # redacted in the store since: the source still holds what was erased
    stored_json = encode_content(list(stored.content))[0]
    if codec.loads(stored_json) != codec.loads(row["content_json"]):
        raise Conflict(f"{what} has changed in the source since it was imported")


async def append(
    store: SessionStore, found: Held, increment: Increment, keys: list[tuple[str, str]]
) -> None:
    """Write ``increment`` to its session in one transaction, claiming ``keys`` in it.

    Raises:
        Moved: the session changed since ``found`` was read (nothing written).
        session_keys.KeyTaken: a key was claimed meanwhile (nothing written).
    """
    files = artifact_files(store)
    staged: dict[str, str] = {}
    published: list[str] = []
    try:
        for item in increment.artifacts:
            path = item["row"]["path"]
            staged[path] = files.stage(path, base64.b64decode(item["data_b64"]))

        def job(connection: Connection) -> None:
            _append_job(connection, found, increment, keys, files, staged, published)

        await run_write(store, job, on_abort=lambda: _drop(files, staged))
    except BaseException:
        if published:
            cleanup = _Cleanup(files, published)
            await run_write(store, cleanup)
        raise


@dataclass(slots=True)
class _Cleanup:
    files: ArtifactFiles
    paths: list[str]

    def __call__(self, connection: Connection) -> None:
        remove_unreferenced(connection, files=self.files, paths=self.paths)


def _drop(files: ArtifactFiles, staged: dict[str, str]) -> None:
    files.discard([f"{rel.partition('/')[0]}/{name}" for rel, name in staged.items()])


def _append_job(
    connection: Connection,
    found: Held,
    increment: Increment,
    keys: list[tuple[str, str]],
    files: ArtifactFiles,
    staged: dict[str, str],
    published: list[str],
) -> None:
    sid = found.known.session_id
    writer = SessionWriter.open(connection, sid)  # takes the session's lock
    tables = tables_of(connection, sid)
    if tables is not None:
        last = connection.execute(select(func.max(tables.nodes.c.node_seq))).scalar() or 0
        if last != found.last_node_seq:
            raise Moved(sid)
    for key in keys:
        session_keys.claim(connection, *key, sid)
    if staged:
        lock_files(connection)
        named = named_paths(connection, staged)
        for rel, name in staged.items():
            if rel in named:
                raise InvalidArgument(f"artifact file {rel!r} belongs to another session's row")
            files.publish(rel, name)
            published.append(rel)
    for agent in increment.agents:
        connection.execute(agents_table.insert(), agent)
    if increment.runs:
        connection.execute(runs_table.insert(), increment.runs)
        enter_usage(connection, increment.runs)
    for agent_id, metadata in increment.renewed.items():
        connection.execute(
            agents_table.update()
            .where(agents_table.c.agent_id == agent_id)
            .values(metadata_json=metadata, updated_at=writer.now)
        )
    for node in increment.nodes:
        writer.restore_node(node)
    for event in increment.events:
        writer.restore_event(event)
    for item in increment.artifacts:
        writer.restore_artifact(item["row"])
    for run_id, changed in increment.grown.items():
        connection.execute(
            runs_table.update().where(runs_table.c.run_id == run_id).values(**changed)
        )
    refresh_usage(connection, increment.grown)
    if increment.metadata is not None:
        renamed = sessions_table.update().where(sessions_table.c.session_id == sid)
        connection.execute(renamed.values(metadata_json=increment.metadata))
    for row_id, created in increment.earlier.items():
        if row_id == sid:
            started = sessions_table.update().where(sessions_table.c.session_id == sid)
        else:
            started = agents_table.update().where(agents_table.c.agent_id == row_id)
        connection.execute(started.values(created_at=created))
    if increment.linked and tables is not None:
        nodes = tables.nodes
        for node_id, run_id in increment.linked.items():
            connection.execute(
                nodes.update().where(nodes.c.node_id == node_id).values(run_id=run_id)
            )
    if increment.move_active and increment.active != writer.session["active_node_id"]:
        writer.set_active(increment.active)
    writer.finish()
