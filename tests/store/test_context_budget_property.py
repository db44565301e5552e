"""``context(max_tokens=)`` against a plain reference, for random paths and budgets.

A path is random user messages, model calls (new ids, or an id made before again), tool results
answering any earlier call, nodes answering their own call and compactions; a node has a
``token_count`` or none (then its stored ``content_json``'s bytes / 4, rounded up). Half of it is
written and read (the path cache holds it), the rest appended after (the cache extends it), and
each budget (with or without a ``limit``) is checked against :func:`reference`: the longest tail
of the cut path that fits and starts outside a tool exchange, headed by the compaction.
"""

from __future__ import annotations

import asyncio
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from soong_store import BudgetError, SessionStore
from tests.backends import Kind
from tests.helpers import execute, nodes_table

KINDS = ["user", "call", "result", "own", "compaction"]


@dataclass
class Node:
    node_id: str
    compaction: bool
    calls: list[str]
    results: list[str]
    tokens: int  # its count, or its estimate


step = st.tuples(
    st.sampled_from(KINDS),
    st.none() | st.integers(0, 30),  # token_count
    st.integers(0, 60),  # text length, or which earlier call
    st.booleans(),  # a call: reuse an earlier id
)


def content(kind: str, size: int, reuse: bool, made: list[str]) -> tuple[str, list[Any]]:
    """The role and content of one step; ``made`` gains the calls it makes."""
    if kind == "call" or (kind == "result" and not made):
        new = made[size % len(made)] if reuse and made else f"c{len(made)}"
        made.append(new)
        return "assistant", [
            {"type": "tool_call", "tool_call_id": new, "name": "f", "arguments": {}}
        ]
    if kind == "result":
        answered = made[size % len(made)]
        item = {"type": "text", "text": "r" * size}
        return "tool", [{"type": "tool_result", "tool_call_id": answered, "content": [item]}]
    if kind == "own":
        own = f"o{len(made)}"
        made.append(own)
        return "assistant", [
            {"type": "tool_call", "tool_call_id": own, "name": "g", "arguments": {"n": size}},
            {"type": "tool_result", "tool_call_id": own, "content": []},
        ]
    return ("system" if kind == "compaction" else "user"), [{"type": "text", "text": "é" * size}]


def reference(path: list[Node], max_tokens: int, limit: int | None) -> tuple[list[str], int]:
    """The nodes a budgeted context returns and how many it omits, by brute force."""
    cut = max((i for i, n in enumerate(path) if n.compaction), default=None)
    head = [] if cut is None else [path[cut]]
    first = 0 if cut is None else cut + 1
    if head and (head[0].tokens > max_tokens or limit == 0):
        raise BudgetError("the head alone does not fit")
    for start in range(first, len(path) + 1):
        tail = path[start:]
        if sum(n.tokens for n in head + tail) > max_tokens:
            continue
        if limit is not None and len(head) + len(tail) > limit:
            continue
        if all(_call_kept(path, first, start, at) for at in range(start, len(path))):
            return [n.node_id for n in head + tail], start - first
    raise AssertionError("the empty tail always fits")


def _call_kept(path: list[Node], first: int, start: int, at: int) -> bool:
    """Whether each result of ``path[at]`` keeps its call (the nearest at or above it)."""
    for wanted in path[at].results:
        made = next((i for i in range(at, -1, -1) if wanted in path[i].calls), None)
        if made is not None and first <= made < start and made != at:
            return False
    return True


async def write(store: SessionStore, sid: str, steps: list[Any], made: list[str]) -> None:
    async with store.transaction(sid) as tx:
        for kind, count, size, reuse in steps:
            role, blocks = content(kind, size, reuse, made)
            node_type = "compaction" if kind == "compaction" else "message"
            tx.add_node(role, node_type, blocks, token_count=count)


async def check(store: SessionStore, backend: Any, steps: list[Any], budgets: list[Any]) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    made: list[str] = []
    half = len(steps) // 2
    await write(store, sid, steps[:half], made)
    await store.context(sid)  # the cache holds the first half
    await write(store, sid, steps[half:], made)
    stored = dict(execute(backend, f'SELECT node_id, content_json FROM "{nodes_table(sid)}"'))
    path = []
    for record in await store.active_path(sid):
        blocks = record.content
        estimate = math.ceil(len(stored[record.node_id].encode()) / 4)
        path.append(
            Node(
                record.node_id,
                record.node_type == "compaction",
                [b.tool_call_id for b in blocks if b.type == "tool_call"],
                [b.tool_call_id for b in blocks if b.type == "tool_result"],
                estimate if record.token_count is None else record.token_count,
            )
        )
    total = sum(n.tokens for n in path)
    for share, limit in budgets:
        max_tokens = share * (total + 2) // 100
        try:
            expected = reference(path, max_tokens, limit)
        except BudgetError:
            try:
                await store.context(sid, max_tokens=max_tokens, limit=limit)
            except BudgetError:
                continue
            raise AssertionError("no BudgetError") from None
        view = await store.context(sid, max_tokens=max_tokens, limit=limit)
        assert ([n.node_id for n in view.nodes], view.omitted) == expected
        kept = {n.node_id: n for n in path}
        assert view.token_count == sum(kept[n.node_id].tokens for n in view.nodes) <= max_tokens
        assert view.estimated == any(n.token_count is None for n in view.nodes)


def test_budgeted_context_matches_the_reference(backend_kind: Kind) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="soong-budget-") as tmp,
        backend_kind.fresh(Path(tmp)) as backend,
        asyncio.Runner() as runner,
    ):
        store = backend.store()
        runner.run(store.open())
        try:

            @settings(max_examples=60, deadline=None)
            @given(
                steps=st.lists(step, min_size=1, max_size=24),
                budgets=st.lists(
                    st.tuples(st.integers(0, 110), st.none() | st.integers(0, 8)),
                    min_size=1,
                    max_size=6,
                ),
            )
            def run(steps: list[Any], budgets: list[Any]) -> None:
                runner.run(check(store, backend, steps, budgets))

            run()
        finally:
            runner.run(store.close())
