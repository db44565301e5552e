"""Read-only lists and dicts: the values inside records that later reads share.

The path cache hands the same records to every read of a path, so a change a caller made to a
record's content or metadata would reach what the next read returns while the database still
holds the original. Records are frozen models; these containers make the values inside them
frozen too. They subclass ``list`` and ``dict`` so that they still compare equal to plain
values, pass ``isinstance`` checks and encode as JSON (orjson, ``json``, pydantic); every
method that would change them raises ``TypeError``. A copy (``copy.copy``, ``copy.deepcopy``,
pickling, :func:`thaw`) is plain and the caller's to change.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any, NoReturn, SupportsIndex, TypeVar

T = TypeVar("T")

_READ_ONLY = (
    "{kind} of a record read from the store is read-only (shared with later reads); "
    "change a copy: copy.deepcopy(value), or record.model_copy(deep=True)"
)


class FrozenList(list[T]):
    """A ``list`` that refuses change (equal to the plain list of the same items)."""

    __slots__ = ()

    def _refused(self, *_: object, **__: object) -> NoReturn:
        raise TypeError(_READ_ONLY.format(kind="a list"))

    append = extend = insert = remove = clear = sort = reverse = _refused
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refused

    def pop(self, index: SupportsIndex = -1) -> NoReturn:
        """Refused: the list is read-only."""
        self._refused()

    def __copy__(self) -> list[T]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[T]:
        return [deepcopy(item, memo) for item in self]

    def __reduce__(self) -> tuple[Any, ...]:
        return list, (list(self),)


class FrozenDict(dict[str, Any]):
    """A ``dict`` that refuses change (equal to the plain dict of the same items)."""

    __slots__ = ()

    def _refused(self, *_: object, **__: object) -> NoReturn:
        raise TypeError(_READ_ONLY.format(kind="a dict"))

    __setitem__ = __delitem__ = __ior__ = _refused
    clear = update = setdefault = popitem = _refused

    def pop(self, *_: object) -> NoReturn:
        """Refused: the dict is read-only."""
        self._refused()

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {key: deepcopy(item, memo) for key, item in self.items()}

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (dict(self),)


def freeze(value: Any) -> Any:
    """``value`` with every list and dict in it read-only (copies; scalars are kept).

    Values read back from JSON hold only dicts, lists and scalars, which cannot change. A
    scalar item is kept without a call: most items of JSON are.
    """
    kind = type(value)
    if kind is dict or kind is FrozenDict:
        return FrozenDict(
            {key: item if type(item) in _SCALARS else freeze(item) for key, item in value.items()}
        )
    if kind is list or kind is FrozenList:
        return FrozenList([item if type(item) in _SCALARS else freeze(item) for item in value])
    return value


_SCALARS = frozenset({str, int, float, bool, type(None)})


def thaw(value: Any) -> Any:
    """A plain copy of ``value``: every list and dict in it a new one the caller may change."""
    if isinstance(value, dict):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, list):
        return [thaw(item) for item in value]
    return value
