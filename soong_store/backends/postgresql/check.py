"""PostgreSQL's own check of a store's database: ``amcheck``.

``amcheck`` verifies B-tree indexes (``bt_index_check``: each page's order and structure, no
lock that blocks writers) and, from version 1.3 (PostgreSQL 14), tables (``verify_heapam``: tuple
headers, visibility, TOAST). It is an extension: checking never installs it, so a database
without it gets a note saying what was not verified rather than a problem.
"""

from __future__ import annotations

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from soong_store.backends.values import Integrity

_EXTENSION = "SELECT extversion FROM pg_extension WHERE extname = 'amcheck'"
_SCHEMA_RELATIONS = """
SELECT c.oid, c.relname
FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind = %(kind)s AND c.relpersistence = 'p'
  AND (%(kind)s <> 'i' OR c.relam = (SELECT oid FROM pg_am WHERE amname = 'btree'))
ORDER BY c.relname
"""
_INDEX_CHECK = "SELECT bt_index_check(%(oid)s::oid)"
_HEAP_CHECK = "SELECT blkno, offnum, attnum, msg FROM verify_heapam(%(oid)s::oid)"
_NOT_INSTALLED = (
    "amcheck is not installed in this database: its tables and indexes were not verified "
    "(CREATE EXTENSION amcheck, as a superuser, lets check verify them)"
)


def amcheck(connection: Connection) -> Integrity:
    """Every B-tree index (and, with amcheck 1.3, every table) of the current schema, verified.

    Each relation is checked inside a savepoint, so a damaged one is reported and the rest are
    still checked; a role that may not run amcheck gets a note, not a problem.
    """
    version = connection.exec_driver_sql(_EXTENSION).first()
    if version is None:
        return Integrity(notes=[_NOT_INSTALLED])
    indexes = connection.exec_driver_sql(_SCHEMA_RELATIONS, {"kind": "i"}).all()
    tables = connection.exec_driver_sql(_SCHEMA_RELATIONS, {"kind": "r"}).all()
    heap = tuple(int(part) for part in str(version[0]).split(".")[:2]) >= (1, 3)
    problems: list[str] = []
    try:
        for oid, name in indexes:
            problems += _checked(connection, _INDEX_CHECK, oid, f"index {name}")
        for oid, name in tables if heap else []:
            problems += _checked(connection, _HEAP_CHECK, oid, f"table {name}")
    except _NotAllowed as exc:
        return Integrity(problems, [f"amcheck {version[0]} could not run: {exc}"])
    covered = f"{len(indexes)} B-tree indexes" + (f" and {len(tables)} tables" if heap else "")
    notes = [f"amcheck {version[0]} verified {covered}"]
    if not heap:
        notes.append("tables were not verified (verify_heapam needs amcheck 1.3)")
    return Integrity(problems, notes)


class _NotAllowed(Exception):
    """This role may not run amcheck's functions."""


def _checked(connection: Connection, sql: str, oid: int, what: str) -> list[str]:
    try:
        with connection.begin_nested():
            found = connection.exec_driver_sql(sql, {"oid": oid}).fetchall()
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) == "42501":  # insufficient_privilege
            raise _NotAllowed(str(exc.orig).strip()) from exc
        return [f"{what}: {' '.join(str(exc.orig).split())}"]
    if sql is _INDEX_CHECK:
        return []
    return [
        f"{what}: block {block}, item {item}"
        + (f", column {column}" if column is not None else "")
        + f": {message}"
        for block, item, column, message in found
    ]
