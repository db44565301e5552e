"""``tree``, ``path``, ``timeline`` and ``export`` of a session bigger than a page.

Each reads its nodes or rows a bounded page at a time and writes what it has as it goes: the
outputs equal the whole-session reads' (order kept across pages), no page read asks for more
than a page, and an export's Python heap stays far below the session's size.
"""

from __future__ import annotations

import asyncio
import io
import json
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any, TextIO, cast

import orjson
import pytest

from soong_store import SessionStore
from soong_store.cli import main, render_nodes
from soong_store.cli.render import ListDocument
from soong_store.model import codec
from soong_store.read import node_pages
from soong_store.transfer import export_session, import_session
from tests.backends import Backend

PAGE = 7


async def build(store: SessionStore, nodes: int, size: int = 40) -> str:
    """A chain with a side branch every fifth node and a compaction in the middle."""
    sid = (await store.create_session(cwd=str(store.home))).session_id
    parent: str | None = None
    async with store.transaction(sid) as tx:
        for index in range(nodes):
            role, kind = ("system", "compaction") if index == nodes // 2 else ("user", "message")
            body = [{"type": "text", "text": f"node {index} " + "x" * size}]
            node = tx.add_node(role, kind, body, parent_id=parent, token_count=index % 7)
            if parent is not None and index % 5 == 0:
                tx.add_node("user", "message", body, parent_id=parent)
            parent = node
    await store.switch_node(sid, parent)
    return sid


@pytest.fixture
def paged(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A page of ``PAGE`` nodes; the sizes of the pages read, as they are read."""
    sizes: list[int] = []
    read = node_pages.nodes_by_seq

    def spy(connection: Any, session_id: str, seqs: Sequence[int]) -> Any:
        sizes.append(len(seqs))
        return read(connection, session_id, seqs)

    monkeypatch.setattr(node_pages, "PAGE", PAGE)
    monkeypatch.setattr(node_pages, "nodes_by_seq", spy)
    return sizes


def run(backend: Backend, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    assert main([*backend.cli, *args]) == 0
    return capsys.readouterr().out


def test_tree_is_read_a_page_at_a_time_and_shows_every_node(
    backend: Backend, capsys: pytest.CaptureFixture[str], paged: list[int]
) -> None:
    async def whole() -> tuple[str, dict[str, Any]]:
        async with backend.store() as store:
            sid = await build(store, 60)
            session = await store.get_session(sid)
            doc = render_nodes.tree_document(
                session, await store.list_nodes(sid), await store.list_agents(sid)
            )
            return sid, doc

    sid, want = asyncio.run(whole())
    assert json.loads(run(backend, capsys, "tree", sid, "--json")) == json.loads(
        codec.dumps_text(want)
    )
    assert paged and max(paged) <= PAGE and sum(paged) == len(want["nodes"])
    paged.clear()
    lines = run(backend, capsys, "tree", sid, "--width", "400").splitlines()[2:]
    texts = {n["node_seq"]: n["text"] for n in want["nodes"]}
    seqs = [int(line.split("#")[1].split()[0]) for line in lines]
    assert sorted(seqs) == sorted(texts)
    assert all(line.endswith(texts[seq]) for seq, line in zip(seqs, lines, strict=True))
    assert paged and max(paged) <= PAGE


def test_path_is_read_a_page_at_a_time_and_equals_the_context(
    backend: Backend, capsys: pytest.CaptureFixture[str], paged: list[int]
) -> None:
    async def whole() -> tuple[str, list[Any], Any]:
        async with backend.store() as store:
            sid = await build(store, 60)
            return sid, await store.active_path(sid), await store.context(sid)

    sid, path, context = asyncio.run(whole())
    doc = json.loads(run(backend, capsys, "path", sid, "--json"))
    assert doc["nodes"] == [json.loads(n.model_dump_json()) for n in context.nodes]
    assert doc["path_length"] == len(path) and doc["nodes_cut"] == 30
    assert doc["token_count"] == context.token_count
    assert paged and max(paged) <= PAGE and sum(paged) == len(context.nodes)
    limited = json.loads(run(backend, capsys, "path", sid, "--json", "--limit", "9"))
    assert [n["node_seq"] for n in limited["nodes"]] == [n.node_seq for n in context.nodes[-9:]]
    assert limited["nodes_hidden"] == len(context.nodes) - 9
    text = run(backend, capsys, "path", sid).splitlines()
    heads = [line.split()[0] for line in text if line.startswith("#")]
    assert heads == [f"#{n.node_seq}" for n in context.nodes]
    assert text[-1] == f"context: {len(context.nodes)} nodes, {context.token_count} tokens"


def test_timeline_json_written_as_read_equals_the_whole_timeline(
    backend: Backend, capsys: pytest.CaptureFixture[str]
) -> None:
    async def whole() -> tuple[str, list[Any]]:
        async with backend.store() as store:
            sid = await build(store, 1500, size=0)
            return sid, await store.timeline(sid)

    sid, events = asyncio.run(whole())
    doc = json.loads(run(backend, capsys, "timeline", sid, "--json"))
    assert doc == {"session_id": sid, "events": [json.loads(e.model_dump_json()) for e in events]}


def test_a_list_document_is_the_document_printed_whole() -> None:
    for head, items in (({"a": 1, "b": [2]}, [{"x": 1}, 2, "three"]), ({}, []), ({"a": 1}, [])):
        written = io.StringIO()
        doc = ListDocument(written.write, head, "items")
        for item in items:
            doc.add(item)
        doc.close()
        assert written.getvalue() == codec.dumps_text({**head, "items": items}) + "\n"


class _Discard(io.TextIOBase):
    def write(self, text: str) -> int:
        return len(text)


def test_an_export_holds_a_page_not_the_session(backend: Backend) -> None:
    async def scenario() -> tuple[int, int, dict[str, int]]:
        async with backend.store() as store:
            sid = await build(store, 2500, size=4000)
            tracemalloc.start()
            try:
                counts = await export_session(store, sid, cast(TextIO, _Discard()))
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            return peak, 2500 * 4000, counts

    peak, content, counts = asyncio.run(scenario())
    assert counts["nodes"] == 2500 + 499
    assert peak < content / 3, f"{peak:,} bytes at the peak of a {content:,}-byte session"


def test_an_export_of_several_pages_round_trips(
    backend: Backend, new_backend: Callable[[str], Backend], monkeypatch: pytest.MonkeyPatch
) -> None:
    import soong_store.transfer as transfer

    monkeypatch.setattr(transfer, "PAGE", PAGE)

    async def scenario() -> tuple[list[Any], list[Any]]:
        first = io.StringIO()
        async with backend.store() as store:
            sid = await build(store, 50)
            await export_session(store, sid, first)
        target = new_backend("other")
        async with target.store() as store:
            await import_session(store, first.getvalue().splitlines())
            again = io.StringIO()
            await export_session(store, sid, again)
        strip = [orjson.loads(line) for line in first.getvalue().splitlines()]
        back = [orjson.loads(line) for line in again.getvalue().splitlines()]
        for doc in (strip[0], back[0]):
            doc.pop("exported_at")
        return strip, back

    first, back = asyncio.run(scenario())
    assert first == back
    seqs = [line["row"]["node_seq"] for line in first if line.get("kind") == "node"]
    assert seqs == sorted(seqs) and len(seqs) == 50 + 9


def test_an_import_holds_the_shape_not_the_session(
    backend: Backend, new_backend: Callable[[str], Backend]
) -> None:
    async def scenario() -> tuple[int, int]:
        dump = io.StringIO()
        async with backend.store() as store:
            sid = await build(store, 1000, size=16000)
            await export_session(store, sid, dump)
        lines = dump.getvalue().splitlines()
        del dump
        async with new_backend("other").store() as store:
            tracemalloc.start()
            try:
                imported = await import_session(store, lines, new_id=True)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert imported.counts["nodes"] == 1000 + 199
        return peak, 1000 * 16000

    peak, content = asyncio.run(scenario())
    assert peak < content / 3, f"{peak:,} bytes at the peak of a {content:,}-byte import"


def test_an_import_writes_nodes_in_number_order_whatever_the_file_order(
    backend: Backend, new_backend: Callable[[str], Backend]
) -> None:
    async def scenario() -> tuple[list[Any], list[Any]]:
        first = io.StringIO()
        async with backend.store() as store:
            sid = await build(store, 40)
            await export_session(store, sid, first)
        lines = [orjson.loads(line) for line in first.getvalue().splitlines()]
        nodes = [i for i, line in enumerate(lines) if line.get("kind") == "node"]
        shuffled = [lines[i] for i in reversed(nodes)]
        lines[nodes[0] : nodes[-1] + 1] = shuffled
        async with new_backend("other").store() as store:
            await import_session(store, [orjson.dumps(line) for line in lines])
            again = io.StringIO()
            await export_session(store, sid, again)
        back = [orjson.loads(line) for line in again.getvalue().splitlines()]
        return [line for line in back if line.get("kind") == "node"], [lines[i] for i in nodes]

    back, original = asyncio.run(scenario())
    assert back == sorted(original, key=lambda line: line["row"]["node_seq"])


def test_a_markdown_export_reads_the_path_a_page_at_a_time(
    backend: Backend, paged: list[int]
) -> None:
    from soong_store.cli.markdown import export_markdown

    async def scenario() -> tuple[str, list[Any]]:
        async with backend.store() as store:
            sid = await build(store, 40)
            out = io.StringIO()
            await export_markdown(store, sid, out)
            return out.getvalue(), await store.active_path(sid)

    text, path = asyncio.run(scenario())
    heads = [line for line in text.splitlines() if line.startswith("## #")]
    assert heads == [f"## #{n.node_seq} {n.role} · {n.node_type}" for n in path]
    marker = text.index("starts here (compaction)")
    assert text.index(f"## #{path[20].node_seq} system · compaction") > marker
    assert text.index(f"## #{path[19].node_seq} ") < marker
    assert paged and max(paged) <= PAGE and sum(paged) == len(path)


def test_an_export_read_run_again_after_writing_refuses_rather_than_writes_twice(
    backend: Backend,
) -> None:
    import soong_store.transfer as transfer
    from soong_store import StorageError
    from soong_store.store import artifact_files, run_read

    async def scenario() -> str:
        async with backend.store() as store:
            sid = await build(store, 3)
            out = io.StringIO()
            job = transfer._ExportJob(sid, out, artifact_files(store), True, None)
            await run_read(store, job)
            with pytest.raises(StorageError, match="interrupted"):
                await run_read(store, job)  # what a retry of the read would do
            return out.getvalue()

    lines = asyncio.run(scenario()).splitlines()
    counts = orjson.loads(lines[0])["counts"]
    assert counts["nodes"] == 3 and len(lines) == 2 + sum(counts.values())  # written once
