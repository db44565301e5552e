"""Redaction: a node's content replaced by one ``redacted`` block, and what it named removed.

:func:`check_reason` checks the caller's reason before anything is queued; :func:`redact_node`
is the writer job. In one transaction it:

- replaces the node's content with ``[RedactedBlock(reason)]`` and clears its ``token_count``
  (the count described the content that is gone); the node keeps its id, seqs, parent, role,
  type, agent, run, metadata and time, so the tree, runs and forks stay as they were;
- removes the node's search row (the index keeps no text of it);
- deletes the rows of the artifacts only its blocks referred to (an artifact another node of
  the session still refers to stays) and hands their paths back: the files go afterwards, in a
  job of their own (:func:`~soong_store.write.file_jobs.remove_unreferenced`), and only those
  no row names (a fork's copy names its own link to the file);
- writes a ``node_redacted`` event naming the node, its payload the reason only;
- tells the backend that a node changed in place (:meth:`~soong_store.backends.base.Backend.
  nodes_changed`), so that no read cache, in any process, serves the old content.

An archived session is redacted too: archiving stops a session from growing, while erasure,
like deletion, is about what it must stop keeping.
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import Connection, delete, select, update

from soong_store.backends.base import backend_class_of
from soong_store.errors import InvalidArgument, NotFound
from soong_store.model.content import (
    REASON_LENGTH,
    RedactedBlock,
    artifact_refs,
    content_from_json,
    content_to_json,
)
from soong_store.model.records import NodeRecord, node_record
from soong_store.schema.session_tables import session_tables
from soong_store.schema.tables import artifacts_table
from soong_store.search.index import unindex_node
from soong_store.write.session_writer import SessionWriter
from soong_store.write.unit_of_work import EventOp

NODE_REDACTED = "node_redacted"


class Redacted(NamedTuple):
    """What a redaction did: the node as it now is, and the artifact files it may remove."""

    node: NodeRecord
    paths: list[str]


def check_reason(reason: object) -> str:
    """A redaction's reason: 1 to :data:`REASON_LENGTH` characters, not only blanks.

    Raises:
        InvalidArgument: anything else (the message names the value).
    """
    if not isinstance(reason, str) or not reason.strip() or len(reason) > REASON_LENGTH:
        raise InvalidArgument(
            f"invalid reason {reason!r:.80}: expected 1-{REASON_LENGTH} characters, "
            "not only blanks",
            reason=reason,
        )
    try:
        reason.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"invalid reason {reason!r:.80}: {exc.reason}") from exc
    return reason


def redact_node(connection: Connection, session_id: str, node_id: str, reason: str) -> Redacted:
    """Replace a node's content with a ``redacted`` block (see the module); ``NotFound`` if none."""
    writer = SessionWriter.open(connection, session_id, writable=False)
    nodes = session_tables(session_id).nodes  # open() placed the pair in the main file
    row = connection.execute(select(nodes).where(nodes.c.node_id == node_id)).mappings().first()
    if row is None:
        raise NotFound(f"no node {node_id!r} in session {session_id!r}", node_id=node_id)
    refs = set(artifact_refs(content_from_json(row["content_json"])))
    content_json = content_to_json([RedactedBlock(reason=reason)])
    connection.execute(
        update(nodes)
        .where(nodes.c.node_id == node_id)
        .values(content_json=content_json, token_count=None)
    )
    unindex_node(connection, session_id, node_id)
    paths = _drop_artifacts(connection, session_id, node_id, refs)
    writer.add_event(EventOp.own(NODE_REDACTED, node_id=node_id, payload={"reason": reason}))
    writer.finish()
    backend_class_of(connection).nodes_changed(connection)
    stored = connection.execute(select(nodes).where(nodes.c.node_id == node_id)).mappings().one()
    return Redacted(node_record(session_id, stored), paths)


def _drop_artifacts(
    connection: Connection, session_id: str, node_id: str, refs: set[str]
) -> list[str]:
    """Delete the rows of the artifacts in ``refs`` that no other node of the session names."""
    if not refs:
        return []
    nodes = session_tables(session_id).nodes
    kept: set[str] = set()
    for ref in sorted(refs):
        others = connection.execute(
            select(nodes.c.content_json).where(
                nodes.c.node_id != node_id, nodes.c.content_json.contains(ref, autoescape=True)
            )
        ).scalars()
        if any(ref in artifact_refs(content_from_json(text)) for text in others):
            kept.add(ref)
    gone = sorted(refs - kept)
    if not gone:
        return []
    table = artifacts_table
    mine = (table.c.session_id == session_id) & table.c.artifact_id.in_(gone)
    paths = list(connection.execute(select(table.c.path).where(mine)).scalars())
    connection.execute(delete(table).where(mine))
    return sorted(set(paths))
