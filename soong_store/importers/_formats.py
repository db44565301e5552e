"""The formats an import reads: each one's parser, and telling a file's format from its head."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from soong_store.errors import InvalidArgument
from soong_store.importers import chatgpt, claude_code, codex, librechat, openhands, openwebui, pi
from soong_store.importers._detect import detect, several_values
from soong_store.importers._model import ParsedFile
from soong_store.importers._spool import ContentSpool

Parser = Callable[[Path, bytes], ParsedFile]
_PARSERS: dict[str, Parser] = {
    "claude-code": claude_code.parse,
    "codex": codex.parse,
    "pi": pi.parse,
    "chatgpt": chatgpt.parse,
    "librechat": librechat.parse,
    "openwebui": openwebui.parse,
    "openhands": openhands.parse,
}
_STREAMED: dict[str, Callable[[Path, bytes | None, ContentSpool | None], ParsedFile]] = {
    "claude-code": claude_code.parse,
    "codex": codex.parse,
    "pi": pi.parse,
}
"""Parsers of JSON Lines that read the file a line at a time and park content in a spool."""
FORMATS = ("auto", "soong", *_PARSERS)
"""The names ``format=`` accepts."""


def _detect_file(source: Path) -> str | None:
    """:func:`detect` of a file, reading only its head when that is enough."""
    try:
        with source.open("rb") as file:
            data = file.read(_HEAD)
            if file.read(1) and not several_values(data):
                file.seek(0)
                data = file.read()
    except OSError as exc:
        raise InvalidArgument(f"cannot read {str(source)!r}: {exc.strerror}") from None
    return detect(source, data)


_HEAD = 2**20
"""How much of a file of lines :func:`detect_format` reads."""
