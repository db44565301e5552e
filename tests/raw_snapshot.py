"""The database's own picture of itself, for tests that prove a refused call changed nothing.

Read in the engine's catalog (``sqlite_master``; ``pg_class`` with its definitions), so that a
change the portable inspection of :func:`tests.helpers.snapshot` does not see (a trigger, an
index's text) still shows. Test code, not the store's: the backends' contract has no part of it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Select, inspect, literal_column, select, table

_PG_OBJECTS = """
SELECT c.relname, c.relkind,
       CASE c.relkind WHEN 'i' THEN pg_get_indexdef(c.oid) END,
       (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
                          || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END, ', '
                          ORDER BY a.attnum)
        FROM pg_attribute AS a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
       (SELECT string_agg(k.conname || ' ' || pg_get_constraintdef(k.oid), ', '
                          ORDER BY k.conname)
        FROM pg_constraint AS k WHERE k.conrelid = c.oid)
FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i', 'v', 'S')
ORDER BY c.relname
"""


def raw_snapshot(connection: Connection) -> dict[str, Any]:
    """The schema and every table's rows, in an order of their own: equal means unchanged."""
    if connection.dialect.name == "sqlite":
        master = connection.exec_driver_sql(
            "SELECT type, name, sql FROM sqlite_master ORDER BY name"
        )
        objects = [tuple(row) for row in master]
        tables = [name for kind, name, _sql in objects if kind == "table"]
    else:
        objects = [tuple(row) for row in connection.exec_driver_sql(_PG_OBJECTS)]
        tables = inspect(connection).get_table_names()
    data: dict[str, Any] = {"schema": objects}
    for name in tables:
        every: Select[Any] = select(literal_column("*")).select_from(table(name))
        data[name] = sorted((tuple(r) for r in connection.execute(every)), key=repr)
    return data
