"""The checks an import makes before it writes anything, and the export format they enforce.

:func:`read_export` parses a whole export file and checks it: the header (format, version,
counts), then every row's shape (exactly the stored columns), types, enums, ids, JSON columns,
timestamps, content blocks and artifact paths, the embedded artifact bytes (base64, size), and at
the end the references between the rows (every id a row names is a row of the same file). The
first problem found is raised as :class:`~soong_store.errors.InvalidArgument` naming the line.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Integer, Table

from soong_store import _json
from soong_store.content import content_from_json
from soong_store.enums import (
    AgentStatus,
    AgentType,
    EndReason,
    EventLevel,
    NodeType,
    Role,
    RunStatus,
    SessionStatus,
)
from soong_store.errors import InvalidArgument, SoongStoreError
from soong_store.ids import check_id, check_session_id
from soong_store.schema.models import agents_table, artifacts_table, runs_table, sessions_table
from soong_store.schema.session_tables import session_tables

FORMAT = "soong-store-session"
FORMAT_VERSION = 1
KINDS = ("session", "agent", "run", "node", "event", "artifact")
Progress = Callable[[int, int], None]
"""Called with (items done, items in all) while a long export or import runs."""

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
_REFERENCES: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "session": (("root_agent_id", "agent", False), ("active_node_id", "node", True)),
    "agent": (
        ("parent_agent_id", "agent", True),
        ("created_by_run_id", "run", True),
        ("fork_from_node_id", "node", True),
    ),
    "run": (
        ("agent_id", "agent", False),
        ("start_node_id", "node", True),
        ("end_node_id", "node", True),
    ),
    "node": (("parent_id", "node", True), ("agent_id", "agent", False), ("run_id", "run", True)),
    "event": (("node_id", "node", True), ("agent_id", "agent", True), ("run_id", "run", True)),
}
"""Columns that must name a row of the same file: (column, kind named, may be null)."""
JSON_COLUMNS = ("metadata_json", "result_json", "usage_json", "error_json", "payload_json")
"""Columns holding JSON text: checked as JSON, rewritten in a renamed copy."""


def kind_tables(session_id: str) -> dict[str, Table]:
    """The table holding each kind of row of one session (its own nodes and events tables)."""
    pair = session_tables(session_id)
    return {
        "session": sessions_table,
        "agent": agents_table,
        "run": runs_table,
        "node": pair.nodes,
        "event": pair.events,
        "artifact": artifacts_table,
    }


@dataclass
class Bundle:
    """A checked export: the rows by kind and the artifact bytes that came with it."""

    session_id: str
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    data: dict[str, bytes] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    """For a renamed copy: new artifact path -> the original's path (copied if it is here)."""


def _refuse(lineno: int, message: str) -> InvalidArgument:
    return InvalidArgument(f"bad export file, line {lineno}: {message}", line=lineno)


def read_export(lines: Iterable[bytes | str], progress: Progress | None = None) -> Bundle:
    """Parse and check an export completely, before anything is written.

    Raises:
        InvalidArgument: the file is malformed, truncated, inconsistent or of an unknown
            format version; the message names the line.
    """
    bundle: Bundle | None = None
    counts: dict[str, int] = {}
    seen_kind = 0
    lineno = 0
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            item = _json.loads(raw)
        except ValueError as exc:
            raise _refuse(lineno, f"not JSON ({exc})") from None
        if not isinstance(item, dict):
            raise _refuse(lineno, "expected a JSON object")
        if bundle is None:
            bundle, counts = _read_header(item, lineno)
            continue
        kind = item.get("kind")
        if kind not in KINDS or not set(item) <= {"kind", "row", "data_b64"}:
            raise _refuse(lineno, "expected an object with kind, row (and data_b64)")
        if KINDS.index(kind) < seen_kind or (kind == "session" and bundle.rows["session"]):
            raise _refuse(lineno, f"a {kind} row is out of order")
        seen_kind = KINDS.index(kind)
        if kind != "session" and not bundle.rows["session"]:
            raise _refuse(lineno, "the session row must come first")
        row = _check_row(bundle.session_id, kind, item.get("row"), lineno)
        bundle.rows[kind].append(row)
        if "data_b64" in item:
            bundle.data[row.get("artifact_id", "")] = _decode_data(kind, item, row, lineno)
        if progress is not None and lineno % 500 == 0:
            progress(lineno, sum(counts.values()) + 2)
    if bundle is None:
        raise InvalidArgument("bad export file: it is empty")
    for kind in KINDS:
        want = 1 if kind == "session" else counts[f"{kind}s"]
        if len(bundle.rows[kind]) != want:
            raise _refuse(
                lineno, f"expected {want} {kind} rows, found {len(bundle.rows[kind])} (truncated?)"
            )
    _check_references(bundle)
    return bundle


def _read_header(item: dict[str, Any], lineno: int) -> tuple[Bundle, dict[str, int]]:
    if item.get("format") != FORMAT:
        raise _refuse(lineno, f"not a {FORMAT} export (no header)")
    if item.get("version") != FORMAT_VERSION:
        raise _refuse(
            lineno, f"unknown format version {item.get('version')!r} (this reads {FORMAT_VERSION})"
        )
    counts = item.get("counts")
    names = {f"{kind}s" for kind in KINDS[1:]}
    if (
        not isinstance(counts, dict)
        or set(counts) != names
        or not all(type(v) is int and v >= 0 for v in counts.values())
    ):
        raise _refuse(lineno, "header counts are missing or invalid")
    sid = check_session_id(item.get("session_id"))
    return Bundle(sid, {kind: [] for kind in KINDS}), counts


def _check_row(sid: str, kind: str, row: Any, lineno: int) -> dict[str, Any]:
    table = kind_tables(sid)[kind]
    if not isinstance(row, dict) or set(row) != set(table.c.keys()):
        raise _refuse(lineno, f"a {kind} row must hold exactly {', '.join(table.c.keys())}")
    for column in table.c:
        value = row[column.name]
        want: type = int if isinstance(column.type, Integer) else str
        if value is None and (column.nullable and not column.primary_key):
            continue
        if type(value) is not want:
            raise _refuse(lineno, f"{kind}.{column.name} must be {want.__name__}, got {value!r}")
    try:
        _check_values(sid, kind, row)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise _refuse(lineno, f"{kind} content at {where}: {first['msg']}") from None
    except (SoongStoreError, ValueError) as exc:
        raise _refuse(lineno, f"{kind} row: {exc}") from None
    return row


def _check_values(sid: str, kind: str, row: dict[str, Any]) -> None:
    for (enum_kind, column), enum in _ENUMS.items():
        if enum_kind == kind and row[column] is not None:
            enum(row[column])
    for column, value in row.items():
        if value is None:
            continue
        if column == "session_id" and value != sid:
            raise ValueError(f"session_id {value!r} is not the exported session {sid!r}")
        if column == "parent_session_id":
            check_session_id(value)
        elif column.endswith("_id") and column not in ("session_id", "tool_call_id"):
            check_id(value, column)
        if column in JSON_COLUMNS:
            _json.loads(value)
        if column in ("created_at", "updated_at"):
            datetime.fromisoformat(value)
        low = 1 if column.endswith("seq") else 0
        if isinstance(value, int) and value < low:
            raise ValueError(f"{column} {value} is out of range")
    if kind == "node":
        content_from_json(row["content_json"])
    if kind == "artifact":
        _check_artifact_path(row["path"])


def _check_artifact_path(path: str) -> None:
    parts = PurePosixPath(path).parts
    if (
        len(parts) != 2
        or "\\" in path
        or "\x00" in path
        or any(p in (".", "..") or p.startswith(".") for p in parts)
    ):
        raise ValueError(f"artifact path {path!r} is not <session_id>/<file>")
    check_session_id(parts[0])


def _decode_data(kind: str, item: dict[str, Any], row: dict[str, Any], lineno: int) -> bytes:
    if kind != "artifact" or not isinstance(item["data_b64"], str):
        raise _refuse(lineno, "only an artifact line holds data_b64, as a string")
    try:
        data = base64.b64decode(item["data_b64"], validate=True)
    except (binascii.Error, ValueError):
        raise _refuse(lineno, "data_b64 is not base64") from None
    if row["size_bytes"] is not None and row["size_bytes"] != len(data):
        raise _refuse(lineno, f"artifact holds {len(data)} bytes, its row says {row['size_bytes']}")
    return data


def _check_references(bundle: Bundle) -> None:
    rows = bundle.rows
    ids = {
        kind: [r[f"{kind}_id"] for r in rows[kind]]
        for kind in ("agent", "run", "node", "event", "artifact")
    }
    for kind, values in ids.items():
        if len(set(values)) != len(values):
            raise InvalidArgument(f"bad export file: a {kind} id appears twice")
    for kind, column in (("node", "node_seq"), ("event", "seq")):
        values = [r[column] for r in rows[kind]]
        if len(set(values)) != len(values):
            raise InvalidArgument(f"bad export file: a {kind} {column} appears twice")
    run_seqs = [(r["run_id"], r["run_seq"]) for r in rows["event"] if r["run_id"] is not None]
    if len(set(run_seqs)) != len(run_seqs) or any(
        (r["run_id"] is None) != (r["run_seq"] is None) for r in rows["event"]
    ):
        raise InvalidArgument("bad export file: events' run_seq are not unique per run")
    known = {kind: set(values) for kind, values in ids.items()}
    for kind, references in _REFERENCES.items():
        for row in rows[kind]:
            for column, target, optional in references:
                value = row[column]
                if (value is None and not optional) or (
                    value is not None and value not in known[target]
                ):
                    raise InvalidArgument(
                        f"bad export file: {kind} {column} {value!r} names no {target} of the file"
                    )
