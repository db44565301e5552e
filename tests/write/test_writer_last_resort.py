"""The writer when its own handling of a failed batch fails, or cannot tell what committed.

SQLite-only: the failures are forced by replacing the writer's attempt and recovery steps (the
same steps run on every backend), through a store on real files so that the artifact files of
the failed units can be looked at.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from soong_store import SessionStore, StorageError
from soong_store.store import runtime_of
from soong_store.write import batch as write_retry
from soong_store.write.batch import CommitUnknown
from soong_store.write.writer import WriteConnection
from tests.conftest import text

pytestmark = [pytest.mark.sqlite, pytest.mark.asyncio]


def artifact_files(home: Path) -> list[Path]:
    return sorted(p for p in (home / "artifacts").rglob("*") if p.is_file())


async def test_a_failure_of_the_recovery_fails_the_batch_and_takes_its_files_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
        await store.append_node(sid, "user", "message", text("before"))

        def refused(*args: object) -> int:
            raise RuntimeError("the disk said no")

        def recovery_breaks(self: WriteConnection) -> None:
            raise RuntimeError("recovery broke")

        monkeypatch.setattr(write_retry, "attempt", refused)
        monkeypatch.setattr(WriteConnection, "recover", recovery_breaks)
        with pytest.raises(StorageError, match="unexpected RuntimeError: recovery broke"):
            # Bounded: a writer that died of it would leave the caller waiting for ever.
            await asyncio.wait_for(
                store.put_artifact(sid, b"never stored", filename="lost.txt"), 30
            )
        monkeypatch.undo()

        assert artifact_files(home) == []
        assert await store.list_artifacts(sid) == []
        assert runtime_of(store).writer_alive
        node = await store.append_node(sid, "assistant", "message", text("after"))
        assert node.node_seq == 2


async def test_files_of_a_batch_whose_commit_cannot_be_told_stay_for_gc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id

        def answer_lost(*args: object) -> int:
            raise CommitUnknown(None, 1)

        monkeypatch.setattr(write_retry, "attempt", answer_lost)
        monkeypatch.setattr(write_retry, "_commit_outcome", lambda *args: None)
        with pytest.raises(StorageError, match="could not say"):
            await asyncio.wait_for(
                store.put_artifact(sid, b"maybe stored", filename="maybe.txt"), 30
            )
        monkeypatch.undo()

        # Its row may have committed: removing the file could leave a row without its file.
        assert [p.read_bytes() for p in artifact_files(home)] == [b"maybe stored"]
        assert runtime_of(store).writer_alive
        assert await store.gc(min_age=0) != []  # nothing names it here: gc takes it
        assert artifact_files(home) == []
