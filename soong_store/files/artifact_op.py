"""Artifacts: the validated operation that writes one, its fields, its path and its limits.

A file lives at ``<home>/artifacts/<session_id>/<artifact_id>[.ext]``; the ``artifacts`` row keeps
that path relative to ``<home>/artifacts`` so a home can move. Files are written atomically
(:class:`~soong_store.files.folder.ArtifactFiles`) *before* the row is committed; a unit of
work that fails removes them again, and a crash between the two leaves an orphan that ``gc``
removes. A file is removed only when no row names it. Large JSON blocks become artifacts too
(:mod:`soong_store.write.unit_of_work`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from soong_store.errors import InvalidArgument, NotFound
from soong_store.files.folder import PendingFile
from soong_store.model import codec
from soong_store.model.checks import check_optional_id
from soong_store.model.ids import new_id
from soong_store.rules.artifacts import (
    artifact_path,
    check_filename,
    check_mime_type,
    check_short_text,
)

MAX_ARTIFACT_BYTES = 1 << 30
"""Default bound of one artifact (1 GiB): larger data is refused before anything is written."""

SPILL_BYTES = 16 * 1024
"""Default size over which a JSON block's data becomes an artifact (16 KiB)."""
SPILL_TOKENS = 4_000
"""Default estimated token count over which a JSON block's data becomes an artifact."""


@dataclass(frozen=True, slots=True)
class SpillPolicy:
    """The bounds of artifacts: when a JSON block becomes one, and how large one may be."""

    max_bytes: int = SPILL_BYTES
    max_tokens: int = SPILL_TOKENS
    max_artifact_bytes: int = MAX_ARTIFACT_BYTES


@dataclass(slots=True)
class ArtifactOp:
    """A validated artifact: its bytes (written before the commit) and its future row."""

    artifact_id: str
    session_id: str
    path: str
    data: bytes
    filename: str | None = None
    mime_type: str | None = None
    summary: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    node_id: str | None = None
    tool_call_id: str | None = None
    metadata_json: str | None = None
    metadata: Any = None
    """The metadata as a read of ``metadata_json`` returns it: what the artifact's record holds."""
    event: bool = True
    write: PendingFile | None = None
    """The file's write, once started (see :mod:`soong_store.write.file_pool`)."""

    @classmethod
    def build(
        cls,
        session_id: str,
        data: object,
        *,
        policy: SpillPolicy,
        filename: object = None,
        mime_type: object = None,
        summary: object = None,
        agent_id: object = None,
        run_id: object = None,
        node_id: object = None,
        tool_call_id: object = None,
        metadata: Any = None,
    ) -> ArtifactOp:
        """Validate caller input; nothing is written yet."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidArgument(
                f"artifact data must be bytes, got {type(data).__name__}",
                data_type=type(data).__name__,
            )
        payload = bytes(data)
        if len(payload) > policy.max_artifact_bytes:
            raise InvalidArgument(
                f"artifact of {len(payload)} bytes is over the limit of "
                f"{policy.max_artifact_bytes} bytes",
                size_bytes=len(payload),
            )
        name = check_filename(filename)
        mime = check_mime_type(mime_type)
        artifact_id = new_id("art")
        metadata_json, metadata_value = codec.encode_column(metadata, what="artifact metadata")
        return cls(
            artifact_id=artifact_id,
            session_id=session_id,
            path=artifact_path(session_id, artifact_id, name, mime),
            data=payload,
            filename=name,
            mime_type=mime,
            summary=check_short_text(summary, "summary"),
            agent_id=check_optional_id(agent_id, "agent"),
            run_id=check_optional_id(run_id, "run"),
            node_id=check_optional_id(node_id, "node"),
            tool_call_id=check_short_text(tool_call_id, "tool_call_id"),
            metadata_json=metadata_json,
            metadata=metadata_value,
        )


def drop_files(ops: list[ArtifactOp]) -> None:
    """Give up the files started for ``ops``: each goes once its write is over."""
    for op in ops:
        if op.write is not None:
            op.write.drop()


def require_artifact_session(row: Any, artifact_id: str, session_id: str) -> None:
    """``NotFound`` unless the artifact row exists and belongs to the session."""
    if row is None or row["session_id"] != session_id:
        raise NotFound(
            f"no artifact {artifact_id!r} in session {session_id!r}", artifact_id=artifact_id
        )
