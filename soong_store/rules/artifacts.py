"""The rules of an artifact's fields: its display name, mime type, short texts and file name.

Pure checks of plain values, shared by the artifact operation that writes a file
(:mod:`soong_store.files.artifact_op`) and by the row and session rules that read one back.
"""

from __future__ import annotations

import mimetypes
import re
from pathlib import Path

from soong_store.errors import InvalidArgument
from soong_store.model import codec

_EXT = re.compile(r"\.[A-Za-z0-9]{1,16}")


_MIME = re.compile(r"[A-Za-z0-9][\w.+-]*/[\w.+-]+(;[ -~]*)?")


_MAX_TEXT = 4096


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
