"""The one place JSON is encoded and decoded (orjson), with NaN and Infinity refused."""

from __future__ import annotations

import marshal
import math
import re
from typing import Any

import orjson

from soong_store.errors import InvalidContent

_NULL = re.compile(rb"null")  # a compiled search scans large output twice as fast as `in`


def dumps(value: Any, *, what: str = "value") -> bytes:
    """Encode ``value`` as compact JSON bytes.

    orjson writes NaN and Infinity as ``null``; a silent change of data is worse than an error, so
    whenever the output holds a ``null`` the value is checked for non-finite floats (see
    :func:`_non_finite_at`).

    Raises:
        InvalidContent: the value holds NaN, Infinity, a lone surrogate, a non-string key or a type
            JSON cannot hold. ``what`` names the value in the message.
    """
    out = encode(value, what=what)
    check_finite(out, value, what=what)
    return out


def encode(value: Any, *, what: str = "value") -> bytes:
    """The first half of :func:`dumps`: orjson's output, *not yet* checked for NaN."""
    try:
        return orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError) as exc:
        raise InvalidContent(f"{what} is not storable as JSON: {exc}", what=what) from exc


def check_finite(out: bytes, value: Any, *, what: str = "value") -> None:
    """The second half of :func:`dumps`: ``InvalidContent`` if ``out`` hides NaN or Infinity."""
    bad = non_finite_at(out, value)
    if bad is not None:
        raise InvalidContent(
            f"{what} holds a non-finite number at {bad}; NaN and Infinity are refused",
            what=what,
        )


def non_finite_at(out: bytes, value: Any) -> str | None:
    """Where ``value``, encoded as ``out``, holds NaN or an infinity (a JSON path), or ``None``."""
    if _NULL.search(out) is None:
        return None
    return _non_finite_at(value)


def dumps_text(value: Any, *, what: str = "value") -> str:
    """Encode ``value`` as a JSON string for a TEXT column."""
    return dumps(value, what=what).decode()


def dumps_optional(value: Any, *, what: str = "value") -> str | None:
    """Encode ``value`` for a nullable TEXT column: ``None`` stays NULL."""
    return None if value is None else dumps_text(value, what=what)


def encode_column(value: Any, *, what: str = "value") -> tuple[str | None, Any]:
    """Encode ``value`` for a nullable TEXT column, and return it as a read of that column does.

    What a write hands back must equal what a later read returns (:func:`read_back`), so the
    value travels with its text and nothing decodes the column again on the way in.
    """
    if value is None:
        return None, None
    out = dumps(value, what=what)
    return out.decode(), read_back(value, out)


_SCALARS = frozenset({str, int, float, bool, type(None)})


def read_back(value: Any, out: bytes) -> Any:
    """``value`` as a read of ``out``, its JSON, returns it.

    A scalar of an exact builtin type reads back as itself. Anything else may not — a tuple
    becomes a list, a str subclass a str, a date its text, an enum its value — and no check of
    a container is cheaper than decoding ``out`` (orjson decodes ~3x faster than a Python walk
    tells plain values apart), so a container is decoded once, here.
    """
    if type(value) in _SCALARS:
        return value
    return orjson.loads(out)


_STRUCTURE = bytes(range(256)).translate(None, b'"[]{}')
_TO_LIST = bytes.maketrans(b"{}", b"[]")


def nesting(out: bytes, *, stop: int | None = None) -> int:
    """How deep containers nest in ``out``, JSON as orjson writes it (``stop``: count no further).

    Strings hold no structure: once their escaped backslashes and quotes are gone, every
    remaining quote opens or closes one, so the text between quote pairs is dropped. Each pass
    over the brackets left removes the innermost pairs.
    """
    plain = out.replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = b"".join(plain.translate(_TO_LIST, _STRUCTURE).split(b'"')[::2])
    depth = 0
    while brackets and (stop is None or depth < stop):
        brackets = brackets.replace(b"[]", b"")
        depth += 1
    return depth


def loads(data: str | bytes | None) -> Any:
    """Decode JSON text from the database (``None`` for NULL)."""
    if data is None:
        return None
    return orjson.loads(data)


def loads_stored(text: str) -> Any:
    """Decode JSON text that must be exactly what :func:`dumps_text` writes for its value.

    What the store writes always passes. Text from elsewhere (an import file, a damaged row) that
    decodes to something else — NaN or Infinity, a number beyond a double, an integer beyond 64
    bits (which would come back as a float), a repeated key, other spacing — raises
    ``ValueError``: it cannot have come from the store, and accepting it would change data.
    """
    value = orjson.loads(text)  # refuses NaN, Infinity, 1e400, lone surrogates
    if not is_text(orjson.dumps(value), text):
        raise ValueError(
            f"{text[:60]!r} is not the store's JSON encoding of its value (numbers beyond 64 "
            "bits or a double, repeated keys or other spacing)"
        )
    return value


_PIECE = 2**20


def is_text(out: bytes, text: str) -> bool:
    """Whether ``out`` is the UTF-8 of ``text``, without a whole copy of a long text.

    A long text is encoded and compared a piece at a time: comparing ``text.encode()`` would
    hold a third copy of a 100 MB content beside the text and ``out``.
    """
    try:
        if len(text) <= _PIECE:
            return out == text.encode()
        view = memoryview(out)
        at = 0
        for start in range(0, len(text), _PIECE):
            piece = text[start : start + _PIECE].encode()
            if view[at : at + len(piece)] != piece:
                return False
            at += len(piece)
    except UnicodeEncodeError:  # a lone surrogate: no bytes are its UTF-8
        return False
    return at == len(out)


# marshal writes a float as TYPE_BINARY_FLOAT, b"g" (b"\xe7" when flagged as shared), then the
# 8 little-endian bytes of the double. NaN and infinities are the doubles whose 11 exponent bits
# are all set: the last two bytes are [\xf0-\xff][\x7f\xff]. Two searches with a literal first
# byte each run several times faster than one with a class of two.
_NON_FINITE = re.compile(rb"g.{6}[\xf0-\xff][\x7f\xff]", re.DOTALL)
_SHARED_NON_FINITE = re.compile(rb"\xe7.{6}[\xf0-\xff][\x7f\xff]", re.DOTALL)


def _non_finite_at(value: Any) -> str | None:
    """Where ``value`` holds NaN or an infinity (a JSON path), or ``None``.

    A walk in Python costs ~50x orjson's encoding of the same value. ``marshal`` (C, ~0.6x
    orjson's time) writes every float of a plain value as its eight bytes, which two searches
    check; it refuses anything but exact builtins (an enum, a float subclass, a dataclass ...),
    which therefore never hides a float from it. The walk runs only to confirm a hit (other
    bytes can look like one) and name its place, or for a value marshal refuses.
    """
    try:
        flat = marshal.dumps(value)
    except ValueError:  # not plain builtins, or nested too deep: the walk decides
        return _find_non_finite(value, "$")
    if _NON_FINITE.search(flat) is None and _SHARED_NON_FINITE.search(flat) is None:
        return None
    return _find_non_finite(value, "$")


def _find_non_finite(value: Any, where: str) -> str | None:
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return path
        elif isinstance(item, dict):
            stack.extend((v, f"{path}.{k}") for k, v in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
    return None


def check_text(value: object, what: str, *, max_len: int = 4096) -> str:
    """A plain text value for a TEXT column: a non-empty, bounded, encodable ``str``.

    Lone surrogates cannot be stored as UTF-8; they are refused here rather than failing in the
    writer.
    """
    if not isinstance(value, str) or not 0 < len(value) <= max_len:
        raise InvalidContent(f"invalid {what} {value!r}: expected 1-{max_len} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidContent(f"invalid {what} {value!r}: {exc.reason}") from exc
    return value
