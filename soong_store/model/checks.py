"""The checks of a caller's arguments: ids, enum values, integers and bounds, event types.

The facade checks every argument once, with these, before anything is queued or read; what is
below it (the unit of work, the writer, the reads) takes the checked values as they are. Each
check returns the value to use or raises :class:`~soong_store.errors.InvalidArgument` (an id of
the wrong shape: :class:`~soong_store.errors.InvalidIdentifier`) naming it.

A session id becomes part of two table names, so it is the one id whose shape is a security
matter: :func:`check_session_id` is applied before any SQL is built from it. The other ids are
ordinary bound parameters; they are still checked for shape so that typos fail early and clearly.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum
from functools import cache
from typing import TypeVar

from soong_store.errors import InvalidArgument, InvalidIdentifier
from soong_store.model import codec

E = TypeVar("E", bound=StrEnum)

_MAX_EVENT_TYPE = 128

SESSION_ID_RE = re.compile(r"[A-Za-z0-9_]{1,56}")
"""What a session id must match (56 keeps ``events_<sid>`` within PostgreSQL's 63 characters)."""

_RECORD_ID_RE = re.compile(r"[A-Za-z0-9_\-]{1,128}")


def check_session_id(value: object) -> str:
    """Return ``value`` if it is a safe session id, else raise :class:`InvalidIdentifier`."""
    if not isinstance(value, str) or SESSION_ID_RE.fullmatch(value) is None:
        raise InvalidIdentifier(
            f"invalid session id {value!r}: expected 1-56 characters of [A-Za-z0-9_]",
            session_id=value,
        )
    return value


def check_id(value: object, kind: str) -> str:
    """Return ``value`` if it has the shape of a record id (node, event, agent, run, artifact)."""
    if not isinstance(value, str) or _RECORD_ID_RE.fullmatch(value) is None:
        raise InvalidIdentifier(
            f"invalid {kind} id {value!r}: expected 1-128 characters of [A-Za-z0-9_-]",
            **{f"{kind}_id": value},
        )
    return value


def check_optional_id(value: object, kind: str) -> str | None:
    """Like :func:`check_id`, letting ``None`` through."""
    return None if value is None else check_id(value, kind)


def enum_value(enum: type[E], value: object, what: str) -> E:
    """Convert ``value`` to a member of ``enum`` or raise :class:`InvalidArgument` naming it."""
    if type(value) is str or type(value) is enum:  # a member, or its value as a plain string
        members: dict[str, E] = _members(enum)
        found = members.get(value)
        if found is not None:
            return found
    try:
        return enum(value)  # type: ignore[arg-type]  # anything else is refused below
    except ValueError:
        allowed = ", ".join(member.value for member in enum)
        raise InvalidArgument(f"invalid {what} {value!r}: expected one of {allowed}") from None


@cache
def _members(enum: type[E]) -> dict[str, E]:
    """``enum``'s members by value (a member is its own key: it equals its value)."""
    return {member.value: member for member in enum}


def check_event_type(event_type: object) -> str:
    """An event type is free text, but a short non-empty one."""
    return codec.check_text(event_type, "event type", max_len=_MAX_EVENT_TYPE)


MAX_INTEGER = 2**63 - 1
"""The largest integer an ``INTEGER`` column holds: a count or bound beyond it is refused here."""


def _shown(value: object) -> str:
    """``repr(value)``, but a huge integer by its size (Python refuses to print one as text)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"<an integer of {value.bit_length()} bits>"
    return repr(value)


def check_integer(value: object, what: str, *, low: int = 0) -> int | None:
    """An integer from ``low`` to :data:`MAX_INTEGER`, or ``None``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_INTEGER:
        raise InvalidArgument(
            f"invalid {what} {_shown(value)}: expected an integer from {low} to {MAX_INTEGER}"
        )
    return value


def check_bound(value: object, what: str, *, low: int = 0) -> int | None:
    """A bound of a read (a limit, a cursor): an integer >= ``low``, capped at the column's range.

    A bound beyond every stored number means the same as the largest one, so it is taken as that
    rather than refused.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_INTEGER:
        return MAX_INTEGER
    return check_integer(value, what, low=low)


def check_token_count(value: object) -> int | None:
    """``token_count`` is an integer from 0 to :data:`MAX_INTEGER`, or ``None``."""
    return check_integer(value, "token_count")


def check_lock_wait(value: object) -> float:
    """Seconds a busy database is waited for: a finite number above 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise InvalidArgument(f"invalid lock_wait {value!r}: expected seconds > 0", lock_wait=value)
    return float(value)


OWNER_RE = re.compile(r"[A-Za-z0-9_.@:\-]{1,128}")
"""What an owner (a user or tenant) must match: compared, listed, typed on a command line."""

MAX_KEY = 256
"""The longest session key, in characters."""


def check_owner(value: object) -> str:
    """Return ``value`` if it is an owner: 1-128 characters of ``[A-Za-z0-9_.@:-]``."""
    if not isinstance(value, str) or OWNER_RE.fullmatch(value) is None:
        raise InvalidArgument(
            f"invalid owner {value!r:.200}: expected 1-128 characters of [A-Za-z0-9_.@:-]",
            owner=value,
        )
    return value


def check_optional_owner(value: object) -> str | None:
    """Like :func:`check_owner`, letting ``None`` (no owner) through."""
    return None if value is None else check_owner(value)


def check_key(value: object) -> str:
    """Return ``value`` if it is a session key: 1-256 printable characters."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_KEY or not value.isprintable():
        raise InvalidArgument(
            f"invalid key {value!r:.300}: expected 1-{MAX_KEY} printable characters", key=value
        )
    return value
