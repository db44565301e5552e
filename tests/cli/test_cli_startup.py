"""What a CLI command starts and loads: a read starts no writer, and the open's guarantees stay.

SQLite files because the tests set a home's revision by hand and count what a new process loads.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import soong_store
from soong_store import SessionStore, StoreClosed
from soong_store.cli import main
from soong_store.migrate.upgrade import HEAD_REVISION, current_revision
from soong_store.store import runtime_of
from soong_store.write.writer import Writer
from tests.conftest import db_path, text

PROBE = """
import sys
from soong_store.cli import main
code = main(["--home", sys.argv[1], *sys.argv[2:]])
loaded = [name for name in {names!r} if name in sys.modules]
print("exit", code, "loaded:", *loaded)
"""

WRITE_SIDE = (
    "sqlalchemy.orm",
    "soong_store.importers",
    "soong_store.write.writer",
    "soong_store.write.unit_of_work",
    "soong_store.write.lifecycle",
    "soong_store.write.session_writer",
    "soong_store.write.fork",
    "soong_store.search.run",
    "soong_store.model.search",
    "soong_store.tasks.wal",
)
"""What a listing of sessions has no use for: the ORM, importers, write side, search, task WAL."""

CONTENT = (
    "soong_store.model.content",
    "soong_store.model.records",
    "soong_store.write.unit_of_work",
    "soong_store.cli.render_nodes",
)
"""The content blocks and every module that needs them: a listing shows no node."""


def writer_threads() -> int:
    return sum(t.name == "soong-store-writer" and t.is_alive() for t in threading.enumerate())


async def made(home: Path, sessions: int) -> list[str]:
    async with SessionStore(home=home) as store:
        ids = [(await store.create_session(cwd=".")).session_id for _ in range(sessions)]
        await store.append_node(ids[0], "user", "message", text("hello"))
    return ids


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[Writer]:
    """The writers started while the test runs."""
    started: list[Writer] = []
    start = Writer.start

    def counted(self: Writer) -> None:
        started.append(self)
        start(self)

    monkeypatch.setattr(Writer, "start", counted)
    return started


def test_read_commands_start_no_writer_a_write_command_does(
    home: Path, starts: list[Writer], capsys: pytest.CaptureFixture[str]
) -> None:
    sid = asyncio.run(made(home, 3))[0]
    starts.clear()

    for command in (["sessions"], ["tree", sid], ["path", sid], ["show", sid]):
        assert main(["--home", str(home), *command]) == 0, capsys.readouterr().err
    assert starts == []

    assert main(["--home", str(home), "switch", sid, "--none"]) == 0, capsys.readouterr().err
    assert len(starts) == 1
    assert "no active node now" in capsys.readouterr().out


def loaded_by(home: Path, names: tuple[str, ...], *command: str) -> list[str]:
    """Which of ``names`` a new process running the command has imported (it must exit 0)."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(names=names), str(home), *command],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1].split()
    assert last[:3] == ["exit", "0", "loaded:"], done.stdout
    return last[3:]


def test_sessions_in_a_new_process_loads_neither_alembic_nor_the_transfer(home: Path) -> None:
    asyncio.run(made(home, 2))
    assert loaded_by(home, ("alembic", "soong_store.transfer"), "sessions") == []


@pytest.mark.parametrize("json", [False, True])
def test_sessions_in_a_new_process_loads_no_orm_nor_the_write_side(home: Path, json: bool) -> None:
    asyncio.run(made(home, 2))
    assert loaded_by(home, WRITE_SIDE, "sessions", *(["--json"] if json else [])) == []


@pytest.mark.parametrize("json", [False, True])
def test_sessions_in_a_new_process_loads_no_content_model(home: Path, json: bool) -> None:
    asyncio.run(made(home, 2))
    assert loaded_by(home, CONTENT, "sessions", *(["--json"] if json else [])) == []


@pytest.mark.parametrize(("command", "needs"), [("tree", "render_nodes"), ("path", "content")])
def test_a_command_that_shows_nodes_in_a_new_process_loads_the_content(
    home: Path, command: str, needs: str
) -> None:
    sid = asyncio.run(made(home, 1))[0]
    loaded = loaded_by(home, CONTENT, command, sid)
    assert any(name.endswith(needs) for name in loaded), loaded


@pytest.mark.parametrize("command", ["show", "path", "tree"])
def test_a_read_command_in_a_new_process_loads_no_write_side_nor_postgresql(
    home: Path, command: str
) -> None:
    sid = asyncio.run(made(home, 1))[0]
    needless = ("alembic", "soong_store.transfer", "sqlalchemy.dialects.postgresql", *WRITE_SIDE)
    assert loaded_by(home, needless, command, sid) == []


def test_a_write_command_in_a_new_process_loads_the_write_side_it_uses(home: Path) -> None:
    sid = asyncio.run(made(home, 1))[0]
    loaded = loaded_by(home, WRITE_SIDE, "switch", sid, "--none")
    assert "soong_store.write.writer" in loaded and "soong_store.write.lifecycle" in loaded
    assert "sqlalchemy.orm" not in loaded


def test_sessions_on_a_home_at_an_older_revision_upgrades_it(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home.mkdir()
    url = f"sqlite:///{db_path(home)}"
    soong_store.upgrade(url, revision="0003")
    assert current_revision(url) == "0003"

    assert main(["--home", str(home), "sessions", "--json"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["sessions"] == []
    assert current_revision(url) == HEAD_REVISION


def test_sessions_on_a_revision_this_code_does_not_know_is_refused(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(made(home, 1))
    path = db_path(home)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE alembic_version SET version_num = 'f00dcafe'")
    con.close()
    before = digest(path)

    assert main(["--home", str(home), "sessions"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("soong-store: the database is at schema revision 'f00dcafe'")
    assert err.count("\n") == 1
    assert digest(path) == before


def test_sessions_on_a_missing_home_leaves_nothing_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "nowhere"
    assert main(["--home", str(home), "sessions"]) == 2
    assert f"no database in home {home}" in capsys.readouterr().err
    assert not home.exists()


async def test_a_store_that_only_reads_starts_its_writer_at_the_first_write(home: Path) -> None:
    sid = (await made(home, 1))[0]
    before = writer_threads()
    store = SessionStore(home=home)
    await store.open()
    runtime = runtime_of(store)

    assert [s.session_id for s in await store.list_sessions()] == [sid]
    assert not runtime.writer_started
    assert writer_threads() == before

    node = await store.append_node(sid, "user", "message", text("again"))
    assert node.node_seq == 2
    assert runtime.writer_started and runtime.writer_alive
    assert writer_threads() == before + 1

    await store.close()
    assert writer_threads() == before
    with pytest.raises(StoreClosed):
        await store.append_node(sid, "user", "message", text("closed"))
    assert not runtime.writer_started


async def test_a_store_closed_before_any_write_reopens_and_writes(home: Path) -> None:
    sid = (await made(home, 1))[0]
    store = SessionStore(home=home)
    await store.open()
    await store.close()
    with pytest.raises(StoreClosed):
        await store.list_sessions()

    async with store:
        node = await store.append_node(sid, "user", "message", text("after reopening"))
        assert node.node_seq == 2
        assert runtime_of(store).generation == 2


GC_PROBE = """
import gc, sys
from soong_store import __main__, cli
home = sys.argv[1]
if sys.argv[2] == "console":
    sys.argv = ["soong-store", "--home", home, "sessions"]
    code = __main__.main()
else:
    code = cli.main(["--home", home, "sessions"])
print("exit", code, "frozen", gc.get_freeze_count(), "collecting", gc.isenabled())
"""


@pytest.mark.parametrize("entry", ["console", "in-process"])
def test_only_the_console_script_freezes_what_its_command_imports(home: Path, entry: str) -> None:
    asyncio.run(made(home, 2))
    done = subprocess.run(
        [sys.executable, "-c", GC_PROBE, str(home), entry],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    words = done.stdout.splitlines()[-1].split()
    assert words[:2] == ["exit", "0"] and words[-2:] == ["collecting", "True"], done.stdout
    frozen = int(words[3])
    if entry == "console":
        assert frozen > 10_000  # SQLAlchemy, Pydantic and the store's modules
    else:
        assert frozen == 0  # a caller's own objects are never frozen behind its back
