"""The climb's SQL: one recursive CTE from a node up its parent chain, compiled once per shape.

What :func:`~soong_store.sql.reads.climb` runs. A session's node table differs from another's
only in its name, so the statement is compiled once per dialect and schema, for the first
session read there, and each other session's table gets that text with its own name put in.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import replace
from functools import lru_cache

from sqlalchemy import BigInteger, Table, bindparam, literal, select
from sqlalchemy.engine import Dialect

from soong_store.model.enums import NodeType
from soong_store.model.row_records import NODE_COLUMNS
from soong_store.schema.catalog import CACHE_SIZE
from soong_store.sql.prepared import Prepared

_SHAPES = 16
"""Compiled climbs kept (one per dialect, schema and cut); the least recently used goes first."""

_Shape = tuple[str | None, bool, Dialect]
_compiled: OrderedDict[_Shape, tuple[str, Prepared]] = OrderedDict()
"""Per shape, the rendered name of the table the climb was compiled for, and its statement."""
_lock = threading.Lock()


@lru_cache(maxsize=CACHE_SIZE)
def climb_statement(nodes: Table, to_compaction: bool, dialect: Dialect) -> Prepared:
    """The climb of ``nodes``: the statement compiled for its shape, with the table's name put in.

    Compiling the recursive CTE takes milliseconds, which every session's first read in a
    process paid; now the first session read in a schema pays it, for its own table (no other
    table is built for it), and the others get its text renamed. Names are rendered by the
    dialect (schema and quotes), as compiling renders them.
    """
    shape: _Shape = (nodes.schema, to_compaction, dialect)
    own = dialect.identifier_preparer.format_table(nodes)  # with its schema, quoted
    with _lock:
        found = _compiled.get(shape)
        if found is not None:
            _compiled.move_to_end(shape)
    if found is None:
        prepared = compile_climb(nodes, to_compaction, dialect)
        with _lock:
            _compiled[shape] = (own, prepared)
            while len(_compiled) > _SHAPES:
                _compiled.popitem(last=False)
        return prepared
    name, template = found
    if name == own:
        return template
    whole = re.compile(rf'(?<![\w".]){re.escape(name)}(?![\w"])')  # the name, not part of one
    return replace(template, sql=whole.sub(lambda _: own, template.sql))


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
