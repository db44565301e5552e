"""``ScopedStore``: a store's session-level API confined to one owner.

A server that keeps many users' sessions hands each request the handle of its user:
``store.scoped(owner)``. Every call through it sees that owner's sessions and nothing else. A
session of another owner (or of none), and an agent, run or artifact of one, is
:class:`~soong_store.errors.NotFound` with the very message an unknown id gets, so a caller
cannot tell "not yours" from "not there"; listings and searches leave them out in the query.

Each call checks the session (or the row reached by its id) in a read, then makes the store's own
call: an owner never changes, so nothing a check has seen is undone before the call. Ids inside a
session (nodes, parents, agents named beside the session id) are the session's own: the store
refuses one of another session as it always does.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import date, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from soong_store.errors import InvalidArgument
from soong_store.model.checks import check_id, check_session_id
from soong_store.read import record_reads
from soong_store.read.readers import ON_LINK, ON_LOOP
from soong_store.store import calls
from soong_store.store.core import runtime_of

if TYPE_CHECKING:
    from soong_store.model.enums import (
        AgentStatus,
        AgentType,
        EndReason,
        EventLevel,
        NodeType,
        Role,
        RunStatus,
        SessionStatus,
    )
    from soong_store.model.global_records import (
        AgentRecord,
        ArtifactRecord,
        RunRecord,
        SessionRecord,
    )
    from soong_store.model.records import ContextView, EventRecord, NodeRecord
    from soong_store.model.retention import RetentionPolicy, RetentionReport
    from soong_store.model.search import SearchHit
    from soong_store.model.usage import UsageRow
    from soong_store.store.facade import SessionStore
    from soong_store.tasks.wal import TaskDag
    from soong_store.write.unit_of_work import UnitOfWork


class ScopedStore:
    """The session-level API of a :class:`~soong_store.SessionStore`, for one owner's sessions.

    Made by :meth:`SessionStore.scoped`; it shares the store's connections and is usable while
    the store is open. ``create_session`` through it sets the owner; ``find_session`` and
    ``list_sessions`` look among the owner's sessions only; ``search`` finds only their nodes.
    """

    def __init__(self, store: SessionStore, owner: str) -> None:
        self._store = store
        self.owner = owner

    def __repr__(self) -> str:
        return f"ScopedStore(owner={self.owner!r})"

    async def _own(self, session_id: str) -> str:
        """The checked id of a session of this owner (``NotFound`` as for an unknown one)."""
        return (await self.get_session(session_id)).session_id

    async def _owned(self, kind: str, value: str) -> None:
        """``NotFound`` unless the agent, run or artifact ``value`` is of this owner's session."""
        query = partial(
            record_reads.check_owned, kind=kind, value=check_id(value, kind), owner=self.owner
        )
        await runtime_of(self._store).read(query, ON_LOOP)

    # -- sessions ---------------------------------------------------------------------------

    async def create_session(
        self,
        cwd: str | os.PathLike[str],
        metadata: Any = None,
        root_agent_type: AgentType | str = "main",
        *,
        key: str | None = None,
    ) -> SessionRecord:
        """A new session of this owner (``key``: unique among this owner's sessions)."""
        return await self._store.create_session(
            cwd, metadata, root_agent_type, owner=self.owner, key=key
        )

    async def get_session(self, session_id: str) -> SessionRecord:
        """One of this owner's sessions."""
        sid = check_session_id(session_id)
        query = partial(record_reads.owned_session, session_id=sid, owner=self.owner)
        return await runtime_of(self._store).read(query, ON_LINK)

    async def find_session(self, key: str) -> SessionRecord | None:
        """This owner's session named ``key``, or ``None``."""
        return await self._store.find_session(key, owner=self.owner)

    async def list_sessions(
        self,
        status: SessionStatus | str | None = None,
        limit: int | None = None,
        *,
        cwd: str | os.PathLike[str] | None = None,
        updated_after: datetime | None = None,
        updated_before: datetime | None = None,
        after: SessionRecord | None = None,
    ) -> list[SessionRecord]:
        """This owner's sessions, most recently updated first (filters as the store's)."""
        return await self._store.list_sessions(
            status,
            limit,
            owner=self.owner,
            cwd=cwd,
            updated_after=updated_after,
            updated_before=updated_before,
            after=after,
        )

    async def archive_session(self, session_id: str) -> SessionRecord:
        """Make one of this owner's sessions read-only."""
        return await self._store.archive_session(await self._own(session_id))

    async def delete_session(self, session_id: str) -> None:
        """Remove one of this owner's sessions with its tables and files."""
        await self._store.delete_session(await self._own(session_id))

    async def fork_session(self, session_id: str, node_id: str) -> SessionRecord:
        """A copy of the path to ``node_id``: a new session of this owner."""
        return await self._store.fork_session(await self._own(session_id), node_id)

    async def apply_retention(
        self, policy: RetentionPolicy, *, dry_run: bool = False
    ) -> RetentionReport:
        """The store's retention run, on this owner's sessions only.

        Raises:
            InvalidArgument: ``policy`` names another owner.
        """
        from dataclasses import replace

        from soong_store.model.retention import RetentionPolicy

        if isinstance(policy, RetentionPolicy) and policy.owner != self.owner:
            if policy.owner is not None:
                raise InvalidArgument(
                    f"invalid policy owner {policy.owner!r}: this handle is {self.owner!r}'s",
                    owner=policy.owner,
                )
            policy = replace(policy, owner=self.owner)
        return await self._store.apply_retention(policy, dry_run=dry_run)

    async def usage(
        self,
        *,
        by: str = "day",
        since: datetime | date | None = None,
        until: datetime | date | None = None,
    ) -> list[UsageRow]:
        """The usage of this owner's sessions' runs (``by`` as the store's, not ``"owner"``)."""
        if by == "owner":
            raise InvalidArgument(f"invalid by {by!r}: a scoped handle sees one owner")
        return await self._store.usage(by=by, owner=self.owner, since=since, until=until)

    # -- agents and runs --------------------------------------------------------------------

    async def create_agent(
        self,
        session_id: str,
        agent_type: AgentType | str,
        parent_agent_id: str | None = None,
        created_by_run_id: str | None = None,
        fork_from_node_id: str | None = None,
        metadata: Any = None,
    ) -> AgentRecord:
        """Add a ``sub`` or ``fork`` agent to one of this owner's sessions."""
        return await self._store.create_agent(
            await self._own(session_id),
            agent_type,
            parent_agent_id,
            created_by_run_id,
            fork_from_node_id,
            metadata,
        )

    async def get_agent(self, agent_id: str) -> AgentRecord:
        """An agent of one of this owner's sessions."""
        await self._owned("agent", agent_id)
        return await self._store.get_agent(agent_id)

    async def list_agents(self, session_id: str) -> list[AgentRecord]:
        """The agents of one of this owner's sessions."""
        return await self._store.list_agents(await self._own(session_id))

    async def update_agent(
        self,
        agent_id: str,
        status: AgentStatus | str | None = None,
        result: Any = None,
        metadata: Any = None,
    ) -> AgentRecord:
        """Change an agent of one of this owner's sessions."""
        await self._owned("agent", agent_id)
        return await self._store.update_agent(agent_id, status, result, metadata)

    async def start_run(
        self,
        session_id: str,
        agent_id: str,
        status: RunStatus | str = "running",
        metadata: Any = None,
    ) -> RunRecord:
        """Start a run in one of this owner's sessions."""
        return await self._store.start_run(await self._own(session_id), agent_id, status, metadata)

    async def get_run(self, run_id: str) -> RunRecord:
        """A run of one of this owner's sessions."""
        await self._owned("run", run_id)
        return await self._store.get_run(run_id)

    async def list_runs(self, session_id: str) -> list[RunRecord]:
        """The runs of one of this owner's sessions."""
        return await self._store.list_runs(await self._own(session_id))

    async def update_run(
        self,
        run_id: str,
        status: RunStatus | str | None = None,
        turn_count: int | None = None,
        usage: Any = None,
        metadata: Any = None,
    ) -> RunRecord:
        """Move a run of one of this owner's sessions forward."""
        await self._owned("run", run_id)
        return await self._store.update_run(run_id, status, turn_count, usage, metadata)

    async def finish_run(
        self,
        run_id: str,
        status: RunStatus | str,
        end_reason: EndReason | str,
        usage: Any = None,
        error: Any = None,
        turn_count: int | None = None,
    ) -> RunRecord:
        """End a run of one of this owner's sessions."""
        await self._owned("run", run_id)
        return await self._store.finish_run(run_id, status, end_reason, usage, error, turn_count)

    # -- the tree and the timeline ----------------------------------------------------------

    @asynccontextmanager
    async def transaction(self, session_id: str) -> AsyncIterator[UnitOfWork]:
        """A unit of work on one of this owner's sessions."""
        async with self._store.transaction(await self._own(session_id)) as tx:
            yield tx

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
        """Append a node to one of this owner's sessions."""
        return await self._store.append_node(
            await self._own(session_id),
            role,
            node_type,
            content,
            agent_id,
            run_id,
            parent_id,
            metadata,
            token_count,
            event,
        )

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
        """Append an event to one of this owner's sessions."""
        return await self._store.append_event(
            await self._own(session_id),
            event_type,
            level,
            agent_id,
            run_id,
            node_id,
            tool_call_id,
            payload,
        )

    async def switch_node(self, session_id: str, node_id: str | None) -> SessionRecord:
        """Move the active node of one of this owner's sessions."""
        return await self._store.switch_node(await self._own(session_id), node_id)

    async def get_node(self, session_id: str, node_id: str) -> NodeRecord:
        """A node of one of this owner's sessions."""
        return await self._store.get_node(await self._own(session_id), node_id)

    async def list_nodes(self, session_id: str) -> list[NodeRecord]:
        """Every node of one of this owner's sessions."""
        return await self._store.list_nodes(await self._own(session_id))

    async def children(self, session_id: str, node_id: str) -> list[NodeRecord]:
        """The children of a node of one of this owner's sessions."""
        return await self._store.children(await self._own(session_id), node_id)

    async def active_path(
        self, session_id: str, node_id: str | None = None, limit: int | None = None
    ) -> list[NodeRecord]:
        """The path to a node of one of this owner's sessions."""
        return await self._store.active_path(await self._own(session_id), node_id, limit)

    async def context(
        self,
        session_id: str,
        node_id: str | None = None,
        limit: int | None = None,
        *,
        max_tokens: int | None = None,
    ) -> ContextView:
        """The context of one of this owner's sessions (within ``max_tokens``, if given)."""
        sid = await self._own(session_id)
        return await self._store.context(sid, node_id, limit, max_tokens=max_tokens)

    async def redact_node(self, session_id: str, node_id: str, *, reason: str) -> NodeRecord:
        """Redact a node of one of this owner's sessions."""
        return await self._store.redact_node(await self._own(session_id), node_id, reason=reason)

    async def timeline(
        self,
        session_id: str,
        run_id: str | None = None,
        after_seq: int | None = None,
        limit: int | None = None,
    ) -> list[EventRecord]:
        """The events of one of this owner's sessions."""
        return await self._store.timeline(await self._own(session_id), run_id, after_seq, limit)

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
        """Nodes of this owner's sessions whose text matches ``query``, best first.

        Other owners' nodes are left out by the query itself, so a page holds ``limit`` hits
        whenever the owner's sessions have that many.
        """
        job = calls.search_job(
            query,
            session_id=session_id,
            role=role,
            node_type=node_type,
            agent_type=agent_type,
            limit=limit,
            offset=offset,
            owner=self.owner,
        )
        return await calls.search(runtime_of(self._store), job)

    # -- artifacts and tasks ----------------------------------------------------------------

    async def put_artifact(
        self,
        session_id: str,
        data: bytes,
        filename: str | None = None,
        mime_type: str | None = None,
        summary: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        node_id: str | None = None,
        tool_call_id: str | None = None,
        metadata: Any = None,
    ) -> ArtifactRecord:
        """Store a file of one of this owner's sessions."""
        return await self._store.put_artifact(
            await self._own(session_id),
            data,
            filename,
            mime_type,
            summary,
            agent_id,
            run_id,
            node_id,
            tool_call_id,
            metadata,
        )

    async def get_artifact(self, artifact_id: str) -> ArtifactRecord:
        """An artifact's row, of one of this owner's sessions."""
        await self._owned("artifact", artifact_id)
        return await self._store.get_artifact(artifact_id)

    async def list_artifacts(self, session_id: str) -> list[ArtifactRecord]:
        """The artifacts of one of this owner's sessions."""
        return await self._store.list_artifacts(await self._own(session_id))

    async def read_artifact(self, artifact_id: str) -> bytes:
        """The bytes of an artifact of one of this owner's sessions."""
        await self._owned("artifact", artifact_id)
        return await self._store.read_artifact(artifact_id)

    async def task_dag(self, session_id: str, task_name: str) -> TaskDag:
        """A task DAG of one of this owner's sessions."""
        return await self._store.task_dag(await self._own(session_id), task_name)
