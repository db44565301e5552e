"""Usage summed by day, model, session, cwd or owner, on the database (the ledger's rows).

One ``GROUP BY`` over ``run_usage`` (joined to ``sessions`` for the cwd and the owner): the rows
never come into Python, so a report over 100,000 runs costs what the database's scan does. Runs are
counted by the ledger's ``first_of_*`` flags, not by ``COUNT(DISTINCT run_id)``. A day is the
UTC date of the run's start (``created_at`` is stored as UTC text, so its first ten
characters are the date on every backend).
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import ColumnElement, Connection, Select, case, func, literal, select

from soong_store.model.usage import COUNTS, UsageRow
from soong_store.schema.tables import run_usage_table, sessions_table

GROUPS: Final = ("day", "model", "session", "cwd", "owner")
"""What ``store.usage(by=)`` groups by."""

_U = run_usage_table


def _key(by: str) -> ColumnElement[Any]:
    if by == "day":
        return func.substr(_U.c.created_at, 1, 10)
    if by == "model":
        return _U.c.model
    if by == "session":
        return _U.c.session_id
    if by == "owner":
        return sessions_table.c.owner
    return sessions_table.c.cwd


def usage(
    connection: Connection,
    by: str,
    since: str | None,
    until: str | None,
    owner: str | None = None,
) -> list[UsageRow]:
    """The usage of runs started in ``[since, until)`` (stored timestamp text), one row a group.

    ``owner``: only the runs of that owner's sessions. Days come oldest first; other groups most
    tokens (input and output) first, then by key.
    """
    key = _key(by).label("key")
    sums = [func.coalesce(func.sum(_U.c[name]), 0).label(name) for name in COUNTS]
    given = func.count(_U.c.cost_usd)
    cost = case((given > 0, func.sum(_U.c.cost_usd)), else_=literal(None)).label("cost_usd")
    first = _U.c.first_of_model if by == "model" else _U.c.first_of_run
    query: Select[Any] = select(key, func.sum(first).label("runs"), *sums, cost)
    if by in ("cwd", "owner") or owner is not None:
        query = query.join_from(_U, sessions_table, sessions_table.c.session_id == _U.c.session_id)
    if owner is not None:
        query = query.where(sessions_table.c.owner == owner)
    if since is not None:
        query = query.where(_U.c.created_at >= since)
    if until is not None:
        query = query.where(_U.c.created_at < until)
    query = query.group_by(key)
    if by == "day":
        query = query.order_by(key)
    else:
        tokens = func.coalesce(func.sum(_U.c.input_tokens), 0) + func.coalesce(
            func.sum(_U.c.output_tokens), 0
        )
        query = query.order_by(tokens.desc(), case((key.is_(None), 1), else_=0), key)
    return [
        UsageRow(
            key=row.key,
            runs=int(row.runs),
            input_tokens=int(row.input_tokens),
            output_tokens=int(row.output_tokens),
            cache_read_tokens=int(row.cache_read_tokens),
            cache_write_tokens=int(row.cache_write_tokens),
            cost_usd=None if row.cost_usd is None else float(row.cost_usd),
        )
        for row in connection.execute(query)
    ]
