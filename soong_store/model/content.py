"""Content blocks: the provider-neutral items a node's ``content_json`` holds.

A node's content is a list of blocks, a strict discriminated union on ``type``: unknown types and
unknown fields are refused, and nothing is coerced (a number is not a string). One
:class:`~pydantic.TypeAdapter` is built at import time and used for every validation, both of
caller input (plain dicts or block models) and of JSON read back from the database
(:mod:`soong_store.model.content_json`). :func:`walk` is the one walk over blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Annotated, Any, Literal, NamedTuple, Self, TypeVar, get_args

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
