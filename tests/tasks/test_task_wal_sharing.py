"""Task WALs shared and held long: other writers, other event loops, odd files, few descriptors."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest

from soong_store import StorageError, StoreClosed, TaskDag, TaskDagUnavailable, TaskStatus
from soong_store.tasks.files import LOG_FILES, LogFiles
from soong_store.tasks.threads import AnyLoopLock
from soong_store.tasks.wal import task_wal_path
from tests.tasks.test_task_wal import NAME, build, header, patch_sync, record, reopen, run

T = TypeVar("T")


@pytest.fixture
def wal(tmp_path: Path) -> Path:
    return task_wal_path(tmp_path / "tasks", NAME)


def finishes(call: Callable[[], T], seconds: float = 20) -> T:
    """``call()`` in a daemon thread; fails (instead of hanging the suite) if it never returns."""
    out: list[Any] = []

    def target() -> None:
        try:
            out.append((True, call()))
        except BaseException as exc:
            out.append((False, exc))

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the call blocked"
    ok, value = out[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def ids(dag: TaskDag) -> list[str]:
    return [t.task_id for t in dag.tasks()]


def open_fds_under(folder: Path) -> int:
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        count += target.startswith(str(folder))
    return count


# --- paths that are not regular files -------------------------------------------------------


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_dir(path: Path) -> None:
    path.mkdir()


def make_symlink(path: Path) -> None:
    target = path.with_name("elsewhere.jsonl")
    target.write_bytes(header() + record(2, "add", ADD_A))
    path.symlink_to(target)


def make_dangling_symlink(path: Path) -> None:
    path.symlink_to(path.with_name("nothing-here"))


def make_socket(path: Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX)
    here = os.getcwd()
    os.chdir(path.parent)  # a socket's path is limited to about 100 bytes; the name is not
    try:
        server.bind(path.name)
    except BaseException:
        server.close()
        raise
    finally:
        os.chdir(here)
    return server


ADD_A = {"task_id": "a", "title": "A", "depends_on": [], "metadata": None}
ODD_FILES: dict[str, Callable[[Path], object]] = {
    "FIFO": make_fifo,
    "directory": make_dir,
    "symbolic link": make_symlink,
    "dangling symbolic link": make_dangling_symlink,
    "socket": make_socket,
}


@pytest.fixture(params=list(ODD_FILES))
def odd(request: pytest.FixtureRequest, wal: Path) -> Iterator[str]:
    wal.parent.mkdir(parents=True)
    keep = ODD_FILES[request.param](wal)
    yield request.param
    if isinstance(keep, socket.socket):
        keep.close()


REASONS = {
    "FIFO": "a FIFO",
    "directory": "a directory",
    "symbolic link": "a symbolic link",
    "dangling symbolic link": "a symbolic link",
    "socket": "a socket",
}


def refused(info: pytest.ExceptionInfo[TaskDagUnavailable], wal: Path, kind: str) -> None:
    assert info.value.path == wal and info.value.line == 0
    assert info.value.reason == f"not a regular file: {REASONS[kind]}"


def test_replay_refuses_a_path_that_is_not_a_regular_file(wal: Path, odd: str) -> None:
    with pytest.raises(TaskDagUnavailable) as info:
        finishes(lambda: TaskDag.replay(wal, NAME))
    refused(info, wal, odd)


@pytest.mark.parametrize("offload", [True, False])
def test_open_refuses_a_path_that_is_not_a_regular_file(wal: Path, odd: str, offload: bool) -> None:
    with pytest.raises(TaskDagUnavailable) as info:
        finishes(lambda: run(TaskDag.open(wal, NAME, offload=offload)))
    refused(info, wal, odd)
    target = wal.with_name("elsewhere.jsonl")
    if target.exists():
        assert target.read_bytes() == header() + record(2, "add", ADD_A)


@pytest.mark.parametrize("make", [make_fifo, make_symlink, make_dangling_symlink])
def test_first_append_refuses_what_appeared_at_the_path(
    wal: Path, make: Callable[[Path], None]
) -> None:
    dag = reopen(wal)
    wal.parent.mkdir(parents=True)
    make(wal)
    with pytest.raises(TaskDagUnavailable, match="not a regular file"):
        finishes(lambda: run(dag.add("a", "A")))
    assert dag.tasks() == [] and not wal.with_name("nothing-here").exists()


@pytest.mark.parametrize("make", [make_fifo, make_symlink])
def test_a_log_replaced_while_its_descriptor_was_closed_is_refused(
    wal: Path, make: Callable[[Path], None]
) -> None:
    dag = run(build(wal))
    tasks = dag.tasks()
    dag.close()
    wal.unlink()
    make(wal)
    with pytest.raises((StorageError, TaskDagUnavailable)):
        finishes(lambda: run(dag.set_status("b", "completed")))
    assert dag.tasks() == tasks
    target = wal.with_name("elsewhere.jsonl")
    if target.exists():
        assert target.read_bytes() == header() + record(2, "add", ADD_A)


# --- other writers: each append catches up first ----------------------------------------------


def test_a_stale_append_replays_the_other_writers_records_first(wal: Path) -> None:
    async def scenario() -> tuple[TaskDag, TaskDag]:
        one = await build(wal)
        two = await TaskDag.open(wal, NAME)
        await two.add("d", "by the other writer")
        await two.set_status("b", TaskStatus.COMPLETED)
        await one.add_dependency("d", "b")
        return one, two

    one, two = run(scenario())
    assert one.get("b").status is TaskStatus.COMPLETED and one.get("d").depends_on == ("b",)
    assert reopen(wal).tasks() == one.tasks()
    assert [r["seq"] for r in map(orjson.loads, wal.read_bytes().splitlines())] == list(
        range(1, one.seq + 1)
    )


def test_damage_appended_by_another_writer_refuses_the_append(wal: Path) -> None:
    dag = run(build(wal))
    tasks, seq = dag.tasks(), dag.seq
    damaged = bytearray(record(seq + 1, "add", ADD_A | {"task_id": "d"}))
    damaged[20] ^= 0x01
    with wal.open("ab") as f:
        f.write(bytes(damaged))
    before = wal.read_bytes()
    with pytest.raises(TaskDagUnavailable) as info:
        run(dag.add("e", "E"))
    assert info.value.line == seq + 1 and "checksum" in info.value.reason
    assert wal.read_bytes() == before and dag.tasks() == tasks and dag.seq == seq


def test_a_torn_record_left_by_a_dead_writer_is_dropped_before_appending(wal: Path) -> None:
    dag = run(build(wal))
    line = record(dag.seq + 1, "add", ADD_A | {"task_id": "d"})
    with wal.open("ab") as f:
        f.write(line[:-5])
    run(dag.add("e", "E"))
    assert ids(reopen(wal)) == ["a", "b", "c", "e"] == ids(dag)


def test_a_log_created_by_another_writer_gets_no_second_header(wal: Path) -> None:
    async def scenario() -> TaskDag:
        one = await TaskDag.open(wal, NAME)  # no file yet
        two = await TaskDag.open(wal, NAME)
        await two.add("a", "by the other writer")
        await one.add("b", "second", depends_on=["a"])
        return one

    one = run(scenario())
    lines = wal.read_bytes().splitlines(keepends=True)
    assert lines[0] == header() and [orjson.loads(x)["op"] for x in lines].count("header") == 1
    assert ids(one) == ["a", "b"] and reopen(wal).tasks() == one.tasks()


def test_a_stale_refusal_is_final_only_if_the_file_did_not_change(wal: Path) -> None:
    async def scenario() -> TaskDag:
        one = await build(wal)
        two = await TaskDag.open(wal, NAME)
        await two.remove("c")
        await two.remove_dependency("b", "a")
        await one.remove("a")  # one still sees b and c depend on a; the file says neither does
        return one

    one = run(scenario())
    assert ids(one) == ["b"] and reopen(wal).tasks() == one.tasks()


def test_refresh_catches_up_and_says_when_the_file_is_another(wal: Path) -> None:
    async def scenario() -> None:
        one = await build(wal)
        two = await TaskDag.open(wal, NAME)
        assert await one.refresh() is True
        await two.add("d", "D")
        assert "d" not in one
        assert await one.refresh() is True
        assert one.tasks() == two.tasks() and one.seq == two.seq
        moved = wal.with_name("moved")
        wal.rename(moved)
        kept = moved.read_bytes()
        assert await one.refresh() is False
        with pytest.raises(StorageError, match="no longer the file"):
            await one.add("e", "E")
        assert not wal.exists() and moved.read_bytes() == kept

    run(scenario())


def test_refresh_reports_a_cut_short_or_damaged_log(wal: Path) -> None:
    async def scenario() -> None:
        one = await build(wal)
        data = wal.read_bytes()
        with wal.open("ab") as f:
            f.write(b'{"seq":99}\n')
        with pytest.raises(TaskDagUnavailable, match="checksum"):
            await one.refresh()
        wal.write_bytes(data[: len(data) // 2])
        assert await one.refresh() is False
        with pytest.raises(StorageError, match="open it again"):
            await one.add("e", "E")

    run(scenario())


# --- event loops, threads and closing ----------------------------------------------------------


def in_threads(*mains: Callable[[], Awaitable[None]]) -> None:
    """Run each coroutine function in a thread of its own, each with its own event loop."""
    errors: list[BaseException] = []

    def target(main: Callable[[], Awaitable[None]]) -> None:
        async def go() -> None:
            await main()

        try:
            asyncio.run(go())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=target, args=(m,), daemon=True) for m in mains]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a loop is stuck"
    assert errors == []


@pytest.mark.parametrize("offload", [True, False])
def test_one_dag_appends_from_two_event_loops(wal: Path, offload: bool) -> None:
    dag = run(build(wal, offload=offload))

    def appender(name: str) -> Callable[[], Awaitable[None]]:
        async def main() -> None:
            for i in range(40):
                await asyncio.gather(dag.add(f"{name}{i}", "x"), dag.set_status("a", "completed"))
                assert all(t.task_id for t in dag.ready())  # reads while the other loop writes

        return main

    in_threads(appender("x"), appender("y"))
    assert len(dag) == 83 and reopen(wal).tasks() == dag.tasks()
    assert dag.seq == len(wal.read_bytes().splitlines())


def test_the_lock_excludes_across_loops_and_is_fair_within_one() -> None:
    lock = AnyLoopLock()
    inside: list[int] = []

    def contender(n: int) -> Callable[[], Awaitable[None]]:
        async def main() -> None:
            for _ in range(100):
                async with lock:
                    inside.append(n)
                    assert len(inside) == 1
                    await asyncio.sleep(0.0005)  # really suspended: the others must wait
                    inside.pop()

        return main

    in_threads(contender(1), contender(2), contender(3))
    assert not lock.locked()

    async def fair() -> list[int]:
        order: list[int] = []
        await lock.acquire()

        async def waiter(n: int) -> None:
            async with lock:
                order.append(n)

        waiters = [asyncio.create_task(waiter(n)) for n in range(5)]
        await asyncio.sleep(0.01)
        lock.release()
        await asyncio.gather(*waiters)
        return order

    assert run(fair()) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("when", ["queued", "chosen", "granted"])
def test_a_cancelled_waiter_never_keeps_the_lock(when: str) -> None:
    async def scenario() -> None:
        lock = AnyLoopLock()
        await lock.acquire()
        first = asyncio.create_task(lock.acquire())
        second = asyncio.create_task(lock.acquire())
        await asyncio.sleep(0)
        if when == "queued":
            first.cancel()
            await asyncio.sleep(0)
            lock.release()
        elif when == "chosen":  # the grant is scheduled, the waiter cancelled before it runs
            lock.release()
            first.cancel()
        else:  # the grant ran, the cancellation lands before the waiter resumes
            lock.release()
            await asyncio.sleep(0)
            first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        await asyncio.wait_for(second, 5)
        lock.release()
        assert not lock.locked()

    run(scenario())


def test_aclose_waits_for_the_append_in_flight_then_refuses(
    wal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        entered.set()
        release.wait(5)
        real_fsync(fd)

    async def scenario() -> TaskDag:
        dag = await build(wal)
        patch_sync(monkeypatch, slow_fsync)
        flying = asyncio.create_task(dag.add("d", "in flight"))
        queued = asyncio.create_task(dag.add("e", "queued behind it"))
        await asyncio.to_thread(entered.wait, 5)
        closing = asyncio.create_task(dag.aclose())
        await asyncio.sleep(0.05)
        assert not closing.done()
        release.set()
        await closing
        assert flying.done() and queued.done()
        size = wal.stat().st_size
        await flying
        with pytest.raises(StoreClosed):
            await queued
        with pytest.raises(StoreClosed):
            await dag.add("f", "after close")
        assert wal.stat().st_size == size
        return dag

    dag = run(scenario())
    assert ids(dag) == ["a", "b", "c", "d"] == ids(reopen(wal))
    assert dag and len(dag) == 4


def test_an_empty_dag_is_true(wal: Path) -> None:
    dag = reopen(wal)
    assert len(dag) == 0 and bool(dag) is True


# --- a bounded number of open logs ---------------------------------------------------------------


@pytest.fixture
def few_files(monkeypatch: pytest.MonkeyPatch) -> LogFiles:
    monkeypatch.setattr(LOG_FILES, "limit", 4)
    return LOG_FILES


def test_open_logs_stay_bounded_and_reopen_on_demand(tmp_path: Path, few_files: LogFiles) -> None:
    folder = tmp_path / "many"

    async def scenario() -> list[TaskDag]:
        dags = [await TaskDag.open(folder / f"t{i}.wal.jsonl", NAME) for i in range(20)]
        for round_ in range(3):
            for i, dag in enumerate(dags):
                await dag.add(f"r{round_}", f"task {i}")
                assert open_fds_under(folder) <= few_files.limit
        return dags

    dags = run(scenario())
    for dag in dags:
        assert ids(dag) == ["r0", "r1", "r2"] == ids(reopen(dag.path))


def test_a_reopened_log_must_be_the_same_file(wal: Path, few_files: LogFiles) -> None:
    async def scenario() -> None:
        dag = await build(wal)
        others = [await TaskDag.open(wal.with_name(f"o{i}.wal.jsonl"), NAME) for i in range(6)]
        for other in others:
            await other.add("x", "x")  # pushes the first log's descriptor out
        assert dag._file.fd is None
        copy = wal.with_name("copy")
        copy.write_bytes(wal.read_bytes())
        copy.replace(wal)  # same bytes, another file
        with pytest.raises(StorageError, match="replaced"):
            await dag.add("d", "D")
        assert list(TaskDag.replay(wal).tasks) == ["a", "b", "c"]

    run(scenario())


def test_a_descriptor_in_use_is_never_closed_under_the_append(
    tmp_path: Path, few_files: LogFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()
    real_fsync = os.fsync
    slow = tmp_path / "slow.wal.jsonl"

    synced_the_log: list[bool] = []

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}") == str(slow):
            entered.set()
            release.wait(5)
            try:  # the descriptor must still be this log's, not closed or reused for another
                synced_the_log.append(os.readlink(f"/proc/self/fd/{fd}") == str(slow))
            except OSError:
                synced_the_log.append(False)
        real_fsync(fd)

    async def scenario() -> None:
        dag = await build(slow)
        patch_sync(monkeypatch, fsync)
        flying = asyncio.create_task(dag.add("d", "in flight"))
        await asyncio.to_thread(entered.wait, 5)
        dag.close()
        for i in range(8):
            other = await TaskDag.open(tmp_path / f"o{i}.wal.jsonl", NAME)
            await other.add("x", "x")
        release.set()
        await flying
        assert dag._file.fd is None  # closed once the append let go of it
        await dag.add("e", "after")

    run(scenario())
    assert synced_the_log and all(synced_the_log)
    assert ids(reopen(slow)) == ["a", "b", "c", "d", "e"]
