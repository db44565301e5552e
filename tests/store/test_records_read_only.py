"""A caller's change to a record it read never reaches what a later read returns.

The path cache (where a backend has one) shares records between reads; whatever a caller does
to the content, metadata or node list it was handed, the next ``context``/``active_path`` still
returns what is stored, which is what ``get_node`` returns.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from soong_store import (
    ContextView,
    JsonBlock,
    NodeRecord,
    SessionStore,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)

pytestmark = pytest.mark.asyncio

CONTENTS: list[list[Any]] = [
    [TextBlock(text="hello")],
    [ToolCallBlock(tool_call_id="c1", name="grep", arguments={"q": "x", "paths": ["a", "b"]})],
    [
        ToolResultBlock(
            tool_call_id="c1",
            content=[TextBlock(text="found"), JsonBlock(data={"hits": [1, 2], "more": {"n": 1}})],
        )
    ],
    [JsonBlock(data=[{"k": "v"}, [1, 2]]), TextBlock(text="tail")],
]
ROLES = ["user", "assistant", "tool", "assistant"]
"""Who writes each of :data:`CONTENTS` (a tool call is the model's, its result the tool's)."""


def _try(change: Callable[..., object], *args: Any) -> None:
    """Call ``change(*args)``; a read-only value refuses it with ``TypeError``, which is fine."""
    with contextlib.suppress(TypeError):
        change(*args)


def _tamper(nodes: Sequence[NodeRecord]) -> None:
    """Everything a caller could change in records it was handed, changed where it can be."""
    for node in nodes:
        _try(node.content.append, TextBlock(text="injected"))
        _try(node.metadata.__setitem__, "injected", True)
        _try(node.metadata["tags"].append, "injected")
        for block in node.content:
            if isinstance(block, JsonBlock):
                _try(block.data.append, "injected")
                _try(block.data[0].clear)
            if isinstance(block, ToolCallBlock):
                _try(block.arguments.__setitem__, "q", "injected")
                _try(block.arguments["paths"].append, "injected")
            if isinstance(block, ToolResultBlock):
                _try(block.content.pop)
                for item in block.content:
                    if isinstance(item, JsonBlock):
                        _try(item.data["hits"].append, 3)
                        _try(item.data["more"].clear)


async def _session(store: SessionStore) -> tuple[str, list[NodeRecord]]:
    session = await store.create_session(cwd="/p")
    sid = session.session_id
    written = [
        await store.append_node(
            sid, role, "message", content, metadata={"i": i, "tags": ["t"]}, token_count=3
        )
        for i, (role, content) in enumerate(zip(ROLES, CONTENTS, strict=True))
    ]
    return sid, written


async def _stored(store: SessionStore, sid: str, nodes: list[NodeRecord]) -> list[dict[str, Any]]:
    return [(await store.get_node(sid, node.node_id)).model_dump() for node in nodes]


async def test_changing_a_context_s_records_does_not_change_the_next_context(
    store: SessionStore,
) -> None:
    sid, written = await _session(store)
    expected = [node.model_dump() for node in written]
    first = await store.context(sid)
    assert [node.model_dump() for node in first.nodes] == expected
    _tamper(first.nodes)
    _try(first.nodes.append, first.nodes[0])
    _try(first.nodes.pop, 0)
    again = await store.context(sid)
    assert [node.model_dump() for node in again.nodes] == expected
    assert await _stored(store, sid, written) == expected
    assert again.token_count == 3 * len(CONTENTS)


async def test_changing_an_active_path_s_records_does_not_change_the_next_read(
    store: SessionStore,
) -> None:
    sid, written = await _session(store)
    expected = [node.model_dump() for node in written]
    path = await store.active_path(sid)
    _tamper(path)
    path.append(path[0])  # the list is the caller's own
    path.reverse()
    assert [node.model_dump() for node in await store.active_path(sid)] == expected
    view: ContextView = await store.context(sid)
    assert [node.model_dump() for node in view.nodes] == expected


async def test_changing_a_written_record_does_not_change_what_is_read(
    store: SessionStore,
) -> None:
    sid, _ = await _session(store)
    await store.context(sid)  # the session has a cache entry, which takes written nodes in
    arguments: dict[str, Any] = {"q": "x", "paths": ["a"]}
    node = await store.append_node(
        sid,
        "assistant",
        "message",
        [ToolCallBlock(tool_call_id="c2", name="grep", arguments=arguments)],
        metadata={"tags": ["t"]},
    )
    expected = node.model_dump()
    arguments["paths"].append("changed by its writer")
    _tamper([node])
    read = (await store.context(sid)).nodes[-1]
    assert read.model_dump() == expected
    assert (await store.get_node(sid, node.node_id)).model_dump() == expected


async def test_a_read_node_s_values_can_be_written_again_as_they_are(store: SessionStore) -> None:
    sid, written = await _session(store)
    for node in (await store.context(sid)).nodes:
        again = await store.append_node(
            sid, node.role, "message", node.content, metadata=node.metadata
        )
        assert again.content == node.content and again.metadata == node.metadata
    path = await store.active_path(sid)
    assert [n.content for n in path] == [n.content for n in written] * 2
