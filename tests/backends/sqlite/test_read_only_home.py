"""A home this process may not write is read as it is; one it cannot make is a ``StorageError``.

Run in a child process that file permissions bind: as root (which ignores them), the child
drops the capabilities that override them before it starts, so the test runs the same as root
and as any other user. The home is made read-only by its mode bits (folders 0555, files 0444).
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from soong_store import SessionStore
from soong_store.catalog import lookup as catalog
from soong_store.errors import StorageError
from soong_store.home import HEAD_REVISION, SQLITE_MODULE_ENV
from tests.conftest import db_path, text
from tests.shard_support import limited, settle

pytestmark = pytest.mark.sqlite

_OVERRIDES = (1, 2, 3)
"""CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER: what lets root ignore file modes."""
_PR_CAPBSET_DROP = 24

READER = """
import asyncio, json, sys
from soong_store import SessionStore
from soong_store.errors import SoongStoreError

async def main(home, sid, artifact):
    out = {}
    try:
        async with SessionStore(home=home) as store:
            out["nodes"] = [n.content[0].text for n in await store.list_nodes(sid)]
            out["artifact"] = (await store.read_artifact(artifact)).decode()
            try:
                await store.append_node(sid, "user", "message", [{"type": "text", "text": "x"}])
            except SoongStoreError as exc:
                out["write"] = [type(exc).__name__, str(exc)]
    except Exception as exc:
        out["open"] = [type(exc).__name__, str(exc)]
    print(json.dumps(out))

asyncio.run(main(*sys.argv[1:]))
"""


def _drop_overrides() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in _OVERRIDES:
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def bound_by_modes(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python args`` in a child that file modes bind, whoever runs the tests."""
    preexec = _drop_overrides if os.geteuid() == 0 else None
    try:
        return subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, preexec_fn=preexec
        )
    except subprocess.SubprocessError as exc:  # preexec_fn failed: no CAP_SETPCAP here
        pytest.skip(f"root cannot drop its file-permission override here: {exc}")


def lock_down(folder: Path) -> None:
    """Folders 0555 and files 0444 under and including ``folder``."""
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)


@pytest.fixture
def open_up(tmp_path: Path) -> Iterator[None]:
    """Give the owner write access back afterwards, so the temporary folder can be removed."""
    yield
    for path in [tmp_path, *tmp_path.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)


def files_under(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


async def _fill(home: Path) -> tuple[str, str]:
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
        await store.append_node(sid, "user", "message", text("hello"))
        artifact = await store.put_artifact(sid, b"kept", filename="a.txt")
        return sid, artifact.artifact_id


@pytest.fixture
def filled(tmp_path: Path, open_up: None) -> tuple[Path, str, str]:
    home = tmp_path / "home"
    sid, artifact = asyncio.run(_fill(home))
    return home, sid, artifact


def test_a_read_only_home_reads_and_refuses_writes_naming_the_database(
    filled: tuple[Path, str, str],
) -> None:
    home, sid, artifact = filled
    lock_down(home)
    before = files_under(home)
    done = bound_by_modes("-c", READER, str(home), sid, artifact)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert "open" not in out, out
    assert out["nodes"] == ["hello"] and out["artifact"] == "kept"
    kind, message = out["write"]
    assert kind == "StorageError" and str(db_path(home)) in message, message
    assert files_under(home) == before


@pytest.mark.parametrize(
    "command", [["sessions"], ["sessions", "--json"], ["tree"], ["show"]], ids=" ".join
)
def test_the_cli_reads_a_read_only_home(filled: tuple[Path, str, str], command: list[str]) -> None:
    home, sid, _artifact = filled
    lock_down(home)
    before = files_under(home)
    args = command if command[0] == "sessions" else [*command, sid]
    done = bound_by_modes("-m", "soong_store", "--home", str(home), *args)
    assert done.returncode == 0, done.stderr
    assert sid in done.stdout or "hello" in done.stdout, done.stdout
    assert files_under(home) == before


def test_a_read_only_home_reads_what_its_log_holds(
    tmp_path: Path, filled: tuple[Path, str, str]
) -> None:
    """A log another process left, with its index: read through it, not from the file alone."""
    home, sid, artifact = filled
    copy = tmp_path / "copy"
    writer = sqlite3.connect(db_path(home), isolation_level=None)
    try:
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute("UPDATE sessions SET cwd = 'only-in-the-log'")
        shutil.copytree(home, copy)  # the file, its -wal and -shm, as a running writer has them
    finally:
        writer.close()
    assert (copy / "sessions.sqlite-wal").stat().st_size > 0
    lock_down(copy)
    done = bound_by_modes("-m", "soong_store", "--home", str(copy), "sessions", "--json")
    assert done.returncode == 0, done.stderr
    assert [s["cwd"] for s in json.loads(done.stdout)["sessions"]] == ["only-in-the-log"]


def test_a_read_only_home_whose_log_lacks_its_index_says_what_to_do(
    tmp_path: Path, filled: tuple[Path, str, str]
) -> None:
    home, sid, artifact = filled
    copy = tmp_path / "copy"
    writer = sqlite3.connect(db_path(home), isolation_level=None)
    try:
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute("UPDATE sessions SET cwd = 'only-in-the-log'")
        shutil.copytree(home, copy)
    finally:
        writer.close()
    (copy / "sessions.sqlite-shm").unlink()
    lock_down(copy)
    done = bound_by_modes("-c", READER, str(copy), sid, artifact)
    assert done.returncode == 0, done.stderr
    kind, message = json.loads(done.stdout)["open"]
    assert kind == "StorageError" and str(copy / "sessions.sqlite-wal") in message, message
    assert "write" in message


def test_a_home_under_a_folder_it_may_not_write_is_a_storage_error(
    tmp_path: Path, open_up: None
) -> None:
    parent = tmp_path / "locked"
    parent.mkdir()
    lock_down(parent)
    home = parent / "home"
    done = bound_by_modes("-c", READER, str(home), "sess_x", "art_x")
    assert done.returncode == 0, done.stderr
    kind, message = json.loads(done.stdout)["open"]
    assert kind == "StorageError" and str(home) in message and "permission" in message, message
    assert not home.exists()


def test_a_read_only_home_without_a_database_is_a_storage_error(
    tmp_path: Path, open_up: None
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    lock_down(home)
    done = bound_by_modes("-c", READER, str(home), "sess_x", "art_x")
    assert done.returncode == 0, done.stderr
    kind, message = json.loads(done.stdout)["open"]
    assert kind == "StorageError" and str(db_path(home)) in message, message
    assert files_under(home) == []


async def test_a_home_that_is_a_file_is_a_storage_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.write_text("not a folder")
    with pytest.raises(StorageError, match="is not a folder") as caught:
        async with SessionStore(home=home):
            pass
    assert str(home) in str(caught.value)
    assert home.read_text() == "not a folder"


EVERY_SESSION = """
import asyncio, json, sys
from soong_store import SessionStore

async def main(home):
    async with SessionStore(home=home) as store:
        sids = [s.session_id for s in await store.list_sessions(limit=100)]
        print(json.dumps({sid: len(await store.list_nodes(sid)) for sid in sids}))

asyncio.run(main(sys.argv[1]))
"""


async def _fill_shards(home: Path) -> dict[str, int]:
    with limited():
        async with SessionStore(home=home) as store:
            sids = [(await store.create_session(cwd=".")).session_id for _ in range(8)]
            for sid in sids:
                await store.append_node(sid, "user", "message", text(sid))
            placed = await settle(store)
    assert any(file != catalog.MAIN for file, _ in placed.values())  # some pairs in shards
    return dict.fromkeys(sids, 1)


def test_a_read_only_home_reads_the_sessions_in_its_shards(tmp_path: Path, open_up: None) -> None:
    home = tmp_path / "home"
    expected = asyncio.run(_fill_shards(home))
    assert list((home / "shards").iterdir())
    lock_down(home)
    before = files_under(home)
    done = bound_by_modes("-c", EVERY_SESSION, str(home))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected
    assert files_under(home) == before


def test_the_quick_look_lists_a_read_only_home_without_a_store(
    filled: tuple[Path, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SQLITE_MODULE_ENV, raising=False)  # a driver named sends it to the store
    home, sid, _artifact = filled
    lock_down(home)
    probe = (
        "import sys\n"
        "from soong_store.cli import main\n"
        "code = main(['--home', sys.argv[1], 'sessions'])\n"
        "print('exit', code, 'store:', 'sqlalchemy' in sys.modules)\n"
    )
    done = bound_by_modes("-c", probe, str(home))
    assert done.returncode == 0, done.stderr
    assert sid in done.stdout and done.stdout.splitlines()[-1] == "exit 0 store: False"


def test_upgrade_of_a_read_only_home_at_head_names_its_database_as_given(
    filled: tuple[Path, str, str],
) -> None:
    home, _sid, _artifact = filled
    lock_down(home)
    done = bound_by_modes("-m", "soong_store", "--home", str(home), "upgrade")
    assert done.returncode == 0, done.stderr
    url = f"sqlite+pysqlite:///{db_path(home)}"
    assert done.stdout == f"{url}: already at revision {HEAD_REVISION} (head)\n"


@pytest.mark.parametrize("where", ["missing folder", "a folder"])
async def test_a_database_path_that_cannot_be_opened_is_a_storage_error(
    tmp_path: Path, where: str
) -> None:
    path = tmp_path / "nowhere" / "db.sqlite" if where == "missing folder" else tmp_path / "d"
    if where == "a folder":
        path.mkdir()
    with pytest.raises(StorageError) as caught:
        async with SessionStore(home=tmp_path / "home", url=f"sqlite:///{path}"):
            pass
    message = str(caught.value)
    assert str(path) in message and ("create" in message or "file" in message), message
    assert not (tmp_path / "nowhere").exists()
