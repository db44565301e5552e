"""The facade's calls on sessions, their agents and their runs."""

from __future__ import annotations

import os
from datetime import date, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from soong_store.model.checks import check_id, check_session_id
from soong_store.model.enums import (
    AgentStatus,
    AgentType,
    EndReason,
    RunStatus,
    SessionStatus,
)
from soong_store.model.global_records import AgentRecord, RunRecord, SessionRecord
from soong_store.model.retention import RetentionPolicy, RetentionReport
from soong_store.read import record_reads
from soong_store.read.readers import ON_LINK, ON_LOOP, ON_LOOP_BUDGETED, ON_THREAD, page
from soong_store.store import calls
from soong_store.store.core import StoreCore

if TYPE_CHECKING:
    from soong_store.model.usage import UsageRow


class SessionCalls(StoreCore):
    """Create, read, list, archive, delete and fork sessions; add agents; start and end runs."""

    # -- sessions ---------------------------------------------------------------------------

    async def create_session(
        self,
        cwd: str | os.PathLike[str],
        metadata: Any = None,
        root_agent_type: AgentType | str = "main",
        *,
        owner: str | None = None,
        key: str | None = None,
    ) -> SessionRecord:
        """Create a session with its root agent (``main`` or ``orchestrator``) and tables.

        ``cwd`` is stored as an absolute path: the session's task logs live under it, and they
        must be found again from any working directory. ``owner`` names the user or tenant
        (1-128 characters of ``[A-Za-z0-9_.@:-]``); ``key`` is the application's own name for
        the session (1-256 printable characters), unique per owner.

        Raises:
            InvalidArgument: a bad argument, or a ``key`` another session of the same owner
                holds (nothing is written).
        """
        metadata = self._clean(metadata, "session metadata")
        job = calls.create_session_job(cwd, metadata, root_agent_type, owner, key)
        return await self._runtime.write(job)

    async def find_session(self, key: str, *, owner: str | None = None) -> SessionRecord | None:
        """The session ``owner`` (``None``: no owner) named ``key``, or ``None``."""
        return await self._runtime.read(calls.find_session_job(key, owner), ON_LOOP)

    async def get_session(self, session_id: str) -> SessionRecord:
        """One session (``NotFound`` if there is none)."""
        sid = check_session_id(session_id)
        query = partial(record_reads.get_session, session_id=sid)
        return await self._runtime.read(query, ON_LINK)

    async def list_sessions(
        self,
        status: SessionStatus | str | None = None,
        limit: int | None = None,
        *,
        owner: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        updated_after: datetime | None = None,
        updated_before: datetime | None = None,
        after: SessionRecord | None = None,
    ) -> list[SessionRecord]:
        """Sessions, most recently updated first; ``after``: the next page after that record.

        Pass the last record of a page as ``after`` to read the next one (a key cursor: a page
        far down costs what the first one does). ``owner`` and ``cwd`` keep the sessions of one
        owner or one folder; ``updated_after`` and ``updated_before`` (aware datetimes, both
        exclusive) those last changed in that span. Every filter is served by an index.
        """
        job = calls.list_sessions_job(
            status,
            limit,
            after,
            owner=owner,
            cwd=cwd,
            updated_after=updated_after,
            updated_before=updated_before,
        )
        return await self._runtime.read(job, page(limit, ON_LOOP))

    async def archive_session(self, session_id: str) -> SessionRecord:
        """Make a session read-only (it can still be read, exported, forked and deleted)."""
        from soong_store.write import lifecycle as writes

        sid = check_session_id(session_id)
        return await self._runtime.write(partial(writes.archive_session, session_id=sid))

    async def delete_session(self, session_id: str) -> None:
        """Remove a session's rows, tables and artifact files (shared files stay while named)."""
        sid = await calls.delete_session(self._runtime, session_id)
        if self._task_dags is not None:
            self._task_dags.forget_session(sid)

    async def apply_retention(
        self, policy: RetentionPolicy, *, dry_run: bool = False
    ) -> RetentionReport:
        """Delete the sessions idle past ``delete_after``, archive those past ``archive_after``.

        Idle is measured from ``updated_at``; deleting is :meth:`delete_session` (rows, tables,
        search rows, the artifact files no other session names). A session written while the
        run goes is left alone. ``dry_run``: report what would be done, change nothing.

        Raises:
            InvalidArgument: ``policy`` is not a :class:`~soong_store.RetentionPolicy`.
        """
        report = await calls.apply_retention(self._runtime, policy, bool(dry_run))
        if self._task_dags is not None and not dry_run:
            for sid in report.deleted:
                self._task_dags.forget_session(sid)
        return report

    async def fork_session(self, session_id: str, node_id: str) -> SessionRecord:
        """A new session holding copies of the active path up to ``node_id``."""
        return await calls.fork_session(self._runtime, session_id, node_id)

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
        """Add a ``sub`` or ``fork`` agent to a session."""
        metadata = self._clean(metadata, "agent metadata")
        job = calls.create_agent_job(
            session_id, agent_type, parent_agent_id, created_by_run_id, fork_from_node_id, metadata
        )
        return await self._runtime.write(job)

    async def get_agent(self, agent_id: str) -> AgentRecord:
        """One agent."""
        aid = check_id(agent_id, "agent")
        query = partial(record_reads.get_agent, agent_id=aid)
        return await self._runtime.read(query, ON_LOOP)

    async def list_agents(self, session_id: str) -> list[AgentRecord]:
        """A session's agents in creation order."""
        sid = check_session_id(session_id)
        query = partial(record_reads.list_agents, session_id=sid)
        return await self._runtime.read(query, ON_LOOP_BUDGETED)

    async def update_agent(
        self,
        agent_id: str,
        status: AgentStatus | str | None = None,
        result: Any = None,
        metadata: Any = None,
    ) -> AgentRecord:
        """Change an agent's status, result or metadata (terminal statuses are final)."""
        result = self._clean(result, "agent result")
        metadata = self._clean(metadata, "agent metadata")
        return await self._runtime.write(calls.update_agent_job(agent_id, status, result, metadata))

    async def start_run(
        self,
        session_id: str,
        agent_id: str,
        status: RunStatus | str = "running",
        metadata: Any = None,
    ) -> RunRecord:
        """Start a run of an agent; a session's main agent runs one at a time."""
        metadata = self._clean(metadata, "run metadata")
        return await self._runtime.write(
            calls.start_run_job(session_id, agent_id, status, metadata)
        )

    async def get_run(self, run_id: str) -> RunRecord:
        """One run."""
        rid = check_id(run_id, "run")
        query = partial(record_reads.get_run, run_id=rid)
        return await self._runtime.read(query, ON_LOOP)

    async def list_runs(self, session_id: str) -> list[RunRecord]:
        """A session's runs in creation order."""
        sid = check_session_id(session_id)
        query = partial(record_reads.list_runs, session_id=sid)
        return await self._runtime.read(query, ON_LOOP_BUDGETED)

    async def update_run(
        self,
        run_id: str,
        status: RunStatus | str | None = None,
        turn_count: int | None = None,
        usage: Any = None,
        metadata: Any = None,
    ) -> RunRecord:
        """Move a run forward (queued, pending, running) or record its counters."""
        usage = self._clean(usage, "run usage")
        metadata = self._clean(metadata, "run metadata")
        job = calls.update_run_job(run_id, status, turn_count, usage, metadata)
        return await self._runtime.write(job)

    async def finish_run(
        self,
        run_id: str,
        status: RunStatus | str,
        end_reason: EndReason | str,
        usage: Any = None,
        error: Any = None,
        turn_count: int | None = None,
    ) -> RunRecord:
        """End a run with a terminal status and an end reason."""
        usage = self._clean(usage, "run usage")
        error = self._clean(error, "run error")
        job = calls.finish_run_job(run_id, status, end_reason, usage, error, turn_count)
        return await self._runtime.write(job)

    async def usage(
        self,
        *,
        by: str = "day",
        owner: str | None = None,
        since: datetime | date | None = None,
        until: datetime | date | None = None,
    ) -> list[UsageRow]:
        """Runs' usage summed per day (UTC), model, session, cwd or owner, on the database.

        ``owner``: only the runs of that owner's sessions (``by="owner"`` groups by it instead;
        runs of sessions without an owner have the key ``None``).

        Counts the runs started at ``since`` or later and before ``until`` (a ``date`` is its
        UTC midnight; a ``datetime`` must say its time zone). Days come oldest first, other
        groups most tokens first.
        """
        job = calls.usage_job(by, since, until, owner)
        return await self._runtime.read(job, ON_THREAD)
