"""The rules one stored row must satisfy on its own: its columns, their types and their values.

These are what the API guarantees of everything it writes (types and ranges, enums, the shape of
ids, the timestamp format, JSON in exactly the store's encoding, valid content blocks, safe text),
written once as pure functions of a plain row. ``check`` applies them to rows read back from the
database, an import applies them to the rows of its file before anything is written; the session
level rules (references between rows) are in :mod:`soong_store.rules.session`.
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import Integer, Table

from soong_store.errors import SoongStoreError
from soong_store.model import codec
from soong_store.model.checks import check_id, check_key, check_owner, check_session_id
from soong_store.model.content import decode_stored_content
from soong_store.model.enums import (
    TERMINAL_RUN_STATUSES,
    AgentStatus,
    AgentType,
    EndReason,
    EventLevel,
    NodeType,
    Role,
    RunStatus,
    SessionStatus,
)
from soong_store.rules.artifacts import check_filename, check_mime_type, check_short_text
from soong_store.schema.session_tables import session_tables
from soong_store.schema.tables import agents_table, artifacts_table, runs_table, sessions_table

KINDS = ("session", "agent", "run", "node", "event", "artifact")
"""The kinds of row of one session, in the order an export holds them."""

JSON_COLUMNS = ("metadata_json", "result_json", "usage_json", "error_json", "payload_json")
"""Columns holding JSON text (``content_json`` holds content blocks, checked apart)."""

ENCODED_COLUMNS = frozenset({*JSON_COLUMNS, "content_json"})
"""The columns a row made by the store's own encoders is trusted with (``check_row(encoded=)``)."""

INT64 = (-(1 << 63), (1 << 63) - 1)
"""The range of an INTEGER column (SQLite and PostgreSQL ``bigint`` alike)."""

_ENUMS: dict[tuple[str, str], type[Any]] = {
    ("session", "status"): SessionStatus,
    ("agent", "agent_type"): AgentType,
    ("agent", "status"): AgentStatus,
    ("run", "status"): RunStatus,
    ("run", "end_reason"): EndReason,
    ("node", "role"): Role,
    ("node", "node_type"): NodeType,
    ("event", "level"): EventLevel,
}
_LOWEST = {"node_seq": 1, "seq": 1, "run_seq": 1, "token_count": 0, "turn_count": 0}
_LOWEST["size_bytes"] = 0
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00")
_MAX_EVENT_TYPE = 128
_MAX_CWD = 4096


class RowError(ValueError):
    """A row breaks a rule: ``column`` names where (``None``: the row as a whole)."""

    def __init__(self, message: str, column: str | None = None) -> None:
        super().__init__(message)
        self.column = column


@lru_cache(maxsize=1)
def _template() -> dict[str, Table]:
    pair = session_tables("sess_template")
    return {
        "session": sessions_table,
        "agent": agents_table,
        "run": runs_table,
        "node": pair.nodes,
        "event": pair.events,
        "artifact": artifacts_table,
    }


def columns(kind: str) -> tuple[str, ...]:
    """The stored columns of a kind of row, in table order."""
    return tuple(_template()[kind].c.keys())


def check_row(session_id: str, kind: str, row: Any, *, encoded: bool = False) -> dict[str, Any]:
    """Return ``row`` if it is a valid stored row of ``kind`` in session ``session_id``.

    ``encoded``: the row's JSON columns (:data:`ENCODED_COLUMNS`) were written by the store's
    own encoders in this process (content from validated blocks), so they are not decoded
    again; their type and nullness, and every other column, are checked as always.

    Raises:
        RowError: the first rule the row breaks, naming the column.
    """
    names, specs = _columns_of(_template()[kind])
    if not isinstance(row, dict) or row.keys() != names:
        raise RowError(f"a {kind} row must hold exactly {', '.join(columns(kind))}")
    for name, nullable, want in specs:
        value = row[name]
        if value is None:
            if nullable:
                continue
            raise RowError(f"{kind}.{name} must not be null", name)
        if type(value) is not want:
            raise RowError(f"{kind}.{name} must be {want.__name__}, got {value!r:.80}", name)
        if encoded and name in ENCODED_COLUMNS:
            continue
        try:
            _check_value(session_id, kind, name, value)
        except RowError:
            raise
        except (SoongStoreError, ValueError) as exc:
            raise RowError(f"{kind}.{name}: {exc}", name) from None
    _check_whole(kind, row)
    return row


@lru_cache(maxsize=2 * len(KINDS))
def _columns_of(table: Table) -> tuple[frozenset[str], tuple[tuple[str, bool, type], ...]]:
    """A table's column names, and each column's name, whether it may be null, its value type.

    Read from the table once (per table: a newer factory's template is read anew): asking
    SQLAlchemy's column objects for every value of every row cost a fifth of an import's check.
    """
    specs = tuple(
        (
            column.name,
            bool(column.nullable) and not column.primary_key,
            int if isinstance(column.type, Integer) else str,
        )
        for column in table.c
    )
    return frozenset(table.c.keys()), specs


def _check_value(session_id: str, kind: str, column: str, value: Any) -> None:
    if isinstance(value, int):
        low = _LOWEST.get(column, INT64[0])
        if not low <= value <= INT64[1]:
            raise ValueError(f"{value} is out of range ({low} to {INT64[1]})")
        return
    enum = _ENUMS.get((kind, column))
    if enum is not None:
        enum(value)
    elif column in ("session_id", "parent_session_id"):
        check_session_id(value)
        if column == "session_id" and value != session_id:
            raise ValueError(f"{value!r} is not the session {session_id!r}")
    elif column == "tool_call_id":
        check_short_text(value, "tool_call_id")
    elif column.endswith("_id"):
        check_id(value, column.removesuffix("_id"))
    elif column in ("created_at", "updated_at"):
        check_timestamp(value)
    elif column in JSON_COLUMNS:
        codec.loads_stored(value)
    elif column == "content_json":
        decode_stored_content(value)
    elif column == "cwd":
        _check_cwd(value)
    elif column == "owner":
        check_owner(value)
    elif column == "key":
        check_key(value)
    elif column == "event_type":
        codec.check_text(value, "event type", max_len=_MAX_EVENT_TYPE)
    elif column == "filename":
        check_filename(value)
    elif column == "mime_type":
        check_mime_type(value)
    elif column == "summary":
        check_short_text(value, "summary")
    else:
        codec.check_text(value, column, max_len=len(value) or 1)


def _check_whole(kind: str, row: dict[str, Any]) -> None:
    """Rules that tie the columns of one row together."""
    if kind == "event" and (row["run_id"] is None) != (row["run_seq"] is None):
        raise RowError("an event has a run_seq exactly when it has a run_id", "run_seq")
    if kind == "run":
        ended = row["status"] in TERMINAL_RUN_STATUSES
        if ended != (row["end_reason"] is not None):
            raise RowError(
                f"a {row['status']} run must {'' if ended else 'not '}have an end_reason",
                "end_reason",
            )


def check_timestamp(value: str) -> None:
    """A timestamp column holds UTC ISO-8601 text with microseconds, as the store writes it."""
    if _TIMESTAMP.fullmatch(value) is None:
        raise ValueError(
            f"{value!r:.60} is not a UTC timestamp like 2026-01-31T12:00:00.000000+00:00"
        )
    datetime.fromisoformat(value)


def _check_cwd(value: str) -> None:
    codec.check_text(value, "cwd", max_len=_MAX_CWD)
    if "\x00" in value or not os.path.isabs(value):
        raise ValueError(f"{value!r:.80} is not an absolute path without NUL")
