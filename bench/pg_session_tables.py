"""Per-session tables on PostgreSQL: create time, a new connection's first read, disk, catalog.

Run: ``eval "$(bash .ci/postgres start)"; python bench/pg_session_tables.py [--sizes 0,1000,10000]
[--samples N] [--variant store|nofk|lean|all] [--rounds R] [--alter] [--fresh]; bash .ci/postgres
stop``.

SQLAlchemy Core and psycopg 3 only (shapes in ``pg_shapes.py``). For each variant and size, one
database (``soong_bench_<variant>_<size>``) holds at least ``size`` empty sessions (a ``sessions``
row and a pair each), built once in batches and reused by later runs (``--fresh`` rebuilds).
Then, on it:

- create: ``samples`` new sessions, each one transaction (the row, both tables, their indexes)
  on a warm connection; once through ``Table.create`` with the tables built afresh (what the
  store's factory does on a cache miss), once as prebuilt DDL text (the server's share);
- first read: for ``samples`` random sessions (given 5 nodes and 5 events first), a new
  connection, its first ``SELECT`` of the session's nodes by ``node_seq``, the same again, and
  on a second new connection the store's recursive active-path query as its first statement;
- disk: ``pg_total_relation_size`` of one new empty pair, the database's size, and catalog
  rows (``pg_class``, ``pg_attribute`` ...) added per session (counted over the samples);
- interleaved, at the largest size: ``R`` rounds, each creating one session per variant both
  ways and reading one through a new connection's first active-path query, so that the
  variants are compared under the same load (the per-size figures above are taken minutes
  apart, and this machine's load changes faster than that);
- ``--alter``: ``ADD COLUMN`` then ``DROP COLUMN`` on every ``nodes_`` table (what a revision
  touching every session does), 200 tables per transaction.
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass, field

from pg_rows import (
    CATALOGS,
    SESSIONS,
    catalog_counts,
    ddl_text,
    fill,
    new_session_id,
    objects_of_pair,
    pair_size,
    path_query,
    session_row,
)
from pg_shapes import (
    VARIANTS,
    add_url_argument,
    create_pair,
    engine_for,
    ensure_database,
    server_url,
    session_pair,
    summary,
    table,
)
from sqlalchemy import Connection, func, insert, select, text

BUILD_BATCH = 100


def count_sessions(connection: Connection) -> int:
    return int(connection.execute(select(func.count()).select_from(SESSIONS)).scalar_one())


def build(connection: Connection, variant: str, target: int) -> tuple[int, float]:
    """Add sessions until ``target`` exist; return how many were added and the seconds taken."""
    SESSIONS.create(connection, checkfirst=True)
    connection.commit()
    have = count_sessions(connection)
    template_id = "sess_TEMPLATE_000000_00000000"
    template = ddl_text(connection, template_id, variant)
    start = time.perf_counter()
    added = 0
    while have + added < target:
        batch = min(BUILD_BATCH, target - have - added)
        ids = [new_session_id() for _ in range(batch)]
        connection.execute(insert(SESSIONS), [session_row(sid) for sid in ids])
        connection.exec_driver_sql(";\n".join(template.replace(template_id, sid) for sid in ids))
        connection.commit()
        added += batch
    return added, time.perf_counter() - start


@dataclass
class SizeResult:
    variant: str
    size: int
    sessions: int = 0
    built: int = 0
    build_s: float = 0.0
    create_core: list[float] = field(default_factory=list)
    create_text: list[float] = field(default_factory=list)
    connect: list[float] = field(default_factory=list)
    first_nodes: list[float] = field(default_factory=list)
    warm_nodes: list[float] = field(default_factory=list)
    first_path: list[float] = field(default_factory=list)
    pair_bytes: int = 0
    db_bytes: int = 0
    catalog_bytes: int = 0
    catalog_per_session: dict[str, float] = field(default_factory=dict)
    objects: list[tuple[str, str, int]] = field(default_factory=list)
    alter_add_s: float = 0.0
    alter_drop_s: float = 0.0


def measure(
    url: str, variant: str, size: int, samples: int, fresh: bool, alter: bool
) -> SizeResult:
    result = SizeResult(variant, size)
    db_url = ensure_database(url, f"soong_bench_{variant}_{size}", fresh=fresh)
    engine = engine_for(db_url)
    try:
        with engine.connect() as connection:
            result.built, result.build_s = build(connection, variant, size)
            before = catalog_counts(connection)
            connection.commit()
            created: list[str] = []
            for turn in range(2 * samples):
                sid = new_session_id()
                core = turn % 2 == 0
                ddl = None if core else ddl_text(connection, sid, variant)
                connection.rollback()
                start = time.perf_counter()
                with connection.begin():
                    connection.execute(insert(SESSIONS), session_row(sid))
                    if ddl is None:
                        create_pair(connection, sid, variant)
                    else:
                        connection.exec_driver_sql(ddl)
                took = time.perf_counter() - start
                (result.create_core if core else result.create_text).append(took)
                created.append(sid)
            after = catalog_counts(connection)
            result.catalog_per_session = {
                c: (after[c] - before[c]) / len(created) for c in CATALOGS
            }
            result.pair_bytes = pair_size(connection, created[-1])
            result.objects = objects_of_pair(connection, created[-1])
            result.sessions = count_sessions(connection)
            result.db_bytes = int(
                connection.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
            )
            result.catalog_bytes = int(
                connection.execute(
                    text(
                        "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                        "JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE n.nspname = 'pg_catalog' AND c.relkind = 'r'"
                    )
                ).scalar_one()
            )
            all_ids = list(connection.execute(select(SESSIONS.c.session_id)).scalars())
            connection.commit()
            picks = random.sample(all_ids, min(samples, len(all_ids)))
            leaves = {sid: fill(connection, sid, variant) for sid in picks}
        for sid, leaf in leaves.items():
            nodes, _ = session_pair(sid, variant)
            everything = select(nodes).order_by(nodes.c.node_seq)
            start = time.perf_counter()
            with engine.connect() as connection:
                connected = time.perf_counter()
                rows = connection.execute(everything).all()
                first = time.perf_counter()
                connection.execute(everything).all()
                warm = time.perf_counter()
            assert len(rows) == 5
            result.connect.append(connected - start)
            result.first_nodes.append(first - connected)
            result.warm_nodes.append(warm - first)
            with engine.connect() as connection:
                start = time.perf_counter()
                path = connection.execute(path_query(nodes, leaf)).all()
                result.first_path.append(time.perf_counter() - start)
            assert [row.node_seq for row in path] == [1, 2, 3, 4, 5]
        if alter:
            result.alter_add_s, result.alter_drop_s = alter_every_nodes_table(engine_for(db_url))
    finally:
        engine.dispose()
    return result


def alter_every_nodes_table(engine) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    with engine.connect() as connection:
        names = list(
            connection.execute(
                text("SELECT tablename FROM pg_tables WHERE tablename LIKE 'nodes\\_%'")
            ).scalars()
        )
        connection.commit()
        took = []
        for statement in ("ADD COLUMN bench_extra TEXT", "DROP COLUMN bench_extra"):
            start = time.perf_counter()
            for i in range(0, len(names), 200):
                for name in names[i : i + 200]:
                    connection.exec_driver_sql(f'ALTER TABLE "{name}" {statement}')
                connection.commit()
            took.append(time.perf_counter() - start)
    return took[0], took[1]


def interleaved(
    url: str, variants: tuple[str, ...], size: int, rounds: int
) -> dict[str, tuple[list[float], list[float], list[float]]]:
    """Create and read sessions of every variant in turn, so that the machine's load hits all."""
    engines = {v: engine_for(ensure_database(url, f"soong_bench_{v}_{size}")) for v in variants}
    found: dict[str, tuple[list[float], list[float], list[float]]] = {
        v: ([], [], []) for v in variants
    }
    try:
        for _ in range(rounds):
            for variant, engine in engines.items():
                core, prebuilt, read = found[variant]
                with engine.connect() as connection:
                    for timings, as_text in ((core, False), (prebuilt, True)):
                        sid = new_session_id()
                        ddl = ddl_text(connection, sid, variant) if as_text else None
                        start = time.perf_counter()
                        with connection.begin():
                            connection.execute(insert(SESSIONS), session_row(sid))
                            if ddl is None:
                                create_pair(connection, sid, variant)
                            else:
                                connection.exec_driver_sql(ddl)
                        timings.append(time.perf_counter() - start)
                    leaf = fill(connection, sid, variant)
                nodes, _ = session_pair(sid, variant)
                start = time.perf_counter()
                with engine.connect() as connection:
                    assert len(connection.execute(path_query(nodes, leaf)).all()) == 5
                read.append(time.perf_counter() - start)
    finally:
        for engine in engines.values():
            engine.dispose()
    return found


def med(samples: list[float]) -> str:
    m, p90 = summary(samples)
    return f"{m * 1e3:.2f} / {p90 * 1e3:.2f}"


def report(results: list[SizeResult]) -> str:
    out = [
        "create one session (row + pair, one transaction), ms median / p90",
        table(
            ["variant", "sessions", "Table.create", "prebuilt DDL text", "built now (s/1000)"],
            [
                [
                    r.variant,
                    f"{r.sessions:,}",
                    med(r.create_core),
                    med(r.create_text),
                    f"{r.built:,} in {r.build_s:.1f} s ({r.build_s / r.built * 1e3:.1f})"
                    if r.built
                    else "reused",
                ]
                for r in results
            ],
        ),
        "",
        "a new connection and its first read of one session (5 nodes), ms median / p90",
        table(
            ["variant", "sessions", "connect", "1st SELECT nodes", "2nd SELECT", "1st active path"],
            [
                [
                    r.variant,
                    f"{r.sessions:,}",
                    med(r.connect),
                    med(r.first_nodes),
                    med(r.warm_nodes),
                    med(r.first_path),
                ]
                for r in results
            ],
        ),
        "",
        "disk and catalog",
        table(
            ["variant", "sessions", "empty pair", "database", "catalog tables"]
            + [f"{c}/session" for c in CATALOGS],
            [
                [
                    r.variant,
                    f"{r.sessions:,}",
                    f"{r.pair_bytes / 1024:.0f} KiB",
                    f"{r.db_bytes / 2**20:.1f} MiB",
                    f"{r.catalog_bytes / 2**20:.1f} MiB",
                ]
                + [f"{r.catalog_per_session[c]:.1f}" for c in CATALOGS]
                for r in results
            ],
        ),
    ]
    by_variant: dict[str, list[SizeResult]] = {}
    for r in results:
        by_variant.setdefault(r.variant, []).append(r)
    growth = []
    for variant, rs in by_variant.items():
        rs.sort(key=lambda r: r.sessions)
        if len(rs) >= 2 and rs[-1].sessions > rs[0].sessions:
            per = (rs[-1].db_bytes - rs[0].db_bytes) / (rs[-1].sessions - rs[0].sessions)
            cat = (rs[-1].catalog_bytes - rs[0].catalog_bytes) / (rs[-1].sessions - rs[0].sessions)
            growth.append(
                [
                    variant,
                    f"{rs[0].sessions:,} -> {rs[-1].sessions:,}",
                    f"{per / 1024:.1f} KiB",
                    f"{cat / 1024:.1f} KiB",
                    f"{per * 100_000 / 2**30:.2f} GiB",
                ]
            )
    if growth:
        out += [
            "",
            "pg_database_size growth per empty session",
            table(["variant", "sessions", "per session", "of it catalogs", "x 100,000"], growth),
        ]
    for variant, rs in by_variant.items():
        out += ["", f"relations of one empty pair ({variant})"]
        out.append(
            table(
                ["relation", "kind", "bytes"],
                [[name, kind, size] for name, kind, size in rs[0].objects],
            )
        )
    altered = [r for r in results if r.alter_add_s]
    if altered:
        out += [
            "",
            "ALTER every nodes_ table (200 per transaction)",
            table(
                ["variant", "sessions", "ADD COLUMN", "DROP COLUMN", "per table"],
                [
                    [
                        r.variant,
                        f"{r.sessions:,}",
                        f"{r.alter_add_s:.1f} s",
                        f"{r.alter_drop_s:.1f} s",
                        f"{r.alter_add_s / r.sessions * 1e3:.2f} ms",
                    ]
                    for r in altered
                ],
            ),
        ]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_url_argument(parser)
    parser.add_argument("--sizes", default="0,1000,10000")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--variant", choices=[*VARIANTS, "all"], default="all")
    parser.add_argument(
        "--rounds", type=int, default=40, help="rounds of the interleaved comparison (0: none)"
    )
    parser.add_argument("--alter", action="store_true", help="also ALTER every nodes_ table")
    parser.add_argument("--fresh", action="store_true", help="rebuild the databases")
    args = parser.parse_args()
    url = server_url(args.url)
    sizes = [int(s) for s in args.sizes.split(",")]
    variants = VARIANTS if args.variant == "all" else (args.variant,)
    results = []
    for variant in variants:
        for size in sizes:
            results.append(
                measure(
                    url, variant, size, args.samples, args.fresh, args.alter and size == max(sizes)
                )
            )
            print(f"  done: {variant} at {size:,}", flush=True)
    with engine_for(url).connect() as connection:
        version = connection.execute(text("SHOW server_version")).scalar()
        settings = connection.execute(
            text(
                "SELECT string_agg(name || '=' || setting, ', ' ORDER BY name) FROM pg_settings "
                "WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', "
                "'shared_buffers')"
            )
        ).scalar()
    compared = interleaved(url, variants, max(sizes), args.rounds) if args.rounds else None
    print(f"\nPostgreSQL {version} ({settings})\n")
    print(report(results))
    if compared:
        print(
            f"\ninterleaved at {max(sizes):,}+ sessions: {args.rounds} rounds, each creating one "
            "session per variant both ways and reading one on a new connection (ms median / p90)"
        )
        print(
            table(
                ["variant", "Table.create", "prebuilt DDL text", "connect + 1st active path"],
                [[v, *map(med, compared[v])] for v in variants],
            )
        )


if __name__ == "__main__":
    main()
