"""Per-session locking on PostgreSQL: a node+event unit with and without a lock, 1 and 4 writers.

Run: ``eval "$(bash .ci/postgres start)"; python bench/pg_locking.py [--seconds S] [--rounds R]
[--modes none,advisory,...] [--no-lean] [--ids N]; bash .ci/postgres stop``.

SQLAlchemy Core and psycopg 3 only (shapes in ``pg_shapes.py``). The unit is the store's
``append_node`` in one READ COMMITTED transaction: read the session row with ``max(node_seq)``
and ``max(seq)`` of its tables, insert the node (seq + 1, under the active node), insert its
``node_created`` event, move the session's active node. Seqs come from ``max`` + 1, so two units
of one session that read the same ``max`` collide on a UNIQUE index: the loser rolls back and
tries again (counted as a retry; its unit's latency includes every try). Modes, taken first in
the unit:

- ``none``: no lock (only the UNIQUE indexes keep the seqs dense);
- ``advisory``: ``pg_advisory_xact_lock(hashtext(session_id))`` (32-bit key);
- ``advisory64``: ``pg_advisory_xact_lock(hashtextextended(session_id, 0))`` (64-bit key);
- ``row``: ``SELECT 1 FROM sessions WHERE session_id = ... FOR NO KEY UPDATE``, its own statement;
- ``row_inline``: ``FOR NO KEY UPDATE`` on the read statement itself (no extra statement);
- ``select1``: ``SELECT 1`` first (the control: an extra round trip that locks nothing);
- ``pipeline``: ``advisory64``'s statements, sent with psycopg's pipeline mode in two network
  flights (``BEGIN``, lock and read; then the inserts, the update and ``COMMIT``) in place of
  one round trip per statement (the statements are Core's, compiled to SQL once).

Each case runs ``S`` seconds once per round (``--rounds``; a round runs every case, so a change
in the machine's load hits them alike): 1 writer, 4 writers each on a session of its own, and 4
writers on one session (writers are processes; fresh sessions per run). After each run the seqs
of every session are checked dense (1..n). The ``advisory`` cases also run on the ``nofk`` and
``lean`` shapes (no foreign keys; and two indexes fewer), to show what the schema costs a
write. Last, how many pairs of ``--ids`` distinct session ids of the store's format share a
32-bit and a 64-bit lock key (counted by the server).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from pg_rows import (
    NOW,
    SESSIONS,
    event_row,
    new_session_id,
    node_row,
    session_row,
    shared_keys,
)
from pg_shapes import (
    VARIANTS,
    add_url_argument,
    create_pair,
    drop_database,
    engine_for,
    ensure_database,
    server_url,
    session_pair,
    table,
)
from sqlalchemy import (
    Connection,
    Select,
    bindparam,
    func,
    insert,
    literal,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError

MODES = ("none", "select1", "advisory", "advisory64", "row", "row_inline", "pipeline")
LOCKING = ("select1", "advisory", "advisory64", "row")  # a first statement of their own
CASES = ((1, "own"), (4, "own"), (4, "shared"))
DATABASE = "soong_bench_locking"
RETRIED = {"23505", "40001", "40P01"}  # unique violation, serialization failure, deadlock


@dataclass
class Case:
    """One lock mode, shape and writer count, pooled over rounds."""

    mode: str
    variant: str
    writers: int
    target: str
    rates: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    locks: list[float] = field(default_factory=list)
    retries: int = 0
    dense: bool = True

    def row(self) -> list[object]:
        ordered = sorted(self.latencies)
        p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
        return [
            self.mode,
            self.variant,
            self.writers,
            self.target,
            f"{statistics.median(self.rates):,.0f}",
            f"{min(self.rates):,.0f}-{max(self.rates):,.0f}",
            f"{statistics.median(ordered) * 1e3:.2f}",
            f"{p99 * 1e3:.2f}",
            f"{statistics.median(self.locks) * 1e3:.3f}" if self.mode in LOCKING else "-",
            self.retries,
            "yes" if self.dense else "NO",
        ]


def read_statement(session_id: str, variant: str, mode: str) -> Select[Any]:
    nodes, events = session_pair(session_id, variant)
    statement = select(
        SESSIONS.c.active_node_id,
        select(func.max(nodes.c.node_seq)).scalar_subquery(),
        select(func.max(events.c.seq)).scalar_subquery(),
    ).where(SESSIONS.c.session_id == session_id)
    if mode == "row_inline":
        statement = statement.with_for_update(key_share=True)
    return statement


def lock_statement(session_id: str, mode: str) -> Any:
    if mode == "advisory":
        return text("SELECT pg_advisory_xact_lock(hashtext(:sid))").bindparams(sid=session_id)
    if mode == "select1":
        return text("SELECT 1")
    if mode in ("advisory64", "pipeline"):
        return text("SELECT pg_advisory_xact_lock(hashtextextended(:sid, 0))").bindparams(
            sid=session_id
        )
    if mode == "row":
        return (
            select(literal(1))
            .select_from(SESSIONS)
            .where(SESSIONS.c.session_id == session_id)
            .with_for_update(key_share=True)
        )
    return None


def unit(connection: Connection, statements: dict[str, Any], node_id: str, agent: str) -> float:
    """Run one unit's statements (the caller commits); return the seconds its lock took."""
    locked = 0.0
    if statements["lock"] is not None:
        start = time.perf_counter()
        connection.execute(statements["lock"])
        locked = time.perf_counter() - start
    active, max_node_seq, max_seq = connection.execute(statements["read"]).one()
    connection.execute(
        statements["insert_node"], node_row(node_id, (max_node_seq or 0) + 1, active, agent)
    )
    connection.execute(statements["insert_event"], event_row(node_id, (max_seq or 0) + 1))
    connection.execute(statements["move"], {"active": node_id})
    return locked


def writer(
    url: str,
    session_id: str,
    variant: str,
    mode: str,
    seconds: float,
    name: str,
    barrier: Any,
    results: Any,
) -> None:
    nodes, events = session_pair(session_id, variant)
    statements = {
        "lock": lock_statement(session_id, mode),
        "read": read_statement(session_id, variant, mode),
        "insert_node": insert(nodes),
        "insert_event": insert(events),
        "move": update(SESSIONS)
        .where(SESSIONS.c.session_id == session_id)
        .values(active_node_id=bindparam("active"), updated_at=NOW),
    }
    if mode == "pipeline":
        pipelined_writer(url, statements, seconds, name, barrier, results)
        return
    latencies: list[float] = []
    locks: list[float] = []
    retries = 0
    engine = engine_for(url)
    with engine.connect() as connection:
        connection.execute(text("SELECT 1")).all()
        connection.rollback()
        barrier.wait()
        deadline = time.perf_counter() + seconds
        n = 0
        while time.perf_counter() < deadline:
            n += 1
            start = time.perf_counter()
            while True:
                try:
                    with connection.begin():
                        locked = unit(
                            connection, statements, f"node_{name}_{n:07d}", "agent_" + name
                        )
                    break
                except (IntegrityError, DBAPIError) as exc:
                    if getattr(exc.orig, "sqlstate", None) not in RETRIED:
                        raise
                    retries += 1
            latencies.append(time.perf_counter() - start)
            locks.append(locked)
    engine.dispose()
    results.put((latencies, locks, retries))


def pipelined_writer(
    url: str, statements: dict[str, Any], seconds: float, name: str, barrier: Any, results: Any
) -> None:
    """The same unit on a bare psycopg connection in pipeline mode: two flights per unit."""
    import psycopg

    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    node_keys = list(node_row("n", 1, None, "a"))
    event_keys = list(event_row("n", 1))

    def sql(statement: Any, keys: list[str] | None = None) -> str:
        return str(statement.compile(dialect=dialect, column_keys=keys))

    lock, read = sql(statements["lock"]), sql(statements["read"])
    insert_node = sql(statements["insert_node"], node_keys)
    insert_event = sql(statements["insert_event"], event_keys)
    move = sql(statements["move"])
    lock_params = statements["lock"].compile(dialect=dialect).params
    read_params = statements["read"].compile(dialect=dialect).params
    move_params = statements["move"].compile(dialect=dialect).params
    parsed = make_url(url)
    latencies: list[float] = []
    retries = 0
    with psycopg.connect(
        host=parsed.host, port=parsed.port, user=parsed.username, dbname=parsed.database
    ) as connection:
        connection.execute("SELECT 1")
        connection.rollback()
        barrier.wait()
        deadline = time.perf_counter() + seconds
        n = 0
        while time.perf_counter() < deadline:
            n += 1
            node_id = f"node_{name}_{n:07d}"
            start = time.perf_counter()
            while True:
                try:
                    with connection.pipeline():
                        connection.execute(lock, lock_params)
                        active, max_node_seq, max_seq = connection.execute(
                            read, read_params
                        ).fetchone() or (None, None, None)
                        values = node_row(node_id, (max_node_seq or 0) + 1, active, "agent_" + name)
                        connection.execute(insert_node, values)
                        connection.execute(insert_event, event_row(node_id, (max_seq or 0) + 1))
                        connection.execute(move, {**move_params, "active": node_id})
                        connection.commit()
                    break
                except psycopg.Error as exc:
                    connection.rollback()
                    if exc.sqlstate not in RETRIED:
                        raise
                    retries += 1
            latencies.append(time.perf_counter() - start)
    results.put((latencies, [], retries))


def fresh_sessions(url: str, variant: str, count: int) -> list[str]:
    engine = engine_for(url)
    ids = [new_session_id() for _ in range(count)]
    with engine.begin() as connection:
        for sid in ids:
            connection.execute(insert(SESSIONS), session_row(sid))
            create_pair(connection, sid, variant)
    engine.dispose()
    return ids


def dense(url: str, session_id: str, variant: str) -> bool:
    nodes, events = session_pair(session_id, variant)
    engine = engine_for(url)
    with engine.connect() as connection:
        ok = True
        for column in (nodes.c.node_seq, events.c.seq):
            n, low, high = connection.execute(
                select(func.count(), func.min(column), func.max(column))
            ).one()
            ok = ok and n > 0 and low == 1 and high == n
    engine.dispose()
    return ok


def run_case(url: str, case: Case, seconds: float) -> None:
    """One timed run of ``case`` on fresh sessions; its figures are added to ``case``."""
    writers, target, variant = case.writers, case.target, case.variant
    ids = fresh_sessions(url, variant, writers if target == "own" else 1)
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(writers + 1)
    results = context.Queue()
    processes = [
        context.Process(
            target=writer,
            args=(
                url,
                ids[i] if target == "own" else ids[0],
                variant,
                case.mode,
                seconds,
                f"w{i}",
                barrier,
                results,
            ),
        )
        for i in range(writers)
    ]
    for process in processes:
        process.start()
    barrier.wait()
    start = time.perf_counter()
    gathered = [results.get(timeout=seconds + 120) for _ in processes]
    took = time.perf_counter() - start
    for process in processes:
        process.join(timeout=30)
        if process.exitcode != 0:
            raise RuntimeError(f"a writer failed (exit {process.exitcode})")
    latencies = [x for lat, _, _ in gathered for x in lat]
    case.rates.append(len(latencies) / took)
    case.latencies.extend(latencies)
    case.locks.extend(x for _, locks, _ in gathered for x in locks)
    case.retries += sum(r for _, _, r in gathered)
    case.dense = case.dense and all(dense(url, sid, variant) for sid in ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_url_argument(parser)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--no-lean", action="store_true", help="skip the nofk and lean cases")
    parser.add_argument("--ids", type=int, default=100_000, help="ids for the lock-key count")
    args = parser.parse_args()
    server = server_url(args.url)
    url = ensure_database(server, DATABASE, fresh=True)
    try:
        engine = engine_for(url)
        with engine.begin() as connection:
            SESSIONS.create(connection)
        engine.dispose()
        plan = [(m, "store") for m in args.modes.split(",")]
        if not args.no_lean:
            plan += [("advisory", "nofk"), ("advisory", "lean")]
        cases = [
            Case(mode, variant, writers, target)
            for mode, variant in plan
            for writers, target in CASES
        ]
        for case in cases:
            assert case.mode in MODES and case.variant in VARIANTS, case
        # Rounds, each running every case once, so that a change in the machine's load hits
        # every case alike.
        for turn in range(args.rounds):
            for case in cases:
                run_case(url, case, args.seconds)
            print(f"  round {turn + 1} of {args.rounds} done", flush=True)
    finally:
        drop_database(server, DATABASE)
    pairs32, pairs64 = shared_keys(server, args.ids)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"\nnode+event units, {args.rounds} rounds of {args.seconds:g} s per case, writers are "
        f"processes (units/s over all writers: median and range of the rounds; latency per unit "
        f"including retries, and of its lock statement alone (median), ms; load average at "
        f"the end {load})"
    )
    print(
        table(
            [
                "lock",
                "shape",
                "writers",
                "sessions",
                "units/s",
                "range",
                "median",
                "p99",
                "lock stmt",
                "retries",
                "dense",
            ],
            [case.row() for case in cases],
        )
    )
    print(
        f"\n{args.ids:,} distinct session ids of the store's format: {pairs32} pairs share a "
        f"hashtext key (32 bit), {pairs64} a hashtextextended key (64 bit); two sessions that "
        "share a key wait for each other's writers"
    )


if __name__ == "__main__":
    main()
