"""The store's DB-API module with SQLite's limit of bound variables per statement set low.

Importable by name (``sqlite_module="tests.backends.sqlite.few_variables"``): it is the store's own
module, whose connections take at most :data:`LIMIT` variables in one statement (a library
built with ``SQLITE_MAX_VARIABLE_NUMBER`` that low), so that a statement binding one variable
per row found fails with a few hundred rows rather than tens of thousands.
"""

from __future__ import annotations

from typing import Any

from tests.conftest import RAW_SQLITE

globals().update({k: v for k, v in vars(RAW_SQLITE).items() if not k.startswith("__")})

LIMIT = 100
CAN_LIMIT = hasattr(RAW_SQLITE.Connection, "setlimit")
"""Whether the driver can lower the limit (``Connection.setlimit``, Python 3.11's sqlite3)."""


def connect(*args: Any, **kwargs: Any) -> Any:
    """``connect`` of the store's module, its connection limited to :data:`LIMIT` variables."""
    connection = RAW_SQLITE.connect(*args, **kwargs)
    connection.setlimit(RAW_SQLITE.SQLITE_LIMIT_VARIABLE_NUMBER, LIMIT)
    return connection
