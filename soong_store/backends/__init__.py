"""Database backends: the base contract, the retry policy, and the backends this version ships.

Importing the package registers each shipped backend under its dialect name (SQLite and
PostgreSQL), so :func:`~soong_store.backends.base.open_backend` finds it by a URL's backend name.
PostgreSQL's driver (psycopg 3, the ``postgres`` extra) is imported only when an engine is made.
"""

from soong_store.backends.postgresql import backend as _postgresql
from soong_store.backends.sqlite import backend as _sqlite
from soong_store.backends.sqlite.backend import database_url as default_url

__all__ = ["default_url"]

del _postgresql, _sqlite
