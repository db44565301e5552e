"""Driver errors as soong_store errors: the kinds a backend sorts them into, and one translation.

A backend says what a driver error means (:class:`ErrorKind`, by its own message patterns or
codes); what a kind means to a caller is said here once, the same for every database.
:func:`soong_store.backends.base.translate` and ``translated`` apply it with the backend at hand,
or with every registered one when there is none.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from types import TracebackType
from typing import Protocol

from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from soong_store.errors import SoongStoreError, StorageError


class ErrorKind(StrEnum):
    """What a driver error means, whatever words the driver used."""

    BUSY = "busy"
    """Another connection holds a lock or changed the schema: the same work may succeed when tried
    again."""
    FULL = "full"
    """The disk is full or failed: nothing of the call was stored."""
    DAMAGED = "damaged"
    """The database itself is damaged."""
    MISSING_TABLE = "missing_table"
    """A statement named a table that is not there."""
    LOST = "lost"
    """The connection to the server failed or was cut: work not yet committed may be tried again."""


class Classifier(Protocol):
    """Whatever sorts driver errors into kinds: a backend class."""

    def classify(self, exc: BaseException, /) -> ErrorKind | None:
        """The kind of ``exc``; ``None`` when it is not known."""


def translate(exc: BaseException, by: Iterable[Classifier]) -> SoongStoreError:
    """The soong_store error that stands for ``exc`` (itself when it already is one).

    A driver error, as SQLAlchemy wraps it or as the driver raised it (``ATTACH``, a pragma:
    statements run on the driver's own connection), becomes a :class:`StorageError` saying what
    its kind (the first of ``by`` that knows it) means: the call stored nothing, or the database
    is damaged; it names the driver's class. Another SQLAlchemy or file-system error becomes a
    ``StorageError`` of its own, anything else an "unexpected" one.
    """
    if isinstance(exc, SoongStoreError):
        return exc
    orig = exc.orig if isinstance(exc, DBAPIError) else exc if _is_driver_error(exc) else None
    if orig is not None:
        detail = str(orig)
        kind = next((k for c in by if (k := c.classify(exc)) is not None), None)
        if kind is ErrorKind.FULL:
            message = (
                f"storage failed: {detail} (the disk is full or failing: "
                "nothing of this call was stored)"
            )
        elif kind is ErrorKind.DAMAGED:
            message = f"the database file is damaged: {detail}"
        elif kind is ErrorKind.LOST:
            message = f"the database could not be reached: {detail}"
        else:
            message = f"database error: {detail}"
        error = StorageError(message, driver_error=type(orig).__name__)
    elif isinstance(exc, SQLAlchemyError | OSError):
        error = StorageError(f"storage failed: {exc}")
    else:
        return StorageError(f"unexpected {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def _is_driver_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a DB-API driver's own error, by PEP 249's hierarchy of names.

    Every driver error derives from the driver's ``Error`` through ``DatabaseError`` or
    ``InterfaceError``; the drivers share no class, and an error of any other library whose
    words happen to match a driver's message must not be taken for one.
    """
    names = {cls.__name__ for cls in type(exc).__mro__}
    return "Error" in names and not names.isdisjoint(("DatabaseError", "InterfaceError"))


class Translated:
    """Re-raise every error of the block as a soong_store error (``raise ... from`` the original).

    soong_store's own errors pass unchanged; ``BaseException``s that are not errors
    (cancellation, interrupts) are never touched. A class rather than a generator: it wraps
    every write a caller awaits, so entering it must cost next to nothing.
    """

    __slots__ = ("_by",)

    def __init__(self, by: Iterable[Classifier]) -> None:
        self._by = by

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, Exception) and not isinstance(exc, SoongStoreError):
            raise translate(exc, self._by) from exc
