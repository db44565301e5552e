"""The tree against an in-memory model: random appends, branches, switches and new roots.

A worker (a ``sub`` agent) appends under any node too: its children never make a branch of the
main agent, and the main agent's never one of the worker's.
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from soong_store import BranchError, InvalidArgument
from tests.backends import Kind

ROLES = ["user", "assistant", "tool", "system"]
TYPES = ["message", "compaction", "system_note"]


class TreeMachine(RuleBasedStateMachine):
    def __init__(self, kind: Kind) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="soong-tree-"))
        self.database = ExitStack()
        self.runner = asyncio.Runner()
        self.store = self.database.enter_context(kind.fresh(self.dir)).store()
        self.run(self.store.open())
        session = self.run(self.store.create_session(cwd="."))
        self.sid = session.session_id
        self.worker = self.run(self.store.create_agent(self.sid, "sub")).agent_id
        self.agent: dict[str, str] = {}
        self.parent: dict[str, str | None] = {}
        self.kind: dict[str, tuple[str, str]] = {}
        self.tokens: dict[str, int] = {}
        self.order: list[str] = []
        self.active: str | None = None

    def run(self, coro: Any) -> Any:
        return self.runner.run(coro)

    def teardown(self) -> None:
        try:
            self.run(self.store.close())
        finally:
            self.runner.close()
            self.database.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def path_to(self, node: str | None) -> list[str]:
        out = []
        while node is not None:
            out.append(node)
            node = self.parent[node]
        return out[::-1]

    def mine(self, agent: str) -> list[str]:
        return [n for n in self.order if self.agent[n] == agent]

    def expect_branch_error(
        self, parent: str | None, role: str, node_type: str, agent: str = "main"
    ) -> bool:
        mine = self.mine(agent)
        if parent is None:  # a new root of the main agent beside its first is a branch too
            opens_branch = agent == "main" and any(self.parent[n] is None for n in mine)
        else:  # only a child of the same agent makes a branch
            opens_branch = any(self.parent[n] == parent for n in mine)
        return opens_branch and (role, node_type) != ("user", "message")

    def added(self, node: Any, parent: str | None, agent: str, tokens: int) -> None:
        assert node.parent_id == parent
        assert node.node_seq == len(self.order) + 1
        self.parent[node.node_id] = parent
        self.agent[node.node_id] = agent
        self.kind[node.node_id] = (node.role, node.node_type)
        self.tokens[node.node_id] = tokens
        self.order.append(node.node_id)

    @rule(
        role=st.sampled_from(ROLES),
        node_type=st.sampled_from(TYPES),
        tokens=st.integers(0, 50),
        pick=st.none() | st.integers(0, 10_000),
    )
    def append(self, role: str, node_type: str, tokens: int, pick: int | None) -> None:
        explicit = None if pick is None or not self.order else self.order[pick % len(self.order)]
        parent = explicit if explicit is not None else self.active
        content = [{"type": "text", "text": f"{role} {len(self.order)}"}]
        try:
            node = self.run(
                self.store.append_node(
                    self.sid, role, node_type, content, parent_id=explicit, token_count=tokens
                )
            )
        except BranchError:
            assert self.expect_branch_error(parent, role, node_type)
            return
        assert not self.expect_branch_error(parent, role, node_type)
        self.added(node, parent, "main", tokens)
        self.active = node.node_id

    @rule(
        role=st.sampled_from(ROLES),
        node_type=st.sampled_from(TYPES),
        pick=st.none() | st.integers(0, 10_000),
    )
    def worker_append(self, role: str, node_type: str, pick: int | None) -> None:
        explicit = None if pick is None or not self.order else self.order[pick % len(self.order)]
        latest = self.mine(self.worker)[-1] if self.mine(self.worker) else None
        parent = explicit if explicit is not None else latest
        content = [{"type": "text", "text": f"worker {len(self.order)}"}]
        try:
            node = self.run(
                self.store.append_node(
                    self.sid, role, node_type, content, agent_id=self.worker, parent_id=explicit
                )
            )
        except BranchError:
            assert self.expect_branch_error(parent, role, node_type, self.worker)
            return
        assert not self.expect_branch_error(parent, role, node_type, self.worker)
        # No token_count: the context counts ceil(bytes of the stored content JSON / 4).
        estimate = math.ceil(len(json.dumps(content, separators=(",", ":"))) / 4)
        self.added(node, parent, self.worker, estimate)

    @precondition(lambda self: bool(self.order))
    @rule(pick=st.integers(0, 10_000))
    def switch(self, pick: int) -> None:
        target = self.order[pick % len(self.order)]
        if self.agent[target] != "main":
            try:
                self.run(self.store.switch_node(self.sid, target))
            except InvalidArgument:
                return
            raise AssertionError("switched to a worker's node")
        self.run(self.store.switch_node(self.sid, target))
        self.active = target

    @rule()
    def clear(self) -> None:
        self.run(self.store.switch_node(self.sid, None))
        self.active = None

    @precondition(lambda self: bool(self.order))
    @rule(pick=st.integers(0, 10_000))
    def children_match(self, pick: int) -> None:
        node = self.order[pick % len(self.order)]
        got = [n.node_id for n in self.run(self.store.children(self.sid, node))]
        assert got == [n for n in self.order if self.parent[n] == node]

    @invariant()
    def active_path_and_context_match(self) -> None:
        path = [n.node_id for n in self.run(self.store.active_path(self.sid))]
        expected = self.path_to(self.active)
        assert path == expected
        cut = max((i for i, n in enumerate(expected) if self.kind[n][1] == "compaction"), default=0)
        view = self.run(self.store.context(self.sid))
        assert [n.node_id for n in view.nodes] == expected[cut:]
        assert view.token_count == sum(self.tokens[n] for n in expected[cut:])


def test_tree_matches_model(backend_kind: Kind) -> None:
    run_state_machine_as_test(
        lambda: TreeMachine(backend_kind),
        settings=settings(max_examples=25, stateful_step_count=30, deadline=None),
    )
