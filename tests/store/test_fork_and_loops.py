"""A store in a forked child, and one store used from several event loops at once."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import warnings
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from soong_store import SessionStore, StorageError, StoreClosed
from soong_store.store import runtime_of
from tests.backends import Backend
from tests.conftest import text

CHILD_PATIENCE_S = 60.0


def writer_threads() -> int:
    return sum(t.name == "soong-store-writer" and t.is_alive() for t in threading.enumerate())


def in_threads(*bodies: Callable[[], Coroutine[Any, Any, Any]]) -> list[Any]:
    """Run each coroutine function in a thread of its own, with an event loop of its own."""
    results: list[Any] = [None] * len(bodies)
    start = threading.Barrier(len(bodies))

    def run(index: int) -> None:
        start.wait()
        try:
            results[index] = asyncio.run(bodies[index]())
        except BaseException as exc:  # handed to the test
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


# -- fork ----------------------------------------------------------------------------------


async def _child_calls(store: SessionStore, sid: str, node: str, art: str) -> list[str]:
    """Every kind of call on the inherited store: each must be refused, none may hang."""

    async def tx() -> None:
        async with store.transaction(sid) as unit:
            unit.add_event("x")

    calls: dict[str, Callable[[], Coroutine[Any, Any, Any]]] = {
        "open": store.open,
        "append_node": lambda: store.append_node(sid, "user", "message", text("x")),
        "append_event": lambda: store.append_event(sid, "x"),
        "transaction": tx,
        "switch_node": lambda: store.switch_node(sid, node),
        "create_agent": lambda: store.create_agent(sid, "sub"),
        "put_artifact": lambda: store.put_artifact(sid, b"x"),
        "get_session": lambda: store.get_session(sid),
        "list_sessions": store.list_sessions,
        "active_path": lambda: store.active_path(sid),
        "timeline": lambda: store.timeline(sid),
        "read_artifact": lambda: store.read_artifact(art),
        "task_dag": lambda: store.task_dag(sid, "plan"),
        "gc": store.gc,
    }
    wrong = []
    for name, call in calls.items():
        try:
            await asyncio.wait_for(call(), 10)
            wrong.append(f"{name}: no error")
        except StorageError as exc:
            if "open a new store in the child" not in str(exc):
                wrong.append(f"{name}: {exc}")
        except BaseException as exc:
            wrong.append(f"{name}: {type(exc).__name__} {exc}")
    return wrong


def _child(store: SessionStore, backend: Backend, sid: str, node: str, art: str) -> str:
    async def main() -> str:
        wrong = await _child_calls(store, sid, node, art)
        await store.close()  # lets go of the parent's store; touches nothing of it
        async with backend.store() as own:
            await own.append_node(sid, "user", "message", text("from the child"))
        return "; ".join(wrong) or "ok"

    return asyncio.run(main())


def test_a_forked_child_is_refused_every_call_and_opens_its_own(backend: Backend) -> None:
    store = backend.store()

    async def seed() -> tuple[str, str, str]:
        await store.open()
        sid = (await store.create_session(cwd=".")).session_id
        node = await store.append_node(sid, "user", "message", text("q"))
        art = await store.put_artifact(sid, b"bytes")
        return sid, node.node_id, art.artifact_id

    runner = asyncio.Runner()
    try:
        sid, node, art = runner.run(seed())
        read, write = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads, on purpose
            pid = os.fork()
        if pid == 0:  # the child: report through the pipe, never return into pytest
            os.close(read)
            try:
                verdict = _child(store, backend, sid, node, art)
            except BaseException as exc:
                verdict = f"child failed: {type(exc).__name__}: {exc}"
            os.write(write, verdict.encode())
            os._exit(0)
        os.close(write)
        deadline = time.monotonic() + CHILD_PATIENCE_S
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                pytest.fail("the child hung")
            time.sleep(0.05)
        with os.fdopen(read, "rb") as pipe:
            assert pipe.read().decode() == "ok"

        async def parent_goes_on() -> list[str]:
            await store.append_node(sid, "assistant", "message", text("from the parent"))
            return [n.content[0].text for n in await store.list_nodes(sid)]

        assert runner.run(parent_goes_on()) == ["q", "from the child", "from the parent"]
    finally:
        runner.run(store.close())
        runner.close()


# -- event loops ---------------------------------------------------------------------------


def test_opening_from_two_loops_at_once_opens_once(backend: Backend) -> None:
    before = writer_threads()
    store = backend.store()
    in_threads(store.open, store.open, store.open)
    assert runtime_of(store).generation == 1
    assert writer_threads() == before  # the first write starts it

    async def session() -> str:
        return (await store.create_session(cwd=".")).session_id

    assert len(set(in_threads(session, session, session))) == 3
    assert writer_threads() == before + 1

    async def use_and_close() -> None:
        sid = (await store.create_session(cwd=".")).session_id
        await store.append_node(sid, "user", "message", text("q"))
        await store.close()

    asyncio.run(use_and_close())
    assert writer_threads() == before


def test_one_store_serves_several_loops_at_once(backend: Backend) -> None:
    store = backend.store()
    asyncio.run(store.open())  # this loop ends here: the store is not bound to it
    sid = asyncio.run(store.create_session(cwd=".")).session_id

    def worker(name: str) -> Callable[[], Coroutine[Any, Any, list[str]]]:
        async def body() -> list[str]:
            seen = []
            for i in range(20):
                node = await store.append_node(sid, "user", "message", text(f"{name}{i}"))
                async with store.transaction(sid) as tx:
                    tx.add_event(f"{name}-event", node_id=node.node_id)
                big = [{"type": "json", "data": {"rows": ["x" * 100] * 200}}]
                await store.append_node(sid, "tool", "message", big)
                art = await store.put_artifact(sid, f"{name}{i}".encode())
                assert await store.read_artifact(art.artifact_id) == f"{name}{i}".encode()
                seen.append((await store.get_node(sid, node.node_id)).node_id)
            return seen

        return body

    results = in_threads(worker("a"), worker("b"), worker("c"))
    assert all(len(r) == 20 for r in results)

    async def verify() -> None:
        nodes = await store.list_nodes(sid)
        assert [n.node_seq for n in nodes] == list(range(1, 121))
        events = await store.timeline(sid)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))

    asyncio.run(verify())
    in_threads(store.close, store.close)
    with pytest.raises(StoreClosed):
        asyncio.run(store.get_session(sid))
