"""The tool rules: a tool result answers a call made on its path, and a user makes no calls.

A ``tool_result`` block names the ``tool_call_id`` of a ``tool_call`` block made by its own node
or by a node above it on its path; a ``user`` node holds no ``tool_call`` (calls are a model's).
A live append is refused when it breaks either (``InvalidContent``); history recorded elsewhere
(an import, an SDK's own items) keeps what its source wrote, and ``check`` lists it as notes,
not as damage. Pure functions of blocks, of stored content text and of the calls met going up a
path; the writer (:mod:`soong_store.write.session_writer`) gathers those, nearest first, and stops
as soon as every result has its call.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import orjson

from soong_store.errors import InvalidContent
from soong_store.model.content import ContentBlock, ToolCallBlock, ToolResultBlock
from soong_store.model.enums import Role

NO_CALLS: frozenset[str] = frozenset()


class ToolIds(NamedTuple):
    """The ``tool_call_id`` of a node's calls and of its results, in block order."""

    calls: tuple[str, ...]
    results: tuple[str, ...]


def tool_ids(blocks: Iterable[ContentBlock]) -> ToolIds:
    """The tool ids of validated blocks."""
    calls: list[str] = []
    results: list[str] = []
    for block in blocks:
        if isinstance(block, ToolCallBlock):
            calls.append(block.tool_call_id)
        elif isinstance(block, ToolResultBlock):
            results.append(block.tool_call_id)
    return ToolIds(tuple(calls), tuple(results))


def stored_tool_ids(content_json: object) -> ToolIds:
    """The tool ids of a stored ``content_json`` text (none where it holds no tool block).

    Text without a tool block's type is not parsed: most nodes on a path have none.
    """
    if not isinstance(content_json, str) or '"tool_' not in content_json:
        return ToolIds((), ())
    try:
        blocks: Any = orjson.loads(content_json)
    except orjson.JSONDecodeError:
        return ToolIds((), ())
    calls: list[str] = []
    results: list[str] = []
    for block in blocks if isinstance(blocks, list) else ():
        if not isinstance(block, dict) or not isinstance(block.get("tool_call_id"), str):
            continue
        if block.get("type") == "tool_call":
            calls.append(block["tool_call_id"])
        elif block.get("type") == "tool_result":
            results.append(block["tool_call_id"])
    return ToolIds(tuple(calls), tuple(results))


def unanswered(ids: ToolIds, above: Iterable[Collection[str]]) -> list[str]:
    """The results of a node that no call answers: its own calls, then those ``above`` it.

    ``above`` yields the calls of each node up the path, nearest first; it is read only until
    every result has found its call.
    """
    wanted = [i for i in dict.fromkeys(ids.results) if i not in ids.calls]
    if not wanted:
        return []
    missing = set(wanted)
    for calls in above:
        missing.difference_update(calls)
        if not missing:
            return []
    return [i for i in wanted if i in missing]


def check_tool_blocks(
    node_id: str, role: str, ids: ToolIds, above: Callable[[], Iterable[Collection[str]]]
) -> None:
    """The tool rules of a live append (see the module).

    ``above``: called only when the node holds a result its own calls do not answer.

    Raises:
        InvalidContent: a ``user`` node with a tool call, or a result whose call was not made
            on the node's path; the message names the ``tool_call_id``.
    """
    if ids.calls and role == Role.USER:
        raise InvalidContent(
            f"node {node_id} is a user node with tool call {ids.calls[0]!r}: only a model's "
            "node makes tool calls",
            node_id=node_id,
            tool_call_id=ids.calls[0],
        )
    if not ids.results:
        return
    missing = unanswered(ids, above())
    if missing:
        raise InvalidContent(
            f"node {node_id} holds a tool result for tool call {missing[0]!r}, which no "
            "tool_call on its path made",
            node_id=node_id,
            tool_call_id=missing[0],
        )


class _Node(NamedTuple):
    parent_id: str | None
    role: object
    ids: ToolIds


def tool_notes(nodes: Sequence[dict[str, Any]]) -> list[str]:
    """What a session's stored nodes hold against the tool rules, one sentence each.

    ``nodes``: every node row of one session (its ``node_id``, ``parent_id``, ``role``,
    ``content_json``). A climb never takes more steps than there are nodes, so a damaged parent
    chain that loops ends too.
    """
    held = {
        n["node_id"]: _Node(n["parent_id"], n["role"], stored_tool_ids(n["content_json"]))
        for n in nodes
    }
    made: set[str] = {i for node in held.values() for i in node.ids.calls}
    notes: list[str] = []
    for node_id, node in held.items():
        if node.ids.calls and node.role == Role.USER:
            notes.append(
                f"node {node_id} is a user node with tool call {node.ids.calls[0]!r}: only a "
                "model's node makes tool calls"
            )
        if not node.ids.results:
            continue
        # A call made nowhere in the session needs no climb to be missing.
        rest = ToolIds(node.ids.calls, tuple(i for i in node.ids.results if i in made))
        missing = set(unanswered(rest, _climb(held, node.parent_id, len(held))))
        missing.update(i for i in node.ids.results if i not in made)
        for tool_call_id in (i for i in dict.fromkeys(node.ids.results) if i in missing):
            notes.append(
                f"node {node_id} holds a tool result for tool call {tool_call_id!r}, which no "
                "tool_call on its path made"
            )
    return notes


def _climb(held: dict[str, _Node], node_id: str | None, steps: int) -> Iterator[tuple[str, ...]]:
    while node_id is not None and steps > 0:
        node = held.get(node_id)
        if node is None:
            return
        yield node.ids.calls
        node_id, steps = node.parent_id, steps - 1
