"""Artifacts: the validated operation that writes one, its fields, its path and its limits.

A file lives at ``<home>/artifacts/<session_id>/<artifact_id>[.ext]``; the ``artifacts`` row keeps
that path relative to ``<home>/artifacts`` so a home can move. Files are written atomically
(:class:`~soong_store.files.store.ArtifactFiles`) *before* the row is committed; a unit of
work that fails removes them again, and a crash between the two leaves an orphan that ``gc``
removes. A file is removed only when no row names it. Large JSON blocks become artifacts too
(:mod:`soong_store.files.spill`).
"""

from __future__ import annotations

import mimetypes
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soong_store.errors import InvalidArgument, NotFound
from soong_store.files.store import PendingFile
from soong_store.model import codec
from soong_store.model.ids import check_optional_id, new_id

MAX_ARTIFACT_BYTES = 1 << 30
"""Default bound of one artifact (1 GiB): larger data is refused before anything is written."""

SPILL_BYTES = 16 * 1024
"""Default size over which a JSON block's data becomes an artifact (16 KiB)."""
SPILL_TOKENS = 4_000
"""Default estimated token count over which a JSON block's data becomes an artifact."""
_EXT = re.compile(r"\.[A-Za-z0-9]{1,16}")
_MIME = re.compile(r"[A-Za-z0-9][\w.+-]*/[\w.+-]+(;[ -~]*)?")
_MAX_TEXT = 4096


@dataclass(frozen=True, slots=True)
class SpillPolicy:
    """The bounds of artifacts: when a JSON block becomes one, and how large one may be."""

    max_bytes: int = SPILL_BYTES
    max_tokens: int = SPILL_TOKENS
    max_artifact_bytes: int = MAX_ARTIFACT_BYTES


def check_filename(filename: object) -> str | None:
    """A display name for an artifact: one path component, no control characters."""
    if filename is None:
        return None
    name = codec.check_text(filename, "filename", max_len=255)
    if name in (".", "..") or any(c in "/\\" or ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidArgument(
            f"invalid filename {filename!r}: expected one path component without control "
            "characters",
            filename=filename,
        )
    return name


def _check_text(value: object, what: str, pattern: re.Pattern[str] | None = None) -> str | None:
    if value is None:
        return None
    text = codec.check_text(value, what, max_len=_MAX_TEXT)
    if pattern is not None and pattern.fullmatch(text) is None:
        raise InvalidArgument(f"invalid {what} {value!r}")
    return text


def check_mime_type(value: object) -> str | None:
    """A mime type such as ``application/json`` (parameters allowed), or ``None``."""
    return _check_text(value, "mime type", _MIME)


def check_short_text(value: object, what: str) -> str | None:
    """A bounded text value of an artifact or event (summary, tool_call_id), or ``None``."""
    return _check_text(value, what)


def extension(filename: str | None, mime_type: str | None) -> str:
    """A safe file extension from the filename, else from the mime type, else none."""
    if filename is not None:
        suffix = Path(filename).suffix
        if _EXT.fullmatch(suffix):
            return suffix.lower()
    if mime_type is not None:
        guessed = mimetypes.guess_extension(mime_type.split(";")[0].strip())
        if guessed and _EXT.fullmatch(guessed):
            return guessed
    return ""


def artifact_path(session_id: str, artifact_id: str, filename: str | None, mime: str | None) -> str:
    """The stored path of a new artifact: ``<session_id>/<artifact_id><extension>``."""
    return f"{session_id}/{artifact_id}{extension(filename, mime)}"


def is_artifact_file_name(artifact_id: str, name: str) -> bool:
    """Whether ``name`` is one the store gives an artifact: its id, then a safe extension or none.

    The extension is not recomputed: a mime type's extension comes from the platform's tables,
    which differ between machines, and a file keeps the name it was given.
    """
    rest = name[len(artifact_id) :] if name.startswith(artifact_id) else None
    return rest is not None and (rest == "" or _EXT.fullmatch(rest) is not None)


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
    """The file's write, once started (see :mod:`soong_store.files.pool`)."""

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
        mime = _check_text(mime_type, "mime type", _MIME)
        artifact_id = new_id("art")
        metadata_json, metadata_value = codec.encode_column(metadata, what="artifact metadata")
        return cls(
            artifact_id=artifact_id,
            session_id=session_id,
            path=artifact_path(session_id, artifact_id, name, mime),
            data=payload,
            filename=name,
            mime_type=mime,
            summary=_check_text(summary, "summary"),
            agent_id=check_optional_id(agent_id, "agent"),
            run_id=check_optional_id(run_id, "run"),
            node_id=check_optional_id(node_id, "node"),
            tool_call_id=_check_text(tool_call_id, "tool_call_id"),
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
