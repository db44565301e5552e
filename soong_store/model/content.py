"""Content blocks: the provider-neutral items a node's ``content_json`` holds.

A node's content is a list of blocks, a strict discriminated union on ``type``: unknown types and
unknown fields are refused, and nothing is coerced (a number is not a string). One
:class:`~pydantic.TypeAdapter` is built at import time and used for every validation, both of
caller input (plain dicts or block models) and of JSON read back from the database.
:func:`walk` is the one walk over blocks.

``content_json``, a node's blocks written once and read back: :func:`encode_content` encodes
each value once and hands back the blocks as a read returns them, without parsing its own
output; :func:`content_from_json` is the read; and :func:`decode_stored_content` is the strict
read of text that is not trusted (an import, ``check``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Annotated, Any, Literal, NamedTuple, Self, TypeVar, get_args

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    ValidationError,
    model_serializer,
    model_validator,
)

from soong_store.errors import InvalidContent
from soong_store.model import codec

REASON_LENGTH = 1000
"""The longest reason a redaction keeps (characters): a short note, never a copy of the content."""


class _Block(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class TextBlock(_Block):
    """Plain text."""

    type: Literal["text"] = "text"
    text: str


class ArtifactRefBlock(_Block):
    """A reference to an artifact file (a user attachment or a spilled payload)."""

    type: Literal["artifact_ref"] = "artifact_ref"
    artifact_id: str = Field(min_length=1)
    summary: str | None = None
    mime_type: str | None = None


class JsonBlock(_Block):
    """A JSON value: inline ``data``, or once spilled, ``summary`` + ``artifact_ref``."""

    type: Literal["json"] = "json"
    data: Any = None
    summary: str | None = None
    artifact_ref: str | None = None

    @model_validator(mode="after")
    def _one_form(self) -> Self:
        spilled = self.artifact_ref is not None
        if spilled and "data" in self.model_fields_set:
            raise ValueError("a json block holds either data or an artifact_ref, not both")
        if spilled and self.summary is None:
            raise ValueError("a json block with an artifact_ref needs a summary")
        if not spilled and "data" not in self.model_fields_set:
            raise ValueError("a json block needs data (or summary and artifact_ref)")
        return self

    @model_serializer(mode="wrap")
    def _dump_one_form(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # ``data: null`` is a value, so the spilled form is told apart by the key being absent.
        out: dict[str, Any] = handler(self)
        if self.artifact_ref is not None:
            out.pop("data", None)
        else:
            out.pop("summary", None)
            out.pop("artifact_ref", None)
        return out


class ToolCallBlock(_Block):
    """A model's request to call a tool."""

    type: Literal["tool_call"] = "tool_call"
    tool_call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: Any = None


class RedactedBlock(_Block):
    """What a redacted node holds instead of its content (``store.redact_node``): why, not what."""

    type: Literal["redacted"] = "redacted"
    reason: str = Field(min_length=1, max_length=REASON_LENGTH)


ToolResultItem = Annotated[TextBlock | JsonBlock | ArtifactRefBlock, Field(discriminator="type")]


class ToolResultBlock(_Block):
    """What a tool returned for one call; ``is_error`` marks a failed tool."""

    type: Literal["tool_result"] = "tool_result"
    tool_call_id: str = Field(min_length=1)
    content: list[ToolResultItem]
    is_error: bool = False


ContentBlock = Annotated[
    TextBlock | JsonBlock | ToolCallBlock | ToolResultBlock | ArtifactRefBlock | RedactedBlock,
    Field(discriminator="type"),
]
"""Any one block; the union is discriminated on ``type``."""

CONTENT = TypeAdapter(list[ContentBlock])
"""The one adapter of a node's content, built at import time."""

BLOCKS: dict[str, type[BaseModel]] = {
    block.model_fields["type"].default: block for block in get_args(get_args(ContentBlock)[0])
}
"""Each block type's class, in the union's order."""
ITEM_TAGS = tuple(
    block.model_fields["type"].default for block in get_args(get_args(ToolResultItem)[0])
)
"""The types a tool result's items may have, in :data:`ToolResultItem`'s order."""


def validate_content(content: object) -> list[ContentBlock]:
    """Turn caller input (block models or plain dicts) into a list of validated blocks.

    Raises:
        InvalidContent: the input is not a list of valid blocks; the message names the first
            block in error, the key and what the block takes
            (:mod:`soong_store.model.content_errors`).
    """
    if isinstance(content, str | bytes | Mapping | BaseModel) or not isinstance(content, Iterable):
        from soong_store.model.content_errors import not_a_list

        raise InvalidContent(not_a_list(content), content_type=type(content).__name__)
    try:
        return CONTENT.validate_python(list(content))
    except ValidationError as exc:
        from soong_store.model.content_errors import content_error

        raise content_error(exc.errors(), BLOCKS, ITEM_TAGS) from exc


# -- the one walk over blocks ------------------------------------------------------------------

Leaf = TextBlock | JsonBlock | ToolCallBlock | ArtifactRefBlock | RedactedBlock
"""A block that holds no blocks: any block but a tool result, or an item of one."""

T = TypeVar("T")


class Place(NamedTuple):
    """Where a leaf block sits in a node's content."""

    position: int
    """The position of its block in the content."""
    item: int | None = None
    """Its position in the tool result's content, when it is an item of one."""
    owner: ToolResultBlock | None = None
    """The tool result it is an item of."""

    @property
    def where(self) -> str:
        """The leaf's path as messages name it: ``content[2]`` or ``content[2].content[0]``."""
        top = f"content[{self.position}]"
        return top if self.item is None else f"{top}.content[{self.item}]"

    @property
    def depth(self) -> int:
        """How many JSON containers hold the leaf's fields in ``content_json``."""
        return 2 if self.item is None else 4


def _leaves(index: int, block: ContentBlock) -> Iterator[tuple[Place, Leaf]]:
    if isinstance(block, ToolResultBlock):
        for item, leaf in enumerate(block.content):
            yield Place(index, item, block), leaf
    else:
        yield Place(index), block


def walk(blocks: Iterable[ContentBlock]) -> Iterator[tuple[Place, Leaf]]:
    """Every leaf of ``blocks`` in order, with its place: a block, or an item of a tool result.

    Everything that looks into content blocks goes through this walk (or :func:`fold`, which
    is the same walk), so a new kind of block that holds others changes one function.
    """
    for index, block in enumerate(blocks):
        yield from _leaves(index, block)


def fold(
    blocks: Iterable[ContentBlock],
    leaf: Callable[[Place, Leaf], T],
    result: Callable[[ToolResultBlock, list[T]], T],
) -> list[T]:
    """One value per block: ``leaf`` of a leaf block, ``result`` of a tool result and its items."""
    out: list[T] = []
    for index, block in enumerate(blocks):
        values = [leaf(place, item) for place, item in _leaves(index, block)]
        out.append(result(block, values) if isinstance(block, ToolResultBlock) else values[0])
    return out


def rebuild(
    blocks: Iterable[ContentBlock], change: Callable[[Place, Leaf], Leaf]
) -> list[ContentBlock]:
    """``blocks`` with each leaf replaced by ``change(place, leaf)``; untouched blocks are kept."""

    def result(block: ToolResultBlock, items: list[ContentBlock]) -> ContentBlock:
        if all(a is b for a, b in zip(items, block.content, strict=True)):
            return block
        return block.model_copy(update={"content": items})

    return fold(blocks, change, result)


def _ref_of(leaf: Leaf) -> str | None:
    if isinstance(leaf, ArtifactRefBlock):
        return leaf.artifact_id
    if isinstance(leaf, JsonBlock):
        return leaf.artifact_ref
    return None


def artifact_refs(blocks: Iterable[ContentBlock]) -> list[str]:
    """The artifact ids the blocks refer to (attachments and spilled JSON), in order."""
    return [ref for _, leaf in walk(blocks) if (ref := _ref_of(leaf)) is not None]


def map_artifact_refs(blocks: list[ContentBlock], mapping: dict[str, str]) -> list[ContentBlock]:
    """The blocks with every artifact reference renamed through ``mapping`` (a forked copy)."""

    def rename(_: Place, leaf: Leaf) -> Leaf:
        if isinstance(leaf, ArtifactRefBlock) and leaf.artifact_id in mapping:
            return leaf.model_copy(update={"artifact_id": mapping[leaf.artifact_id]})
        if isinstance(leaf, JsonBlock) and leaf.artifact_ref in mapping:
            return leaf.model_copy(update={"artifact_ref": mapping[leaf.artifact_ref]})
        return leaf

    return rebuild(blocks, rename)


def content_to_json(blocks: list[ContentBlock]) -> str:
    """The ``content_json`` text of validated blocks (see :func:`encode_content`)."""
    return encode_content(blocks)[0]


def token_estimate(blocks: list[ContentBlock]) -> int:
    """What a node without a ``token_count`` counts as: ceil(bytes of its content JSON / 4).

    The content JSON is the node's ``content_json`` as the store writes it: the blocks' compact
    UTF-8 JSON (no spaces, every field of a block written, a spilled JSON block as its summary
    and reference), which :func:`decode_stored_content` holds stored content to; so the estimate
    of a read node is the estimate of its stored text. Four bytes a token is the usual rough
    rule for English and JSON.
    """
    return -(-len(orjson.dumps(CONTENT.dump_python(blocks))) // 4)


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
        if isinstance(leaf, RedactedBlock):
            return {"type": "redacted", "reason": leaf.reason}, leaf
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
    if not codec.is_text(codec.dumps(CONTENT.dump_python(blocks), what="content"), text):
        raise InvalidContent("content is not in the form the store writes (defaults left out?)")
    return blocks
