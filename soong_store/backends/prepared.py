"""Statements compiled once and run straight on the driver's cursor: the writer's hot path.

Every statement is built from the table definitions, by SQLAlchemy Core or as SQL text written
from their names where compiling Core costs more than the statement (:meth:`Prepared.lookup`,
:meth:`Prepared.insert`), so the definitions stay the one source of names and columns. Running a
compiled statement through ``Connection.execute`` still costs several times what SQLite itself
spends on a small insert (cache lookup, parameter processing, result set-up, events); the
statements the writer runs for every node and event therefore go to the DB-API cursor of the
connection SQLAlchemy holds, inside the transaction SQLAlchemy began. Driver errors are raised as
SQLAlchemy's own exception classes, so retries and error translation are unchanged.

Only columns without type processing (``Text``, ``Integer``) may pass this way: values go to the
driver as they are and rows come back as the driver returns them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sqlalchemy import Select, Table, bindparam, text
from sqlalchemy.engine import Dialect
from sqlalchemy.engine.interfaces import BindTyping, DBAPICursor
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.elements import ClauseElement

from soong_store.backends.base import backend_class
from soong_store.backends.link import Link


@dataclass(frozen=True, slots=True)
class Prepared:
    """The SQL text of one statement for one dialect, and how to pass its parameters."""

    sql: str
    order: tuple[str, ...] | None
    """Parameter names in placeholder order (positional paramstyles); ``None`` when named."""
    fixed: Mapping[str, Any]
    """Values the statement carries itself (a ``LIMIT``), merged under the caller's."""
    columns: tuple[str, ...]
    """The names of the result columns (empty for DML)."""

    @classmethod
    def compile(cls, statement: ClauseElement, dialect: Dialect) -> Prepared:
        """Compile ``statement`` for ``dialect`` (an insert takes every column of its table)."""
        compiled = statement.compile(dialect=dialect)
        fixed = {name: value for name, value in compiled.params.items() if value is not None}
        selected = statement.selected_columns if isinstance(statement, Select) else ()
        positions = getattr(compiled, "positiontup", None)
        order = tuple(positions) if positions is not None else None
        return cls(compiled.string, order, fixed, tuple(c.name for c in selected))

    @classmethod
    def written(
        cls,
        sql: str,
        dialect: Dialect,
        columns: Sequence[str] = (),
        fixed: Mapping[str, Any] | None = None,
    ) -> Prepared:
        """SQL text with ``:name`` parameters, for ``dialect``; ``columns`` names its result's.

        ``fixed`` gives parameters the statement carries itself. A driver that takes ``:name``
        parameters from a mapping as they are (SQLite's) gets the text unchanged;
        compiling it as a ``text()`` clause cost ~0.1 ms a statement of a new process's first
        read or write. Other dialects get the text compiled to their parameter style.
        """
        values = dict(fixed or {})
        if takes_names(dialect):
            return cls(sql, None, values, tuple(columns))
        statement = text(sql).bindparams(**values) if values else text(sql)
        compiled = cls.compile(statement, dialect)
        return cls(compiled.sql, compiled.order, compiled.fixed, tuple(columns))

    @classmethod
    def lookup(cls, table: Table, key: str, dialect: Dialect) -> Prepared:
        """Every column of the ``table`` row whose ``key`` is ``:key``, written as SQL text.

        Compiling the same Core select labels and types each column: about 1.3 ms of a new
        process's first read of a session, against about 0.1 ms for the text.
        """
        preparer = dialect.identifier_preparer
        columns = tuple(column.name for column in table.c)
        listed = ", ".join(preparer.quote(name) for name in columns)
        where = f"{preparer.quote(key)} = :{key}"
        sql = f"SELECT {listed} FROM {preparer.format_table(table)} WHERE {where}"
        return cls.written(sql, dialect, columns)

    @classmethod
    def insert(
        cls,
        table: Table,
        dialect: Dialect,
        columns: Sequence[str] | None = None,
        rows: int | None = None,
    ) -> Prepared:
        """An ``INSERT`` of ``columns`` (every column) into ``table``, as Core compiles it.

        Each value is the parameter named after its column, or with ``rows``, that many rows
        whose parameters are ``<column>_<row>``. Where the dialect sends a bare placeholder for
        each value (SQLite) the statement is written as SQL text, which SQLite runs as it is:
        compiling Core's insert cost 0.2–0.4 ms of a new process's first write. A dialect that
        renders a cast around each placeholder (PostgreSQL's drivers) gets Core's own.
        """
        names = tuple(c.name for c in table.c) if columns is None else tuple(columns)
        groups = (
            [names] if rows is None else [tuple(f"{n}_{i}" for n in names) for i in range(rows)]
        )
        if not bare_binds(dialect):
            values: list[dict[str, Any]] = [
                {n: bindparam(b) for n, b in zip(names, g, strict=True)} for g in groups
            ]
            statement = table.insert().values(values if rows is not None else values[0])
            return cls.compile(statement, dialect)
        preparer = dialect.identifier_preparer
        listed = ", ".join(preparer.quote(name) for name in names)
        placed = ", ".join("(" + ", ".join(f":{b}" for b in g) + ")" for g in groups)
        sql = f"INSERT INTO {preparer.format_table(table)} ({listed}) VALUES {placed}"
        return cls.written(sql, dialect)

    def args(self, params: Mapping[str, Any]) -> Any:
        """The parameters in the form the driver takes."""
        if self.fixed:
            params = {**self.fixed, **params}
        if self.order is None:
            return params
        return tuple(params[name] for name in self.order)


def takes_names(dialect: Dialect) -> bool:
    """Whether ``dialect``'s driver runs ``:name`` parameters given as a mapping (SQLite's).

    As its backend's capabilities say (:attr:`.base.Capabilities.names_parameters`).
    """
    return backend_class(dialect.name).capabilities.names_parameters


def bare_binds(dialect: Dialect) -> bool:
    """Whether ``dialect`` renders a bound value as its placeholder alone (no cast around it).

    Where it does, a statement written as text is what Core would compile; where it does not
    (PostgreSQL's drivers cast each value), the writer's statements are Core's own.
    """
    return dialect.bind_typing is not BindTyping.RENDER_CASTS


LARGE_VALUE = 2**20
"""From this length on, a value written is let go by its statement (:meth:`Runner.release`)."""

_NAME = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


@lru_cache(maxsize=64)
def _names(sql: str) -> tuple[str, ...]:
    """The ``:name`` parameters of ``sql`` in placeholder order, each once."""
    return tuple(dict.fromkeys(_NAME.findall(sql)))


class Runner:
    """Runs prepared statements on the driver cursor of one connection (an engine's, or a link)."""

    __slots__ = ("_cursor", "_dialect", "_error")

    def __init__(self, connection: Link) -> None:
        self._cursor: DBAPICursor = connection.connection.driver_connection.cursor()
        self._dialect = connection.dialect
        self._error: type[Exception] = connection.dialect.loaded_dbapi.Error

    def execute(self, prepared: Prepared, params: Mapping[str, Any] | None = None) -> DBAPICursor:
        """Run ``prepared``; driver errors come out as SQLAlchemy's ``DBAPIError`` subclasses."""
        args = prepared.args(params or {})
        try:
            self._cursor.execute(prepared.sql, args)
        except self._error as exc:
            raise DBAPIError.instance(
                prepared.sql, args, exc, self._error, dialect=self._dialect
            ) from exc
        return self._cursor

    def executemany(self, prepared: Prepared, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run ``prepared`` for each of ``rows`` in one driver call (errors as :meth:`execute`).

        One statement bound again for each row: SQLite compiles it once, where an insert of
        many rows in one statement is compiled for each number of rows it is run with.
        """
        if not rows:
            return
        args = [prepared.args(row) for row in rows]
        try:
            self._cursor.executemany(prepared.sql, args)
        except self._error as exc:
            raise DBAPIError.instance(
                prepared.sql, args, exc, self._error, dialect=self._dialect
            ) from exc

    def release(self, prepared: Prepared) -> None:
        """Let the driver free the values ``prepared`` was last run with (SQLite's driver).

        SQLite keeps its own copy of each bound value until the statement is bound again, and
        the driver keeps its statements cached: after an insert of a 100 MB text, 100 MB stay
        held for as long as the statement is not run again. The DB-API has no call to clear a
        statement's bindings, so the statement is bound again, each parameter to NULL but the
        last, which is left out: the driver refuses the run at that parameter, before the
        statement runs. Nothing is written and the transaction goes on. A value in the last
        parameter stays held; a dialect that does not bind names from a mapping is left alone.
        """
        names = _names(prepared.sql) if prepared.order is None else ()
        if len(names) < 2 or not takes_names(self._dialect):
            return
        unbound = dict.fromkeys(names[:-1])
        try:
            self._cursor.execute(prepared.sql, unbound)
        except self._dialect.loaded_dbapi.ProgrammingError:
            return
        raise AssertionError("a statement ran without its last parameter")  # pragma: no cover

    def first(
        self, prepared: Prepared, params: Mapping[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """The first row as a dict of column name to value, or ``None``."""
        row = self._one(prepared, params)
        return None if row is None else dict(zip(prepared.columns, row, strict=True))

    def scalar(self, prepared: Prepared, params: Mapping[str, Any] | None = None) -> Any:
        """The first column of the first row, or ``None``."""
        row = self._one(prepared, params)
        return None if row is None else row[0]

    def _one(self, prepared: Prepared, params: Mapping[str, Any] | None) -> Any:
        # Every row is fetched (the hot queries return one at most), so the driver finishes the
        # statement and lets go of it now. A statement left on its first row stays tied to this
        # cursor; older pysqlite3 releases statements at rollback and hands them to the next
        # cursor, and this cursor's late deallocation (a traceback keeps it alive) then resets
        # the statement under that cursor, which reads an empty row.
        rows = self.execute(prepared, params).fetchall()
        return rows[0] if rows else None
