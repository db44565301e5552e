"""Which schema revisions shard files may be at: the mark an upgrade leaves, and shards ahead.

A per-session change (:mod:`soong_store.migrate.pairs`) commits each shard in a transaction of
its own before the main database commits, so a crash between them leaves shards at a revision
the main database does not record. Code that stops at the main database's revision must not open
such a home: its moves would put pairs of its shape into shards of the new one. So before it
changes a shard an upgrade writes its revision to the mark, ``shards/revision`` beside the
shards, and each open compares: no mark, or the mark equal to the main database's revision, and
every shard is at most there (a stat and a read of a few bytes); any other mark, and each
shard's own record is read, and one at a revision that is neither the main database's nor one
of its ancestors is refused (:class:`~soong_store.errors.SchemaVersionError` naming it). An
upgrade sets the mark to the revision it commits once it has found no shard ahead of it, in its
own transaction, so the mark equals the main database's revision only when no shard is ahead.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import sqlite3
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from soong_store.backends.sqlite.files import SHARD_FOLDER, files_on_disk
from soong_store.errors import SchemaVersionError, StorageError

if TYPE_CHECKING:
    from alembic.script import ScriptDirectory

MARK = "revision"
"""The mark's name in the shard folder (a shard's name ends in ``.sqlite``)."""
_UNREADABLE = ""
"""What :func:`read_mark` returns for a mark it cannot read (a link, not text): never a match."""
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def read_mark(folder: Path) -> str | None:
    """The revision the last upgrade that changed shards went to (``None``: no mark).

    ``folder`` is the database's (shard names are relative to it), as for every function here.
    """
    try:
        descriptor = os.open(folder / SHARD_FOLDER / MARK, os.O_RDONLY | _NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a link (ELOOP) or unreadable: the shards themselves are read
        if exc.errno == errno.ENOTDIR:
            return None
        return _UNREADABLE
    try:
        return os.read(descriptor, 256).decode("ascii", "replace").strip()
    finally:
        os.close(descriptor)


def write_mark(folder: Path, revision: str) -> None:
    """Set the mark to ``revision``, durably (a new file renamed over the old, folder synced)."""
    shards = folder / SHARD_FOLDER
    temporary = shards / f".tmp-{MARK}.{secrets.token_hex(4)}"
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644)
        try:
            os.write(descriptor, f"{revision}\n".encode())
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temporary, shards / MARK)
        directory = os.open(shards, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise StorageError(f"cannot write {SHARD_FOLDER}/{MARK} in {folder}: {exc}") from exc


def marked_at(folder: Path, revision: str) -> bool:
    """Whether no shard can be ahead of ``revision`` without reading them: the cheap test."""
    return read_mark(folder) in (None, revision)


def refuse_shards_ahead(folder: Path, revision: str, module: ModuleType | None = None) -> None:
    """Refuse a home with a shard at a revision past ``revision`` (the main database's).

    Reads each shard's record only when the mark is not ``revision``.

    Raises:
        SchemaVersionError: a shard is at a revision that is neither ``revision`` nor one of its
            ancestors (newer code changed it, and its upgrade of the main database never
            committed); it names the shard.
    """
    if marked_at(folder, revision):
        return
    for file in files_on_disk(folder, links=True):
        found = recorded_revision(folder / file, module)
        if not holds_shape_of(found, revision):
            raise ahead_error(file, found, revision)


def ahead_error(file: str, found: str | None, revision: str) -> SchemaVersionError:
    """The error that refuses shard ``file``, recorded at ``found``, for a home at ``revision``."""
    return SchemaVersionError(
        f"the shard file {file} is at schema revision {found!r}, past this database's "
        f"{revision!r} (an upgrade by newer code stopped before sessions.sqlite committed?): "
        "open the home with that code, whose upgrade finishes",
        file=file,
        revision=found,
    )


def recorded_revision(path: Path, module: ModuleType | None = None) -> str | None:
    """A shard file's own record of its revision, read behind the store's back (``None``: none).

    A file that cannot be read as a database says nothing here: ``check`` reports it.
    """
    if path.is_symlink():  # never followed: attaching it is refused
        return None
    driver = module or sqlite3
    try:
        connection = driver.connect(os.fspath(path), timeout=5.0)
    except driver.Error:
        return None
    try:
        row = connection.execute("SELECT revision FROM shard_revision").fetchone()
    except driver.Error:
        return None
    finally:
        connection.close()
    return None if row is None else str(row[0])


def holds_shape_of(found: str | None, revision: str) -> bool:
    """Whether a shard recorded at ``found`` holds pairs of the shape of ``revision``.

    Its record is the revision of the last per-session change it went through (``None``: from
    before records were kept): every later change reaches every shard, so the record must be
    ``revision`` or one of its ancestors.
    """
    if found is None or found == revision or (found, revision) in _below:
        return True
    if found not in ancestors(revision):
        return False
    _below.add((found, revision))  # revision ids are unique: a fact that stays true
    return True


_below: set[tuple[str, str]] = set()


def ancestors(revision: str) -> frozenset[str]:
    """The revisions before ``revision`` (none when this code does not know it)."""
    from alembic.util.exc import CommandError

    try:
        return frozenset(r.revision for r in script().iterate_revisions(revision, "base") if r)
    except CommandError:
        return frozenset()


def known(revision: str) -> bool:
    """Whether this code's migrations name ``revision``."""
    from alembic.util.exc import CommandError

    try:
        return script().get_revision(revision) is not None
    except CommandError:
        return False


def script() -> ScriptDirectory:
    """The revisions of the migration running (their folders), else this code's."""
    from alembic import op
    from alembic.script import ScriptDirectory

    from soong_store.schema.revisions import alembic_config

    try:
        found = op.get_context().script
    except (NameError, AttributeError):  # not inside a migration
        found = None
    return found if found is not None else ScriptDirectory.from_config(alembic_config())
