"""A scrubber (text -> text) applied to every string of a value the store is given.

The store calls these before it validates and encodes anything (``SessionStore(scrub=...)``):
:func:`scrub_json` for a JSON value (metadata, payloads, usage, a run's error, an ADK state
delta), :func:`scrub_content` for a node's content blocks. Strings are replaced wherever they
are values; keys of objects are left as they are (two keys scrubbed alike would merge). In
content blocks the fields that tie blocks together are left too: a block's ``type``, a
``tool_call_id`` and the ids of artifact references, which a scrubber of secrets never needs
to change and a careless one must not break.

What a scrubber raises, or a value other than a string it returns, becomes an
:class:`~soong_store.errors.InvalidArgument` naming the value's place, never its text (the
text is what the scrubber was to hide), and nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from soong_store.errors import InvalidArgument
from soong_store.model import codec

Scrub = Callable[[str], str]
"""A scrubber: takes a text, returns the text to store in its place."""

_KEPT = frozenset({"type", "tool_call_id", "artifact_id", "artifact_ref"})
"""Fields of a content block that link blocks and artifacts: never given to the scrubber."""

_DEEPEST = 256
"""Containers deeper than this are left to the encoder, which refuses them (orjson's limit is
255 levels): nothing that deep is stored, scrubbed or not."""


def check_scrub(scrub: object) -> Scrub | None:
    """``scrub`` as a store takes it: ``None`` or a callable (``InvalidArgument`` otherwise)."""
    if scrub is not None and not callable(scrub):
        raise InvalidArgument(f"invalid scrub {scrub!r}: expected a callable (text -> text)")
    return scrub


def scrub_json(value: Any, scrub: Scrub, what: str) -> Any:
    """``value`` with ``scrub`` applied to each string in it (a new value; the input is kept).

    Dicts, lists and tuples are walked; a value of another type the encoder takes (a dataclass,
    a date) is first turned into its JSON value, so its strings are scrubbed too.
    """
    return _Walk(scrub, what).json(value, 0)


def scrub_content(content: Any, scrub: Scrub, what: str = "node content") -> Any:
    """A node's content (block models or dicts) with ``scrub`` applied to its strings.

    Block models come back as dicts, validated afterwards like any caller's dicts; what is not
    a list of blocks comes back as it is, for the validation to refuse.
    """
    if isinstance(content, str | bytes | Mapping) or not isinstance(content, list | tuple):
        return content
    return _Walk(scrub, what).blocks(content, 0)


class _Walk:
    """One walk over a value: the scrubber, and what to call the value in an error."""

    __slots__ = ("scrub", "what")

    def __init__(self, scrub: Scrub, what: str) -> None:
        self.scrub = scrub
        self.what = what

    def text(self, text: str) -> str:
        try:
            out = self.scrub(text)
        except Exception as exc:
            raise InvalidArgument(
                f"the scrubber failed on a string of the {self.what} "
                f"({type(exc).__name__}); nothing was written",
                what=self.what,
            ) from exc
        if not isinstance(out, str):
            raise InvalidArgument(
                f"the scrubber returned {type(out).__name__} for a string of the {self.what}: "
                "expected a string; nothing was written",
                what=self.what,
            )
        return out

    def json(self, value: Any, depth: int) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if value is None or isinstance(value, bool | int | float):
            return value
        if depth > _DEEPEST:
            return value
        if isinstance(value, dict):
            return {key: self.json(item, depth + 1) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.json(item, depth + 1) for item in value]
        # Anything else the encoder would turn into JSON (a dataclass, a date, an enum):
        # scrubbed as that JSON. What it cannot encode raises here as it would at the write.
        return self.json(codec.loads(codec.dumps(value, what=self.what)), depth)

    def blocks(self, blocks: list[Any] | tuple[Any, ...], depth: int) -> list[Any]:
        return [self.block(block, depth + 1) for block in blocks]

    def block(self, block: Any, depth: int) -> Any:
        if isinstance(block, BaseModel):
            block = block.model_dump()
        if not isinstance(block, dict):
            return block  # the validation names what is wrong with it
        out: dict[str, Any] = {}
        for key, value in block.items():
            if key in _KEPT:
                out[key] = value
            elif key == "content" and isinstance(value, list | tuple):  # a tool result's items
                out[key] = self.blocks(value, depth + 1)
            else:
                out[key] = self.json(value, depth + 1)
        return out
