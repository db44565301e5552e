"""Import, export and gc under races and hostile files: nothing lost, mixed or followed.

The races run real processes of the CLI against one store (the way two terminals would), many
rounds each; the hostile files are planted in the artifact folder by hand.
"""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from soong_store import StorageError
from soong_store.check.run import check_store
from soong_store.demo import write_demo
from soong_store.transfer import export_session
from tests.backends import Backend
from tests.conftest import text
from tests.helpers import execute, nodes_table

ROUNDS = 10
CLI = [sys.executable, "-m", "soong_store"]


@pytest.fixture(scope="module")
def demo(module_backend: Backend) -> tuple[Backend, str, bytes]:
    """A store with the demo session, and its export (artifacts embedded)."""

    async def build() -> tuple[str, bytes]:
        out = io.StringIO()
        async with module_backend.store() as store:
            sid = await write_demo(store, module_backend.home / "demo-project")
            await export_session(store, sid, out)
        return sid, out.getvalue().encode()

    sid, dump = asyncio.run(build())
    return module_backend, sid, dump


def start(backend: Backend, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, *backend.cli, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_two_imports_of_one_file_at_once_lose_no_file(
    demo: tuple[Backend, str, bytes], new_backend: Callable[[str], Backend], tmp_path: Path
) -> None:
    _, sid, dump = demo
    source = tmp_path / "session.jsonl"
    source.write_bytes(dump)
    lines = [orjson.loads(line) for line in dump.splitlines()]
    want = {
        line["row"]["path"]: line["data_b64"] for line in lines[1:] if line["kind"] == "artifact"
    }
    lost = 0
    for round_no in range(ROUNDS):
        target = new_backend(f"home{round_no}")
        target.home.mkdir()
        asyncio.run(_open(target))
        racers = [start(target, "import", str(source)) for _ in range(2)]
        outcomes = [(p.communicate(), p.returncode) for p in racers]
        outcomes = [(code, out) for out, code in outcomes]
        codes = sorted(code for code, _ in outcomes)
        assert codes == [0, 2], outcomes
        loser = next(err for code, (_, err) in outcomes if code == 2)
        assert "already exists" in loser
        present = files_under(target.home / "artifacts")
        lost += sum(1 for path in want if path not in present)
        assert sorted(present) == sorted(want)  # no temporary file left either
        report = asyncio.run(_check(target))
        assert report == [], report
    assert lost == 0


@pytest.mark.slow
def test_two_exports_to_one_file_at_once_leave_one_whole_export(
    demo: tuple[Backend, str, bytes], tmp_path: Path
) -> None:
    backend, sid, _ = demo
    other = asyncio.run(_second_session(backend))
    target = tmp_path / "out.jsonl"
    seen: set[str] = set()
    for _ in range(ROUNDS):
        racers = [start(backend, "export", s, "-o", str(target)) for s in (sid, other)]
        outputs = [p.communicate() for p in racers]
        assert [p.returncode for p in racers] == [0, 0], outputs
        lines = [orjson.loads(line) for line in target.read_bytes().splitlines()]
        header = lines[0]
        assert {line["row"]["session_id"] for line in lines[1:] if "session_id" in line["row"]} == {
            header["session_id"]
        }
        assert len(lines) == 1 + 1 + sum(header["counts"].values())
        seen.add(header["session_id"])
        assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]  # no staging file left
    assert seen <= {sid, other}


async def _open(backend: Backend) -> None:
    async with backend.store():
        pass


async def _check(backend: Backend) -> list[Any]:
    async with backend.store() as store:
        return [(p.kind, p.ids) for p in (await check_store(store)).problems]


async def _second_session(backend: Backend) -> str:
    async with backend.store() as store:
        s = await store.create_session(cwd=backend.home)
        await store.append_node(s.session_id, "user", "message", text("another session"))
        await store.put_artifact(s.session_id, b"x" * 5000, filename="x.bin")
        return s.session_id


# -- gc never follows a link, never removes a file a row names ----------------------------------


async def test_gc_unlinks_a_planted_link_and_keeps_its_target(backend: Backend, home: Path) -> None:
    async with backend.store() as store:
        a = (await store.create_session(cwd=home)).session_id
        b = (await store.create_session(cwd=home)).session_id
        await store.put_artifact(a, b"a's file")
        victim = await store.put_artifact(b, b"b's live file")
        folder = home / "artifacts" / a
        (folder / "evil").symlink_to(home / "artifacts" / victim.path)
        (folder / "evil-dir").symlink_to(home / "artifacts" / b, target_is_directory=True)
        (home / "artifacts" / "sess_linked").symlink_to(home / "artifacts" / b)
        old = 1_000_000_000
        for name in ("evil", "evil-dir"):
            os.utime(folder / name, (old, old), follow_symlinks=False)
        removed = await store.gc(min_age=0)
        assert sorted(removed) == [f"{a}/evil", f"{a}/evil-dir"]
        assert not (folder / "evil").is_symlink() and not (folder / "evil-dir").is_symlink()
        assert await store.read_artifact(victim.artifact_id) == b"b's live file"
        assert (home / "artifacts" / "sess_linked").is_symlink()  # not entered, not removed
        assert (await check_store(store, b)).ok


async def test_a_link_in_place_of_a_stored_file_is_refused_not_followed(
    backend: Backend, home: Path
) -> None:
    async with backend.store() as store:
        a = (await store.create_session(cwd=home)).session_id
        b = (await store.create_session(cwd=home)).session_id
        mine = await store.put_artifact(a, b"mine")
        secret = await store.put_artifact(b, b"b's secret")
        path = home / "artifacts" / mine.path
        path.unlink()
        path.symlink_to(home / "artifacts" / secret.path)
        with pytest.raises(StorageError, match="symbolic link"):
            await store.read_artifact(mine.artifact_id)
        assert await store.gc(min_age=0) == []  # a row names it: never removed
        assert path.is_symlink()
        kinds = {p.kind for p in (await check_store(store, a)).problems}
        assert kinds == {"missing_artifact_file"}


async def test_gc_never_removes_a_file_a_row_names_even_if_old(
    backend: Backend, home: Path
) -> None:
    async with backend.store() as store:
        sid = (await store.create_session(cwd=home)).session_id
        kept = await store.put_artifact(sid, b"named")
        stray = home / "artifacts" / sid / "stray.bin"
        stray.write_bytes(b"orphan")
        for p in (home / "artifacts" / kept.path, stray):
            os.utime(p, (1_000_000_000, 1_000_000_000))
        assert await store.gc(dry_run=True, min_age=0) == [f"{sid}/stray.bin"]
        assert await store.gc(min_age=0) == [f"{sid}/stray.bin"]
        assert await store.read_artifact(kept.artifact_id) == b"named"


# -- cycles that reach the database by other means -----------------------------------------------


def test_a_parent_cycle_in_the_file_raises_at_once_everywhere(backend: Backend, home: Path) -> None:
    async def build() -> tuple[str, list[str]]:
        async with backend.store() as store:
            sid = (await store.create_session(cwd=home)).session_id
            ids = [
                (await store.append_node(sid, "user", "message", text(f"n{i}"))).node_id
                for i in range(4)
            ]
            return sid, ids

    sid, ids = asyncio.run(build())
    execute(  # 2 -> 3 -> 2: a loop the store never writes
        backend,
        f'UPDATE "{nodes_table(sid)}" SET parent_id = :parent WHERE node_id = :node',
        {"parent": ids[3], "node": ids[2]},
    )

    async def reads() -> None:
        async with backend.store() as store:
            for call in (
                store.active_path(sid),
                store.context(sid),
                store.active_path(sid, ids[2]),
                store.fork_session(sid, ids[3]),
            ):
                with pytest.raises(StorageError, match=f"parent chain .* in session '{sid}'"):
                    await asyncio.wait_for(call, timeout=30)
            assert len(await store.active_path(sid, ids[1])) == 2  # above the damage: fine
            assert len(await store.list_sessions()) == 1  # the fork wrote nothing

    asyncio.run(reads())
    done = subprocess.run(
        [*CLI, *backend.cli, "path", sid], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and "parent chain" in done.stderr and done.stdout == ""


def test_nan_never_reaches_a_reader_through_import(
    demo: tuple[Backend, str, bytes], new_backend: Callable[[str], Backend], tmp_path: Path
):
    _, sid, dump = demo
    lines = [orjson.loads(line) for line in dump.splitlines()]
    node = next(line for line in lines[1:] if line["kind"] == "node")
    node["row"]["content_json"] = '[{"type":"json","data":NaN}]'
    source = tmp_path / "nan.jsonl"
    source.write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n")
    target = new_backend("home")
    done = subprocess.run(
        [*CLI, *target.cli, "import", str(source)], capture_output=True, text=True
    )
    assert done.returncode == 2 and "line " in done.stderr
    shown = subprocess.run(
        [*CLI, *target.cli, "path", sid, "--json"], capture_output=True, text=True
    )
    assert shown.returncode == 2 and "no session" in shown.stderr
    files = target.home / "artifacts"
    assert not files.exists() or not any(files.iterdir())


def test_import_without_artifacts_says_how_many_files_it_lacks(
    demo: tuple[Backend, str, bytes], new_backend: Callable[[str], Backend], tmp_path: Path
) -> None:
    backend, sid, _ = demo
    dump = tmp_path / "rows-only.jsonl"
    done = subprocess.run(
        [*CLI, *backend.cli, "export", sid, "--no-artifacts", "-o", str(dump)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    target = new_backend("elsewhere")
    done = subprocess.run([*CLI, *target.cli, "import", str(dump)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert len(out) == 2 and out[0].startswith(f"imported session {sid}:")
    assert out[1].startswith("2 artifact file(s) missing")
    shutil.rmtree(target.home)


async def test_gc_takes_any_age_and_an_age_beyond_every_file_removes_nothing(
    backend: Backend, home: Path
) -> None:
    async with backend.store() as store:
        sid = (await store.create_session(cwd=home)).session_id
        stray = home / "artifacts" / sid / "stray.bin"
        stray.parent.mkdir(parents=True)
        stray.write_bytes(b"orphan")
        os.utime(stray, (1_000_000_000, 1_000_000_000))
        for age in (10**400, 1e300, 2**63):
            assert await store.gc(min_age=age) == []
        assert stray.exists()
