"""Content blocks: the provider-neutral items a node's ``content_json`` holds.

A node's content is a list of blocks, a strict discriminated union on ``type``: unknown types and
unknown fields are refused, and nothing is coerced (a number is not a string). One
:class:`~pydantic.TypeAdapter` is built at import time and used for every validation, both of
caller input (plain dicts or block models) and of JSON read back from the database.
:func:`walk` is the one walk over blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Annotated, Any, Literal, NamedTuple, Self, TypeVar

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


ToolResultItem = Annotated[TextBlock | JsonBlock | ArtifactRefBlock, Field(discriminator="type")]


class ToolResultBlock(_Block):
    """What a tool returned for one call; ``is_error`` marks a failed tool."""

    type: Literal["tool_result"] = "tool_result"
    tool_call_id: str = Field(min_length=1)
    content: list[ToolResultItem]
    is_error: bool = False


ContentBlock = Annotated[
    TextBlock | JsonBlock | ToolCallBlock | ToolResultBlock | ArtifactRefBlock,
    Field(discriminator="type"),
]
"""Any one block; the union is discriminated on ``type``."""

_CONTENT = TypeAdapter(list[ContentBlock])


def validate_content(content: object) -> list[ContentBlock]:
    """Turn caller input (block models or plain dicts) into a list of validated blocks.

    Raises:
        InvalidContent: the input is not a list of valid blocks; the message names the first
            problem and where it is.
    """
    if isinstance(content, str | bytes | Mapping) or not isinstance(content, Iterable):
        raise InvalidContent(
            f"content must be a list of blocks, got {type(content).__name__}",
            content_type=type(content).__name__,
        )
    try:
        return _CONTENT.validate_python(list(content))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidContent(f"invalid content at {where or 'top'}: {first['msg']}") from exc


def encode_content(blocks: list[ContentBlock]) -> tuple[str, list[ContentBlock]]:
    """Encode validated blocks for ``content_json``, and return the blocks read back from it.

    NaN, Infinity and lone surrogates are refused. The text is parsed back once: JSON nested
    deeper than the reader accepts (pydantic-core stops at about 200 levels, orjson writes up to
    254) is refused here, not found unreadable later; and the blocks read back are exactly what
    every later read returns (tuples become lists), so a write can hand them out as they are.
    """
    text = codec.dumps_text(_CONTENT.dump_python(blocks), what="content")
    try:
        stored = _CONTENT.validate_json(text)
    except ValidationError as exc:
        raise InvalidContent(f"content cannot be read back: {exc.errors()[0]['msg']}") from exc
    return text, stored


def content_to_json(blocks: list[ContentBlock]) -> str:
    """The ``content_json`` text of validated blocks (see :func:`encode_content`)."""
    return encode_content(blocks)[0]


def content_from_json(text: str | bytes) -> list[ContentBlock]:
    """Decode ``content_json`` read back from the database."""
    return _CONTENT.validate_json(text)


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
    if codec.dumps_text(_CONTENT.dump_python(blocks), what="content") != text:
        raise InvalidContent("content is not in the form the store writes (defaults left out?)")
    return blocks


# -- the one walk over blocks ------------------------------------------------------------------

Leaf = TextBlock | JsonBlock | ToolCallBlock | ArtifactRefBlock
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
