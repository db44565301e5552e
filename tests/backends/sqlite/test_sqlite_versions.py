"""Choosing the SQLite driver, and refusing a SQLite library older than the store needs.

The whole suite runs once per driver (``bash .ci/sqlite-matrix``); these tests pin down the
choice itself: ``sqlite_module=`` by name or object, ``$SOONG_STORE_SQLITE_MODULE``, and the
refusal at open of a library below ``MIN_SQLITE_VERSION``, which must leave the home untouched.
SQLite-only by nature: the drivers are SQLite libraries.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

import soong_store
from soong_store import InvalidArgument, SessionStore, SoongStoreError, StorageError
from soong_store.backends.sqlite.backend import MIN_SQLITE_VERSION, load_sqlite_module
from soong_store.home import SQLITE_MODULE_ENV
from soong_store.store import runtime_of
from tests.conftest import db_path, text

pytestmark = pytest.mark.sqlite

MIN = ".".join(map(str, MIN_SQLITE_VERSION))
DRIVER = load_sqlite_module(None) or sqlite3
"""The driver this run is about (the matrix sets it through the environment)."""


def driver_reporting(version: tuple[int, int, int]) -> ModuleType:
    """This run's driver, claiming to link another SQLite version (the check reads only that)."""
    fake = ModuleType(f"{DRIVER.__name__}_as_{'_'.join(map(str, version))}")
    fake.__dict__.update({k: v for k, v in vars(DRIVER).items() if not k.startswith("__")})
    fake.sqlite_version_info = version
    fake.sqlite_version = ".".join(map(str, version))
    return fake


def files_under(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_the_minimum_is_what_the_schema_needs():
    # RETURNING and ALTER TABLE DROP COLUMN arrived in 3.35.0; the docs and messages say so.
    assert MIN_SQLITE_VERSION == (3, 35, 0)


def test_this_run_uses_a_supported_sqlite():
    assert DRIVER.sqlite_version_info >= MIN_SQLITE_VERSION


@pytest.mark.parametrize("version", [(3, 30, 0), (3, 34, 1), (2, 99, 99)])
async def test_open_refuses_an_old_sqlite_naming_the_minimum(home: Path, version):
    old = driver_reporting(version)
    store = SessionStore(home=home, sqlite_module=old)
    with pytest.raises(SoongStoreError, match=rf"needs SQLite {MIN} or newer") as caught:
        await store.open()
    assert isinstance(caught.value, StorageError)
    assert old.sqlite_version in str(caught.value)
    assert not home.exists()  # the library is checked before the home is created
    with pytest.raises(soong_store.StoreClosed):
        await store.list_sessions()
    await store.close()  # closing a store that never opened is harmless


async def test_refusal_leaves_an_existing_database_untouched(home: Path):
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
        await store.append_node(sid, "user", "message", text("kept"))
    before = files_under(home)
    with pytest.raises(SoongStoreError, match=MIN):
        await SessionStore(home=home, sqlite_module=driver_reporting((3, 34, 1))).open()
    assert files_under(home) == before
    async with SessionStore(home=home) as store:
        assert [n.content[0].text for n in (await store.active_path(sid))] == ["kept"]


async def test_the_minimum_itself_is_accepted(home: Path):
    async with SessionStore(home=home, sqlite_module=driver_reporting((3, 35, 0))) as store:
        sid = (await store.create_session(cwd=".")).session_id
        node = await store.append_node(sid, "user", "message", text("at the floor"))
        assert (await store.get_node(sid, node.node_id)).content == node.content


def test_upgrade_refuses_an_old_sqlite_chosen_by_the_environment(tmp_path: Path, monkeypatch):
    name = "soong_test_old_sqlite"
    (tmp_path / f"{name}.py").write_text("sqlite_version_info = (3, 30, 0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setenv(SQLITE_MODULE_ENV, name)
    db = tmp_path / "upgrade.sqlite"
    with pytest.raises(SoongStoreError, match=rf"SQLite 3\.30\.0 is too old.*{MIN}"):
        soong_store.upgrade(f"sqlite:///{db}")
    assert not db.exists()


def test_an_unimportable_module_name_is_invalid(home: Path):
    with pytest.raises(InvalidArgument, match="no_such_sqlite_driver") as caught:
        SessionStore(home=home, sqlite_module="no_such_sqlite_driver")
    assert caught.value.sqlite_module == "no_such_sqlite_driver"
    assert not home.exists()


@pytest.mark.parametrize(
    "choice",
    [
        pytest.param("sqlite3", id="stdlib-by-name"),
        pytest.param(sqlite3, id="stdlib-module"),
        pytest.param(DRIVER.__name__, id="this-run-by-name"),
        pytest.param(DRIVER, id="this-run-module"),
    ],
)
async def test_a_driver_by_name_or_module_works(home: Path, choice: str | ModuleType):
    async with SessionStore(home=home, sqlite_module=choice) as store:
        sid = (await store.create_session(cwd=".")).session_id
        root = await store.append_node(sid, "user", "message", text("q"))
        await store.append_node(sid, "assistant", "message", text("a"))
        await store.append_node(sid, "user", "message", text("q2"), parent_id=root.node_id)
        assert [n.content[0].text for n in await store.active_path(sid)] == ["q", "q2"]
    module = load_sqlite_module(choice)
    assert module is not None
    con = module.connect(db_path(home))
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        con.close()


async def test_an_explicit_module_beats_the_environment(home: Path, monkeypatch):
    monkeypatch.setenv(SQLITE_MODULE_ENV, "no_such_sqlite_driver")
    async with SessionStore(home=home, sqlite_module="sqlite3") as store:
        await store.create_session(cwd=".")
        assert runtime_of(store).write_engine is not None
        assert runtime_of(store).write_engine.dialect.dbapi is sqlite3


def test_an_empty_environment_variable_means_the_standard_library(monkeypatch):
    monkeypatch.setenv(SQLITE_MODULE_ENV, "")
    assert load_sqlite_module(None) is None


PROBE = textwrap.dedent(
    """
    import asyncio, sys
    from soong_store import SessionStore
    from soong_store.store import runtime_of

    async def main(home):
        async with SessionStore(home=home) as store:
            await store.create_session(cwd=".")
            dbapi = runtime_of(store).write_engine.dialect.dbapi
            print(dbapi.__name__, dbapi.sqlite_version)

    asyncio.run(main(sys.argv[1]))
    """
)


def run_probe(home: Path, module: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, SQLITE_MODULE_ENV: module}
    return subprocess.run(
        [sys.executable, "-c", PROBE, str(home)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_environment_variable_picks_the_driver_of_a_whole_process(home: Path):
    done = run_probe(home, "sqlite3")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["sqlite3", sqlite3.sqlite_version]
    if DRIVER is not sqlite3:
        done = run_probe(home, DRIVER.__name__)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == [DRIVER.__name__, DRIVER.sqlite_version]


def test_an_unimportable_driver_in_the_environment_is_a_clear_error(home: Path):
    done = run_probe(home, "no_such_sqlite_driver")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("soong_store.errors.InvalidArgument: cannot import sqlite module")
    assert "'no_such_sqlite_driver'" in last
    assert not home.exists()
