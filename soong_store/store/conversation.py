"""The facade's calls on a session's tree and timeline: nodes, events, paths, search.

Nodes, events and artifacts are written by a unit of work (:meth:`ConversationCalls.transaction`);
each read says where it may run (:class:`~soong_store.read.readers.Runs`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

from soong_store.errors import StoreClosed
from soong_store.model.checks import check_bound, check_id, check_optional_id, check_session_id
from soong_store.model.enums import AgentType, EventLevel, NodeType, Role
from soong_store.read import session_reads as reads
from soong_store.read.readers import ON_LINK, ON_LINK_BUDGETED, ON_LOOP, ON_LOOP_BUDGETED, page
from soong_store.store import calls
from soong_store.store.core import StoreCore

if TYPE_CHECKING:
    from soong_store.model.global_records import SessionRecord
    from soong_store.model.records import ContextView, EventRecord, NodeRecord
    from soong_store.model.search import SearchHit
    from soong_store.write.unit_of_work import Committed, UnitOfWork


class ConversationCalls(StoreCore):
    """Append and read nodes and events; the active path, the context, the timeline, search."""

    @asynccontextmanager
    async def transaction(self, session_id: str) -> AsyncIterator[UnitOfWork]:
        """A unit of work: the nodes and events added in the block commit together or not at all."""
        tx = self._unit(session_id)
        try:
            yield tx
        except BaseException:
            tx.discard()
            raise
        await tx.commit()

    async def _one(self, session_id: str, add: Callable[[UnitOfWork], object]) -> UnitOfWork:
        """:meth:`transaction` for a call that adds one item, without the context manager.

        The async generator under ``transaction`` costs a few µs an append (docs/performance.md).
        """
        tx = self._unit(session_id)
        try:
            add(tx)
        except BaseException:
            tx.discard()
            raise
        await tx.commit()
        return tx

    def _unit(self, session_id: str) -> UnitOfWork:
        """A new unit of work on the session (what :meth:`transaction` hands out)."""
        from soong_store.write.unit_of_work import UnitOfWork

        sid = check_session_id(session_id)
        runtime = self._runtime
        runtime.check_process()
        if not runtime.is_open:
            raise StoreClosed("the store is not open")
        paths = self._paths

        def on_commit(done: Committed) -> None:
            paths.written(sid, done.nodes)

        if self._scrub is not None:
            from soong_store.write.scrubbed_unit import ScrubbedUnit

            return ScrubbedUnit(sid, runtime, self._policy, self._scrub, on_commit=on_commit)
        return UnitOfWork(sid, runtime, self._policy, on_commit=on_commit)

    async def append_node(
        self,
        session_id: str,
        role: Role | str,
        node_type: NodeType | str,
        content: object,
        agent_id: str | None = None,
        run_id: str | None = None,
        parent_id: str | None = None,
        metadata: Any = None,
        token_count: int | None = None,
        event: str | Mapping[str, Any] | None = None,
    ) -> NodeRecord:
        """Append one node with its event (``node_created`` unless ``event`` says otherwise)."""
        tx = await self._one(
            session_id,
            lambda unit: unit.add_node(
                role,
                node_type,
                content,
                agent_id=agent_id,
                run_id=run_id,
                parent_id=parent_id,
                metadata=metadata,
                token_count=token_count,
                event=event,
            ),
        )
        return tx.nodes[0]

    async def append_event(
        self,
        session_id: str,
        event_type: str,
        level: EventLevel | str = "info",
        agent_id: str | None = None,
        run_id: str | None = None,
        node_id: str | None = None,
        tool_call_id: str | None = None,
        payload: Any = None,
    ) -> EventRecord:
        """Append one event to a session's timeline."""
        tx = await self._one(
            session_id,
            lambda unit: unit.add_event(
                event_type,
                level=level,
                agent_id=agent_id,
                run_id=run_id,
                node_id=node_id,
                tool_call_id=tool_call_id,
                payload=payload,
            ),
        )
        return tx.events[0]

    async def switch_node(self, session_id: str, node_id: str | None) -> SessionRecord:
        """Make ``node_id`` the session's active node; ``None`` clears it.

        With no active node the path and context are empty, and the root agent's next node
        without a ``parent_id`` starts a new root beside the old ones: a branch, so it must be a
        user message once the root agent has nodes (how a user edits the first message, or an
        SDK clears a session while keeping its history).
        """
        from soong_store.write import lifecycle as writes

        sid = check_session_id(session_id)
        nid = check_optional_id(node_id, "node")
        return await self._runtime.write(partial(writes.switch_node, session_id=sid, node_id=nid))

    async def redact_node(self, session_id: str, node_id: str, *, reason: str) -> NodeRecord:
        """Replace a node's content with one ``RedactedBlock(reason)``; the node as it now is.

        The node keeps its place (id, seqs, parent, role, type, agent, run, metadata); its
        ``token_count`` is cleared, its search row removed, the artifacts only it referred to
        deleted, and a ``node_redacted`` event (the reason only) written with it. Archived
        sessions are redacted too. Once the store is closed the old content is in no file
        of the home (docs/operations.md, "Erasure").
        """
        reason = self._clean(reason, "redaction reason")
        node = await calls.redact_node(self._runtime, session_id, node_id, reason)
        self._paths.forget(node.session_id)
        return node

    async def get_node(self, session_id: str, node_id: str) -> NodeRecord:
        """One node of a session."""
        sid = check_session_id(session_id)
        nid = check_id(node_id, "node")
        query = partial(reads.get_node, session_id=sid, node_id=nid)
        return await self._runtime.read(query, ON_LOOP)

    async def list_nodes(self, session_id: str) -> list[NodeRecord]:
        """Every node of a session by ``node_seq`` (the whole tree)."""
        sid = check_session_id(session_id)
        return await self._runtime.read(partial(reads.list_nodes, session_id=sid))

    async def children(self, session_id: str, node_id: str) -> list[NodeRecord]:
        """The children of a node by ``node_seq``."""
        sid = check_session_id(session_id)
        nid = check_id(node_id, "node")
        query = partial(reads.children, session_id=sid, node_id=nid)
        return await self._runtime.read(query, ON_LOOP_BUDGETED)

    async def active_path(
        self, session_id: str, node_id: str | None = None, limit: int | None = None
    ) -> list[NodeRecord]:
        """The nodes from the root to ``node_id`` (default: the active node), root first.

        ``limit``: at most the last that many, root-most first; only they are read. Repeated
        reads are served from the store's path cache while the database says nothing changed
        (the records are then shared between reads: treat their values as read-only).
        """
        sid = check_session_id(session_id)
        nid = check_optional_id(node_id, "node")
        count = check_bound(limit, "limit")
        query = partial(self._paths.active_path, session_id=sid, node_id=nid, limit=count)
        return await self._runtime.read(query, ON_LINK_BUDGETED)

    async def context(
        self,
        session_id: str,
        node_id: str | None = None,
        limit: int | None = None,
        *,
        max_tokens: int | None = None,
    ) -> ContextView:
        """The active path cut at its last compaction node, with its token total.

        ``limit``: at most the last that many nodes of the cut path, root-most first, and
        ``token_count`` the total of those; only they are read. A node without a
        ``token_count`` counts as ceil(bytes of its content JSON / 4) (``estimated`` says so).

        ``max_tokens``: the newest part of the cut path whose total fits, never starting inside
        a tool exchange (a result whose call it leaves out), with the compaction node that
        heads a cut path kept and counted; ``omitted`` says how many nodes were left out. With
        ``limit`` too, both bound the result (the head is one of its ``limit`` nodes).

        Raises:
            BudgetError: the compaction head alone is over ``max_tokens`` (or ``limit`` is 0).
            InvalidArgument: a bad ``limit`` or ``max_tokens`` (not an integer >= 0).
        """
        sid = check_session_id(session_id)
        nid = check_optional_id(node_id, "node")
        count = check_bound(limit, "limit")
        tokens = check_bound(max_tokens, "max_tokens")
        query = partial(
            self._paths.context, session_id=sid, node_id=nid, limit=count, max_tokens=tokens
        )
        return await self._runtime.read(query, ON_LINK_BUDGETED)

    async def timeline(
        self,
        session_id: str,
        run_id: str | None = None,
        after_seq: int | None = None,
        limit: int | None = None,
    ) -> list[EventRecord]:
        """Events by ``seq`` (``run_seq`` for one run), after ``after_seq``, at most ``limit``."""
        job = calls.timeline_job(session_id, run_id, after_seq, limit)
        return await self._runtime.read(job, page(limit, ON_LINK))

    async def search(
        self,
        query: str,
        *,
        session_id: str | None = None,
        role: Role | str | None = None,
        node_type: NodeType | str | None = None,
        agent_type: AgentType | str | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[SearchHit]:
        """Nodes of every session, branch and agent whose text matches ``query``, best first.

        Best first within windows of the newest matches (``docs/search.md``: a common word's
        older better hits come after its newest 5,000). ``query`` is plain words (a node must
        hold each) and "quoted phrases" (words side by side); nothing in it is an operator.
        Ties go to the newer node by ``created_at``, then to the one indexed later; ``offset``
        pages on.
        The filters narrow to one session, role, node type or agent type.

        Raises:
            InvalidArgument: a bad argument (``query`` not a string, an unknown role ...).
            StorageError: this database cannot search (a SQLite library without FTS5).
        """
        job = calls.search_job(
            query,
            session_id=session_id,
            role=role,
            node_type=node_type,
            agent_type=agent_type,
            limit=limit,
            offset=offset,
        )
        return await calls.search(self._runtime, job)
