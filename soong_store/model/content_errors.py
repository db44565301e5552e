"""What a refused content says: the block, the key and what was expected, in the store's words.

Pydantic's first error reads ``0.text.text: Field required`` or ``Unable to extract tag using
discriminator 'type'``; a caller who misspelled a key or passed one block instead of a list
needs to be told which block, which key and what the block takes. :func:`content_error` turns
the errors of one validation into that message, naming places as the rest of the store does
(``content[2]``, ``content[2].content[0]``: :attr:`~soong_store.model.content.Place.where`).
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from soong_store.errors import InvalidContent

BLOCK_HINT = "wrap it: [block]"
"""What a single block given for a list of blocks is told."""


def not_a_list(value: object, what: str = "content") -> str:
    """The message of ``value`` given where a list of blocks belongs."""
    if isinstance(value, BaseModel | Mapping):
        return f"{what} must be a list of blocks, got a {type(value).__name__}; {BLOCK_HINT}"
    if isinstance(value, str):
        return (
            f"{what} must be a list of blocks, got a str; text is [{{'type': 'text', 'text': ...}}]"
        )
    if value is None:
        return f"{what} must be a list of blocks, got None"
    return f"{what} must be a list of blocks, got {_given(value)}"


def content_error(
    errors: Sequence[ErrorDetails],
    blocks: Mapping[str, type[BaseModel]],
    item_tags: Sequence[str],
) -> InvalidContent:
    """The :class:`InvalidContent` of a validation's errors.

    ``blocks`` maps each block type to its class; ``item_tags`` are the types a tool result's
    items may have.

    The first block in error is reported, with all its errors read together: a misspelled key
    is an unknown key and a missing one, and is told as the unknown key with the keys the
    block takes.
    """
    first = _Where.of(errors[0]["loc"])
    tags = ", ".join(item_tags if first.nested else blocks)
    mine = [error for error in errors if _Where.of(error["loc"]).place == first.place]
    unknown = [_Where.of(e["loc"]).key for e in mine if e["type"] == "extra_forbidden"]
    missing = [_Where.of(e["loc"]).key for e in mine if e["type"] == "missing"]
    block = blocks.get(first.tag or "")
    context: dict[str, Any] = {"where": first.place}
    if first.tag is not None:
        context["block_type"] = first.tag
    if block is not None and (unknown or missing):
        keys = unknown or missing
        what = "unknown" if unknown else "missing"
        named = ", ".join(_SHORT.repr(key) for key in keys)
        plural = "s" if len(keys) > 1 else ""
        context["key"] = keys[0]
        problem = f"{what} key{plural} {named}; expected keys: {_expected_keys(block)}"
        return InvalidContent(f"{first.label}: {problem}", **context)
    error = mine[0]
    key = _Where.of(error["loc"]).key
    if key is not None:
        context["key"] = key
    return InvalidContent(f"{first.label}: {_problem(error, key, block, tags)}", **context)


def _problem(error: ErrorDetails, key: str | None, block: type[BaseModel] | None, tags: str) -> str:
    kind, given, ctx = error["type"], error["input"], error.get("ctx") or {}
    if kind == "union_tag_invalid":
        tag = given.get("type") if isinstance(given, Mapping) else getattr(given, "type", None)
        return f"unknown type {_SHORT.repr(tag)}; expected one of: {tags}"
    if kind == "union_tag_not_found" and isinstance(given, Mapping):
        keys = ", ".join(_SHORT.repr(k) for k in given) or "none"
        return f"no 'type' key (keys given: {keys}); expected one of: {tags}"
    if kind in ("union_tag_not_found", "model_attributes_type"):
        return f"expected a block (a dict with a 'type' key, or a block model), got {_given(given)}"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    if key is None:
        return error["msg"]
    if kind == "list_type":
        return not_a_list(given, what=repr(key))
    if kind == "string_too_short":
        return f"{key!r} must not be empty, got {_SHORT.repr(given)}"
    expected = _EXPECTED.get(kind)
    if expected is None:
        return f"{key!r}: {error['msg']}, got {_given(given)}"
    field = block.model_fields.get(key) if block is not None else None
    if field is not None and not field.is_required() and field.default is None:
        expected += " or null"
    return f"{key!r} must be {expected}, got {_given(given)}"


_EXPECTED = {
    "string_type": "a string",
    "bool_type": "a boolean",
    "int_type": "an integer",
    "list_type": "a list",
    "dict_type": "a dict",
}


def _given(value: object) -> str:
    """A value as a message names it: its type, and its text, cut short and shallow."""
    return f"{type(value).__name__} {_SHORT.repr(value)}"


_SHORT = reprlib.Repr()
"""A bounded ``repr``: a given value may be long, or nested past the interpreter's stack."""
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 3, 40, 40
_SHORT.maxlist = _SHORT.maxdict = _SHORT.maxtuple = _SHORT.maxset = 4


def _expected_keys(block: type[BaseModel]) -> str:
    fields = {name: field for name, field in block.model_fields.items() if name != "type"}
    required = [name for name, field in fields.items() if field.is_required()]
    optional = [name for name, field in fields.items() if not field.is_required()]
    if not required:
        return ", ".join(optional)
    return ", ".join(required) + (f"; optional: {', '.join(optional)}" if optional else "")


class _Where:
    """A place in content, read from an error's ``loc``: the block, its type, the key in it.

    A ``loc`` alternates positions and types: ``(0, 'tool_result', 'content', 1, 'text', 'txt')``
    is the key ``txt`` of item 1 (a text block) of block 0 (a tool result).
    """

    __slots__ = ("place", "tag", "key", "nested")

    def __init__(self, place: str, tag: str | None, key: str | None, nested: bool) -> None:
        self.place, self.tag, self.key, self.nested = place, tag, key, nested

    @classmethod
    def of(cls, loc: Sequence[int | str]) -> _Where:
        rest = list(loc)
        place, tag, nested = "content", None, False
        while rest and isinstance(rest[0], int):
            place += f"[{rest.pop(0)}]"
            tag = str(rest.pop(0)) if rest and isinstance(rest[0], str) else None
            if rest[:1] == ["content"] and len(rest) >= 2 and isinstance(rest[1], int):
                place, nested = place + ".content", True
                rest.pop(0)
        return cls(place, tag, str(rest[0]) if rest else None, nested)

    @property
    def label(self) -> str:
        """``content[0] (type 'text')``, or the bare place when no type was read."""
        return self.place if self.tag is None else f"{self.place} (type {self.tag!r})"
