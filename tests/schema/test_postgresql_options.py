"""The partial indexes' PostgreSQL predicate: given once PostgreSQL is used, never loaded before.

Each case runs in a new process: the option is set on the one global ``metadata``, so a test in
this process could not see a process that has never set it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import sys
from sqlalchemy.schema import CreateIndex
from soong_store.schema.tables import SESSION_OWNER_INDEXES
from soong_store.store import SessionStore
{step}
loaded = "sqlalchemy.dialects.postgresql" in sys.modules
from sqlalchemy.dialects import postgresql
made = [str(CreateIndex(i).compile(dialect=postgresql.dialect())) for i in SESSION_OWNER_INDEXES]
print("loaded", loaded)
print("\\n".join(made))
"""

STEPS = {
    "none": "",
    "backend": (  # configured twice: given once
        "from soong_store.backends.base import open_backend\n"
        "for _ in range(2): open_backend('postgresql+psycopg://someone@localhost/nothing')"
    ),
    "alembic": (  # Alembic's environment, as any upgrade (or autogenerate) loads it
        "import soong_store\nsoong_store.upgrade('sqlite:///' + sys.argv[1])"
    ),
}


def probe(step: str, tmp_path: Path) -> tuple[bool, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(step=STEPS[step]), str(tmp_path / "db.sqlite")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    first, *made = done.stdout.splitlines()
    return first == "loaded True", made


def test_a_process_that_never_uses_postgresql_never_loads_its_dialect(tmp_path: Path) -> None:
    loaded, made = probe("none", tmp_path)
    assert not loaded
    assert not any("WHERE" in line for line in made)


@pytest.mark.parametrize("step", ["backend", "alembic"])
def test_once_postgresql_is_used_its_partial_indexes_have_their_predicate(
    step: str, tmp_path: Path
) -> None:
    loaded, made = probe(step, tmp_path)
    assert loaded
    assert [line.split(" WHERE ")[1] for line in made if " WHERE " in line] == [
        "owner IS NOT NULL",
        "owner IS NULL AND key IS NOT NULL",
    ]
