"""Writer jobs that remove artifact files, so that a removal never races a row naming the file.

A file may go only when no artifact row names it. Checking the rows and unlinking the file inside
one writer job that holds the backend's file lock (:func:`~soong_store.backends.base.lock_files`;
SQLite's write lock is one already) across both steps means no other writer, in this process or
another, can commit a row naming the file in between, because the one writer that places files a
row will name at once (an import) places them inside its own job, under the same lock. Jobs here
only read rows; their side effect is the unlinking, which is safe to repeat when a batch runs
again.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sqlalchemy import Connection, select

from soong_store.backends.base import lock_files
from soong_store.files.folder import ArtifactFiles
from soong_store.schema.tables import artifacts_table

_CHUNK = 500


def _chunks(paths: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(paths), _CHUNK):
        yield paths[start : start + _CHUNK]


def named_paths(connection: Connection, paths: Iterable[str]) -> set[str]:
    """The ones of ``paths`` that some artifact row names."""
    wanted = sorted(set(paths))
    named: set[str] = set()
    column = artifacts_table.c.path
    for chunk in _chunks(wanted):
        named.update(connection.execute(select(column).where(column.in_(chunk))).scalars())
    return named


def remove_unreferenced(
    connection: Connection,
    files: ArtifactFiles,
    paths: list[str],
    older_than: float | None = None,
) -> list[str]:
    """Unlink the entries of ``paths`` that no row names; return those removed.

    With ``older_than`` (a time), an entry modified since then is kept: it may belong to a
    unit of work whose rows are not committed yet.
    """
    lock_files(connection)
    named = named_paths(connection, paths)
    removed: list[str] = []
    for rel in paths:
        if rel in named:
            continue
        if older_than is not None:
            mtime = files.mtime(rel)
            if mtime is None or mtime > older_than:
                continue
        files.discard([rel])
        removed.append(rel)
    return removed
