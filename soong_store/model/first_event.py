"""The ``session_created`` event of a session, the same whenever it is written.

A session's pair is created with its first write (:func:`soong_store.catalog.lookup.create_pair`),
so its ``session_created`` event is written then, as ``seq`` 1, and until then a timeline answers
with the same event built from the ``sessions`` row. Everything in it comes from that row: the
time is the session's ``created_at``, the agent its root agent, and the id is derived from the
session id and that time (time-sortable like every event id), so a read before the first write
and a read after it see one and the same event.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from soong_store.model import codec
from soong_store.model.enums import EventLevel
from soong_store.model.ids import crockford26

EVENT_TYPE = "session_created"


def _event_id(session_id: str, created_at: str) -> str:
    """``evt_`` and 26 characters: the creation millisecond, then 80 bits of the id's digest."""
    ms = int(datetime.fromisoformat(created_at).timestamp() * 1000)
    digest = int.from_bytes(hashlib.sha256(session_id.encode()).digest()[:10], "big") >> 1
    return "evt_" + crockford26((ms << 80) | digest)


def created_event_row(session: Mapping[Any, Any]) -> dict[str, Any]:
    """The ``events_<sid>`` row of the session's ``session_created`` event (``seq`` 1)."""
    payload = {"cwd": session["cwd"], "parent_session_id": session["parent_session_id"]}
    return {
        "event_id": _event_id(session["session_id"], session["created_at"]),
        "seq": 1,
        "run_seq": None,
        "agent_id": session["root_agent_id"],
        "run_id": None,
        "level": str(EventLevel.INFO),
        "event_type": EVENT_TYPE,
        "node_id": None,
        "tool_call_id": None,
        "payload_json": codec.dumps_optional(payload, what="event payload"),
        "created_at": session["created_at"],
    }
