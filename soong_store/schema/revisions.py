"""Where the revisions are, and the Alembic config that names them without an ini file.

Below both :mod:`soong_store.migrate.upgrade` (which upgrades) and :mod:`soong_store.migrate.pairs`
(which asks a revision's ancestors outside a migration), so that neither imports the other
back. Alembic itself is loaded only when a config is made.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection

if TYPE_CHECKING:
    from alembic.config import Config


def script_location() -> str:
    """The folder holding ``env.py`` and ``versions/``, installed or in a source checkout."""
    try:
        return str(resources.files("soong_store._migrations"))
    except ModuleNotFoundError:
        return str(Path(__file__).resolve().parents[2] / "migrations")


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config that needs no ini file; ``connection`` is used by ``env.py`` if given."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", script_location())
    if connection is not None:
        config.attributes["connection"] = connection
    return config
