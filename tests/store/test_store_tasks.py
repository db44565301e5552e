"""Task DAGs through the store: WAL under the session's cwd, events mirrored, damage contained."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from soong_store import InvalidIdentifier, NotFound, SessionStore, TaskDagUnavailable
from soong_store.tasks.wal import TaskStatus
from tests.backends import Backend
from tests.conftest import text
from tests.helpers import table_names

pytestmark = pytest.mark.asyncio


async def test_task_dag_lives_under_session_cwd_and_mirrors_events(
    store: SessionStore, tmp_path: Path
):
    project = tmp_path / "project"
    sid = (await store.create_session(cwd=str(project))).session_id
    dag = await store.task_dag(sid, "ship the release")
    assert await store.task_dag(sid, "ship the release") is dag
    await dag.add("build", "Build the wheel")
    await dag.add("test", "Run the tests", depends_on=["build"])
    await dag.set_status("build", TaskStatus.COMPLETED)
    assert [t.task_id for t in dag.ready()] == ["test"]
    folder = project / ".soong-agent" / "tasks" / sid
    files = list(folder.iterdir())
    assert len(files) == 1 and files[0].name.endswith(".wal.jsonl")
    assert dag.path == files[0]
    events = [e for e in await store.timeline(sid) if e.event_type.startswith("task_")]
    assert [e.event_type for e in events] == ["task_add", "task_add", "task_set_status"]
    assert events[0].payload["task_name"] == "ship the release"
    assert events[2].payload["status"] == "completed"


async def test_reopened_store_replays_the_dag(backend: Backend, tmp_path: Path):
    async with backend.store() as store:
        sid = (await store.create_session(cwd=str(tmp_path))).session_id
        dag = await store.task_dag(sid, "t")
        await dag.add("a", "A")
        await dag.add("b", "B", depends_on=["a"])
        await dag.set_status("a", "completed")
    async with backend.store() as store:
        again = await store.task_dag(sid, "t")
        assert again is not dag
        assert [(t.task_id, t.status) for t in again.tasks()] == [
            ("a", TaskStatus.COMPLETED),
            ("b", TaskStatus.PENDING),
        ]


async def test_close_leaves_no_thread_of_the_store_behind(backend: Backend, tmp_path: Path) -> None:
    before = set(threading.enumerate())
    for _ in range(3):
        async with backend.store() as store:
            sid = (await store.create_session(cwd=str(tmp_path))).session_id
            dag = await store.task_dag(sid, "t")
            await dag.add("a", "A")
            await dag.set_status("a", "completed")
        left = [t.name for t in set(threading.enumerate()) - before]
        # asyncio_N: the loop's own pool (asyncio.to_thread), which the loop ends at its close
        assert [name for name in left if not name.startswith("asyncio_")] == []


async def test_damaged_wal_blocks_only_that_task(backend: Backend, tmp_path: Path):
    async with backend.store() as store:
        sid = (await store.create_session(cwd=str(tmp_path))).session_id
        await store.append_node(sid, "user", "message", text("plan it"))
        broken = await store.task_dag(sid, "broken")
        await broken.add("a", "A")
        await broken.add("b", "B")
        fine = await store.task_dag(sid, "fine")
        await fine.add("x", "X")
    raw = bytearray(broken.path.read_bytes())
    raw[raw.index(b'"A"') + 1] ^= 0x01
    broken.path.write_bytes(bytes(raw))
    async with backend.store() as store:
        with pytest.raises(TaskDagUnavailable) as info:
            await store.task_dag(sid, "broken")
        assert info.value.path == broken.path and info.value.line == 2
        assert "checksum" in info.value.reason
        assert len(await store.active_path(sid)) == 1
        assert [t.task_id for t in (await store.task_dag(sid, "fine")).tasks()] == ["x"]
        await store.append_node(sid, "assistant", "message", text("still writable"))


async def test_task_state_never_reaches_the_database(store: SessionStore, tmp_path: Path):
    sid = (await store.create_session(cwd=str(tmp_path))).session_id
    dag = await store.task_dag(sid, "t")
    await dag.add("a", "A")
    names = table_names(store)
    assert not [n for n in names if "task" in n.lower()]


async def test_task_dag_validates_session(store: SessionStore):
    with pytest.raises(InvalidIdentifier):
        await store.task_dag("../../etc", "t")
    with pytest.raises(NotFound):
        await store.task_dag("sess_20990101_000000_dead", "t")


async def test_hostile_task_names_stay_in_the_task_folder(store: SessionStore, tmp_path: Path):
    sid = (await store.create_session(cwd=str(tmp_path))).session_id
    folder = (tmp_path / ".soong-agent" / "tasks" / sid).resolve()
    for name in ["../../x", "/etc/passwd", "CON", "a\x00b", "x" * 500, "naïve/ünï"]:
        dag = await store.task_dag(sid, name)
        await dag.add("t", "T")
        assert dag.path.resolve().parent == folder
    assert len(list(folder.iterdir())) == 6
