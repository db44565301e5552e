"""Building the store's content blocks from source items, losslessly.

A source block that a store block holds exactly becomes that block; the fields it does not
hold are kept per block index in ``metadata["imported_from"]["block_extras"]``. A source block
no store block can hold (thinking with its signature, reasoning, server tool calls, unknown
types) becomes a ``json`` block whose ``data`` is the source block verbatim. Base64 images
become artifacts referenced by ``artifact_ref`` blocks. Tool calls and results without ids get
ids here (:class:`ToolCalls`), marked as generated.
"""

from __future__ import annotations

import base64
import binascii
from collections import deque
from typing import Any

import orjson

from soong_store.importers._model import Artifact


def mapping(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def listing(value: Any) -> list[Any]:
    """``value`` if it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


def name(value: Any) -> str | None:
    """``value`` if it is a string (a type or role name), else ``None``."""
    return value if isinstance(value, str) else None


def text(value: str) -> dict[str, Any]:
    """A text block."""
    return {"type": "text", "text": value}


def verbatim(value: Any) -> dict[str, Any]:
    """A json block holding a source item as it is."""
    return {"type": "json", "data": value}


def tool_call_block(call_id: str, name: Any, args: Any) -> dict[str, Any]:
    """A tool call block (a call without a name is named ``unknown``)."""
    label = name if isinstance(name, str) and name else "unknown"
    return {"type": "tool_call", "tool_call_id": call_id, "name": label, "arguments": args}


def tool_result_block(call_id: str, items: list[dict[str, Any]], is_error: bool) -> dict[str, Any]:
    """A tool result block."""
    return {"type": "tool_result", "tool_call_id": call_id, "content": items, "is_error": is_error}


def as_text(value: Any) -> str:
    """A source value shown as text: strings as they are, anything else as compact JSON."""
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def arguments(value: Any) -> tuple[Any, dict[str, Any]]:
    """Tool arguments: JSON text parsed to its value; the text kept when that is not exact."""
    if not isinstance(value, str):
        return value, {}
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        return value, {"arguments_text": True}
    if orjson.dumps(parsed).decode() == value:
        return parsed, {"arguments_json": True}
    return parsed, {"arguments_json": True, "arguments_text": value}


def extras(item: dict[str, Any], *held: str) -> dict[str, Any]:
    """The fields of a source item that the block made of it does not hold."""
    return {k: v for k, v in item.items() if k not in held}


class Content:
    """The blocks of one entry, with their per-block extras and the artifacts they reference."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.blocks: list[dict[str, Any]] = []
        self.extras: dict[str, Any] = {}
        self.artifacts: list[Artifact] = []

    def add(self, block: dict[str, Any], extra: dict[str, Any] | None = None) -> None:
        """Append a block; ``extra`` holds what the source had beyond it."""
        if extra:
            self.extras[str(len(self.blocks))] = extra
        self.blocks.append(block)

    def image(self, data: Any, mime_type: Any, summary: str = "image") -> dict[str, Any] | None:
        """An ``artifact_ref`` block for base64 image bytes, or ``None`` if they do not decode."""
        if not isinstance(data, str) or not data:
            return None
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            return None
        mime = mime_type if isinstance(mime_type, str) and "/" in mime_type else None
        key = f"{self.key}#artifact{len(self.artifacts)}"
        self.artifacts.append(Artifact(key, raw, mime, summary=summary))
        block: dict[str, Any] = {"type": "artifact_ref", "artifact_id": key, "summary": summary}
        if mime is not None:
            block["mime_type"] = mime
        return block

    def source(self, base: dict[str, Any]) -> dict[str, Any]:
        """``base`` with the block extras added (the node's ``imported_from``)."""
        if self.extras:
            base["block_extras"] = self.extras
        return base


class ToolCalls:
    """Ids for tool calls and results, pairing results that name no call with open calls.

    A result without an id answers the oldest call still unanswered (calls are answered in
    order); a call or result that has no id and nothing to pair with gets a generated one.
    """

    def __init__(self) -> None:
        self._open: deque[str] = deque()
        self._made = 0

    def call(self, call_id: Any) -> tuple[str, bool]:
        """The id of a new call, and whether it was generated."""
        made = not isinstance(call_id, str) or not call_id
        cid = self._new("call") if made else str(call_id)
        self._open.append(cid)
        return cid, made

    def result(self, call_id: Any) -> tuple[str, bool]:
        """The id of the call a result answers, and whether it was not in the source."""
        if isinstance(call_id, str) and call_id:
            if call_id in self._open:
                self._open.remove(call_id)
            return call_id, False
        if self._open:
            return self._open.popleft(), True
        return self._new("result"), True

    def _new(self, kind: str) -> str:
        self._made += 1
        return f"imported_{kind}_{self._made}"


def result_items(content: Any, out: Content) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The items of a tool result (text, json, artifact_ref) and what the items did not hold.

    The second value maps an item index to the source fields its item lacks (a text part of
    type ``input_text`` keeps that type there), so that the result is lossless.
    """
    if content is None:
        return [], {}
    if isinstance(content, str):
        return [text(content)], {}
    if not isinstance(content, list):
        return [verbatim(content)], {}
    items: list[dict[str, Any]] = []
    lost: dict[str, Any] = {}
    for part in content:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            items.append(text(part["text"]))
            rest = extras(part, "text")
            if rest and rest != {"type": "text"}:
                lost[str(len(items) - 1)] = rest
            continue
        ref = None
        if isinstance(part, dict) and part.get("type") in ("image", "input_image"):
            source = part["source"] if isinstance(part.get("source"), dict) else part
            ref = out.image(source.get("data"), source.get("media_type") or source.get("mimeType"))
        if ref is not None:
            lost[str(len(items))] = without_data(part)
        items.append(ref if ref is not None else verbatim(part))
    return items, lost


def without_data(part: dict[str, Any]) -> dict[str, Any]:
    """A source image part without its bytes (they are in the artifact), to keep the rest."""
    out = {k: v for k, v in part.items() if k != "data"}
    if isinstance(part.get("source"), dict):
        out["source"] = {k: v for k, v in part["source"].items() if k != "data"}
    return out
