"""The climb's SQL: one recursive CTE from a node up its parent chain, per session table.

What :func:`~soong_store.read.session_reads.climb` runs. The statement is written as SQL text around
the table's name as the catalog renders it for the dialect (schema and quotes:
:func:`~soong_store.catalog.lookup.nodes_sql_name`) and the record columns' names
(:meth:`~soong_store.backends.prepared.Prepared.written`: SQLite runs it as it is, other dialects
compile it to their parameter style). Compiling the same CTE built with Core took 2–3 ms of every
new process's first read. The text uses only what SQLite and PostgreSQL share (``WITH RECURSIVE``,
``CAST``).
"""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy.engine import Dialect

from soong_store.backends.prepared import Prepared
from soong_store.model.enums import NodeType
from soong_store.model.row_records import NODE_COLUMNS
from soong_store.schema.session_tables import CACHE_SIZE

_WALKED = ("node_id", "parent_id", "node_seq", "node_type")
"""The columns the recursion carries (the rows themselves are joined back at the end)."""


@lru_cache(maxsize=CACHE_SIZE)
def climb_statement(table: str, to_compaction: bool, dialect: Dialect) -> Prepared:
    """The climb of node table ``table`` (as SQL names it): ``:steps`` nodes up from ``:node_id``.

    Each step must reach a node numbered before the one below it; with ``to_compaction`` the
    climb ends at the first compaction node (included).
    """
    quote = dialect.identifier_preparer.quote
    carried = [quote(name) for name in _WALKED]
    node_id, parent_id, node_seq, node_type = carried
    walked = ", ".join(carried)
    stepped = ", ".join(f"n.{name}" for name in carried)
    cut = f" AND path.{node_type} <> :compaction" if to_compaction else ""
    sql = (
        f"WITH RECURSIVE path({walked}, depth) AS ("
        f"SELECT {walked}, 1 FROM {table} WHERE {node_id} = :node_id"
        f" UNION ALL SELECT {stepped}, path.depth + 1 FROM {table} AS n"
        f" JOIN path ON n.{node_id} = path.{parent_id}"
        f" WHERE n.{node_seq} < path.{node_seq} AND path.depth < CAST(:steps AS BIGINT){cut})"
        f" SELECT {', '.join(f'n.{quote(name)}' for name in NODE_COLUMNS)}"
        f" FROM {table} AS n JOIN path ON n.{node_id} = path.{node_id} ORDER BY path.depth"
    )
    fixed = {"compaction": NodeType.COMPACTION.value} if to_compaction else None
    return Prepared.written(sql, dialect, NODE_COLUMNS, fixed)
