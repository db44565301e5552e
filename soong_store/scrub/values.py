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

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from soong_store.errors import InvalidArgument, InvalidContent
from soong_store.model import codec

Scrub = Callable[[str], str]
"""A scrubber: takes a text, returns the text to store in its place."""

_KEPT = frozenset({"type", "tool_call_id", "artifact_id", "artifact_ref"})
"""Fields of a content block that link blocks and artifacts: never given to the scrubber."""

_DEEPEST = 300
"""Containers nested deeper than this are refused (``InvalidContent``): the store's encoder
refuses more than 255 levels anyway, and no string is ever left unscrubbed."""


def scrub_json(value: Any, scrub: Scrub, what: str) -> Any:
    """``value`` with ``scrub`` applied to each string in it (the input is not changed).

    Dicts, lists and tuples are walked; a value of another type the encoder takes (a dataclass,
    a date) is first turned into its JSON value, so its strings are scrubbed too.
    """
    return _scrubbed(scrub, what, value, blocks=False)


def scrub_content(content: Any, scrub: Scrub, what: str = "node content") -> Any:
    """A node's content (block models or dicts) with ``scrub`` applied to its strings.

    Changed block models come back as dicts, validated afterwards like any caller's dicts; what
    is not a list of blocks comes back as it is, for the validation to refuse.
    """
    if isinstance(content, str | bytes | Mapping) or not isinstance(content, list | tuple):
        return content
    return _scrubbed(scrub, what, content, blocks=True)


def _scrubbed(scrub: Scrub, what: str, value: Any, *, blocks: bool) -> Any:
    """One walk that scrubs each string and copies; a cheaper way where the scrubber allows.

    A scrubber with a ``many`` method (list of texts -> list of texts, as
    :meth:`~soong_store.scrub.secrets.SecretScrubber.many`) gets every string of the value in
    one call: a first walk only gathers them, and where nothing changed (most values) the value
    itself is handed on; else a second walk copies it with the results in their places, taken
    in the same order.
    """
    many = getattr(scrub, "many", None)
    if many is None:
        return _Walk(what, lambda text: _checked(what, _guarded(what, scrub, text))).run(
            value, blocks
        )
    found: list[str] = []
    _Walk(what, found.append, copy=False).run(value, blocks)
    if not found:
        return value
    done = _guarded(what, many, found)
    if not isinstance(done, list) or len(done) != len(found):
        raise InvalidArgument(
            f"the scrubber's many() returned {type(done).__name__} for the {len(found)} strings "
            f"of the {what}: expected a list of as many strings; nothing was written",
            what=what,
        )
    if all(new is old for new, old in zip(done, found, strict=True)):
        return value
    results = iter(done)
    return _Walk(what, lambda _text: _checked(what, next(results))).run(value, blocks)


def _guarded(what: str, call: Callable[[Any], Any], argument: Any) -> Any:
    """``call(argument)``; what it raises becomes an :class:`InvalidArgument` naming ``what``."""
    try:
        return call(argument)
    except Exception as exc:
        raise InvalidArgument(
            f"the scrubber failed on a string of the {what} ({type(exc).__name__}); "
            "nothing was written",
            what=what,
        ) from exc


def _checked(what: str, out: object) -> str:
    if not isinstance(out, str):
        raise InvalidArgument(
            f"the scrubber returned {type(out).__name__} for a string of the {what}: "
            "expected a string; nothing was written",
            what=what,
        )
    return out


class _Walk:
    """One walk over a value: what to do with each string, and whether to build a copy.

    ``copy=False`` only visits (``on_text``'s result is dropped) and hands back the value.
    Both kinds visit the strings in the same order.
    """

    __slots__ = ("copy", "on_text", "what")

    def __init__(self, what: str, on_text: Callable[[str], object], *, copy: bool = True) -> None:
        self.what = what
        self.on_text = on_text
        self.copy = copy

    def run(self, value: Any, blocks: bool) -> Any:
        return self.blocks(value, 0) if blocks else self.json(value, 0)

    def json(self, value: Any, depth: int) -> Any:
        kind = type(value)
        if kind is str:
            out = self.on_text(value)
            return out if self.copy else value
        if kind is int or kind is float or kind is bool or value is None:
            return value
        if depth > _DEEPEST:
            raise InvalidContent(
                f"the {self.what} nests containers deeper than {_DEEPEST} levels", what=self.what
            )
        if isinstance(value, dict):
            if not self.copy:
                self.visit(value.values(), depth + 1)
                return value
            return {key: self.json(item, depth + 1) for key, item in value.items()}
        if isinstance(value, list | tuple):
            if not self.copy:
                self.visit(value, depth + 1)
                return value
            return [self.json(item, depth + 1) for item in value]
        if isinstance(value, str):  # a str subclass
            return self.json(str(value), depth)
        if isinstance(value, int | float):
            return value
        # Anything else the encoder would turn into JSON (a dataclass, a date, an enum):
        # scrubbed as that JSON. What it cannot encode raises here as it would at the write.
        return self.json(codec.loads(codec.dumps(value, what=self.what)), depth)

    def visit(self, items: Iterable[Any], depth: int) -> None:
        """Visit the items of a container (strings at once: most items of large values are)."""
        on_text = self.on_text
        for item in items:
            if type(item) is str:
                on_text(item)
            else:
                self.json(item, depth)

    def blocks(self, blocks: list[Any] | tuple[Any, ...], depth: int) -> Any:
        if not self.copy:
            for block in blocks:
                self.block(block, depth + 1)
            return blocks
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
