"""The path cache stays right while other processes write, and reads only what is new.

SQLite-only, on purpose: the cache is checked by SQLite's ``PRAGMA data_version``, and the other
writers here are other processes on the same file.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from soong_store import (
    ContextView,
    NodeRecord,
    NotFound,
    SessionStore,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from soong_store.backends.sqlite.backend import SQLiteBackend
from soong_store.read import path_cache as cache
from soong_store.read import session_reads as reads
from soong_store.read.readers import SMALL_ROWS
from tests.conftest import text

pytestmark = [pytest.mark.sqlite, pytest.mark.asyncio]


def other_process(home: Path, body: str, *args: str) -> str:
    """Run ``body`` (async code with ``store`` open on ``home`` and ``argv``) in a new process."""
    script = "import asyncio, sys\nfrom soong_store import SessionStore\n"
    script += "argv = sys.argv[2:]\nasync def main():\n"
    script += "    async with SessionStore(home=sys.argv[1]) as store:\n"
    script += textwrap.indent(textwrap.dedent(body), " " * 8)
    script += "\nasyncio.run(main())\n"
    done = subprocess.run(
        [sys.executable, "-c", script, str(home), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


class Climbs:
    """Counts the climbs a read makes and the nodes they return."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[int | None, int]] = []
        original = reads.climb

        def counted(*args: Any, **kwargs: Any) -> Any:
            rows = original(*args, **kwargs)
            steps = args[3] if len(args) > 3 else kwargs.get("steps")
            self.calls.append((steps, len(rows)))
            return rows

        monkeypatch.setattr(reads, "climb", counted)

    def take(self) -> list[tuple[int | None, int]]:
        calls, self.calls = self.calls, []
        return calls


async def session_of(store: SessionStore, depth: int) -> tuple[str, list[str]]:
    sid = (await store.create_session(cwd=".")).session_id
    async with store.transaction(sid) as tx:
        ids = [tx.add_node("user", "message", text(f"n{i}"), token_count=1) for i in range(depth)]
    return sid, ids


async def test_a_repeated_read_reads_no_node(store: SessionStore, monkeypatch):
    sid, ids = await session_of(store, 50)
    climbs = Climbs(monkeypatch)
    first = await store.context(sid)
    assert [n.node_id for n in first.nodes] == ids and first.token_count == 50
    assert climbs.take() == [(SMALL_ROWS, 50)]  # on the loop: bounded by its budget
    for _ in range(3):
        assert await store.context(sid) == first
        assert await store.active_path(sid) == first.nodes
        assert (await store.context(sid, limit=5)).nodes == first.nodes[-5:]
    assert climbs.take() == []


def _refuses_change(view: ContextView, written: NodeRecord) -> None:
    (held,) = view.nodes
    call, result = held.content
    assert isinstance(call, ToolCallBlock) and isinstance(result, ToolResultBlock)
    assert held.content == written.content and held.metadata == {"m": [1]}  # == a plain list
    assert isinstance(held.content, list) and isinstance(held.metadata, dict)
    for change in (
        lambda: view.nodes.append(held),
        lambda: held.content.append(TextBlock(text="x")),
        lambda: held.metadata.update(m=2),
        lambda: held.metadata["m"].append(2),
        lambda: call.arguments["a"].append(2),
        lambda: result.content.clear(),
        lambda: result.content[0].data.update(k=1),  # type: ignore[union-attr]
    ):
        with pytest.raises(TypeError, match="read-only"):
            change()
    mine = held.model_copy(deep=True)
    mine.content.append(TextBlock(text="mine"))
    mine.metadata["m"].append(2)
    assert mine.content[-1] == TextBlock(text="mine") and held.content == written.content


async def test_what_the_cache_hands_out_refuses_change_and_copies_are_the_caller_s(
    store: SessionStore,
) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    content = [
        {"type": "tool_call", "tool_call_id": "c", "name": "f", "arguments": {"a": [1]}},
        {"type": "tool_result", "tool_call_id": "c", "content": [{"type": "json", "data": {}}]},
    ]
    node = await store.append_node(sid, "tool", "message", content, metadata={"m": [1]})
    _refuses_change(await store.context(sid), node)  # climbed
    _refuses_change(await store.context(sid), node)  # held
    path = await store.active_path(sid)
    path.clear()  # a path's list is the caller's own
    assert [n.node_id for n in await store.active_path(sid)] == [node.node_id]


async def test_a_read_after_another_store_s_append_reads_about_the_new_node(
    home: Path, store: SessionStore, monkeypatch
):
    sid, ids = await session_of(store, 200)
    climbs = Climbs(monkeypatch)
    await store.context(sid)
    climbs.take()
    async with SessionStore(home=home) as other:  # its writes never reach this store's cache
        new = await other.append_node(sid, "assistant", "message", text("more"), token_count=3)
        view = await store.context(sid)
        assert [n.node_id for n in view.nodes] == [*ids, new.node_id]
        assert view.token_count == 203
        assert climbs.take() == [(8, 8)]  # one bounded climb from the new leaf
        tail = await other.append_node(sid, "user", "message", text("again"))
        path = await store.active_path(sid, limit=2)
        assert [n.node_id for n in path] == [new.node_id, tail.node_id]
        assert climbs.take() == [(2, 2)]


async def test_reads_see_what_another_process_wrote(home: Path, store: SessionStore):
    sid, ids = await session_of(store, 10)
    assert len((await store.context(sid)).nodes) == 10
    added = other_process(
        home,
        """
        node = await store.append_node(argv[0], "user", "message", [{"type": "text", "text": "x"}])
        print(node.node_id)
        """,
        sid,
    )
    assert [n.node_id for n in await store.active_path(sid)] == [*ids, added]
    assert (await store.context(sid, limit=1)).nodes[0].node_id == added
    other_process(home, "await store.switch_node(argv[0], argv[1])", sid, ids[3])
    assert [n.node_id for n in await store.active_path(sid)] == ids[:4]
    assert (await store.context(sid)).token_count == 4
    compaction = other_process(
        home,
        """
        await store.append_node(argv[0], "user", "message", [{"type": "text", "text": "y"}])
        node = await store.append_node(
            argv[0], "system", "compaction", [{"type": "text", "text": "sum"}], token_count=9
        )
        print(node.node_id)
        """,
        sid,
    )
    view = await store.context(sid)
    assert [n.node_id for n in view.nodes] == [compaction] and view.token_count == 9
    other_process(home, "await store.delete_session(argv[0])", sid)
    with pytest.raises(NotFound):
        await store.context(sid)


async def test_a_session_made_again_with_the_same_ids_is_read_afresh(
    home: Path, store: SessionStore, tmp_path: Path
):
    sid, ids = await session_of(store, 3)
    exported = tmp_path / "s.jsonl"
    other_process(home, "await store.append_node(argv[0], 'user', 'message', [])", sid)
    before = await store.active_path(sid)
    assert len(before) == 4
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "soong_store",
            "--home",
            str(home),
            "export",
            sid,
            "-o",
            str(exported),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = exported.read_text().splitlines()
    # The same session, ids and all, with the first node's text changed.
    changed = [line.replace('\\"text\\":\\"n0\\"', '\\"text\\":\\"changed\\"') for line in lines]
    assert changed != lines
    exported.write_text("\n".join(changed) + "\n")
    other_process(home, "await store.delete_session(argv[0])", sid)
    imported = subprocess.run(
        [sys.executable, "-m", "soong_store", "--home", str(home), "import", str(exported)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert imported.returncode == 0, imported.stderr
    after = await store.active_path(sid)
    assert [n.node_id for n in after] == [n.node_id for n in before]
    assert after[0].content[0].text == "changed"  # type: ignore[union-attr]


async def test_no_cache_when_the_backend_cannot_say(store: SessionStore, monkeypatch):
    sid, ids = await session_of(store, 5)
    monkeypatch.setattr(SQLiteBackend, "data_version", classmethod(lambda cls, connection: None))
    climbs = Climbs(monkeypatch)
    for _ in range(2):
        assert [n.node_id for n in await store.active_path(sid)] == ids
    assert climbs.take() == [(None, 5), (None, 5)]


async def test_the_cache_drops_the_least_recently_read_session_past_its_bound(
    store: SessionStore, monkeypatch
):
    monkeypatch.setattr(cache, "NODES", 10)
    first, _ = await session_of(store, 8)
    second, _ = await session_of(store, 8)
    climbs = Climbs(monkeypatch)
    await store.active_path(first)
    await store.active_path(second)  # 16 nodes held: the first session goes
    assert climbs.take() == [(SMALL_ROWS, 8), (SMALL_ROWS, 8)]
    await store.active_path(second)
    assert climbs.take() == []
    assert len(await store.active_path(first)) == 8
    assert climbs.take() == [(SMALL_ROWS, 8)]
