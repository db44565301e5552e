"""The store as a session backend of the OpenAI Agents SDK (the ``openai-agents`` extra).

:class:`SoongSession` implements the SDK's ``agents.memory.Session`` protocol. One SDK session id
names one store session (a session key, namespace ``openai-agents``, claimed in the transaction
that creates the session, so processes opening the same id at once share one session). The
history is the session's active path: each item is a node (:mod:`._agents_items` maps it, and
round-trips it exactly); ``pop_item`` moves the active node back to its parent, only if it is
still the node that was read (so concurrent pops each pop a different item); ``clear_session``
clears the active node, so the next item starts a new root and the old history stays in the
tree for ``soong-store tree`` to show.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable, Generator, Sequence
from functools import partial
from types import TracebackType
from typing import Any, Self, TypeVar, cast

from agents.items import TResponseInputItem
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)
from sqlalchemy import Connection
from sqlalchemy.engine import URL

from soong_store.backends.base import lock_session
from soong_store.errors import InvalidArgument, NotFound
from soong_store.integrations._agents_items import spilled_refs, to_item, to_node
from soong_store.model import codec
from soong_store.model.enums import AgentType, EndReason, RunStatus
from soong_store.model.global_records import RunRecord
from soong_store.model.records import NodeRecord
from soong_store.model.usage import check_usage
from soong_store.read import record_reads
from soong_store.store import SessionStore, run_read, run_write, runtime_of
from soong_store.write import lifecycle as writes
from soong_store.write import session_keys

__all__ = ["NAMESPACE", "SoongSession"]

T = TypeVar("T")
NAMESPACE = "openai-agents"
"""The session-key namespace of SDK session ids."""


class SoongSession:
    """An OpenAI Agents SDK session kept in a soong store.

    Give ``store`` (an open :class:`~soong_store.SessionStore`, which the caller closes) or
    ``home``/``url`` (then the session opens a store of its own on first use and closes it in
    :meth:`close`). The store session is found, or created, on first use. Like the store, a
    session may be used from any event loop and thread (``Runner.run_sync`` too).
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        *,
        home: str | os.PathLike[str] | None = None,
        url: str | URL | None = None,
        store: SessionStore | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        session_keys.check_key(NAMESPACE, session_id)
        if store is not None and (home is not None or url is not None):
            raise InvalidArgument("give either store= or home=/url=, not both")
        self.session_id = session_id
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        self._own = store is None
        self._store = store if store is not None else SessionStore(home=home, url=url)
        self._sid: str | None = None

    async def __aenter__(self) -> Self:
        await self._session()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._aclose()

    def close(self) -> Awaitable[None]:
        """Close the store this session opened, before returning (a given store stays open).

        Both shapes of the SDK's sessions: synchronous as ``SQLiteSession.close()`` and
        awaitable as its async sessions' ``close()`` (awaiting the result returns at once). It
        works from any thread, also inside a running event loop, which waits for the close as
        it would for ``SQLiteSession``'s. Closing twice is fine; the next use opens the store
        again. ``async with`` closes without holding up its loop.
        """
        if self._own_store_open():
            _close_now(self._store)
        return _CLOSED

    async def _aclose(self) -> None:
        if self._own_store_open():
            await self._store.close()

    def _own_store_open(self) -> bool:
        """Whether this session opened its store and the store is open (so a close has work).

        Asked of the store itself, never of a flag of this object: a flag set by one thread's
        open could outlive another thread's close, leaving a closed store taken for open.
        """
        return self._own and runtime_of(self._store).is_open

    @property
    def store(self) -> SessionStore:
        """The store the items live in."""
        return self._store

    async def store_session_id(self) -> str:
        """The id of the store session this SDK session id names (created on first use)."""
        return await self._session()

    async def _session(self) -> str:
        if self._own and not runtime_of(self._store).is_open:  # first use, or closed since
            await self._store.open()
        if self._sid is None:
            found = await run_read(
                self._store, partial(session_keys.lookup, namespace=NAMESPACE, key=self.session_id)
            )
            if found is None:
                metadata_json = codec.dumps_text({NAMESPACE: {"session_id": self.session_id}})
                job = partial(
                    _open_session, key=self.session_id, cwd=os.getcwd(), metadata=metadata_json
                )
                found = await run_write(self._store, job)
            self._sid = found
        return self._sid

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The history, oldest first: the last ``limit`` items (``session_settings.limit``).

        A limit of 0 reads nothing; a negative one reads everything (as ``SQLiteSession``).
        """
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted == 0:
            return []
        count = None if wanted is None or wanted < 0 else wanted

        async def read(sid: str) -> list[TResponseInputItem]:
            return await self._items(await _tail(self._store, sid, count))

        return await self._in_session(read)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items after the last one, in one transaction (all or none)."""
        parts = [to_node(item) for item in items]
        if not parts:
            return

        async def add(sid: str) -> None:
            async with self._store.transaction(sid) as tx:
                for p in parts:
                    tx.add_node(p.role, "message", p.content, metadata=p.metadata)

        await self._in_session(add)

    async def pop_item(self) -> TResponseInputItem | None:
        """Take the last item off the history (it stays in the tree); ``None`` when empty.

        The active node moves to the popped node's parent only if it is still the node read;
        otherwise another caller popped or added meanwhile, and the new last item is read.
        """

        async def pop(sid: str) -> TResponseInputItem | None:
            while True:
                tail = await _tail(self._store, sid, 1)
                if not tail:
                    return None
                node = tail[-1]
                [item] = await self._items(tail)
                job = partial(_pop, session_id=sid, expected=node.node_id, parent=node.parent_id)
                if await run_write(self._store, job):
                    return item

        return await self._in_session(pop)

    async def clear_session(self, *, delete: bool = False) -> None:
        """Empty the history: the next item starts a new root; the old one stays in the tree.

        ``delete=True`` deletes the store session instead (its nodes, events and files); the
        next use of this SDK id creates a new one.
        """
        if delete:
            await self._in_session(self._store.delete_session)
            self._sid = None
            return
        await self._in_session(partial(self._store.switch_node, node_id=None))

    async def record_usage(self, result: Any, *, model: str | None = None) -> RunRecord:
        """Record a finished ``Runner.run`` (or ``run_streamed``, once streamed) as a run.

        The SDK's ``Session`` never sees a run, so the caller hands its result over: the store
        session gets one completed run of its main agent whose ``usage`` holds one entry per
        model call of the run (``result.raw_responses``, each response's ``usage`` as the SDK
        reports it), and ``turn_count`` the number of calls. The SDK counts cached and
        cache-written prompt tokens inside ``input_tokens``; the store's ``input_tokens`` are
        the rest (those are ``cache_read_tokens`` and ``cache_write_tokens``). ``model`` names
        the calls' model; by default the last agent's ``model`` when it is a name (the SDK's
        responses do not say which model made them), else none.

        Raises:
            InvalidArgument: ``result`` has no ``raw_responses``, or a usage the store's shape
                refuses (nothing is written).
            ConcurrentRunError: a run of the session's main agent is running meanwhile.
        """
        responses = getattr(result, "raw_responses", None)
        if not isinstance(responses, list):
            raise InvalidArgument(
                f"invalid result {result!r:.80}: expected the result of Runner.run or "
                "run_streamed (it has raw_responses)"
            )
        if model is None:
            named = getattr(getattr(result, "last_agent", None), "model", None)
            model = named if isinstance(named, str) and named else None
        entries = [_usage_entry(response.usage, model) for response in responses]
        usage_json = codec.dumps_text(check_usage(entries, "SDK usage"), what="run usage")
        agent = getattr(getattr(result, "last_agent", None), "name", None)
        metadata = codec.dumps_text({NAMESPACE: {"last_agent": agent}}, what="run metadata")

        async def record(sid: str) -> RunRecord:
            job = partial(
                _record_run,
                session_id=sid,
                usage_json=usage_json,
                turns=len(responses),
                metadata=metadata,
            )
            return await run_write(self._store, job)

        return await self._in_session(record)

    async def _in_session(self, action: Callable[[str], Awaitable[T]]) -> T:
        """``action`` on the store session; once more on a new one if it was deleted meanwhile.

        The id this object remembers may name a session deleted since (``soong-store``, another
        process's ``clear_session(delete=True)``): the key went with it, so the SDK id now names
        a new, empty session.
        """
        sid = await self._session()
        try:
            return await action(sid)
        except NotFound as exc:
            if exc.context.get("session_id") != sid or "node_id" in exc.context:
                raise
            self._sid = None
        return await action(await self._session())

    async def _items(self, nodes: Sequence[NodeRecord]) -> list[TResponseInputItem]:
        loaded: dict[str, Any] = {}
        for node in nodes:
            for ref in spilled_refs(node.content):
                if ref not in loaded:
                    loaded[ref] = codec.loads(await self._store.read_artifact(ref))
        items = [to_item(n.role, n.content, n.metadata, loaded) for n in nodes]
        return cast(list[TResponseInputItem], items)


class _Closed:
    """What :meth:`SoongSession.close` returns: done already, so awaiting it returns at once."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield


_CLOSED = _Closed()


def _close_now(store: SessionStore) -> None:
    """Close ``store`` before returning, also from inside a running event loop.

    A loop running in this thread cannot run the close itself while it waits: a thread of
    its own runs it (the store may be closed from any loop).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(store.close())
        return
    failed: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(store.close())
        except BaseException as exc:  # handed to the caller below
            failed.append(exc)

    closer = threading.Thread(target=run, name="soong-session-close")
    closer.start()
    closer.join()
    if failed:
        raise failed[0]


async def _tail(store: SessionStore, session_id: str, limit: int | None) -> list[NodeRecord]:
    """The last ``limit`` nodes of the active path (all when ``None``), root-most first.

    Only that tail is read: the store climbs from the active node up ``limit`` nodes.
    """
    return await store.active_path(session_id, limit=limit)


def _open_session(connection: Connection, key: str, cwd: str, metadata: str) -> str:
    """Writer job: the session the key names, created with the key if there is none."""
    lock_session(connection, f"key:{NAMESPACE}:{key}")
    found = session_keys.lookup(connection, NAMESPACE, key)
    if found is not None:
        return found
    record = writes.create_session(
        connection, cwd=cwd, metadata_json=metadata, root_agent_type=AgentType.MAIN
    )
    session_keys.claim(connection, NAMESPACE, key, record.session_id)
    return record.session_id


def _usage_entry(reported: Any, model: str | None) -> dict[str, Any]:
    """One model call's usage in the store's shape, from the SDK's ``Usage`` of that call."""
    details = getattr(reported, "input_tokens_details", None)
    cached = getattr(details, "cached_tokens", 0) or 0
    written = getattr(details, "cache_write_tokens", 0) or 0
    entry: dict[str, Any] = {} if model is None else {"model": model}
    entry.update(
        input_tokens=max(reported.input_tokens - cached - written, 0),
        output_tokens=reported.output_tokens,
        cache_read_tokens=cached,
        cache_write_tokens=written,
    )
    return entry


def _record_run(
    connection: Connection, session_id: str, usage_json: str, turns: int, metadata: str
) -> RunRecord:
    """Writer job: a run of the session's main agent, started and finished in one transaction."""
    root = record_reads.session_row(connection, session_id)["root_agent_id"]
    run = writes.start_run(connection, session_id, root, RunStatus.RUNNING, metadata)
    return writes.finish_run(
        connection, run.run_id, RunStatus.COMPLETED, EndReason.COMPLETED, usage_json, None, turns
    )


def _pop(connection: Connection, session_id: str, expected: str, parent: str | None) -> bool:
    """Writer job: move the active node from ``expected`` to ``parent``, if it is still there."""
    lock_session(connection, session_id)
    if record_reads.session_row(connection, session_id)["active_node_id"] != expected:
        return False
    writes.switch_node(connection, session_id, parent)
    return True
