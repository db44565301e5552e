"""The usage row: ``store.usage(by=...)`` over 100,000 runs, beside the same query in raw sqlite3.

The sessions are made through the public API; the runs, each with one usage entry (a model of
four, a start spread over 90 days), are written by one writer job per session through the
store's own ledger code (:func:`soong_store.write.usage_ledger.enter_usage`): 100,000
``finish_run`` calls would take minutes and measure nothing this row is about. The store is
measured only through ``store.usage()``; raw runs the same ``GROUP BY`` on the store's file.
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _harness import Figure, compare, interleave, timed, timed_sync
from _raw import connect_ro
from sqlalchemy import Connection

from soong_store import SessionStore
from soong_store.model import codec
from soong_store.schema.tables import runs_table
from soong_store.store import run_write
from soong_store.write.usage_ledger import enter_usage

SESSIONS = 100
MODELS = ("model-large", "model-small", "model-mini", "model-code")
SAMPLES = 5

RAW = {
    "day": (
        "SELECT substr(created_at, 1, 10) AS k, sum(first_of_run), "
        "coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0), "
        "coalesce(sum(cache_read_tokens), 0), coalesce(sum(cache_write_tokens), 0), "
        "sum(cost_usd) FROM run_usage GROUP BY k ORDER BY k"
    ),
    "model": (
        "SELECT model AS k, sum(first_of_model), "
        "coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0), "
        "coalesce(sum(cache_read_tokens), 0), coalesce(sum(cache_write_tokens), 0), "
        "sum(cost_usd) FROM run_usage GROUP BY k "
        "ORDER BY coalesce(sum(input_tokens), 0) + coalesce(sum(output_tokens), 0) DESC, k"
    ),
    "cwd": (
        "SELECT s.cwd AS k, sum(u.first_of_run), "
        "coalesce(sum(u.input_tokens), 0), coalesce(sum(u.output_tokens), 0), "
        "coalesce(sum(u.cache_read_tokens), 0), coalesce(sum(u.cache_write_tokens), 0), "
        "sum(u.cost_usd) FROM run_usage u JOIN sessions s ON s.session_id = u.session_id "
        "GROUP BY k "
        "ORDER BY coalesce(sum(u.input_tokens), 0) + coalesce(sum(u.output_tokens), 0) DESC, k"
    ),
}


def _runs_job(
    connection: Connection, session_id: str, agent_id: str, first: int, count: int
) -> None:
    start = datetime(2026, 9, 1, tzinfo=UTC)
    rows: list[dict[str, Any]] = []
    for i in range(first, first + count):
        at = (start + timedelta(minutes=i * 1.3)).isoformat(timespec="microseconds")
        usage = {
            "model": MODELS[i % len(MODELS)],
            "input_tokens": 1000 + i % 977,
            "output_tokens": 200 + i % 311,
            "cache_read_tokens": 5000 + i % 1009,
            "cost_usd": 0.001 * (i % 13),
        }
        rows.append(
            {
                "run_id": f"run_{i:032x}",
                "session_id": session_id,
                "agent_id": agent_id,
                "status": "completed",
                "start_node_id": None,
                "end_node_id": None,
                "end_reason": "completed",
                "turn_count": 1,
                "usage_json": codec.dumps_text(usage),
                "error_json": None,
                "metadata_json": None,
                "created_at": at,
                "updated_at": at,
            }
        )
    connection.execute(runs_table.insert(), rows)
    enter_usage(connection, rows)


async def fill(store: SessionStore, root: Path, runs: int) -> None:
    """``runs`` runs with usage over :data:`SESSIONS` sessions (ten cwds)."""
    each = runs // SESSIONS
    for k in range(SESSIONS):
        session = await store.create_session(cwd=root / f"project-{k % 10}")
        job = _Job(session.session_id, session.root_agent_id, k * each, each)
        await run_write(store, job)


class _Job:
    def __init__(self, session_id: str, agent_id: str, first: int, count: int) -> None:
        self.args = (session_id, agent_id, first, count)

    def __call__(self, connection: Connection) -> None:
        _runs_job(connection, *self.args)


async def usage_sum(rounds: int, runs: int) -> list[Figure]:
    """``store.usage(by=day|model|cwd)`` of ``runs`` runs, against the same query in raw."""
    figures = []
    with tempfile.TemporaryDirectory(prefix="soong-bench-") as tmp:
        home = Path(tmp) / "home"
        async with SessionStore(home=home) as store:
            await fill(store, Path(tmp), runs)
            connection = connect_ro(home / "sessions.sqlite")
            for by, sql in RAW.items():

                async def store_side(by: str = by) -> float:
                    return await timed(lambda: store.usage(by=by), SAMPLES)

                def raw_side(sql: str = sql) -> float:
                    return timed_sync(lambda: connection.execute(sql).fetchall(), SAMPLES)

                mine = await store.usage(by=by)
                theirs = connection.execute(sql).fetchall()
                if sum(r.runs for r in mine) < runs or len(mine) != len(theirs):
                    raise RuntimeError(f"usage by {by}: {len(mine)} rows, raw {len(theirs)}")
                got = await interleave(rounds, {"store": store_side, "raw": raw_side})
                figures.append(
                    compare(
                        "usage_sum",
                        f"usage by {by}",
                        f"store.usage(by={by!r}) of {runs:,} runs in {SESSIONS} sessions",
                        got,
                        "store",
                        "raw",
                        target="≤ 200 ms",
                        max_value=0.2,
                        notes=["raw: the same GROUP BY on the store's file, rows fetched"],
                    )
                )
            connection.close()
    return figures
