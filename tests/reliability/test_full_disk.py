"""Full disk: the database, the artifact folder and a task WAL run out of space mid-write.

A tiny file system is not available here, so space runs out by other means:

- the database: ``PRAGMA max_page_count`` on the writer's own connection (a writer job), so
  SQLite answers ``SQLITE_FULL`` exactly as on a full disk;
- files: ``OSError(ENOSPC)`` injected into ``os.write``/``os.fsync``/``os.replace`` for the
  artifact folder or the task WAL only (the SQLite file is written by C code, never through them);
- shards: a child process under a file-size limit (``RLIMIT_FSIZE``), so that SQLite's own
  writes fail as on a full disk, also where it makes an attached shard's ``-shm``.

Each time the failing call raises a clear ``StorageError``, nothing of it is stored (database
snapshot, artifact folder and WAL bytes equal before and after), earlier data is intact, the
writer survives, and writes succeed again once space is back.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore, StorageError
from soong_store.catalog import lookup as catalog
from soong_store.check.run import check_store
from soong_store.store import run_write, runtime_of
from soong_store.tasks.wal import TaskDag
from tests.conftest import snapshot, text
from tests.reliability.conftest import artifact_files, integrity, tree_files
from tests.shard_support import assert_each_pair_in_one_file, limited, settle

pytestmark = pytest.mark.reliability

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
NO_LIMIT = 1_073_741_823


def set_max_pages(pages: int) -> Callable[[Any], int]:
    def job(connection: Any) -> int:
        return int(connection.exec_driver_sql(f"PRAGMA max_page_count = {pages}").scalar())

    return job


def page_count(connection: Any) -> int:
    return int(connection.exec_driver_sql("PRAGMA page_count").scalar())


async def write_unit(store: SessionStore, sid: str, tag: str, size: int) -> list[str]:
    """A unit of work: an attachment, three nodes (one spilling a JSON block), an event."""
    async with store.transaction(sid) as tx:
        aid = tx.add_artifact(tag.encode() * 50, filename=f"{tag}.txt", metadata={"unit": tag})
        ids = [
            tx.add_node("user", "message", text(tag + "u" * size), metadata={"unit": tag}),
            tx.add_node(
                "assistant",
                "message",
                [{"type": "artifact_ref", "artifact_id": aid}],
                metadata={"unit": tag},
            ),
            tx.add_node(
                "tool",
                "message",
                [{"type": "json", "data": {"unit": tag, "rows": ["r" * 100] * 200}}],
                metadata={"unit": tag},
            ),
        ]
        tx.add_event("unit_mark", payload={"unit": tag})
    return ids


async def unit_state(store: SessionStore, sid: str, tag: str) -> tuple[int, int, int]:
    """(nodes, unit_mark events, artifacts) of a unit as the store reads them."""
    nodes = [n for n in await store.list_nodes(sid) if (n.metadata or {}).get("unit") == tag]
    marks = [
        e
        for e in await store.timeline(sid)
        if e.event_type == "unit_mark" and e.payload == {"unit": tag}
    ]
    owned = {n.node_id for n in nodes}
    artifacts = [
        a
        for a in await store.list_artifacts(sid)
        if (a.metadata or {}).get("unit") == tag or a.node_id in owned
    ]
    return len(nodes), len(marks), len(artifacts)


async def test_database_full_fails_whole_units_and_recovers(home: Path, figures: dict[str, Any]):
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
        written = [await write_unit(store, sid, f"early{i}", 500) for i in range(3)]
        pages = await run_write(store, page_count)
        assert await run_write(store, set_max_pages(pages + 40)) == pages + 40

        units_before_full = 0
        for i in range(500):
            before, files = snapshot(home), tree_files(home / "artifacts")
            try:
                written.append(await write_unit(store, sid, f"u{i}", 3000))
            except StorageError as exc:
                assert "full" in str(exc) and "nothing of this call was stored" in str(exc)
                assert snapshot(home) == before
                assert tree_files(home / "artifacts") == files
                break
            units_before_full += 1
        else:
            pytest.fail("the database never filled up")
        assert runtime_of(store).writer_alive

        # At the edge: a batch of concurrent units, some fit and some do not; each is whole.
        await run_write(store, set_max_pages(await run_write(store, page_count) + 12))
        tags = [f"edge{i}" for i in range(10)]
        outcomes = await asyncio.gather(
            *(write_unit(store, sid, tag, 1500) for tag in tags), return_exceptions=True
        )
        failed_at_edge, messages = 0, []
        for tag, outcome in zip(tags, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                assert await unit_state(store, sid, tag) == (0, 0, 0)
                failed_at_edge += 1
                messages.append(repr(outcome))
            else:
                assert await unit_state(store, sid, tag) == (3, 1, 2)
                written.append(outcome)
        assert 0 < failed_at_edge < len(tags), "the edge batch should half fit"
        unclear = [m for m in messages if not ("StorageError" in m and "full" in m)]

        # Space is back: the same writer takes writes again; nothing earlier was touched.
        await run_write(store, set_max_pages(NO_LIMIT))
        written.append(await asyncio.wait_for(write_unit(store, sid, "after", 3000), 30))
        for ids in written:
            for node_id in ids:
                await store.get_node(sid, node_id)
        assert await unit_state(store, sid, "after") == (3, 1, 2)
        await store.gc(min_age=0)
    assert integrity(home) == ["ok"]
    assert len(artifact_files(home)) == 2 * len(written)  # no file left by a failed unit
    figures.update(
        units_before_full=units_before_full,
        edge_batch=len(tags),
        edge_failed=failed_at_edge,
        units_written=len(written),
        units_lost=0,
    )
    # Last, so that a failure here does not hide the recovery checks above.
    assert not unclear, f"units failed for lack of space without saying so: {unclear}"


async def test_a_unit_that_does_not_fit_harms_no_other_unit_of_its_batch(home: Path):
    """DESIGN.md §5: a failed job raises in its caller and harms no other (group commit too)."""
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
        await store.append_node(sid, "user", "message", text("first"))
        await run_write(store, set_max_pages(await run_write(store, page_count) + 8))

        def busy(_connection: Any) -> None:
            time.sleep(0.5)  # the next three calls queue up meanwhile: one batch

        blocker = asyncio.ensure_future(run_write(store, busy))
        await asyncio.sleep(0.1)
        small = store.append_node(sid, "user", "message", text("small one"), metadata="s1")
        huge = store.append_node(sid, "user", "message", text("h" * 400_000), metadata="h")
        other = store.append_node(sid, "user", "message", text("small two"), metadata="s2")
        results = await asyncio.gather(small, huge, other, return_exceptions=True)
        await blocker
        await run_write(store, set_max_pages(NO_LIMIT))
        seen = [
            f"{type(r).__name__}: {r}" if isinstance(r, BaseException) else "ok" for r in results
        ]
        assert seen[0] == seen[2] == "ok", f"units that fit failed with their neighbour: {seen}"
        assert seen[1].startswith("StorageError") and "full" in seen[1], seen
        stored = [n.metadata for n in await store.list_nodes(sid)]
        assert stored == [None, "s1", "s2"]


# -- a shard attached on a full disk ------------------------------------------------------------

FULL_WITH_SHARDS = """
import asyncio, resource, signal, sys
from soong_store import SessionStore
from soong_store.catalog import moves
moves.LIMITS = moves.Limits(hot=3, shard=4, batch=2)

async def main(home, limit):
    async with SessionStore(home=home) as store:
        sids = sorted(s.session_id for s in await store.list_sessions())
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, no signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit), resource.RLIM_INFINITY))
        content = [{"type": "text", "text": "x" * 5000}]
        for sid in sids:
            for name, call in (
                ("read", lambda: store.active_path(sid)),
                ("write", lambda: store.append_node(sid, "user", "message", content)),
            ):
                try:
                    await call()
                    print("OK", name, sid, flush=True)
                except Exception as exc:
                    print("FAILED", name, sid, type(exc).__name__, exc, flush=True)

asyncio.run(main(*sys.argv[1:]))
"""


async def test_a_full_disk_while_shards_are_attached_says_so(
    home: Path, tmp_path: Path, spawn: Callable[..., Any]
) -> None:
    """A shard attached on a full disk: SQLite's own error (the ``-shm`` it cannot size, an
    ``SQLITE_IOERR``) comes from ``ATTACH``, run on the driver, and must say the disk is full.

    No space is had by a file-size limit of the child's (``RLIMIT_FSIZE``): every write past
    16 KB fails as on a full disk, and a shard's 32 KB ``-shm`` cannot be made.
    """
    with limited():
        async with SessionStore(home=home) as store:
            sids = [(await store.create_session(cwd=".")).session_id for _ in range(8)]
            for sid in sids:
                await store.append_node(sid, "user", "message", text("first"))
            placed = await settle(store)
            before = {sid: await store.list_nodes(sid) for sid in sids}
        idle = {sid for sid, (file, _) in placed.items() if file != catalog.MAIN}
        assert idle
        child = spawn(FULL_WITH_SHARDS, str(home), "16384", cwd=tmp_path)
        lines = child.finish(timeout=120)
        failed = [line.split(" ", 4) for line in lines if line.startswith("FAILED")]
        assert {(name, sid) for _, name, sid, *_ in failed} >= {("read", sid) for sid in idle}
        unclear = [
            " ".join(line)
            for line in failed
            if line[3] != "StorageError"
            or "full" not in line[4]
            or "nothing of this call was stored" not in line[4]
        ]
        assert not unclear, f"calls failed for lack of space without saying so: {unclear}"
        async with SessionStore(home=home) as store:
            for sid in sids:
                assert await store.list_nodes(sid) == before[sid]
            await store.append_node(sids[0], "user", "message", text("space is back"))
            await settle(store)
            assert (await check_store(store)).ok
    assert_each_pair_in_one_file(home)
    assert integrity(home) == ["ok"]


# -- the artifact folder ------------------------------------------------------------------------


def _under(fd: int, folder: Path) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith(str(folder))
    except OSError:
        return False


def _is_dir(fd: int) -> bool:
    return stat.S_ISDIR(os.fstat(fd).st_mode)


class Faults:
    """Fail chosen file operations under one folder with ENOSPC (the rest run normally)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
        self.folder = folder
        self.calls: dict[str, int] = {}
        self.fail: dict[str, int] = {}  # operation -> the 1-based call that fails (and later)
        self.short_write = False
        real_write, real_fsync, real_replace = os.write, os.fsync, os.replace
        real_fdatasync = os.fdatasync

        def hit(op: str) -> bool:
            self.calls[op] = self.calls.get(op, 0) + 1
            return op in self.fail and self.calls[op] >= self.fail[op]

        def write(fd: int, data: Any) -> int:
            if _under(fd, folder):
                if hit("write"):
                    raise ENOSPC
                if self.short_write and len(data) > 1:  # a partial write, then no space
                    self.fail["write"] = self.calls["write"] + 1
                    return real_write(fd, bytes(data)[: len(data) // 2])
            return real_write(fd, data)

        def fsync(fd: int) -> None:
            if _under(fd, folder) and hit("fsync_dir" if _is_dir(fd) else "fsync"):
                raise ENOSPC
            real_fsync(fd)

        def fdatasync(fd: int) -> None:
            if _under(fd, folder) and hit("fdatasync"):
                raise ENOSPC
            real_fdatasync(fd)

        def replace(src: Any, dst: Any, **kwargs: Any) -> None:
            at = kwargs.get("dst_dir_fd")  # a name relative to a folder's descriptor, or a path
            inside = _under(at, folder) if at is not None else str(dst).startswith(str(folder))
            if inside and hit("replace"):
                raise ENOSPC
            real_replace(src, dst, **kwargs)

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "fdatasync", fdatasync)
        monkeypatch.setattr(os, "replace", replace)

    def arm(self, op: str, nth: int = 1) -> None:
        self.calls, self.fail, self.short_write = {}, {op: nth}, False

    def disarm(self) -> None:
        self.calls, self.fail, self.short_write = {}, {}, False


ARTIFACT_FAULTS = [
    ("write", 1),  # the first file's first write
    ("write", 2),  # the second file (the spilled JSON) while the first is already in place
    ("fsync", 1),
    ("fsync", 2),
    ("replace", 1),
    ("replace", 2),
    ("fsync_dir", 1),  # after the rename: the file is at its final path already
    ("fsync_dir", 2),
]


@pytest.mark.parametrize(("op", "nth"), ARTIFACT_FAULTS)
async def test_artifact_folder_full_leaves_no_row_and_no_file(
    home: Path, monkeypatch: pytest.MonkeyPatch, op: str, nth: int
):
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
        earlier = await write_unit(store, sid, "earlier", 10)
        faults = Faults(monkeypatch, home / "artifacts")
        before, files = snapshot(home), tree_files(home / "artifacts")
        faults.arm(op, nth)
        with pytest.raises(StorageError, match="No space left on device"):
            await write_unit(store, sid, "doomed", 10)
        with pytest.raises(StorageError, match="No space left on device"):
            await store.put_artifact(sid, b"doomed" * 100, filename="doomed.bin")
        faults.disarm()
        assert snapshot(home) == before
        assert tree_files(home / "artifacts") == files, "a failed unit left a file behind"
        await asyncio.wait_for(write_unit(store, sid, "later", 10), 30)
        assert await unit_state(store, sid, "later") == (3, 1, 2)
        assert await unit_state(store, sid, "earlier") == (3, 1, 2)
        for node_id in earlier:
            await store.get_node(sid, node_id)
        for record in await store.list_artifacts(sid):
            assert await store.read_artifact(record.artifact_id)


# -- the task WAL -------------------------------------------------------------------------------

WAL_FAULTS = [
    ("write", 1, False),  # nothing reached the file
    ("write", 1, True),  # half a record reached the file, then no space
    ("fdatasync", 1, False),  # the record is in the file but could not be made durable
]


@pytest.mark.parametrize(("op", "nth", "short"), WAL_FAULTS)
@pytest.mark.parametrize("first", [True, False], ids=["creating", "appending"])
async def test_task_wal_full_changes_nothing_and_recovers(
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    op: str,
    nth: int,
    short: bool,
    first: bool,
):
    project = tmp_path / "project"
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=str(project))).session_id
        other = await store.task_dag(sid, "other task")
        await other.add("o1", "unaffected")
        dag = await store.task_dag(sid, "plan")
        if not first:
            await dag.add("a", "A")
            await dag.add("b", "B", depends_on=["a"])
        faults = Faults(monkeypatch, project)
        before_tasks = dag.tasks()
        before_files = tree_files(project)
        before_db = snapshot(home)
        faults.arm(op, nth)
        faults.short_write = short
        with pytest.raises(StorageError, match="No space left on device"):
            await dag.add("c", "C")
        faults.disarm()
        assert dag.tasks() == before_tasks
        after_files = tree_files(project)
        if first and after_files != before_files:  # the new file may stay, empty: an empty DAG
            assert after_files.pop(str(dag.path.relative_to(project))) == b""
        assert after_files == before_files
        if dag.path.exists():
            assert TaskDag.replay(dag.path, "plan").tasks == {t.task_id: t for t in before_tasks}
        assert snapshot(home) == before_db  # no task_add event was mirrored
        await asyncio.wait_for(dag.add("c", "C"), 30)
        await other.add("o2", "still fine")
        await store.append_node(sid, "user", "message", text("the conversation goes on"))
    async with SessionStore(home=home) as store:
        again = await store.task_dag(sid, "plan")
        assert [t.task_id for t in again.tasks()] == [t.task_id for t in before_tasks] + ["c"]
        assert len(await store.task_dag(sid, "other task")) == 2
        added = [e for e in await store.timeline(sid) if e.event_type == "task_add"]
        assert len(added) == len(before_tasks) + 3
