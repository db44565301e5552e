"""Compact and paged reads of a session's nodes, for views of a whole tree or a whole path.

A view of every node (the CLI's ``tree``, ``path``) reads the shape first: one small
:class:`NodeStub` per node, no content. It then reads the nodes it shows a page at a time
(:func:`nodes_by_seq`), so it never holds more than a page of full records, whatever the size of
the session. Nodes never change once written, so pages read in later snapshots agree with the
shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select

from soong_store.catalog.lookup import tables_of
from soong_store.errors import NotFound
from soong_store.model.enums import NodeType
from soong_store.model.row_records import NODE_COLUMNS
from soong_store.read.record_reads import session_row
from soong_store.read.session_reads import _climb, damaged_chain, path_target

if TYPE_CHECKING:
    from soong_store.model.records import NodeRecord

PAGE = 500
"""Rows fetched at a time, and full records read at a time."""

_STUB_COLUMNS = tuple(
    name for name in NODE_COLUMNS if name not in ("content_json", "metadata_json", "created_at")
)
"""A node's columns but its content, metadata and time, in :data:`NODE_COLUMNS`' order."""


@dataclass(frozen=True, slots=True)
class NodeStub:
    """What a view needs of a node to place it: its ids, number, role, type and tokens."""

    node_id: str
    node_seq: int
    parent_id: str | None
    agent_id: str
    run_id: str | None
    role: str
    node_type: str
    token_count: int | None


def _stubs(rows: Iterable[Sequence[Any]]) -> list[NodeStub]:
    """Stubs of rows of :data:`_STUB_COLUMNS`; repeated strings (parents, agents...) shared."""
    shared: dict[str, str] = {}
    out: list[NodeStub] = []
    for node_id, seq, parent_id, agent_id, run_id, role, node_type, tokens in rows:
        node_id = shared.setdefault(node_id, node_id)
        parent_id = None if parent_id is None else shared.setdefault(parent_id, parent_id)
        agent_id = shared.setdefault(agent_id, agent_id)
        run_id = None if run_id is None else shared.setdefault(run_id, run_id)
        role, node_type = shared.setdefault(role, role), shared.setdefault(node_type, node_type)
        out.append(NodeStub(node_id, seq, parent_id, agent_id, run_id, role, node_type, tokens))
    return out


def tree_stubs(connection: Connection, session_id: str) -> list[NodeStub]:
    """A stub of every node of a session by ``node_seq`` (``NotFound`` if there is none)."""
    session_row(connection, session_id)
    pair = tables_of(connection, session_id)
    if pair is None:
        return []
    nodes = pair.nodes
    stmt = select(*(nodes.c[name] for name in _STUB_COLUMNS)).order_by(nodes.c.node_seq)
    return _stubs(connection.execute(stmt.execution_options(yield_per=PAGE)))


def path_stubs(connection: Connection, session_id: str, node_id: str | None) -> list[NodeStub]:
    """Stubs of the path from the root to ``node_id`` (default: the active node), root first.

    The same climb as :func:`~soong_store.read.session_reads.active_path`, its rows taken one at a
    time and only their stubs kept. A chain that does not end at a root raises ``StorageError``.
    """
    target = path_target(connection, session_id, node_id)
    if target is None:
        return []
    cursor = _climb(connection, session_id, target, None, False)
    if cursor is None:
        raise NotFound(f"no node {target!r} in session {session_id!r}", node_id=target)
    wanted = [NODE_COLUMNS.index(name) for name in _STUB_COLUMNS]
    try:
        found = _stubs(tuple(row[i] for i in wanted) for row in iter(cursor.fetchone, None))
    finally:
        cursor.close()
    if not found:
        raise NotFound(f"no node {target!r} in session {session_id!r}", node_id=target)
    if found[-1].parent_id is not None:
        raise damaged_chain(session_id, found[-1].node_id, found[-1].parent_id)
    found.reverse()
    return found


def nodes_by_seq(connection: Connection, session_id: str, seqs: Sequence[int]) -> list[NodeRecord]:
    """The nodes numbered ``seqs`` (a page: at most a few hundred), in the order asked."""
    from soong_store.model.records import node_record

    pair = tables_of(connection, session_id)
    if pair is None or not seqs:
        return []
    nodes = pair.nodes
    rows = connection.execute(select(nodes).where(nodes.c.node_seq.in_(list(seqs)))).mappings()
    by_seq = {row["node_seq"]: node_record(session_id, row) for row in rows}
    return [by_seq[seq] for seq in seqs]


def is_compaction(stub: NodeStub) -> bool:
    """Whether a stub is a compaction node (where the context of a path begins)."""
    return stub.node_type == NodeType.COMPACTION.value
