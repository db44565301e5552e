"""A group-commit batch that fails for a reason that is neither transient nor a job's own error.

The server refuses the batch's ``COMMIT`` (a deferred constraint trigger raises there, after every
job of the batch ran and succeeded): no job's work committed, so every caller of the batch gets
the error, each job's ``on_abort`` removes the artifact file it wrote, and the store goes on.
The writer's last resort, an error raised by its own recovery, is forced as well: the callers
hear of it, nothing of the batch is stored, the files of its units go and the writer goes on.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore, StorageError
from soong_store.check.run import check_store
from soong_store.store import run_write, runtime_of
from soong_store.write.writer import WriteConnection
from tests.conftest import text
from tests.helpers import side_door

pytestmark = [pytest.mark.asyncio, pytest.mark.postgresql]

REFUSE_AT_COMMIT = """
CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'refused at commit: %%', NEW.session_id;
END $$;
CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER UPDATE ON sessions
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.session_id = '{sid}') EXECUTE FUNCTION refuse_at_commit();
"""


async def in_one_batch(store: SessionStore, calls: list[Awaitable[Any]]) -> list[Any]:
    """Run ``calls`` as one group-commit batch: the writer is held until all of them are queued."""
    entered, gate = threading.Event(), threading.Event()

    def hold(_connection: Any) -> None:
        entered.set()
        gate.wait(30)

    held = asyncio.ensure_future(run_write(store, hold))
    assert await asyncio.to_thread(entered.wait, 30), "the writer never ran the holding job"
    writer = runtime_of(store)._writer  # started by the holding job
    assert writer is not None
    tasks = [asyncio.ensure_future(call) for call in calls]
    for _ in range(3000):  # queued for the thread: the calls, and the held job till it ends
        if writer._queued == len(calls) + 1:
            break
        await asyncio.sleep(0.01)
    assert writer._queued == len(calls) + 1, "the calls did not all reach the writer"
    gate.set()
    await held
    return await asyncio.gather(*tasks, return_exceptions=True)


async def sessions_with_a_node(store: SessionStore) -> tuple[str, str]:
    first = (await store.create_session(cwd=".")).session_id
    second = (await store.create_session(cwd=".")).session_id
    for sid in (first, second):
        await store.append_node(sid, "user", "message", text("before"))
    return first, second


def artifact_files(home: Path) -> list[Path]:
    return sorted(p for p in (home / "artifacts").rglob("*") if p.is_file())


def break_recovery_once(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The writer's next recovery from a failed attempt raises; later ones work.

    Returns the list that records the failure once it has happened.
    """
    recover = WriteConnection.recover
    failures: list[int] = []

    def recover_fails_once(link: WriteConnection) -> None:
        if not failures:
            failures.append(1)
            raise RuntimeError("recovery broke")
        recover(link)

    monkeypatch.setattr(WriteConnection, "recover", recover_fails_once)
    return failures


async def test_a_refused_commit_fails_every_job_of_its_batch_and_stores_none(
    pg_database_url: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home, url=pg_database_url) as store:
        poisoned, other = await sessions_with_a_node(store)
        with side_door(pg_database_url) as connection:
            connection.exec_driver_sql(REFUSE_AT_COMMIT.format(sid=poisoned))
        outcomes = await in_one_batch(
            store,
            [
                store.append_node(other, "assistant", "message", text("lost 1")),
                store.append_node(poisoned, "assistant", "message", text("lost 2")),
                store.put_artifact(other, b"never stored", filename="lost.txt"),
            ],
        )
        for outcome in outcomes:
            assert isinstance(outcome, StorageError), outcome
            assert f"refused at commit: {poisoned}" in str(outcome)
        for sid in (poisoned, other):
            assert [n.node_seq for n in await store.list_nodes(sid)] == [1]
        assert await store.list_artifacts(other) == []
        assert artifact_files(home) == []

        # The writer goes on: the same work commits once the server accepts it.
        with side_door(pg_database_url) as connection:
            connection.exec_driver_sql("DROP TRIGGER refuse_at_commit ON sessions")
        done = await in_one_batch(
            store,
            [
                store.append_node(other, "assistant", "message", text("kept 1")),
                store.append_node(poisoned, "assistant", "message", text("kept 2")),
                store.put_artifact(other, b"stored", filename="kept.txt"),
            ],
        )
        assert [d.node_seq for d in done[:2]] == [2, 2]
        assert await store.read_artifact(done[2].artifact_id) == b"stored"
        assert len(artifact_files(home)) == 1
        assert (await check_store(store)).ok


async def test_an_error_in_the_writers_recovery_reaches_every_caller_of_the_batch(
    pg_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home, url=pg_database_url) as store:
        poisoned, other = await sessions_with_a_node(store)
        with side_door(pg_database_url) as connection:
            connection.exec_driver_sql(REFUSE_AT_COMMIT.format(sid=poisoned))
        failures = break_recovery_once(monkeypatch)
        outcomes = await in_one_batch(
            store,
            [
                store.append_node(other, "assistant", "message", text("lost 1")),
                store.append_node(poisoned, "assistant", "message", text("lost 2")),
            ],
        )
        monkeypatch.undo()
        assert failures == [1]
        for outcome in outcomes:
            assert isinstance(outcome, StorageError), outcome
            assert "unexpected RuntimeError: recovery broke" in str(outcome)
        for sid in (poisoned, other):
            assert [n.node_seq for n in await store.list_nodes(sid)] == [1]

        with side_door(pg_database_url) as connection:
            connection.exec_driver_sql("DROP TRIGGER refuse_at_commit ON sessions")
        node = await store.append_node(poisoned, "assistant", "message", text("kept"))
        assert node.node_seq == 2
        assert runtime_of(store).writer_alive
        assert (await check_store(store)).ok


async def test_the_writers_last_resort_takes_the_files_of_its_failed_units_away(
    pg_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home, url=pg_database_url) as store:
        poisoned, other = await sessions_with_a_node(store)
        with side_door(pg_database_url) as connection:
            connection.exec_driver_sql(REFUSE_AT_COMMIT.format(sid=poisoned))
        break_recovery_once(monkeypatch)
        outcomes = await in_one_batch(
            store,
            [
                store.append_node(poisoned, "assistant", "message", text("lost")),
                store.put_artifact(other, b"never stored", filename="lost.txt"),
            ],
        )
        monkeypatch.undo()
        assert all(isinstance(outcome, StorageError) for outcome in outcomes)
        assert await store.list_artifacts(other) == []
        assert artifact_files(home) == []
