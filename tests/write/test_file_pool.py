"""The file pool: artifact files written in the background, committed or dropped by their unit."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from soong_store.errors import StorageError, StoreClosed
from soong_store.files.folder import ArtifactFiles
from soong_store.write.file_pool import FilePool, FileWrite


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "artifacts"


@pytest.fixture
def pool(root: Path) -> Iterator[FilePool]:
    pool = FilePool(ArtifactFiles(root))
    yield pool
    pool.close()


def over(write: FileWrite, timeout: float = 10.0) -> None:
    done = threading.Event()
    write.when_done(done.set)
    assert done.wait(timeout), f"the write of {write.path} did not end"


def test_a_write_ends_with_the_file_in_place_and_calls_back_from_the_pool(
    pool: FilePool, root: Path
):
    threads: list[str] = []
    write = pool.start("s1/a.json", b'{"a": 1}')
    write.when_done(lambda: threads.append(threading.current_thread().name))
    over(write)
    assert write.error() is None
    assert (root / "s1" / "a.json").read_bytes() == b'{"a": 1}'
    assert sorted(p.name for p in (root / "s1").iterdir()) == ["a.json"]  # no temp file left
    assert threads in (["soong-store-files"], [threading.current_thread().name])
    late: list[bool] = []
    write.when_done(lambda: late.append(True))  # already over: called at once
    assert late == [True]


def test_a_failed_write_reports_a_storage_error_and_leaves_nothing(pool: FilePool, root: Path):
    write = pool.start("not/a/session/path", b"x")
    over(write)
    assert isinstance(write.error(), StorageError)
    assert not root.exists() or list(root.rglob("*")) == []


def test_a_dropped_write_is_removed_once_over(pool: FilePool, root: Path, monkeypatch):
    files = ArtifactFiles(root)
    release = threading.Event()
    real = ArtifactFiles.write

    def slow(self: ArtifactFiles, rel: str, data: bytes, begun: Callable[[], None] | None = None):
        release.wait(10)
        real(self, rel, data, begun)

    monkeypatch.setattr(ArtifactFiles, "write", slow)
    early = pool.start("s1/early.bin", b"early")
    early.drop()  # still being written
    release.set()
    over(early)
    monkeypatch.setattr(ArtifactFiles, "write", real)
    late = pool.start("s1/late.bin", b"late")
    over(late)
    assert files.read("s1/late.bin") == b"late"
    late.drop()  # over already: removed now
    assert not (root / "s1").exists()  # the emptied session folder goes too


def test_start_returns_while_the_write_goes_on(pool: FilePool, monkeypatch):
    release = threading.Event()
    real = ArtifactFiles.write

    def held(self: ArtifactFiles, rel: str, data: bytes, begun: Callable[[], None] | None = None):
        if begun is not None:
            begun()
        release.wait(10)
        real(self, rel, data)

    monkeypatch.setattr(ArtifactFiles, "write", held)
    write = pool.start("s1/a.bin", b"a")
    ended: list[bool] = []
    write.when_done(lambda: ended.append(True))
    assert ended == []  # start handed the write over and came back
    release.set()
    over(write)


def test_start_does_not_wait_long_for_a_worker_that_never_begins(pool: FilePool, monkeypatch):
    release = threading.Event()

    def stuck(self: ArtifactFiles, rel: str, data: bytes, begun: Callable[[], None] | None = None):
        release.wait(10)  # never calls begun

    monkeypatch.setattr(ArtifactFiles, "write", stuck)
    began = time.monotonic()
    write = pool.start("s1/a.bin", b"a")
    assert time.monotonic() - began < 1.0  # the handoff wait is bounded (2 ms)
    release.set()
    over(write)


def test_a_raising_callback_does_not_stop_the_pool(pool: FilePool, root: Path, monkeypatch):
    release = threading.Event()
    real = ArtifactFiles.write

    def held(self: ArtifactFiles, rel: str, data: bytes, begun: Callable[[], None] | None = None):
        release.wait(10)
        real(self, rel, data, begun)

    monkeypatch.setattr(ArtifactFiles, "write", held)  # the callback is the pool's to call
    first = pool.start("s1/a.bin", b"a")

    def boom() -> None:
        raise RuntimeError("a callback failed")

    first.when_done(boom)
    release.set()
    over(first)
    monkeypatch.setattr(ArtifactFiles, "write", real)
    for i in range(8):  # more writes than workers: each worker must still be alive
        over(pool.start(f"s1/{i}.bin", b"x"))
    assert len(list((root / "s1").iterdir())) == 9


def test_close_finishes_started_writes_then_refuses(root: Path):
    pool = FilePool(ArtifactFiles(root))
    writes = [pool.start(f"s1/{i}.bin", bytes([i]) * 1000) for i in range(6)]
    pool.close()
    ended: list[bool] = []
    for write in writes:
        write.when_done(lambda: ended.append(True))
    assert ended == [True] * 6  # every write was over when close returned
    assert len(list((root / "s1").iterdir())) == 6
    with pytest.raises(StoreClosed):
        pool.start("s1/late.bin", b"late")
