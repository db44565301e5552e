"""Session keys: a session found by an outside name, in one indexed lookup.

A key is a ``(namespace, key)`` pair naming one session: an SDK's session id
(:mod:`soong_store.integrations.openai_agents`), or the source id of an imported conversation
(:mod:`soong_store.importers`). :func:`claim` runs in the transaction that writes the session, so
a name is taken once, by the first writer to commit, whichever process it runs in.
"""

from __future__ import annotations

from sqlalchemy import Connection, select

from soong_store.backends.base import lock_session
from soong_store.errors import InvalidArgument
from soong_store.model.ids import utc_now
from soong_store.schema.tables import session_keys_table as _keys

_MAX_KEY = 4096


class KeyTaken(InvalidArgument):
    """The name is taken already: ``session_id`` is the session it names."""

    session_id: str


def check_key(namespace: object, key: object) -> tuple[str, str]:
    """A namespace and a key: non-empty text, bounded, without NUL."""
    for value, what in ((namespace, "key namespace"), (key, "session key")):
        if not isinstance(value, str) or not 0 < len(value) <= _MAX_KEY or "\x00" in value:
            raise InvalidArgument(
                f"invalid {what} {value!r}: expected 1-{_MAX_KEY} characters without NUL"
            )
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgument(f"invalid {what} {value!r}: {exc.reason}") from None
    return str(namespace), str(key)


def lookup(connection: Connection, namespace: str, key: str) -> str | None:
    """The session the name names, if any (one primary-key lookup)."""
    found: str | None = connection.execute(
        select(_keys.c.session_id).where(_keys.c.namespace == namespace, _keys.c["key"] == key)
    ).scalar()
    return found


def sessions_keyed(connection: Connection, key: str) -> list[tuple[str, str]]:
    """``(namespace, session_id)`` of each session ``key`` names, in any namespace.

    For a name given without its namespace (the CLI takes a session's key where it takes its id).
    The primary key leads with the namespace, so this reads the whole table: one row a keyed
    session, read once per command.
    """
    rows = connection.execute(
        select(_keys.c.namespace, _keys.c.session_id)
        .where(_keys.c["key"] == key)
        .order_by(_keys.c.namespace)
    )
    return [(namespace, session_id) for namespace, session_id in rows]


def claim(connection: Connection, namespace: str, key: str, session_id: str) -> None:
    """Give the name to ``session_id`` in the current write transaction.

    Raises:
        KeyTaken: another session holds it (its id is the error's ``session_id``).
    """
    lock_session(connection, f"key:{namespace}:{key}")
    taken = lookup(connection, namespace, key)
    if taken is not None:
        raise KeyTaken(
            f"{namespace} key {key!r} names session {taken!r} already",
            session_id=taken,
        )
    connection.execute(
        _keys.insert(),
        {"namespace": namespace, "key": key, "session_id": session_id, "created_at": utc_now()},
    )
