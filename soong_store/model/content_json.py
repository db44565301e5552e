"""``content_json``: a node's blocks written once, and read back.

:func:`encode_content` encodes each value once and hands back the blocks as a read returns
them, without parsing its own output; :func:`content_from_json` is the read; and
:func:`decode_stored_content` is the strict read of text that is not trusted (an import,
``check``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import orjson
from pydantic import ValidationError

from soong_store.errors import InvalidContent
from soong_store.model import codec
from soong_store.model.content import (
    CONTENT,
    ArtifactRefBlock,
    ContentBlock,
    JsonBlock,
    Leaf,
    Place,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    fold,
    rebuild,
    validate_content,
)


def content_to_json(blocks: list[ContentBlock]) -> str:
    """The ``content_json`` text of validated blocks (see :func:`encode_content`)."""
    return encode_content(blocks)[0]


SpillHook = Callable[[Place, JsonBlock, bytes], JsonBlock | None]
"""Given a JSON block's place, the block and its data's bytes: the block to store instead (its
data moved to an artifact), or ``None`` to keep the data inline."""


def encode_content(
    blocks: list[ContentBlock], *, spill: SpillHook | None = None
) -> tuple[str, list[ContentBlock]]:
    """Encode validated blocks for ``content_json``; return it and the blocks a read returns.

    Each value is encoded once: a JSON block's data and a tool call's arguments each on their
    own, then the blocks around those bytes (an ``orjson.Fragment`` goes into the text as it
    is). NaN, Infinity and lone surrogates are refused, and so is JSON nested deeper than the
    reader accepts (pydantic-core stops at ~200 levels, orjson writes up to 254), told from the
    bytes' brackets rather than by parsing the text back. The blocks returned equal what every
    later read returns, to the types of their values (a tuple comes back a list, a date its
    text), and share no container with the caller's values: a block is kept as it is where
    its values read back as themselves, else copied with the values read back.

    ``spill`` sees each JSON block's encoded data and may move it to an artifact (returning the
    block to store instead); then a JSON block's data is refused as soon as it is found bad,
    block by block. Whatever this path cannot vouch for (a value orjson refuses, NaN in tool
    arguments, nesting near the reader's limit) is encoded again the exact, slower way: the
    whole content at once, parsed back, which raises what it finds.
    """
    encoder = _Encoder(spill)
    try:
        done = encoder.run(blocks)
    except InvalidContent:
        if spill is not None:
            raise
        done = None
    if done is not None:
        return done
    return _encode_exact(rebuild(blocks, encoder.replacement))


_ENCODE_ERRORS = (orjson.JSONEncodeError, TypeError)


class _Encoder:
    """One pass over the blocks: the plain values to encode, and the blocks as read back."""

    __slots__ = ("spill", "exact", "replaced")

    def __init__(self, spill: SpillHook | None) -> None:
        self.spill = spill
        self.exact = False
        """Set when the fast path cannot vouch for what it wrote: :func:`_encode_exact` decides."""
        self.replaced: dict[tuple[int, int | None], JsonBlock] = {}

    def run(self, blocks: list[ContentBlock]) -> tuple[str, list[ContentBlock]] | None:
        pairs = fold(blocks, self.leaf, self.result)
        if self.exact:
            return None
        try:
            text = orjson.dumps([plain for plain, _ in pairs])
        except _ENCODE_ERRORS:  # a lone surrogate in a text field, an integer beyond 64 bits
            return None
        return text.decode(), [stored for _, stored in pairs]

    def replacement(self, place: Place, leaf: Leaf) -> Leaf:
        return self.replaced.get((place.position, place.item), leaf)

    def leaf(self, place: Place, leaf: Leaf) -> tuple[Any, Any]:
        if isinstance(leaf, TextBlock):
            return {"type": "text", "text": leaf.text}, leaf
        if isinstance(leaf, ArtifactRefBlock):
            plain = {
                "type": "artifact_ref",
                "artifact_id": leaf.artifact_id,
                "summary": leaf.summary,
                "mime_type": leaf.mime_type,
            }
            return plain, leaf
        if isinstance(leaf, ToolCallBlock):
            arguments, stored = self.value(leaf.arguments, place.depth)
            plain = {
                "type": "tool_call",
                "tool_call_id": leaf.tool_call_id,
                "name": leaf.name,
                "arguments": arguments,
            }
            if stored is leaf.arguments:
                return plain, leaf
            return plain, leaf.model_copy(update={"arguments": stored})
        return self.json(place, leaf)

    def json(self, place: Place, leaf: JsonBlock) -> tuple[Any, Any]:
        if leaf.artifact_ref is not None:
            return _spilled(leaf), leaf
        what = f"{place.where}.data"
        data = codec.encode(leaf.data, what=what)
        if self.spill is not None:
            moved = self.spill(place, leaf, data)
            if moved is not None:
                self.replaced[place.position, place.item] = moved
                return _spilled(moved), moved
        codec.check_finite(data, leaf.data, what=what)
        if not _fits_reader(data, place.depth):
            self.exact = True
        stored = codec.read_back(leaf.data, data)
        plain = {"type": "json", "data": orjson.Fragment(data)}
        if stored is leaf.data and leaf.summary is None:
            return plain, leaf
        return plain, leaf.model_copy(update={"data": stored, "summary": None})

    def value(self, value: Any, depth: int) -> tuple[Any, Any]:
        """A tool call's arguments: what goes into the text, and the value as read back."""
        kind = type(value)
        if kind in _PLAIN_SCALARS:  # written by the pass over the blocks
            if kind is float and not math.isfinite(value):
                self.exact = True
            return value, value
        try:  # a dataclass is left to the exact path: pydantic's dump of it decides there
            out = orjson.dumps(value, option=orjson.OPT_PASSTHROUGH_DATACLASS)
        except _ENCODE_ERRORS:
            self.exact = True
            return None, value
        if codec.non_finite_at(out, value) is not None or not _fits_reader(out, depth):
            self.exact = True
        return orjson.Fragment(out), codec.read_back(value, out)

    def result(self, block: ToolResultBlock, items: list[tuple[Any, Any]]) -> tuple[Any, Any]:
        plain = {
            "type": "tool_result",
            "tool_call_id": block.tool_call_id,
            "content": [item for item, _ in items],
            "is_error": block.is_error,
        }
        stored = [item for _, item in items]
        if all(a is b for a, b in zip(stored, block.content, strict=True)):
            return plain, block
        return plain, block.model_copy(update={"content": stored})


_PLAIN_SCALARS = frozenset({str, int, float, bool, type(None)})


def _spilled(leaf: JsonBlock) -> dict[str, Any]:
    return {"type": "json", "summary": leaf.summary, "artifact_ref": leaf.artifact_ref}


def _encode_exact(blocks: list[ContentBlock]) -> tuple[str, list[ContentBlock]]:
    """The whole content encoded at once and parsed back: what the fast path leaves to it."""
    text = codec.dumps_text(CONTENT.dump_python(blocks), what="content")
    try:
        stored = CONTENT.validate_json(text)
    except ValidationError as exc:
        raise InvalidContent(f"content cannot be read back: {exc.errors()[0]['msg']}") from exc
    return text, stored


def _reader_depth() -> int:
    """How many containers the content reader accepts around a value (pydantic-core's limit)."""
    low, high = 1, 4096
    while low < high:
        mid = (low + high + 1) // 2
        nested = "[" * mid + "0" + "]" * mid
        try:
            CONTENT.validate_json(f'[{{"type":"json","data":{nested}}}]')
        except ValidationError:
            high = mid - 1
        else:
            low = mid
    return low + 2  # the content's list and the block's object hold the data


_READER_DEPTH = _reader_depth()


def _fits_reader(out: bytes, depth: int) -> bool:
    """Whether JSON ``out``, under ``depth`` containers, is certainly within the reader's limit.

    A value nested n deep takes 2n bytes and n opening brackets at least, so most values pass
    on their length or a count; only a value with many brackets has its nesting measured.
    """
    room = _READER_DEPTH - depth
    if len(out) <= 2 * room or out.count(b"[") + out.count(b"{") <= room:
        return True
    return codec.nesting(out, stop=room + 1) <= room


def content_from_json(text: str | bytes) -> list[ContentBlock]:
    """Decode ``content_json`` read back from the database.

    Straight to the adapter's validator: ``TypeAdapter.validate_json``'s own Python costs three
    times the validation of a short node.
    """
    blocks: list[ContentBlock] = _VALIDATE_JSON(text)
    return blocks


_VALIDATE_JSON = CONTENT.validator.validate_json


def decode_stored_content(text: str) -> list[ContentBlock]:
    """Decode ``content_json`` that must be exactly what the store writes for its blocks.

    The strict path, for text that is not trusted (an import, ``check``): JSON is decoded by the
    store's own decoder (NaN, Infinity and numbers beyond 64 bits refused), validated as caller
    input is, and must be the store's own encoding of the blocks it holds.

    Raises:
        InvalidContent: the text is not stored content as the store writes it.
    """
    try:
        value = codec.loads_stored(text)
    except ValueError as exc:
        raise InvalidContent(f"content is not valid stored JSON: {exc}") from None
    if not isinstance(value, list):
        raise InvalidContent(f"content must be a list of blocks, got {type(value).__name__}")
    blocks = validate_content(value)
    if codec.dumps_text(CONTENT.dump_python(blocks), what="content") != text:
        raise InvalidContent("content is not in the form the store writes (defaults left out?)")
    return blocks
