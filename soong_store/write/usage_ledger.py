"""The usage ledger's rows, written with the runs whose usage they hold.

Every write of a run's ``usage_json`` calls :func:`enter_usage` in its own transaction: the
run's ledger rows are replaced by one row per entry of its usage (:func:`ledger_entries`), with
the run's session and start time, so that ``store.usage()`` sums one table on the database.
The rows go with their run (a foreign key that cascades), whoever deletes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, delete, select
from sqlalchemy.engine import Dialect

from soong_store.backends.prepared import Prepared, Runner
from soong_store.model import codec
from soong_store.model.usage import KEYS, ledger_entries
from soong_store.schema.tables import run_usage_table, runs_table

_BATCH = 500
"""Runs whose rows are replaced per statement (bound parameters stay few)."""


def enter_usage(
    connection: Connection, runs: Iterable[Mapping[str, Any]], *, new: bool = False
) -> None:
    """Replace the ledger rows of each run (a row of ``runs``) by its usage's entries.

    ``new``: the runs were inserted in this transaction, so they have no rows to replace.
    """
    batch: list[Mapping[str, Any]] = []
    for run in runs:
        batch.append(run)
        if len(batch) == _BATCH:
            _enter(connection, batch, new)
            batch = []
    if batch:
        _enter(connection, batch, new)


def refresh_usage(connection: Connection, run_ids: Iterable[str]) -> None:
    """Enter the usage of the runs ``run_ids`` as they are stored now (after an update)."""
    wanted = list(run_ids)
    for start in range(0, len(wanted), _BATCH):
        part = wanted[start : start + _BATCH]
        found = connection.execute(
            select(
                runs_table.c.run_id,
                runs_table.c.session_id,
                runs_table.c.created_at,
                runs_table.c.usage_json,
            ).where(runs_table.c.run_id.in_(part))
        ).mappings()
        _enter(connection, [dict(run) for run in found])


def ledger_rows(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ledger rows of one run (a mapping of its id, session, start and ``usage_json``)."""
    rows = []
    models: set[str | None] = set()
    for entry, values in enumerate(ledger_entries(codec.loads(run["usage_json"]))):
        row: dict[str, Any] = dict.fromkeys(KEYS)
        row.update(values)
        row.update(
            run_id=run["run_id"],
            entry=entry,
            session_id=run["session_id"],
            created_at=run["created_at"],
            first_of_run=int(entry == 0),
            first_of_model=int(row["model"] not in models),
        )
        models.add(row["model"])
        rows.append(row)
    return rows


def _enter(connection: Connection, runs: list[Mapping[str, Any]], new: bool = False) -> None:
    if not new:
        ids = [run["run_id"] for run in runs]
        connection.execute(delete(run_usage_table).where(run_usage_table.c.run_id.in_(ids)))
    rows = [row for run in runs for row in ledger_rows(run)]
    # Straight to the driver: Core's executemany processed each row's parameters again (an
    # import of a home enters thousands of runs). Its columns are text, integers and a double.
    Runner(connection).executemany(_insert(connection.dialect), rows)


@lru_cache(maxsize=4)
def _insert(dialect: Dialect) -> Prepared:
    return Prepared.insert(run_usage_table, dialect)
