"""Alembic environment of soong_store.

Used two ways: by ``soong_store.migrate.upgrade`` (which passes a live connection, already inside a
transaction that holds the write lock, through ``config.attributes["connection"]``), and by the
``alembic`` command from the repository root (which names the database with ``-x url=...``,
else ``$SOONG_AGENT_HOME/sessions.sqlite``, else ``~/.soong-agent/sessions.sqlite``).
Only the global tables are Alembic's: the per-session ``nodes_*``/``events_*`` tables are
filtered out of autogenerate.
"""

from __future__ import annotations

import os
from logging.config import fileConfig
from pathlib import Path
from typing import Any

from alembic import context
from sqlalchemy import Connection

from soong_store.backends import default_url
from soong_store.backends.base import backend_class_of, open_backend
from soong_store.schema.session_tables import is_session_table
from soong_store.schema.tables import metadata, with_postgresql_options
from soong_store.search.index import is_search_table

with_postgresql_options()  # autogenerate renders them for every database
config = context.config
if config.config_file_name is not None and "connection" not in config.attributes:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Keep the per-session tables and the search index out of autogenerate."""
    if type_ == "table" and name is not None:
        return not (is_session_table(name) or is_search_table(name))
    return True


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    if url:
        return url
    home = Path(os.environ.get("SOONG_AGENT_HOME") or Path.home() / ".soong-agent")
    home.mkdir(parents=True, exist_ok=True)
    return default_url(home).render_as_string(hide_password=False)


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        include_name=include_name,
        render_as_batch=backend_class_of(connection).capabilities.alters_by_rebuild,
        compare_type=True,
    )


def run_migrations_offline() -> None:
    """Print the SQL of the migrations instead of running them (``alembic upgrade --sql``)."""
    context.configure(
        url=_url(),
        target_metadata=metadata,
        include_name=include_name,
        render_as_batch=True,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run the migrations on the given connection, or on a new one inside one transaction."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = open_backend(_url()).engine("admin")
    try:
        with engine.connect() as connection, connection.begin():
            _configure(connection)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
