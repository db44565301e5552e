"""Database backends: the base contract, the retry policy, and the backends this version ships.

Importing the package registers each shipped backend under its dialect name (SQLite today), so
:func:`~soong_store.backends.base.open_backend` finds it by a URL's backend name.
"""

from soong_store.backends import sqlite as _sqlite
from soong_store.backends.sqlite import database_url as default_url

__all__ = ["default_url"]

del _sqlite
