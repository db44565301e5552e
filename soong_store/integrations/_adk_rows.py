"""The rows the ADK session service keeps beside its sessions, as reader and writer jobs.

An ADK session's key (``session_keys``, namespace ``google-adk``), its state and the app's and
user's (``keyed_states`` rows by scope), and the sub agents and runs its events name: what
:mod:`soong_store.integrations.adk` reads and writes on a connection, in the transactions the
store's reader threads and writer run.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Connection, delete, select, update

from soong_store.backends.base import lock_session
from soong_store.errors import InvalidArgument, NotFound
from soong_store.model import codec
from soong_store.model.enums import AgentType, EndReason, RunStatus
from soong_store.schema.tables import agents_table, keyed_states_table, runs_table
from soong_store.schema.tables import session_keys_table as keys_table
from soong_store.write import lifecycle as writes
from soong_store.write import session_keys

NAMESPACE = "google-adk"
_PLAIN_OWNER = re.compile(r"[A-Za-z0-9_.@-]{1,128}")
"""An ADK user id kept as it is for the owner: an owner's characters but ``:``, which marks the
encoded ones."""


def owner_of(user_id: str) -> str:
    """The store owner of an ADK user: its id where an owner can hold it, else encoded.

    ADK takes any string; an owner is 1-128 characters of ``[A-Za-z0-9_.@:-]``. Other ids
    become ``x:`` and the hex of their UTF-8 (up to 63 bytes), or ``h:`` and its SHA-256: no
    two users share an owner, as a plain id never holds ``:``.
    """
    if _PLAIN_OWNER.fullmatch(user_id):
        return user_id
    raw = user_id.encode("utf-8", "surrogatepass")
    return f"x:{raw.hex()}" if len(raw) <= 63 else f"h:{hashlib.sha256(raw).hexdigest()}"


"""The session-key namespace of ADK sessions (and the metadata key of what this module writes)."""
APP_STATES = "google-adk:app"
USER_STATES = "google-adk:user"
SESSION_STATES = "google-adk:session"


def state_key(*parts: str) -> str:
    return orjson.dumps(list(parts)).decode()


def key_prefix(*parts: str) -> str:
    """What the keys of every session under ``parts`` (an app, or an app and user) start with."""
    return state_key(*parts)[:-1] + ","


class Stale(InvalidArgument):
    """The session was written after the caller's copy of it was read."""


class Moved(InvalidArgument):
    """Another writer appended since the newest node was read (not stale: try again)."""


class Gone(NotFound):
    """The ADK session has no store session (never created, or deleted)."""


@dataclass(frozen=True, slots=True)
class StoredSession:
    """An ADK session as its key and state rows hold it (no events)."""

    store_id: str
    user_id: str
    session_id: str
    state: dict[str, Any]
    update_time: float
    last_node: str | None


def session_key(app_name: object, user_id: object, session_id: object) -> str:
    for value, what in ((app_name, "app_name"), (user_id, "user_id"), (session_id, "session id")):
        if not isinstance(value, str):
            raise InvalidArgument(f"invalid {what} {value!r}: expected a string")
    key = state_key(str(app_name), str(user_id), str(session_id))
    return session_keys.check_key(NAMESPACE, key)[1]


def create(
    connection: Connection,
    key: str,
    app_name: str,
    user_id: str,
    deltas: dict[str, dict[str, Any]],
    now: float,
    cwd: str,
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Writer job: the session, its key and state rows; ``None`` if the key is taken."""
    lock_session(connection, f"key:{NAMESPACE}:{key}")
    if session_keys.lookup(connection, NAMESPACE, key) is not None:
        return None
    _, user, sid = orjson.loads(key)
    metadata = codec.dumps_text({NAMESPACE: {"app_name": app_name, "user_id": user, "id": sid}})
    record = writes.create_session(
        connection,
        cwd=cwd,
        metadata_json=metadata,
        root_agent_type=AgentType.MAIN,
        owner=owner_of(user),
    )
    session_keys.claim(connection, NAMESPACE, key, record.session_id)
    app_state = _merge(connection, APP_STATES, state_key(app_name), deltas["app"], now)
    user_state = _merge(connection, USER_STATES, state_key(app_name, user_id), deltas["user"], now)
    _put(connection, SESSION_STATES, key, deltas["session"], now)
    return app_state, user_state


def apply_delta(
    connection: Connection,
    app_name: str,
    user_id: str,
    key: str,
    deltas: dict[str, dict[str, Any]],
    seen: float,
    timestamp: float,
    parent: str | None,
    node_id: str,
) -> None:
    """Unit step: refuse a stale writer, then apply the event's delta, its time and node."""
    row = _state_row(connection, SESSION_STATES, key)
    if row is None:
        raise Gone(f"ADK session {key} is not stored")
    state, stored_time, last = row
    if stored_time > seen:
        raise Stale(
            f"ADK session {key} has been modified in storage since it was loaded (written at"
            f" {stored_time!r}, the copy appended to was read at {seen!r}): read it again"
        )
    if deltas["app"]:
        _merge(connection, APP_STATES, state_key(app_name), deltas["app"], timestamp)
    if deltas["user"]:
        _merge(connection, USER_STATES, state_key(app_name, user_id), deltas["user"], timestamp)
    if last != parent:
        raise Moved(f"ADK session {key} had an event appended meanwhile")
    state.update(deltas["session"])
    _put(connection, SESSION_STATES, key, state, timestamp, node_id=node_id)


def place(
    connection: Connection, session_id: str, key: str, names: list[str], invocation_id: str
) -> tuple[str, str, str | None]:
    """Writer job: the agent and run an event belongs to, made if missing, and the newest node.

    Runs of the session's earlier invocations end (completed) when a new invocation starts.
    """
    lock_session(connection, session_id)
    root = connection.execute(
        select(agents_table.c.agent_id).where(
            agents_table.c.session_id == session_id, agents_table.c.parent_agent_id.is_(None)
        )
    ).scalar()
    if root is None:
        raise Gone(f"session {session_id!r} has no root agent")
    agent_id = str(root)
    for name in names:
        agent_id = _sub_agent(connection, session_id, agent_id, name)
    running = connection.execute(
        select(runs_table.c.run_id, runs_table.c.agent_id, runs_table.c.metadata_json).where(
            runs_table.c.session_id == session_id,
            runs_table.c.status == str(RunStatus.RUNNING),
        )
    ).all()
    mine: str | None = None
    for run_id, run_agent, metadata_json in running:
        own = (codec.loads(metadata_json) or {}).get(NAMESPACE, {})
        if own.get("invocation_id") != invocation_id:
            writes.finish_run(
                connection, run_id, RunStatus.COMPLETED, EndReason.COMPLETED, None, None, None
            )
        elif run_agent == agent_id:
            mine = run_id
    if mine is None:
        metadata = codec.dumps_text({NAMESPACE: {"invocation_id": invocation_id}})
        mine = writes.start_run(
            connection, session_id, agent_id, RunStatus.RUNNING, metadata
        ).run_id
    row = _state_row(connection, SESSION_STATES, key)
    if row is None:
        raise Gone(f"ADK session {key} is not stored")
    return agent_id, mine, row[2]


def _sub_agent(connection: Connection, session_id: str, parent: str, name: str) -> str:
    found = connection.execute(
        select(agents_table.c.agent_id, agents_table.c.metadata_json).where(
            agents_table.c.session_id == session_id, agents_table.c.parent_agent_id == parent
        )
    ).all()
    for agent_id, metadata_json in found:
        if (codec.loads(metadata_json) or {}).get(NAMESPACE, {}).get("name") == name:
            return str(agent_id)
    metadata = codec.dumps_text({NAMESPACE: {"name": name}, "name": name, "purpose": name})
    return writes.create_agent(
        connection, session_id, AgentType.SUB, parent, None, None, metadata
    ).agent_id


def forget(connection: Connection, key: str) -> None:
    """Writer job: a deleted session's state row."""
    connection.execute(
        delete(keyed_states_table).where(
            keyed_states_table.c.namespace == SESSION_STATES, keyed_states_table.c["key"] == key
        )
    )


def _state_row(
    connection: Connection, namespace: str, key: str
) -> tuple[dict[str, Any], float, str | None] | None:
    """A state row: the state, its update time and its newest node."""
    t = keyed_states_table
    row = connection.execute(
        select(t.c.state_json, t.c.update_time, t.c.node_id).where(
            t.c.namespace == namespace, t.c["key"] == key
        )
    ).first()
    if row is None:
        return None
    state: dict[str, Any] = codec.loads(row[0])
    return state, float(row[1]), row[2]


def state(connection: Connection, namespace: str, key: str) -> dict[str, Any]:
    row = _state_row(connection, namespace, key)
    return row[0] if row is not None else {}


def _put(
    connection: Connection,
    namespace: str,
    key: str,
    state: dict[str, Any],
    at: float,
    *,
    node_id: str | None = None,
) -> None:
    t = keyed_states_table
    values = {
        "state_json": codec.dumps_text(state, what="ADK state"),
        "update_time": at,
        "node_id": node_id,
    }
    done = connection.execute(
        update(t).where(t.c.namespace == namespace, t.c["key"] == key).values(values)
    )
    if done.rowcount == 0:
        connection.execute(t.insert(), {"namespace": namespace, "key": key, **values})


def _merge(
    connection: Connection, namespace: str, key: str, delta: dict[str, Any], at: float
) -> dict[str, Any]:
    """The shared state after ``delta`` (a key's value replaced); written only if it changes."""
    lock_session(connection, f"state:{namespace}:{key}")
    row = _state_row(connection, namespace, key)
    state = row[0] if row is not None else {}
    if delta:
        state.update(delta)
        _put(connection, namespace, key, state, at)
    return state


def read_one(
    connection: Connection, app_name: str, user_id: str, sid: str
) -> tuple[StoredSession, dict[str, Any], dict[str, Any]] | None:
    """Reader job: one session's key and state rows, and the app's and user's state."""
    key = session_key(app_name, user_id, sid)
    store_id = session_keys.lookup(connection, NAMESPACE, key)
    row = _state_row(connection, SESSION_STATES, key) if store_id is not None else None
    if store_id is None or row is None:
        return None
    app_state = state(connection, APP_STATES, state_key(app_name))
    user_state = state(connection, USER_STATES, state_key(app_name, user_id))
    return StoredSession(store_id, user_id, sid, row[0], row[1], row[2]), app_state, user_state


def read_many(
    connection: Connection, app_name: str, user_id: str | None
) -> tuple[list[StoredSession], dict[str, Any], dict[str, dict[str, Any]]]:
    """Reader job: the sessions of an app (or of a user in it) from their key and state rows."""
    t = keyed_states_table
    prefix = key_prefix(app_name) if user_id is None else key_prefix(app_name, user_id)
    found = connection.execute(
        select(keys_table.c.session_id, t.c["key"], t.c.state_json, t.c.update_time)
        .join(keys_table, keys_table.c["key"] == t.c["key"])
        .where(
            t.c.namespace == SESSION_STATES,
            keys_table.c.namespace == NAMESPACE,
            t.c["key"].startswith(prefix, autoescape=True),
        )
    ).all()
    rows: list[StoredSession] = []
    for store_id, key, state_json, update_time in found:
        _, user, sid = orjson.loads(key)
        rows.append(
            StoredSession(store_id, user, sid, codec.loads(state_json), float(update_time), None)
        )
    rows.sort(key=lambda r: (r.update_time, r.user_id, r.session_id))
    users: dict[str, dict[str, Any]] = {}
    user_rows = connection.execute(
        select(t.c["key"], t.c.state_json).where(
            t.c.namespace == USER_STATES,
            t.c["key"].startswith(
                key_prefix(app_name) if user_id is None else state_key(app_name, user_id),
                autoescape=True,
            ),
        )
    ).all()
    for key, state_json in user_rows:
        parts = orjson.loads(key)
        if len(parts) == 2 and (user_id is None or parts[1] == user_id):
            users[parts[1]] = codec.loads(state_json)
    return rows, state(connection, APP_STATES, state_key(app_name)), users
