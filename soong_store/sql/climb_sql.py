"""The climb's SQL: one recursive CTE from a node up its parent chain, compiled once per shape.

What :func:`~soong_store.sql.reads.climb` runs. A session's node table differs from another's
only in its name, so the statement is compiled for a template table once per dialect and schema,
and each session's table gets that text with its own name put in.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache

from sqlalchemy import BigInteger, Table, bindparam, literal, select
from sqlalchemy.engine import Dialect

from soong_store.model.enums import NodeType
from soong_store.model.row_records import NODE_COLUMNS
from soong_store.schema.catalog import CACHE_SIZE, session_tables
from soong_store.sql.prepared import Prepared

_TEMPLATE = "climb_template"
"""The session whose node table the climb is compiled for once; others get its text renamed."""


@lru_cache(maxsize=CACHE_SIZE)
def climb_statement(nodes: Table, to_compaction: bool, dialect: Dialect) -> Prepared:
    """The climb of ``nodes``: the template's statement with the table's own name put in.

    Compiling the recursive CTE takes ~10 ms, which every session's first read in a process
    paid; now it is paid once per dialect and schema. The name comes from the catalog's table
    and is rendered by the dialect (schema and quotes), as compiling renders it.
    """
    template = _climb_template(nodes.schema, to_compaction, dialect)
    rendered = dialect.identifier_preparer.format_table
    name = rendered(session_tables(_TEMPLATE, nodes.schema).nodes)  # with its schema, quoted
    own = rendered(nodes)
    whole = re.compile(rf'(?<![\w".]){re.escape(name)}(?![\w"])')  # the name, not part of one
    return replace(template, sql=whole.sub(lambda _: own, template.sql))


@lru_cache(maxsize=16)
def _climb_template(schema: str | None, to_compaction: bool, dialect: Dialect) -> Prepared:
    return compile_climb(session_tables(_TEMPLATE, schema).nodes, to_compaction, dialect)


def compile_climb(nodes: Table, to_compaction: bool, dialect: Dialect) -> Prepared:
    """The climb's statement compiled for ``nodes`` (what :func:`climb_statement` stands for)."""
    start = select(
        nodes.c.node_id,
        nodes.c.parent_id,
        nodes.c.node_seq,
        nodes.c.node_type,
        literal(1).label("depth"),
    ).where(nodes.c.node_id == bindparam("node_id"))
    path = start.cte("path", recursive=True)
    step = (
        select(
            nodes.c.node_id,
            nodes.c.parent_id,
            nodes.c.node_seq,
            nodes.c.node_type,
            (path.c.depth + 1).label("depth"),
        )
        .join(path, nodes.c.node_id == path.c.parent_id)
        .where(
            nodes.c.node_seq < path.c.node_seq, path.c.depth < bindparam("steps", type_=BigInteger)
        )
    )
    if to_compaction:
        step = step.where(path.c.node_type != NodeType.COMPACTION.value)
    path = path.union_all(step)
    columns = [nodes.c[name] for name in NODE_COLUMNS]
    query = select(*columns).join(path, nodes.c.node_id == path.c.node_id).order_by(path.c.depth)
    return Prepared.compile(query, dialect)
