"""Artifacts: large payloads kept as files, and the spill of large JSON blocks into them.

A file lives at ``<home>/artifacts/<session_id>/<artifact_id>[.ext]``; the ``artifacts`` row keeps
that path relative to ``<home>/artifacts`` so a home can move. Files are written atomically (a
temporary file in the same folder, fsync, rename, fsync of the folder) *before* the row is
committed; a unit of work that fails removes them again, and a crash between the two leaves an
orphan that :meth:`ArtifactFiles.orphans` finds. A file may be named by several rows (a forked
session shares its parent's files) and is removed only when no row names it.

A :class:`~soong_store.content.JsonBlock` whose data is over the byte or token threshold becomes
an artifact in the node's own unit of work; the stored block keeps a short summary of the data's
shape and the reference.
"""

from __future__ import annotations

import contextlib
import logging
import math
import mimetypes
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from soong_store import _json
from soong_store.content import ContentBlock, JsonBlock, ToolResultBlock
from soong_store.errors import InvalidArgument, NotFound, StorageError
from soong_store.ids import check_optional_id, new_id

if TYPE_CHECKING:
    from soong_store._file_pool import FileWrite

log = logging.getLogger(__name__)

StartFile = Callable[[str, bytes], "FileWrite"]
"""Begins writing an artifact file in the background (``FilePool.start``)."""

MAX_ARTIFACT_BYTES = 1 << 30
"""Default bound of one artifact (1 GiB): larger data is refused before anything is written."""

SPILL_BYTES = 16 * 1024
SPILL_TOKENS = 4_000
_SUMMARY_CHARS = 600
_TEMP_PREFIX = ".tmp-"
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_SYNC | _NOFOLLOW
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW
_EXT = re.compile(r"\.[A-Za-z0-9]{1,16}")
_MIME = re.compile(r"[A-Za-z0-9][\w.+-]*/[\w.+-]+(;[ -~]*)?")
_MAX_TEXT = 4096


@dataclass(frozen=True, slots=True)
class SpillPolicy:
    """When a JSON block is moved to an artifact: over ``max_bytes`` or ``max_tokens``."""

    max_bytes: int = SPILL_BYTES
    max_tokens: int = SPILL_TOKENS
    max_artifact_bytes: int = MAX_ARTIFACT_BYTES


def check_filename(filename: object) -> str | None:
    """A display name for an artifact: one path component, no control characters."""
    if filename is None:
        return None
    name = _json.check_text(filename, "filename", max_len=255)
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
    text = _json.check_text(value, what, max_len=_MAX_TEXT)
    if pattern is not None and pattern.fullmatch(text) is None:
        raise InvalidArgument(f"invalid {what} {value!r}")
    return text


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
    event: bool = True
    write: FileWrite | None = None
    """The file's write, once started (see :mod:`soong_store._file_pool`)."""

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
        return cls(
            artifact_id=artifact_id,
            session_id=session_id,
            path=f"{session_id}/{artifact_id}{extension(name, mime)}",
            data=payload,
            filename=name,
            mime_type=mime,
            summary=_check_text(summary, "summary"),
            agent_id=check_optional_id(agent_id, "agent"),
            run_id=check_optional_id(run_id, "run"),
            node_id=check_optional_id(node_id, "node"),
            tool_call_id=_check_text(tool_call_id, "tool_call_id"),
            metadata_json=_json.dumps_optional(metadata, what="artifact metadata"),
        )


class ArtifactFiles:
    """The artifact folder of one home: atomic writes, contained reads, orphan search."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._base = root.resolve()

    def resolve(self, rel: str) -> Path:
        """The file of a stored relative path; refuses any path that leaves the folder."""
        path = (self._base / rel).resolve()
        if self._base not in path.parents:
            raise StorageError(f"artifact path {rel!r} leaves the artifact folder", path=rel)
        return path

    def write(self, rel: str, data: bytes, begun: Callable[[], None] | None = None) -> None:
        """Write ``data`` at ``rel`` (``<session folder>/<file name>``) atomically and durably.

        Everything happens relative to the session folder's descriptor, opened without following
        a symlink, so nothing lands outside it and the folder fsync needs no second open. The
        temporary file is opened ``O_SYNC``: the data reaches the disk within the write call,
        which runs without the GIL; the fsync after it finds nothing left to flush but keeps the
        sequence exact. ``begun`` is called just before the data is written.
        """
        folder_name, name = _split(rel)
        folder = self._open_folder(folder_name)
        try:
            temp = _TEMP_PREFIX + name
            fd = os.open(temp, _CREATE_FLAGS, 0o644, dir_fd=folder)
            try:
                if begun is not None:
                    begun()
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                _unlink(temp, folder)
                raise
            os.close(fd)
            try:
                os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
            except BaseException:
                _unlink(temp, folder)
                raise
            try:
                os.fsync(folder)
            except BaseException:
                # The rename may not be durable: the caller's unit fails, so the file must go too.
                _unlink(name, folder)
                raise
        finally:
            os.close(folder)

    def _open_folder(self, folder_name: str) -> int:
        path = self._base / folder_name
        try:
            return os.open(path, _FOLDER_FLAGS)
        except FileNotFoundError:
            pass
        self._base.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # another writer made it meanwhile
            path.mkdir()
        _fsync_dir(self._base)
        return os.open(path, _FOLDER_FLAGS)

    def read(self, rel: str) -> bytes:
        """The bytes of a stored file (``StorageError`` when the file is missing)."""
        path = self.resolve(rel)
        try:
            return path.read_bytes()
        except FileNotFoundError as exc:
            raise StorageError(f"artifact file {rel!r} is missing", path=rel) from exc

    def remove(self, rel: str) -> None:
        """Delete a file (gone already is fine), and its session folder once empty."""
        path = self.resolve(rel)
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # not empty, or already gone
            path.parent.rmdir()

    def discard(self, paths: list[str]) -> None:
        """Remove files, logging a failure instead of raising: a file left is an orphan for gc."""
        for rel in paths:
            try:
                self.remove(rel)
            except OSError:
                log.warning("could not remove artifact file %s; gc will", rel, exc_info=True)

    def files(self) -> Iterator[tuple[str, float]]:
        """Every file under the folder, as (relative path, modification time)."""
        if not self.root.is_dir():
            return
        for folder in self.root.iterdir():
            if folder.is_dir():
                for file in folder.iterdir():
                    if file.is_file():
                        yield f"{folder.name}/{file.name}", file.stat().st_mtime

    def orphans(self, referenced: set[str], min_age: float) -> list[str]:
        """Files no row names (and leftover temporary files), older than ``min_age`` seconds."""
        cutoff = time.time() - min_age
        return sorted(
            rel for rel, mtime in self.files() if rel not in referenced and mtime <= cutoff
        )


def _split(rel: str) -> tuple[str, str]:
    """``<folder>/<name>`` of a path to write, refused unless it is exactly that."""
    parts = rel.split("/")
    if len(parts) != 2 or any(p in ("", ".", "..") or "\0" in p or "\\" in p for p in parts):
        raise StorageError(f"artifact path {rel!r} is not <session>/<file>", path=rel)
    return parts[0], parts[1]


def _unlink(name: str, folder: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=folder)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def estimate_tokens(data: bytes) -> int:
    """Rough token count of UTF-8 text: ~4 bytes per token for ASCII, one per wide character."""
    text = data.decode("utf-8", errors="replace")
    wide = (len(data) - len(text)) // 2
    return math.ceil((len(text) - wide) / 4) + wide


def summarize_json(value: Any, size: int) -> str:
    """A short description of a JSON value's shape for the model: keys, lengths, first values."""
    head = f"JSON {_human(size)}: "
    return head + _shape(value, 3, _SUMMARY_CHARS - len(head))


def _human(size: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def _shape(value: Any, depth: int, budget: int) -> str:
    if isinstance(value, dict):
        if depth == 0 or not value:
            return f"object with {len(value)} keys"
        parts: list[str] = []
        for key, item in value.items():
            part = f"{_short(key)}: {_shape(item, depth - 1, budget // 4)}"
            if sum(len(p) + 2 for p in parts) + len(part) > budget - 20:
                parts.append(f"... {len(value) - len(parts)} more keys")
                break
            parts.append(part)
        return _clip("{" + ", ".join(parts) + "}", budget)
    if isinstance(value, list):
        if not value:
            return "[]"
        if depth == 0:
            return f"list of {len(value)} items"
        first = _shape(value[0], depth - 1, budget // 2)
        return _clip(f"list of {len(value)} items, first: {first}", budget)
    if isinstance(value, str):
        return _short(value) + (f" ({len(value)} chars)" if len(value) > 40 else "")
    return _clip(repr(value), budget)


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _clip(text: str, budget: int) -> str:
    budget = max(budget, 16)
    return text if len(text) <= budget else text[: budget - 3] + "..."


def spill_large_json(
    session_id: str,
    blocks: list[ContentBlock],
    policy: SpillPolicy,
    start_file: StartFile,
) -> tuple[list[ContentBlock], list[ArtifactOp]]:
    """Move every JSON block over the thresholds (also inside tool results) to an artifact.

    A spilled block's file starts (``start_file``) before its bytes are checked for NaN, so the
    check overlaps the disk; a failure drops every file started here.
    """
    spilled: list[ArtifactOp] = []

    def visit(block: Any, tool_call_id: str | None, where: str) -> Any:
        if isinstance(block, ToolResultBlock):
            inner = [
                visit(item, block.tool_call_id, f"{where}.content[{i}]")
                for i, item in enumerate(block.content)
            ]
            changed = any(a is not b for a, b in zip(inner, block.content, strict=True))
            return block.model_copy(update={"content": inner}) if changed else block
        if not isinstance(block, JsonBlock) or block.artifact_ref is not None:
            return block
        what = f"{where}.data"
        data = _json.encode(block.data, what=what)
        if len(data) <= policy.max_bytes and (
            len(data) <= policy.max_tokens or estimate_tokens(data) <= policy.max_tokens
        ):
            _json.check_finite(data, block.data, what=what)
            return block
        op = ArtifactOp.build(
            session_id,
            data,
            policy=policy,
            mime_type="application/json",
            tool_call_id=tool_call_id,
        )
        op.event = False
        spilled.append(op)
        op.write = start_file(op.path, data)
        op.summary = summarize_json(block.data, len(data))  # bounded by construction
        _json.check_finite(data, block.data, what=what)
        return JsonBlock(summary=op.summary, artifact_ref=op.artifact_id)

    try:
        stored = [visit(block, None, f"content[{i}]") for i, block in enumerate(blocks)]
    except BaseException:
        drop_files(spilled)
        raise
    return stored, spilled


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
