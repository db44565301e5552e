"""The searchable text of a node: what its content blocks say, never an artifact's bytes.

Indexed: the text of text blocks; a tool call's name and the values of its arguments; what a
tool result holds (its text, its inline JSON values, the summaries of its JSON and artifact
items); a JSON block's inline values and summary; an artifact reference's summary. JSON keys,
ids, MIME types and artifact bodies are not. One function serves the write path, the backfill
of an older database and the check, so the three always agree.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

_SEPARATOR = "\n"


def node_text(content_json: str | bytes) -> str:
    """The searchable text of a node's stored ``content_json`` (empty when it says nothing)."""
    blocks = orjson.loads(content_json)
    if not isinstance(blocks, list):
        return ""
    return _SEPARATOR.join(part for part in _blocks(blocks) if part)


def _blocks(blocks: list[Any]) -> Iterator[str]:
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            yield _str(block.get("text"))
        elif kind == "tool_call":
            yield _str(block.get("name"))
            yield from _values(block.get("arguments"))
        elif kind == "tool_result":
            items = block.get("content")
            if isinstance(items, list):
                yield from _blocks(items)
        elif kind == "json":
            yield from _values(block.get("data"))
            yield _str(block.get("summary"))
        elif kind == "artifact_ref":
            yield _str(block.get("summary"))


def _values(value: Any) -> Iterator[str]:
    """The scalar values of a JSON value, depth first (strings and numbers; keys left out)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield str(value)
    elif isinstance(value, list):
        for item in value:
            yield from _values(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _values(item)


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
