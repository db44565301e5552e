"""Where a home is, the database file in it, its driver's setting and the schema's revision.

Also how a home is made, and how a database file this user may not write is opened to be read
(the URI parameters the store's SQLite backend and the quick look both use).

Kept apart from the store and the migrations, which import SQLAlchemy, so that what must know
these facts without it (the CLI's quick look at a home, :mod:`soong_store.cli.glance`) reads them
from the same place as the store.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from soong_store.errors import StorageError

DATABASE_FILE: Final = "sessions.sqlite"
"""The SQLite database of a home (the default backend), inside the home folder."""

SQLITE_MODULE_ENV: Final = "SOONG_STORE_SQLITE_MODULE"
"""The variable naming the DB-API module a process's stores open SQLite with (else ``sqlite3``)."""

HEAD_REVISION: Final = "0011"
"""The newest revision in ``migrations/`` (a test keeps the two equal).

Knowing it without Alembic lets a store open a database that is already at head without
importing Alembic (a fifth of the package's import time); Alembic is loaded only to upgrade.
"""


def default_home() -> Path:
    """``$SOONG_AGENT_HOME``, else ``~/.soong-agent``."""
    env = os.environ.get("SOONG_AGENT_HOME")
    return Path(env) if env else Path.home() / ".soong-agent"


def ensure_home(home: Path) -> None:
    """Create the home folder (and its parents) unless it is there; a failure is a StorageError.

    A folder that is there is left as it is, writable or not: a home this process may not write
    is opened for reading (:mod:`soong_store.backends.sqlite.backend`).
    """
    if home.is_dir():
        return
    try:
        home.mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:
        raise StorageError(
            f"the home {home} is not a folder (a file is there): give a folder as the home",
            path=home,
        ) from exc
    except NotADirectoryError as exc:
        raise StorageError(
            f"the home {home} is not a folder (a path above it is a file): give a folder "
            "as the home",
            path=home,
        ) from exc
    except PermissionError as exc:
        raise StorageError(
            f"cannot create the home {home}: permission denied on {exc.filename or home}; "
            "create it with write access for this user, or give another home",
            path=home,
        ) from exc
    except OSError as exc:
        raise StorageError(
            f"cannot create the home {home}: {exc.strerror or exc} ({exc.filename or home})",
            path=home,
        ) from exc


def writable(path: Path) -> bool:
    """Whether this process may write the database file ``path`` and create files beside it."""
    return os.access(path.parent, os.W_OK) and (not path.exists() or os.access(path, os.W_OK))


def read_only_params(path: Path) -> dict[str, str]:
    """The URI parameters that open ``path`` (a file this process may not write) for reading.

    In WAL mode, a reader needs the log's index (``-shm``), and creates it where it can. In a
    folder it may not write, a file without a log is opened ``immutable`` (as it is on disk:
    there is nothing else to read); a log with its index is read through it; a log without
    one cannot be read here (its content would be missed).
    """
    if os.access(path.parent, os.W_OK):
        return {"mode": "ro"}
    log = path.with_name(path.name + "-wal")
    if not log.exists() or log.stat().st_size == 0:
        return {"mode": "ro", "immutable": "1"}
    if path.with_name(path.name + "-shm").exists():
        return {"mode": "ro"}
    raise StorageError(
        f"cannot read {path} without write access to {path.parent}: its log {log} holds "
        "writes not yet in the file, and their index (-shm) is missing; open it once as a user "
        "who may write the folder (that folds the log back in)",
        path=str(path),
    )
