"""The check of the usage ledger against the runs' usage (problem kind ``usage_ledger``).

Every run's ``run_usage`` rows must be what its ``usage`` gives today
(:func:`~soong_store.write.usage_ledger.ledger_rows`), so that ``store.usage()`` sums what the
runs hold. Runs are read a page at a time, each page with its ledger rows, in one snapshot per
page; a run whose ``usage_json`` is not JSON is left to ``invalid_row``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from sqlalchemy import Connection, select

from soong_store.rules.session import Problem
from soong_store.schema.tables import run_usage_table, runs_table
from soong_store.store import SessionStore, run_read
from soong_store.write.usage_ledger import ledger_rows

KIND = "usage_ledger"
_PAGE = 1000
_COLUMNS = [c.name for c in run_usage_table.c]


def _page(
    connection: Connection, session_id: str | None, after: str
) -> tuple[list[Problem], str | None]:
    """The problems of the next page of runs after ``after``, and the last run id read."""
    query = (
        select(runs_table.c.run_id, runs_table.c.session_id, runs_table.c.created_at)
        .add_columns(runs_table.c.usage_json)
        .where(runs_table.c.run_id > after)
        .order_by(runs_table.c.run_id)
        .limit(_PAGE)
    )
    if session_id is not None:
        query = query.where(runs_table.c.session_id == session_id)
    runs = [dict(row) for row in connection.execute(query).mappings()]
    if not runs:
        return [], None
    have: dict[str, list[dict[str, Any]]] = {}
    stored = select(run_usage_table).where(
        run_usage_table.c.run_id.in_([run["run_id"] for run in runs])
    )
    for row in connection.execute(stored.order_by(run_usage_table.c.entry)).mappings():
        have.setdefault(row["run_id"], []).append({name: row[name] for name in _COLUMNS})
    problems = []
    for run in runs:
        try:
            wanted = ledger_rows(run)
        except ValueError:  # not JSON: invalid_row reports the run
            continue
        if have.get(run["run_id"], []) != wanted:
            message = (
                f"the usage ledger holds {len(have.get(run['run_id'], []))} row(s) for run "
                f"{run['run_id']} that differ from its usage ({len(wanted)} entries)"
            )
            problems.append(Problem(KIND, run["session_id"], (run["run_id"],), message))
    return problems, runs[-1]["run_id"]


async def ledger_problems(store: SessionStore, session_id: str | None = None) -> list[Problem]:
    """Runs (of one session, or all) whose ledger rows are not what their usage gives."""
    problems: list[Problem] = []
    after: str | None = ""
    while after is not None:
        found, after = await run_read(store, partial(_page, session_id=session_id, after=after))
        problems += found
    return problems
