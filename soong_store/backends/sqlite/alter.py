"""SQLite: a column added to many tables at once.

One ``ALTER TABLE ... ADD COLUMN`` re-reads the whole file's schema, so adding a column to each
of a shard's 500 pairs that way takes tens of seconds; writing the new ``CREATE TABLE`` texts
takes well under one (``docs/scaling.md``, per-session upgrades).
"""

from __future__ import annotations

from sqlalchemy import Connection


def rewrite_add_column(connection: Connection, tables: set[str], definition: str) -> None:
    """Add a nullable column without a default to SQLite ``tables``, in the caller's transaction.

    Each new text is the one SQLite's own ``ALTER TABLE ... ADD COLUMN`` writes, obtained by
    running that statement on the table's definition in a scratch database (so SQLite's own
    rules refuse what it would refuse). All tables but the last get it by an update of
    ``sqlite_master`` under ``PRAGMA writable_schema``; the last by a real ``ALTER TABLE``,
    which bumps the schema cookie (every other connection re-reads the schema) and reloads
    this connection's schema from the updated texts.
    """
    driver = connection.connection.driver_connection
    assert driver is not None
    rows = driver.execute("SELECT rowid, name, sql FROM sqlite_master WHERE type = 'table'")
    found = sorted((str(n), int(r), str(s)) for r, n, s in rows.fetchall() if n in tables)
    if not found:
        return
    *rewritten, (last, _rowid, _sql) = found
    updates = []
    scratch = connection.dialect.loaded_dbapi.connect(":memory:")
    try:
        for name, rowid, sql in rewritten:
            scratch.execute(sql)
            scratch.execute(f'ALTER TABLE "{name}" ADD COLUMN {definition}')
            (text,) = scratch.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
            ).fetchone()
            scratch.execute(f'DROP TABLE "{name}"')
            updates.append((str(text), rowid))
    finally:
        scratch.close()
    if updates:
        driver.execute("PRAGMA writable_schema = ON")
        try:
            driver.executemany("UPDATE sqlite_master SET sql = ? WHERE rowid = ?", updates)
        finally:
            driver.execute("PRAGMA writable_schema = OFF")
    driver.execute(f'ALTER TABLE "{last}" ADD COLUMN {definition}')
