"""OpenAI Agents SDK items as nodes and back, exactly (no SDK import: plain dicts).

An item becomes one node: its role, the blocks that hold what a block can (message text, a
function call, a function call's output, anything else as one JSON block), and in
``metadata["imported_from"]`` what the blocks cannot: the item's keys in their order and its
other fields. :func:`to_node` and :func:`to_item` are inverse, so an item read back is equal to
the one added, key order included. The mapping is documented in ``docs/openai_agents.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from soong_store.errors import InvalidContent
from soong_store.model.content import (
    ContentBlock,
    JsonBlock,
    RedactedBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from soong_store.model.enums import Role
from soong_store.model.frozen import thaw
from soong_store.rules.tree import RECORDED_KEY

FORMAT = "openai-agents"
"""The ``format`` of the ``imported_from`` metadata of an SDK item's node."""

_ROLES = {
    "user": Role.USER,
    "assistant": Role.ASSISTANT,
    "system": Role.SYSTEM,
    "developer": Role.SYSTEM,
}
_TEXT_PARTS = ("input_text", "output_text")


@dataclass(frozen=True, slots=True)
class NodeParts:
    """What ``add_node`` takes for one item: role, content blocks (as dicts) and metadata."""

    role: Role
    content: list[dict[str, Any]]
    metadata: dict[str, Any]


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _json(value: Any) -> dict[str, Any]:
    return {"type": "json", "data": value}


def _record(kind: str, item: Mapping[str, Any], mapped: tuple[str, ...], **extra: Any) -> Any:
    rest = {k: v for k, v in item.items() if k not in mapped}
    return {
        RECORDED_KEY: {"format": FORMAT, "kind": kind, "keys": list(item), "rest": rest, **extra}
    }


def to_node(item: object) -> NodeParts:
    """The node of one SDK item.

    Raises:
        InvalidContent: the item is not a mapping with string keys.
    """
    if not isinstance(item, Mapping) or not all(isinstance(k, str) for k in item):
        raise InvalidContent(f"invalid session item {item!r}: expected a dict with string keys")
    kind = item.get("type")
    role = item.get("role")
    if (
        kind == "function_call"
        and _ids(item, "call_id", "name")
        and isinstance(item.get("arguments"), str)
    ):
        arguments, form = _arguments(item["arguments"])
        block = {
            "type": "tool_call",
            "tool_call_id": item["call_id"],
            "name": item["name"],
            "arguments": arguments,
        }
        meta = _record(kind, item, ("call_id", "name", "arguments"), arguments=form)
        return NodeParts(Role.ASSISTANT, [block], meta)
    if kind == "function_call_output" and _ids(item, "call_id") and "output" in item:
        output = item["output"]
        form = "text" if isinstance(output, str) else "json"
        result = {
            "type": "tool_result",
            "tool_call_id": item["call_id"],
            "content": [_text(output) if form == "text" else _json(output)],
        }
        meta = _record(kind, item, ("call_id", "output"), output=form)
        return NodeParts(Role.TOOL, [result], meta)
    if kind in (None, "message") and isinstance(role, str) and role in _ROLES:
        content = item.get("content")
        if isinstance(content, str):
            return NodeParts(_ROLES[role], [_text(content)], _record("message", item, ("content",)))
        if isinstance(content, list):
            blocks: list[dict[str, Any]] = []
            parts: list[dict[str, Any] | None] = []
            for part in content:
                if (
                    isinstance(part, dict)
                    and part.get("type") in _TEXT_PARTS
                    and isinstance(part.get("text"), str)
                ):
                    blocks.append(_text(part["text"]))
                    rest = {k: v for k, v in part.items() if k != "text"}
                    parts.append({"keys": list(part), "rest": rest})
                else:
                    blocks.append(_json(part))
                    parts.append(None)
            meta = _record("message", item, ("content",), parts=parts)
            return NodeParts(_ROLES[role], blocks, meta)
    chosen = _ROLES.get(role, Role.ASSISTANT) if isinstance(role, str) else Role.ASSISTANT
    return NodeParts(
        chosen, [_json(dict(item))], {RECORDED_KEY: {"format": FORMAT, "kind": "json"}}
    )


def _ids(item: Mapping[str, Any], *names: str) -> bool:
    return all(isinstance(item.get(n), str) and item[n] for n in names)


def _arguments(text: str) -> tuple[Any, str]:
    """Arguments as JSON when they read back as the same text, else the text itself."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text, "text"
    try:
        same = orjson.dumps(value).decode() == text
    except TypeError:  # an integer orjson cannot write
        same = False
    return (value, "json") if same else (text, "text")


def spilled_refs(blocks: list[ContentBlock]) -> list[str]:
    """The artifacts holding the JSON of spilled blocks, which a read must load."""
    found: list[str] = []
    for block in blocks:
        inner = block.content if isinstance(block, ToolResultBlock) else [block]
        for part in inner:
            if isinstance(part, JsonBlock) and part.artifact_ref is not None:
                found.append(part.artifact_ref)
    return found


def recorded(metadata: object) -> dict[str, Any] | None:
    """The item record of a node this mapping wrote, else ``None``."""
    if isinstance(metadata, dict):
        record = metadata.get(RECORDED_KEY)
        if isinstance(record, dict) and record.get("format") == FORMAT:
            return record
    return None


def to_item(
    role: str, blocks: list[ContentBlock], metadata: object, loaded: Mapping[str, Any]
) -> dict[str, Any]:
    """The SDK item of a node; ``loaded`` holds the JSON of its spilled blocks by artifact id.

    A node another writer appended (no item record) reads as a message of its text. The item
    is the SDK's to change: a plain copy, sharing no list or dict with the node (a record the
    path cache shares with later reads).
    """
    record = recorded(metadata)
    redacted = [b.reason for b in blocks if isinstance(b, RedactedBlock)]
    if record is None or redacted:  # a redacted item says only that it was, and why
        text = "".join(b.text for b in blocks if isinstance(b, TextBlock))
        if redacted:
            text = f"[redacted: {redacted[0]}]"
        return {"role": "system" if role == Role.TOOL else role, "content": text}

    def value(block: ContentBlock) -> Any:
        if isinstance(block, TextBlock):
            return block.text
        if isinstance(block, JsonBlock):
            return loaded[block.artifact_ref] if block.artifact_ref is not None else block.data
        raise InvalidContent(f"unexpected {block.type} block in a session item's node")

    kind = record["kind"]
    if kind == "json":
        found: dict[str, Any] = thaw(value(blocks[0]))
        return found
    mapped: dict[str, Any]
    if kind == "function_call":
        call = blocks[0]
        assert isinstance(call, ToolCallBlock)
        arguments = call.arguments
        if record.get("arguments") == "json":
            arguments = orjson.dumps(arguments).decode()
        mapped = {"call_id": call.tool_call_id, "name": call.name, "arguments": arguments}
    elif kind == "function_call_output":
        result = blocks[0]
        assert isinstance(result, ToolResultBlock)
        mapped = {"call_id": result.tool_call_id, "output": value(result.content[0])}
    else:
        parts = record.get("parts")
        if parts is None:
            mapped = {"content": value(blocks[0])}
        else:
            content = []
            for block, part in zip(blocks, parts, strict=True):
                if part is None:
                    content.append(value(block))
                else:
                    content.append(
                        {k: value(block) if k == "text" else part["rest"][k] for k in part["keys"]}
                    )
            mapped = {"content": content}
    rest = record["rest"]
    return {k: thaw(mapped[k] if k in mapped else rest[k]) for k in record["keys"]}
