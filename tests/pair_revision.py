"""A test-only revision that adds ``flags`` to every nodes table, and the factory to match.

The revision is written to a folder of the test's own beside ``migrations/versions`` and made
the head that ``soong_store.upgrade`` and stores know; ``ZTEST_FAIL_AT_FILE=N`` makes its change
fail at the N-th file (the main database is the first, then the shards in order).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Column

from soong_store.backends.prepared import Prepared
from soong_store.migrate import upgrade as migrate_module
from soong_store.migrate.upgrade import head_revision
from soong_store.rules import row as row_rules
from soong_store.schema import session_tables
from soong_store.schema.session_tables import SessionTables
from soong_store.schema.tables import INTEGER

REVISION = "ztest_pair_flags"
SOURCE = """\
import os

from alembic import op

from soong_store.migrate.upgrade import add_column, upgrade_pairs

revision = "{revision}"
down_revision = "{down}"
branch_labels = None
depends_on = None

_add = add_column("nodes", "flags", "INTEGER")
_files = []


def _change(connection, session_ids):
    _files.append(len(session_ids))
    if os.environ.get("ZTEST_FAIL_AT_FILE") == str(len(_files)):
        raise RuntimeError(f"failed at file {{len(_files)}}")
    _add(connection, session_ids)


def upgrade():
    _files.clear()
    upgrade_pairs(op.get_bind(), revision, _change)


def downgrade():
    raise NotImplementedError
"""


def install_revision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """From now on, the test revision is known to ``soong_store.upgrade`` and stores, as head."""
    down = head_revision()
    versions = tmp_path / "pair_versions"
    versions.mkdir()
    (versions / f"{REVISION}.py").write_text(SOURCE.format(revision=REVISION, down=down))
    plain = migrate_module.alembic_config

    def config(connection: Any = None) -> Any:
        found = plain(connection)
        found.set_main_option("path_separator", "os")
        shipped = Path(migrate_module.script_location()) / "versions"
        found.set_main_option("version_locations", f"{shipped}:{versions}")
        return found

    monkeypatch.setattr(migrate_module, "alembic_config", config)
    monkeypatch.setattr(migrate_module, "HEAD_REVISION", REVISION)
    return REVISION


def use_newest_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, the table factory of the code that ships the revision (``flags`` added).

    The writer's inserts take every column of a table; the code that ships such a revision
    would give ``flags`` a value, here it is NULL.
    """
    plain = session_tables._build.__wrapped__
    args = Prepared.args

    def with_flags(self: Prepared, params: Any) -> Any:
        named = self.order if self.order is not None else ()
        if ("flags" in named or ":flags" in self.sql or "(flags)" in self.sql) and (
            "flags" not in params
        ):
            params = {**params, "flags": None}
        return args(self, params)

    monkeypatch.setattr(Prepared, "args", with_flags)

    @lru_cache(maxsize=session_tables.CACHE_SIZE)
    def build(session_id: str, schema: str | None) -> SessionTables:
        tables = plain(session_id, schema)
        tables.nodes.append_column(Column("flags", INTEGER))
        return tables

    monkeypatch.setattr(session_tables, "_build", build)
    # check's row rules keep the factory's shape from their first use in the process
    monkeypatch.setattr(
        row_rules, "_template", lru_cache(maxsize=1)(row_rules._template.__wrapped__)
    )
