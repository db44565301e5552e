"""``SessionStore``: the async API the agent runtime uses, and its task DAGs."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from soong_store.model.checks import check_owner
from soong_store.store import calls
from soong_store.store.artifacts import ArtifactCalls
from soong_store.store.conversation import ConversationCalls
from soong_store.store.scoped import ScopedStore
from soong_store.store.sessions import SessionCalls

if TYPE_CHECKING:
    from soong_store.tasks.wal import TaskDag


class SessionStore(SessionCalls, ArtifactCalls, ConversationCalls):
    """The persistence layer of one agent home: sessions, agents, runs, nodes and events.

    Use it as an async context manager (or call :meth:`open` and :meth:`close`)::

        async with SessionStore() as store:
            session = await store.create_session(cwd=".")
            await store.append_node(session.session_id, "user", "message", [{"type": "text",
                                    "text": "hello"}])

    Event loops and threads: a store is not tied to the loop that opened it. Any coroutine may be
    awaited from any event loop, in any thread, also from several loops at once: writes go to
    the writer's thread and reads to the reader threads, and each result is handed back to the
    loop of its caller. Opening and closing from several loops at once open and close once.

    Processes: a store belongs to the process that opened it. After ``os.fork()`` every call
    in the child raises :class:`~soong_store.errors.StorageError` (the writer's thread and the
    connections stay in the parent); the child opens a store of its own. ``close()`` in the
    child only lets go of the inherited store, without touching the parent's connections.

    Contention: work that finds the database locked by another connection is tried again with
    backoff for up to ``lock_wait`` seconds (writes, reads, the open-time upgrade alike); only
    then does the caller get a :class:`~soong_store.errors.StorageError`.

    Scrubbing: ``scrub`` (a callable text -> text, :class:`~soong_store.SecretScrubber` say) is
    applied to every string of the content, metadata and payloads a call is given, before it is
    validated and stored (:mod:`soong_store.scrub`); a scrubber that fails fails the call with
    :class:`~soong_store.errors.InvalidArgument`, and nothing is written.
    """

    def scoped(self, owner: str) -> ScopedStore:
        """This store's session-level API confined to ``owner``'s sessions.

        Another owner's session (or one without an owner) is ``NotFound`` through it exactly as
        an unknown id is, and is never listed or found by a search.

        Raises:
            InvalidArgument: ``owner`` is not 1-128 characters of ``[A-Za-z0-9_.@:-]``.
        """
        return ScopedStore(self, check_owner(owner))

    # -- task DAGs --------------------------------------------------------------------------

    async def task_dag(self, session_id: str, task_name: str) -> TaskDag:
        """The DAG of a named task of the session, replayed from its write-ahead log.

        The log lives at ``<session.cwd>/.soong-agent/tasks/<session_id>/``; one ``TaskDag`` per
        file is kept and handed to every caller, from any event loop (threads that each run a
        loop may share one DAG). Each call first catches the DAG up with records another
        process appended; when the file was deleted, moved, replaced or cut short, the log is
        replayed into a new ``TaskDag`` (the old one refuses appends). Task changes are mirrored
        as ``task_*`` events in the session's timeline. ``close()`` waits for appends in flight;
        after it, every DAG this store handed out raises ``StoreClosed`` on append.

        Raises:
            TaskDagUnavailable: the log is damaged or is not a regular file (the conversation
                stays readable).
            StoreClosed: the store is closed or closing.
        """
        session = await self.get_session(session_id)
        listener = partial(self._mirror_task, session.session_id, task_name)
        return await calls.task_dag(self._runtime, self._tasks, session, task_name, listener)

    async def _mirror_task(
        self, session_id: str, task_name: str, operation: str, arguments: dict[str, Any]
    ) -> None:
        await self.append_event(
            session_id, f"task_{operation}", payload={"task_name": task_name, **arguments}
        )
