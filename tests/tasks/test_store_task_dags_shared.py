"""Task DAGs of a store used by several loops and stores, closed mid-append, in odd folders."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from soong_store import (
    SessionStore,
    SoongStoreError,
    StoreClosed,
    TaskDag,
    TaskDagUnavailable,
    TaskStatus,
)
from soong_store.store import runtime_of
from soong_store.tasks.wal import task_root, task_wal_path

pytestmark = pytest.mark.asyncio


async def new_session(store: SessionStore, cwd: Path) -> str:
    return (await store.create_session(cwd=str(cwd))).session_id


def logged_ids(path: Path, name: str) -> set[str]:
    return set(TaskDag.replay(path, name).tasks)


async def test_task_dag_is_shared_by_threads_with_their_own_event_loops(
    store: SessionStore, tmp_path: Path
):
    sid = await new_session(store, tmp_path)
    errors: list[BaseException] = []
    seen: list[TaskDag] = []

    async def appends(prefix: str) -> None:
        for i in range(30):
            dag = await store.task_dag(sid, "plan")
            seen.append(dag)
            await dag.add(f"{prefix}{i}", "x")

    def other_loop() -> None:
        try:
            asyncio.run(appends("other"))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=other_loop, daemon=True)
    thread.start()
    await appends("main")
    await asyncio.to_thread(thread.join, 60)
    assert not thread.is_alive() and errors == []
    dag = await store.task_dag(sid, "plan")
    assert len(dag) == 60 and all(s is dag for s in seen)
    assert logged_ids(dag.path, "plan") == {t.task_id for t in dag.tasks()}


async def test_close_waits_for_appends_in_flight_and_stores_no_failed_one(
    home: Path, tmp_path: Path
):
    store = SessionStore(home=home)
    await store.open()
    sid = await new_session(store, tmp_path)
    dags = [await store.task_dag(sid, f"task {i}") for i in range(4)]
    appends = [asyncio.create_task(dags[i % 4].add(f"t{i}", "racing close")) for i in range(221)]
    await asyncio.sleep(0.02)
    await store.close()
    logs = {dag.path: dag.path.read_bytes() for dag in dags}
    results = await asyncio.gather(*appends, return_exceptions=True)
    assert {dag.path: dag.path.read_bytes() for dag in dags} == logs  # nothing ran after close
    done = failed = 0
    for i, result in enumerate(results):
        dag = dags[i % 4]
        stored = f"t{i}" in logged_ids(dag.path, dag.task_name)
        if isinstance(result, BaseException):
            assert isinstance(result, StoreClosed), result
            assert not stored
            failed += 1
        else:
            assert stored
            done += 1
    assert done and failed
    with pytest.raises(StoreClosed):
        await dags[0].add("late", "after close")
    async with SessionStore(home=home) as again:
        events = [e for e in await again.timeline(sid) if e.event_type == "task_add"]
        assert len(events) == done  # each acknowledged append was mirrored before close


async def test_task_dag_refused_while_the_store_closes(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    store = SessionStore(home=home)
    await store.open()
    sid = await new_session(store, tmp_path)
    dag = await store.task_dag(sid, "plan")
    await dag.add("a", "A")
    entered, release = threading.Event(), threading.Event()
    real_sync = os.fdatasync

    def slow_sync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}") == str(dag.path):
            entered.set()
            release.wait(10)
        real_sync(fd)

    monkeypatch.setattr(os, "fdatasync", slow_sync)
    flying = asyncio.create_task(dag.add("b", "in flight while the store closes"))
    await asyncio.to_thread(entered.wait, 10)
    closing = asyncio.create_task(store.close())
    await asyncio.sleep(0.05)
    assert not closing.done()  # waiting for the append
    with pytest.raises(StoreClosed):
        await store.task_dag(sid, "another task")
    release.set()
    await closing
    await flying
    assert set(TaskDag.replay(dag.path, "plan").tasks) == {"a", "b"}
    assert not task_wal_path(dag.path.parent, "another task").exists()
    await store.open()  # a reopened store hands out DAGs again
    again = await store.task_dag(sid, "plan")
    assert again is not dag and [t.task_id for t in again.tasks()] == ["a", "b"]
    await again.add("c", "C")
    await store.close()


async def test_a_first_task_dag_asked_for_while_the_store_closes_is_refused(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    store = SessionStore(home=home)
    await store.open()
    sid = await new_session(store, tmp_path)
    runtime = runtime_of(store)
    entered, release = asyncio.Event(), asyncio.Event()
    real_close = runtime.close

    async def held_close() -> None:  # the store still open, its close begun
        entered.set()
        await release.wait()
        await real_close()

    monkeypatch.setattr(runtime, "close", held_close)
    closing = asyncio.create_task(store.close())
    await entered.wait()
    with pytest.raises(StoreClosed):
        await store.task_dag(sid, "plan")
    release.set()
    await closing
    assert not task_wal_path(task_root(str(tmp_path), sid), "plan").exists()
    await store.open()  # the next open hands out DAGs again
    dag = await store.task_dag(sid, "plan")
    await dag.add("a", "A")
    await store.close()
    with pytest.raises(StoreClosed):
        await dag.add("b", "after close")


async def test_task_dag_follows_what_another_store_appended(home: Path, tmp_path: Path):
    async with SessionStore(home=home) as one, SessionStore(home=home) as two:
        sid = await new_session(one, tmp_path)
        mine = await one.task_dag(sid, "plan")
        await mine.add("a", "A")
        theirs = await two.task_dag(sid, "plan")
        await theirs.add("b", "B", depends_on=["a"])
        await theirs.set_status("a", TaskStatus.COMPLETED)
        again = await one.task_dag(sid, "plan")
        assert [t.task_id for t in again.ready()] == ["b"]
        await theirs.add("c", "C")
        await mine.set_status("b", "completed")  # the stale handle catches up by itself
        assert [t.task_id for t in mine.tasks()] == ["a", "b", "c"]
        assert mine.tasks() == (await two.task_dag(sid, "plan")).tasks()
        assert TaskDag.replay(mine.path, "plan").tasks == {t.task_id: t for t in mine.tasks()}


async def test_task_dag_replays_a_log_that_was_replaced(store: SessionStore, tmp_path: Path):
    sid = await new_session(store, tmp_path)
    old = await store.task_dag(sid, "plan")
    await old.add("a", "A")
    other = TaskDag.replay(old.path)
    assert other.tasks
    written = await TaskDag.open(old.path.with_name("new"), "plan")
    await written.add("z", "Z")
    written.path.replace(old.path)
    current = await store.task_dag(sid, "plan")
    assert current is not old and [t.task_id for t in current.tasks()] == ["z"]
    with pytest.raises(SoongStoreError):
        await old.add("b", "through the replaced handle")
    await current.add("y", "Y")
    assert set(TaskDag.replay(current.path, "plan").tasks) == {"z", "y"}


async def test_a_damaged_log_is_not_handed_out_again(store: SessionStore, tmp_path: Path):
    sid = await new_session(store, tmp_path)
    dag = await store.task_dag(sid, "plan")
    await dag.add("a", "A")
    with dag.path.open("ab") as f:
        f.write(b'{"seq":3,"op":"add"}\n')
    for _ in range(2):
        with pytest.raises(TaskDagUnavailable) as info:
            await store.task_dag(sid, "plan")
        assert info.value.line == 3


# --- a FIFO or a link where a task log should be ---------------------------------------------


@pytest.fixture
async def odd_logs(store: SessionStore, tmp_path: Path) -> tuple[Path, str, Path, Path]:
    """A session whose task folder holds a FIFO and a symbolic link named like task logs."""
    sid = await new_session(store, tmp_path / "project")
    fine = await store.task_dag(sid, "fine")
    await fine.add("a", "A")
    folder = task_root(tmp_path / "project", sid)
    fifo = task_wal_path(folder, "fifo")
    os.mkfifo(fifo)
    link = task_wal_path(folder, "link")
    link.symlink_to(fine.path)
    return store.home, sid, fifo, link


IN_A_CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    from soong_store import SessionStore, SoongStoreError
    from soong_store.check.run import check_store
    
    async def main() -> None:
        async with SessionStore(home=sys.argv[1]) as store:
            sid = sys.argv[2]
            report = await check_store(store, sid)
            out = {"problems": sorted([p.kind, *p.ids] for p in report.problems), "dags": {}}
            for name in sys.argv[3:]:
                try:
                    await store.task_dag(sid, name)
                    out["dags"][name] = None
                except SoongStoreError as exc:
                    out["dags"][name] = [type(exc).__name__, exc.line, exc.reason]
        print(json.dumps(out))

    asyncio.run(main())
    """
)


def python(*args: str) -> subprocess.CompletedProcess[str]:
    """A child Python (killed if it blocks: a hang must fail the test, not the suite)."""
    environ = {k: v for k, v in os.environ.items() if k != "SOONG_AGENT_HOME"}
    command = [sys.executable, *args]
    return subprocess.run(command, capture_output=True, text=True, env=environ, timeout=120)


async def test_check_and_task_dag_refuse_a_fifo_or_a_link_instead_of_hanging(
    odd_logs: tuple[Path, str, Path, Path],
):
    home, sid, fifo, link = odd_logs
    done = await asyncio.to_thread(python, "-c", IN_A_CHILD, str(home), sid, "fifo", "link")
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["problems"] == sorted([["task_wal", fifo.name], ["task_wal", link.name]])
    assert out["dags"] == {
        "fifo": ["TaskDagUnavailable", 0, "not a regular file: a FIFO"],
        "link": ["TaskDagUnavailable", 0, "not a regular file: a symbolic link"],
    }


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return python("-m", "soong_store", "--home", str(home), *args)


async def test_cli_tasks_reports_a_fifo_or_a_link_instead_of_hanging(
    odd_logs: tuple[Path, str, Path, Path],
):
    home, sid, fifo, link = odd_logs
    listed = await asyncio.to_thread(cli, home, "tasks", sid, "--json")
    assert listed.returncode == 0, listed.stderr
    logs = {Path(item["path"]).name: item for item in json.loads(listed.stdout)["tasks"]}
    assert "not a regular file" in logs[fifo.name]["error"]
    assert "not a regular file" in logs[link.name]["error"]
    assert logs[task_wal_path(fifo.parent, "fine").name]["error"] is None
    for name in ("fifo", "link"):
        one = await asyncio.to_thread(cli, home, "tasks", sid, name)
        assert one.returncode == 1 and "not a regular file" in one.stderr
        assert len(one.stderr.strip().splitlines()) == 1


# --- few file descriptors --------------------------------------------------------------------

MANY_TASKS = textwrap.dedent(
    """
    import asyncio, resource, sys
    from soong_store import SessionStore
    from soong_store.tasks.files import LOG_FILES

    resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    async def main() -> None:
        async with SessionStore(home=sys.argv[1]) as store:
            sid = (await store.create_session(cwd=sys.argv[2])).session_id
            dags = []
            for i in range(300):
                dag = await store.task_dag(sid, f"task {i}")
                await dag.add("a", "A")
                dags.append(dag)
            assert LOG_FILES.count() <= LOG_FILES.limit, LOG_FILES.count()
            await store.put_artifact(sid, b"still room for other files")
            for dag in dags:
                await dag.set_status("a", "completed")
        print("ok", len(dags))

    asyncio.run(main())
    """
)


async def test_many_tasks_under_a_low_descriptor_limit(home: Path, tmp_path: Path):
    project = str(tmp_path / "project")
    done = await asyncio.to_thread(python, "-c", MANY_TASKS, str(home), project)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ok", "300"]
