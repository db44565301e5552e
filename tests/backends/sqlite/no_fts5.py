"""The store's DB-API module as a SQLite library built without FTS5 would behave.

Importable by name (``sqlite_module="tests.backends.sqlite.no_fts5"``, also from the CLI): it is the
store's own module, with connections that refuse FTS5's function and module the way SQLite
without them does.
"""

from __future__ import annotations

from typing import Any

from tests.conftest import RAW_SQLITE

globals().update({k: v for k, v in vars(RAW_SQLITE).items() if not k.startswith("__")})


def _refuse(sql: str) -> None:
    lowered = sql.lower()
    if "fts5(" in lowered and "using" not in lowered:
        raise RAW_SQLITE.OperationalError("no such function: fts5")
    if "fts5" in lowered or "search_fts" in lowered:
        raise RAW_SQLITE.OperationalError("no such module: fts5")


class Cursor(RAW_SQLITE.Cursor):  # type: ignore[name-defined,misc]
    """A cursor that refuses FTS5."""

    def execute(self, sql: str, *args: Any) -> Any:
        _refuse(sql)
        return super().execute(sql, *args)


class Connection(RAW_SQLITE.Connection):  # type: ignore[name-defined,misc]
    """A connection whose cursors and own ``execute`` refuse FTS5."""

    def cursor(self, factory: Any = Cursor) -> Any:
        return super().cursor(factory)

    def execute(self, sql: str, *args: Any) -> Any:
        _refuse(sql)
        return super().execute(sql, *args)


def connect(*args: Any, **kwargs: Any) -> Any:
    """``connect`` of the store's module, making connections that lack FTS5."""
    return RAW_SQLITE.connect(*args, **{**kwargs, "factory": Connection})
