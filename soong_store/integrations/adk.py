"""The store as a Google ADK session service (the ``adk`` extra).

:class:`SoongSessionService` is a ``google.adk.sessions.BaseSessionService``. An ADK session
(``app_name``, ``user_id``, ``id``) is one store session, named by a session key (namespace
``google-adk``, the key the JSON array of those three) claimed in the transaction that creates
it, so the same id under two users is two sessions. Each non-partial event is one node on the
session's active path: its text as text blocks (what the tree, search and viewer show) and the
whole serialized ``Event`` as a JSON block (spilled to a file when large), read back exactly.
An event's ``branch`` and ``author`` name sub agents of the session's root agent, its
``invocation_id`` a run of that agent. State lives in ``keyed_states`` rows by scope (the app's,
the user's, the session's own), changed in the transaction of the event whose delta changes
it; ``temp:`` keys are never written. The mapping is documented in ``docs/adk.md``.
"""

from __future__ import annotations

import contextlib
import copy
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import orjson
from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from sqlalchemy.engine import URL

from soong_store.errors import InvalidArgument, InvalidTransition, NotFound
from soong_store.integrations import _adk_rows as adk_rows
from soong_store.integrations._adk_rows import (
    APP_STATES,
    NAMESPACE,
    SESSION_STATES,
    USER_STATES,
    owner_of,
)
from soong_store.model.content import ContentBlock, JsonBlock
from soong_store.model.enums import Role
from soong_store.model.frozen import thaw
from soong_store.model.records import NodeRecord
from soong_store.store import SessionStore, run_read, run_write, runtime_of, scrub_of
from soong_store.write import session_keys

__all__ = [
    "APP_STATES",
    "NAMESPACE",
    "SESSION_STATES",
    "USER_STATES",
    "SoongSessionService",
    "owner_of",
]

_REMEMBERED = 4096
"""How many sessions' last appends a service remembers."""
_TRIES = 16
"""How often an append starts again when another writer appended meanwhile."""
_PAGE = 64
"""How many nodes a read filtered by ``after_timestamp`` climbs at first (doubled as needed)."""


@dataclass(frozen=True, slots=True)
class _Placed:
    """Where a session's last append went, remembered for the next one.

    An event of the same agent and invocation goes there too, under that node, without asking
    the database first: a wrong guess (another writer appended, or ended the run) fails the
    unit, which starts again from the database.
    """

    session_id: str
    names: tuple[str, ...]
    invocation_id: str
    agent_id: str
    run_id: str
    last_node: str | None


class SoongSessionService(BaseSessionService):
    """ADK's session service on a soong store.

    Give ``store`` (an open :class:`~soong_store.SessionStore`, which the caller closes) or
    ``home``/``url`` (then the service opens a store of its own on first use and closes it in
    :meth:`close`).
    """

    def __init__(
        self,
        *,
        home: str | os.PathLike[str] | None = None,
        url: str | URL | None = None,
        store: SessionStore | None = None,
    ) -> None:
        if store is not None and (home is not None or url is not None):
            raise InvalidArgument("give either store= or home=/url=, not both")
        self._own = store is None
        self._store = store if store is not None else SessionStore(home=home, url=url)
        self._placed: dict[str, _Placed] = {}

    @property
    def store(self) -> SessionStore:
        """The store the sessions live in."""
        return self._store

    async def close(self) -> None:
        """Close the store this service opened (a given store stays open)."""
        if self._own and runtime_of(self._store).is_open:
            await self._store.close()

    async def __aenter__(self) -> SoongSessionService:
        await self._ready()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _ready(self) -> SessionStore:
        if self._own and not runtime_of(self._store).is_open:
            await self._store.open()
        return self._store

    async def store_session_id(self, *, app_name: str, user_id: str, session_id: str) -> str | None:
        """The id of the store session an ADK session is (for the CLI), ``None`` if none."""
        key = adk_rows.session_key(app_name, user_id, session_id)
        store = await self._ready()
        return await run_read(store, partial(session_keys.lookup, namespace=NAMESPACE, key=key))

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """A new session; its ``app:`` and ``user:`` keys update the app's and user's state.

        Raises:
            AlreadyExistsError: the user has a session of that id in the app.
        """
        chosen = (session_id or "").strip() or str(uuid.uuid4())
        key = adk_rows.session_key(app_name, user_id, chosen)
        store = await self._ready()
        deltas = _scrubbed(store, _session_util.extract_json_safe_state_delta(state or {}))
        now = time.time()
        job = partial(
            adk_rows.create,
            key=key,
            app_name=app_name,
            user_id=user_id,
            deltas=deltas,
            now=now,
            cwd=os.getcwd(),
        )
        made = await run_write(store, job)
        if made is None:
            raise AlreadyExistsError(f"Session with id {chosen} already exists.")
        app_state, user_state = made
        return Session(
            app_name=app_name,
            user_id=user_id,
            id=chosen,
            state=_merged(app_state, user_state, deltas["session"]),
            events=[],
            last_update_time=now,
        )

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with the events ``config`` asks for (all by default), oldest first.

        Only those events are read: the tail of the session's path, ``num_recent_events``
        nodes long, or climbed until an event older than ``after_timestamp``.
        """
        sid = session_id.strip()
        store = await self._ready()
        found = await run_read(
            store, partial(adk_rows.read_one, app_name=app_name, user_id=user_id, sid=sid)
        )
        if found is None:
            return None
        row, app_state, user_state = found
        try:
            events = await self._events(row.store_id, row.last_node, config)
        except NotFound:  # deleted meanwhile
            return None
        return Session(
            app_name=app_name,
            user_id=user_id,
            id=sid,
            state=_merged(app_state, user_state, row.state),
            events=events,
            last_update_time=row.update_time,
        )

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The app's sessions (the user's, or every user's), oldest update first, no events."""
        store = await self._ready()
        rows, app_state, user_states = await run_read(
            store, partial(adk_rows.read_many, app_name=app_name, user_id=user_id)
        )
        return ListSessionsResponse(
            sessions=[
                Session(
                    app_name=app_name,
                    user_id=row.user_id,
                    id=row.session_id,
                    state=_merged(app_state, user_states.get(row.user_id, {}), row.state),
                    events=[],
                    last_update_time=row.update_time,
                )
                for row in rows
            ]
        )

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session: its nodes, events, files and state (none: nothing happens)."""
        key = adk_rows.session_key(app_name, user_id, session_id.strip())
        self._forget_place(key)
        store = await self._ready()
        found = await run_read(store, partial(session_keys.lookup, namespace=NAMESPACE, key=key))
        if found is not None:
            with contextlib.suppress(NotFound):  # deleted meanwhile
                await store.delete_session(found)
        await run_write(store, partial(adk_rows.forget, key=key))

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's state in the app, its keys without the ``user:`` prefix."""
        store = await self._ready()
        return await run_read(
            store,
            partial(
                adk_rows.state, namespace=USER_STATES, key=adk_rows.state_key(app_name, user_id)
            ),
        )

    async def append_event(self, session: Session, event: Event) -> Event:
        """Store a non-partial event and its state delta in one transaction, then add it.

        Raises:
            SessionNotFoundError: the session is not stored (never, or deleted since).
            StaleSessionError: the session was written after ``session`` was read.
        """
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        key = adk_rows.session_key(session.app_name, session.user_id, session.id)
        store = await self._ready()
        delta = _session_util.extract_json_safe_state_delta(event.actions.state_delta or {})
        deltas = _scrubbed(store, delta)
        role, content, metadata = _node_of(event)
        names = tuple(_agent_names(event))
        placed = self._placed.get(key)
        for _ in range(_TRIES):
            fresh = placed is None
            try:
                if placed is None or (placed.names, placed.invocation_id) != (
                    names,
                    event.invocation_id,
                ):
                    placed = await self._place(key, placed, names, event.invocation_id)
                async with store.transaction(placed.session_id) as tx:
                    node_id = tx.add_node(
                        role,
                        "message",
                        content,
                        agent_id=placed.agent_id,
                        run_id=placed.run_id,
                        parent_id=placed.last_node,
                        metadata=metadata,
                    )
                    step = partial(
                        adk_rows.apply_delta,
                        app_name=session.app_name,
                        user_id=session.user_id,
                        key=key,
                        deltas=deltas,
                        seen=session.last_update_time,
                        timestamp=event.timestamp,
                        parent=placed.last_node,
                        node_id=node_id,
                    )
                    tx.add_step(step)
            except adk_rows.Moved:
                self._forget_place(key)
                placed = None
                continue
            except InvalidTransition as exc:  # another invocation ended the run meanwhile
                if exc.context.get("run_id") is None:
                    raise
                self._forget_place(key)
                placed = None
                continue
            except adk_rows.Stale as exc:
                self._forget_place(key)
                raise StaleSessionError(str(exc)) from None
            except NotFound as exc:
                gone = isinstance(exc, adk_rows.Gone) or (
                    placed is not None and exc.context.get("session_id") == placed.session_id
                )
                self._forget_place(key)
                placed = None
                if not gone:
                    raise
                if fresh:
                    raise SessionNotFoundError(f"Session {session.id} not found.") from None
                continue  # the remembered store session was deleted: look the key up again
            self._remember(key, replace(placed, last_node=node_id))
            break
        else:
            raise StaleSessionError(
                f"ADK session {key} kept being modified in storage while appending: read it again"
            )
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)

    async def _place(
        self, key: str, known: _Placed | None, names: tuple[str, ...], invocation_id: str
    ) -> _Placed:
        """Where an event goes: its store session, agent, run and parent node (made if missing)."""
        store = self._store
        sid = known.session_id if known is not None else None
        if sid is None:
            sid = await run_read(store, partial(session_keys.lookup, namespace=NAMESPACE, key=key))
            if sid is None:
                raise adk_rows.Gone(f"ADK session {key} is not stored")
        job = partial(
            adk_rows.place, session_id=sid, key=key, names=list(names), invocation_id=invocation_id
        )
        agent_id, run_id, last = await run_write(store, job)
        return _Placed(sid, names, invocation_id, agent_id, run_id, last)

    def _remember(self, key: str, placed: _Placed) -> None:
        self._placed.pop(key, None)
        if len(self._placed) >= _REMEMBERED:
            del self._placed[next(iter(self._placed))]
        self._placed[key] = placed

    def _forget_place(self, key: str) -> None:
        self._placed.pop(key, None)

    async def _events(
        self, store_id: str, last: str | None, config: GetSessionConfig | None
    ) -> list[Event]:
        recent = config.num_recent_events if config is not None else None
        after = config.after_timestamp if config is not None else None
        if recent == 0 or last is None:
            return []
        if not after:  # ADK reads 0.0 as no filter too
            return await self._loaded(await self._path(store_id, last, recent))
        limit = recent or _PAGE
        while True:
            nodes = await self._path(store_id, last, limit)
            enough = len(nodes) < limit or (nodes and _timestamp(nodes[0]) < after)
            if enough or limit == recent:
                kept = [n for n in nodes if _timestamp(n) >= after]
                return await self._loaded(kept)
            limit = limit * 2 if recent is None else min(limit * 2, recent)

    async def _path(self, store_id: str, last: str, limit: int | None) -> list[NodeRecord]:
        """The last ``limit`` nodes of the path up from ``last`` (the events' chain), root first."""
        return await self._store.active_path(store_id, node_id=last, limit=limit)

    async def _loaded(self, nodes: Sequence[NodeRecord]) -> list[Event]:
        events: list[Event] = []
        for node in nodes:
            raw = await self._event_json(node.content)
            if raw is not None:
                events.append(Event.model_validate_json(raw))
        return events

    async def _event_json(self, blocks: Sequence[ContentBlock]) -> bytes | None:
        for block in blocks:
            if isinstance(block, JsonBlock):
                if block.artifact_ref is not None:
                    return await self._store.read_artifact(block.artifact_ref)
                return orjson.dumps(thaw(block.data))
        return None  # a node another writer appended: not an ADK event


def _scrubbed(store: SessionStore, deltas: dict[str, Any]) -> dict[str, Any]:
    """State deltas with the store's scrubber applied (its events' nodes are scrubbed as added)."""
    scrub = scrub_of(store)
    if scrub is None:
        return deltas
    from soong_store.scrub.values import scrub_json

    return scrub_json(deltas, scrub, "ADK state")  # type: ignore[no-any-return]


def _merged(app: dict[str, Any], user: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(own)
    merged.update({State.APP_PREFIX + k: v for k, v in app.items()})
    merged.update({State.USER_PREFIX + k: v for k, v in user.items()})
    return merged


def _timestamp(node: NodeRecord) -> float:
    own = node.metadata.get(NAMESPACE) if isinstance(node.metadata, dict) else None
    value = own.get("timestamp") if isinstance(own, dict) else None
    return float(value) if isinstance(value, int | float) else float("-inf")


def _node_of(event: Event) -> tuple[Role, list[dict[str, Any]], dict[str, Any]]:
    """The node of an event: role, its text blocks then the whole event, and what to filter on."""
    parts = event.content.parts if event.content is not None and event.content.parts else []
    blocks: list[dict[str, Any]] = [
        {"type": "text", "text": part.text} for part in parts if part.text and not part.thought
    ]
    blocks.append({"type": "json", "data": _event_data(event)})
    own = {
        "event_id": event.id,
        "author": event.author,
        "invocation_id": event.invocation_id,
        "timestamp": event.timestamp,
    }
    if event.branch:
        own["branch"] = event.branch
    role = Role.USER if event.author == "user" else Role.ASSISTANT
    return role, blocks, {NAMESPACE: own}


def _event_data(event: Event) -> dict[str, Any]:
    """The event as JSON: without its unset (``None``) fields when it reads back equal so."""
    short: dict[str, Any] = event.model_dump(mode="json", exclude_none=True)
    if Event.model_validate_json(orjson.dumps(short)) == event:
        return short
    whole: dict[str, Any] = event.model_dump(mode="json")
    return whole


def _agent_names(event: Event) -> list[str]:
    """The sub-agent path an event belongs to: its branch, ending at its author."""
    if event.author == "user":
        return []
    names = [n for n in (event.branch or "").split(".") if n]
    if event.author in names:
        return names[: names.index(event.author) + 1]
    return [*names, event.author]
