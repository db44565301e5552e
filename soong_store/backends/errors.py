"""Translation of driver and SQLAlchemy errors into soong_store errors, in one place."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from soong_store.errors import SoongStoreError, StorageError


def translate(exc: BaseException) -> SoongStoreError:
    """The soong_store error that stands for ``exc`` (itself when it already is one)."""
    if isinstance(exc, SoongStoreError):
        return exc
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        detail = str(exc.orig)
        lowered = detail.lower()
        if "disk is full" in lowered or "disk i/o error" in lowered:
            message = f"storage failed: {detail} (nothing of this call was stored)"
        elif "malformed" in lowered or "not a database" in lowered:
            message = f"the database file is damaged: {detail}"
        else:
            message = f"database error: {detail}"
        error = StorageError(message, driver_error=type(exc.orig).__name__)
    elif isinstance(exc, SQLAlchemyError | OSError):
        error = StorageError(f"storage failed: {exc}")
    else:
        return StorageError(f"unexpected {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


@contextmanager
def translated() -> Iterator[None]:
    """Re-raise database and file-system errors as :class:`StorageError`."""
    try:
        yield
    except (SQLAlchemyError, OSError) as exc:
        raise translate(exc) from exc
