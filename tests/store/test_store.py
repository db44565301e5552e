"""Behaviour of SessionStore: sessions, agents, runs, nodes, events, the tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from soong_store import (
    AgentStatus,
    AgentType,
    BranchError,
    ConcurrentRunError,
    EndReason,
    InvalidArgument,
    InvalidTransition,
    JsonBlock,
    NodeType,
    NotFound,
    Role,
    RunStatus,
    SessionArchived,
    SessionStatus,
    SessionStore,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from tests.backends import Backend
from tests.conftest import text
from tests.helpers import events_table, execute, foreign_key_violations, nodes_table, table_names

pytestmark = pytest.mark.asyncio


async def test_create_session_makes_root_agent_and_tables_on_first_write(
    store: SessionStore, backend: Backend
):
    s = await store.create_session(cwd="/project", metadata={"title": "t"})
    assert s.session_id.startswith("sess_")
    assert s.status == SessionStatus.ACTIVE
    assert s.metadata == {"title": "t"}
    assert s.active_node_id is None
    agent = await store.get_agent(s.root_agent_id)
    assert agent.agent_type == AgentType.MAIN
    assert agent.session_id == s.session_id
    pair = {nodes_table(s.session_id), events_table(s.session_id)}
    assert not pair & table_names(backend)
    before = await store.timeline(s.session_id)
    assert [e.event_type for e in before] == ["session_created"]
    await store.append_node(s.session_id, "user", "message", text("hi"))
    assert pair <= table_names(backend)
    after = await store.timeline(s.session_id)
    assert [e.event_type for e in after] == ["session_created", "node_created"]
    assert after[0] == before[0]


async def test_orchestrator_root_agent(store: SessionStore):
    s = await store.create_session(cwd=".", root_agent_type="orchestrator")
    assert (await store.get_agent(s.root_agent_id)).agent_type == AgentType.ORCHESTRATOR
    with pytest.raises(InvalidArgument):
        await store.create_session(cwd=".", root_agent_type="sub")


async def test_list_sessions_newest_first_with_filter_and_limit(store: SessionStore):
    a = await store.create_session(cwd=".")
    b = await store.create_session(cwd=".")
    c = await store.create_session(cwd=".")
    await store.append_node(a.session_id, "user", "message", text("touch a"))
    listed = [s.session_id for s in await store.list_sessions()]
    assert listed == [a.session_id, c.session_id, b.session_id]
    await store.archive_session(c.session_id)
    active = [s.session_id for s in await store.list_sessions(status="active")]
    assert c.session_id not in active and len(active) == 2
    assert len(await store.list_sessions(limit=1)) == 1
    archived = await store.list_sessions(status=SessionStatus.ARCHIVED)
    assert [s.session_id for s in archived] == [c.session_id]


async def test_first_node_is_root_and_later_nodes_follow_active(store: SessionStore):
    s = await store.create_session(cwd=".")
    sid = s.session_id
    n1 = await store.append_node(sid, "user", "message", text("hi"))
    n2 = await store.append_node(sid, "assistant", "message", [TextBlock(text="hello")])
    assert n1.parent_id is None
    assert n2.parent_id == n1.node_id
    assert (n1.node_seq, n2.node_seq) == (1, 2)
    assert n2.agent_id == s.root_agent_id
    assert (await store.get_session(sid)).active_node_id == n2.node_id
    assert [n.node_id for n in await store.active_path(sid)] == [n1.node_id, n2.node_id]


async def test_only_user_message_opens_branch(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    n1 = await store.append_node(sid, "user", "message", text("q"))
    await store.append_node(sid, "assistant", "message", text("a"))
    for role, node_type in [("assistant", "message"), ("user", "system_note"), ("tool", "message")]:
        with pytest.raises(BranchError):
            await store.append_node(sid, role, node_type, text("x"), parent_id=n1.node_id)
    branch = await store.append_node(sid, "user", "message", text("q2"), parent_id=n1.node_id)
    assert branch.parent_id == n1.node_id
    kids = await store.children(sid, n1.node_id)
    assert [k.node_seq for k in kids] == [2, 3]
    path = await store.active_path(sid)
    assert [n.node_id for n in path] == [n1.node_id, branch.node_id]


async def test_parent_must_exist_in_same_session(store: SessionStore):
    a = (await store.create_session(cwd=".")).session_id
    b = (await store.create_session(cwd=".")).session_id
    na = await store.append_node(a, "user", "message", text("in a"))
    with pytest.raises(NotFound):
        await store.append_node(b, "user", "message", text("x"), parent_id=na.node_id)
    with pytest.raises(NotFound):
        await store.append_node(b, "user", "message", text("x"), parent_id="node_missing")
    assert await store.active_path(b) == []


async def test_switch_node_moves_active_path_and_persists(backend: Backend):
    async with backend.store() as store:
        sid = (await store.create_session(cwd=".")).session_id
        n1 = await store.append_node(sid, "user", "message", text("q"))
        n2 = await store.append_node(sid, "assistant", "message", text("a"))
        await store.switch_node(sid, n1.node_id)
        n3 = await store.append_node(sid, "user", "message", text("q again"))
        assert n3.parent_id == n1.node_id
        events = await store.timeline(sid)
        switched = [e for e in events if e.event_type == "node_switched"]
        assert switched[0].payload == {"from": n2.node_id, "to": n1.node_id}
        await store.switch_node(sid, n2.node_id)
        with pytest.raises(NotFound):
            await store.switch_node(sid, "node_nope")
    async with backend.store() as store:
        path = await store.active_path(sid)
        assert [n.node_id for n in path] == [n1.node_id, n2.node_id]
        assert [n.node_id for n in await store.active_path(sid, n3.node_id)] == [
            n1.node_id,
            n3.node_id,
        ]


async def test_switch_node_refuses_another_agents_node(store: SessionStore):
    s = await store.create_session(cwd=".")
    sid = s.session_id
    tip = await store.append_node(sid, "user", "message", text("q"))
    worker = await store.create_agent(sid, "sub")
    theirs = await store.append_node(sid, "user", "message", text("task"), agent_id=worker.agent_id)
    before = len(await store.timeline(sid))
    with pytest.raises(InvalidArgument) as caught:
        await store.switch_node(sid, theirs.node_id)
    assert theirs.node_id in str(caught.value) and worker.agent_id in str(caught.value)
    assert (await store.get_session(sid)).active_node_id == tip.node_id
    assert len(await store.timeline(sid)) == before
    await store.switch_node(sid, tip.node_id)  # its own node is fine


async def test_context_cuts_at_last_compaction(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    await store.append_node(sid, "user", "message", text("1"), token_count=10)
    await store.append_node(sid, "assistant", "message", text("2"), token_count=20)
    c1 = await store.append_node(sid, "system", "compaction", text("sum 1"), token_count=5)
    await store.append_node(sid, "user", "message", text("3"), token_count=7)
    c2 = await store.append_node(sid, "system", "compaction", text("sum 2"), token_count=4)
    last = await store.append_node(sid, "assistant", "message", text("4"), token_count=3)
    view = await store.context(sid)
    assert [n.node_id for n in view.nodes] == [c2.node_id, last.node_id]
    assert view.token_count == 7
    older = await store.context(sid, c1.node_id)
    assert [n.node_id for n in older.nodes] == [c1.node_id]
    assert len(await store.active_path(sid)) == 6


async def test_context_without_compaction_is_whole_path(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    await store.append_node(sid, "user", "message", text("1"), token_count=2)
    await store.append_node(sid, "assistant", "message", text("2"))
    view = await store.context(sid)
    # The second has no count: its content JSON [{"type":"text","text":"2"}] is 28 bytes, 7 tokens.
    assert len(view.nodes) == 2 and view.token_count == 2 + 7 and view.estimated
    empty = await store.create_session(cwd=".")
    assert (await store.context(empty.session_id)).nodes == []


async def test_content_blocks_round_trip(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    content = [
        TextBlock(text="calling"),
        ToolCallBlock(tool_call_id="c1", name="grep", arguments={"q": "x", "n": 1.5}),
    ]
    call = await store.append_node(sid, "assistant", "message", content)
    result = await store.append_node(
        sid,
        "tool",
        "message",
        [
            {
                "type": "tool_result",
                "tool_call_id": "c1",
                "content": [{"type": "json", "data": [1, None, "é"]}],
                "is_error": True,
            }
        ],
        metadata={"k": [1, 2]},
    )
    again = await store.get_node(sid, call.node_id)
    assert again.content == content
    stored = await store.get_node(sid, result.node_id)
    block = stored.content[0]
    assert isinstance(block, ToolResultBlock) and block.is_error
    assert block.content == [JsonBlock(data=[1, None, "é"])]
    assert stored.metadata == {"k": [1, 2]}
    assert stored.role == Role.TOOL and stored.node_type == NodeType.MESSAGE


async def test_returned_node_record_is_what_a_read_returns(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    content = [
        {"type": "json", "data": {"t": (1, 2), "nested": [{"x": (None,)}]}},
        {"type": "tool_call", "tool_call_id": "c", "name": "f", "arguments": ("a", 1.5)},
    ]
    written = await store.append_node(sid, "assistant", "message", content, metadata=(1,))
    read = await store.get_node(sid, written.node_id)
    assert written == read
    assert written.content[0] == JsonBlock(data={"t": [1, 2], "nested": [{"x": [None]}]})


async def test_runs_serial_for_main_agent(store: SessionStore):
    s = await store.create_session(cwd=".")
    sid = s.session_id
    r1 = await store.start_run(sid, s.root_agent_id)
    with pytest.raises(ConcurrentRunError):
        await store.start_run(sid, s.root_agent_id)
    queued = await store.start_run(sid, s.root_agent_id, status="queued")
    with pytest.raises(ConcurrentRunError):
        await store.update_run(queued.run_id, status="running")
    done = await store.finish_run(
        r1.run_id, "completed", "completed", usage={"input_tokens": 3}, turn_count=2
    )
    assert done.status == RunStatus.COMPLETED and done.end_reason == EndReason.COMPLETED
    assert done.usage == {"input_tokens": 3} and done.turn_count == 2
    running = await store.update_run(queued.run_id, status="running")
    assert running.status == RunStatus.RUNNING


async def test_sub_agent_runs_run_concurrently(store: SessionStore):
    s = await store.create_session(cwd=".")
    sid = s.session_id
    main_run = await store.start_run(sid, s.root_agent_id)
    sub = await store.create_agent(sid, "sub", created_by_run_id=main_run.run_id)
    assert sub.parent_agent_id == s.root_agent_id
    runs = [await store.start_run(sid, sub.agent_id) for _ in range(3)]
    assert all(r.status == RunStatus.RUNNING for r in runs)


async def test_terminal_run_is_final(store: SessionStore):
    s = await store.create_session(cwd=".")
    run = await store.start_run(s.session_id, s.root_agent_id)
    await store.finish_run(run.run_id, "failed", "failed", error={"msg": "boom"})
    with pytest.raises(InvalidTransition):
        await store.finish_run(run.run_id, "completed", "completed")
    with pytest.raises(InvalidTransition):
        await store.update_run(run.run_id, status="running")
    with pytest.raises(InvalidTransition):
        await store.append_node(s.session_id, "user", "message", text("x"), run_id=run.run_id)
    got = await store.get_run(run.run_id)
    assert got.error == {"msg": "boom"} and got.end_reason == EndReason.FAILED


async def test_run_status_rules(store: SessionStore):
    s = await store.create_session(cwd=".")
    run = await store.start_run(s.session_id, s.root_agent_id, status="queued")
    await store.update_run(run.run_id, status="pending")
    with pytest.raises(InvalidTransition):
        await store.update_run(run.run_id, status="queued")
    with pytest.raises(InvalidTransition):
        await store.update_run(run.run_id, status="completed")
    with pytest.raises(InvalidArgument):
        await store.finish_run(run.run_id, "running", "completed")
    with pytest.raises(InvalidArgument):
        await store.finish_run(run.run_id, "completed", "stop_hook_prevented")
    with pytest.raises(InvalidArgument):
        await store.start_run(s.session_id, s.root_agent_id, status="completed")
    assert (await store.get_run(run.run_id)).status == RunStatus.PENDING


async def test_run_tracks_start_and_end_nodes(store: SessionStore):
    s = await store.create_session(cwd=".")
    sid = s.session_id
    run = await store.start_run(sid, s.root_agent_id)
    a = await store.append_node(sid, "user", "message", text("q"), run_id=run.run_id)
    b = await store.append_node(sid, "assistant", "message", text("a"), run_id=run.run_id)
    got = await store.get_run(run.run_id)
    assert (got.start_node_id, got.end_node_id) == (a.node_id, b.node_id)
    events = await store.timeline(sid, run_id=run.run_id)
    assert [e.run_seq for e in events] == [1, 2, 3]
    assert [e.event_type for e in events] == ["run_started", "node_created", "node_created"]


async def test_agent_status_final(store: SessionStore):
    s = await store.create_session(cwd=".")
    sub = await store.create_agent(s.session_id, "sub", metadata={"purpose": "worker"})
    assert sub.metadata == {"purpose": "worker"} and sub.status == AgentStatus.IDLE
    done = await store.update_agent(sub.agent_id, status="completed", result={"ok": True})
    assert done.status == AgentStatus.COMPLETED and done.result == {"ok": True}
    with pytest.raises(InvalidTransition):
        await store.update_agent(sub.agent_id, status="running")
    with pytest.raises(InvalidTransition):
        await store.start_run(s.session_id, sub.agent_id)
    with pytest.raises(InvalidArgument):
        await store.create_agent(s.session_id, "main")
    with pytest.raises(InvalidArgument):
        await store.create_agent(s.session_id, "fork")


async def test_sub_agent_tree_and_dispatch_branches(store: SessionStore):
    s = await store.create_session(cwd=".")
    sid = s.session_id
    await store.append_node(sid, "user", "message", text("main q"))
    main_tip = (await store.get_session(sid)).active_node_id
    worker = await store.create_agent(sid, "sub")
    r1 = await store.start_run(sid, worker.agent_id)
    w1 = await store.append_node(sid, "user", "message", text("task 1"), run_id=r1.run_id)
    w2 = await store.append_node(sid, "assistant", "message", text("done 1"), run_id=r1.run_id)
    assert w1.parent_id is None and w1.agent_id == worker.agent_id
    assert w2.parent_id == w1.node_id
    await store.finish_run(r1.run_id, "completed", "completed")
    assert (await store.get_session(sid)).active_node_id == main_tip
    r2 = await store.start_run(sid, worker.agent_id)
    w3 = await store.append_node(sid, "user", "message", text("task 2"), run_id=r2.run_id)
    assert w3.parent_id == w2.node_id
    r3 = await store.start_run(sid, worker.agent_id)
    w4 = await store.append_node(
        sid, "user", "message", text("task 3"), run_id=r3.run_id, parent_id=w1.node_id
    )
    w5 = await store.append_node(sid, "assistant", "message", text("done 3"), run_id=r3.run_id)
    assert w5.parent_id == w4.node_id
    path = await store.active_path(sid, (await store.get_run(r3.run_id)).end_node_id)
    assert [n.node_id for n in path] == [w1.node_id, w4.node_id, w5.node_id]


async def test_fork_agent_hangs_under_fork_point(store: SessionStore):
    s = await store.create_session(cwd=".")
    sid = s.session_id
    q = await store.append_node(sid, "user", "message", text("q"))
    a = await store.append_node(sid, "assistant", "message", text("a"))
    await store.append_node(sid, "user", "message", text("more"))
    fork = await store.create_agent(sid, "fork", fork_from_node_id=a.node_id)
    run = await store.start_run(sid, fork.agent_id)
    f1 = await store.append_node(sid, "user", "message", text("fork task"), run_id=run.run_id)
    f2 = await store.append_node(sid, "assistant", "message", text("fork done"), run_id=run.run_id)
    assert f1.parent_id == a.node_id
    path = await store.active_path(sid, f2.node_id)
    assert [n.node_id for n in path] == [q.node_id, a.node_id, f1.node_id, f2.node_id]
    assert (await store.get_session(sid)).active_node_id != f2.node_id


async def test_a_fork_from_the_tip_does_not_block_the_main_agent(store: SessionStore):
    s = await store.create_session(cwd=".")
    sid = s.session_id
    await store.append_node(sid, "user", "message", text("q"))
    tip = await store.append_node(sid, "assistant", "message", text("a"))
    compact = await store.create_agent(
        sid, "fork", fork_from_node_id=tip.node_id, metadata={"purpose": "compact"}
    )
    run = await store.start_run(sid, compact.agent_id)
    f1 = await store.append_node(sid, "user", "message", text("summarize"), run_id=run.run_id)
    await store.append_node(sid, "assistant", "message", text("summary"), run_id=run.run_id)
    assert f1.parent_id == tip.node_id
    # The fork's child does not count: the main agent goes on at its tip with any node.
    summary = await store.append_node(sid, "assistant", "compaction", text("summary"))
    assert summary.parent_id == tip.node_id
    # Now the tip has a child of the main agent: a second one is a branch.
    with pytest.raises(BranchError, match=tip.node_id):
        await store.append_node(sid, "assistant", "message", text("x"), parent_id=tip.node_id)
    # The fork's own second child under the fork point is a branch of the fork.
    with pytest.raises(BranchError, match=tip.node_id):
        await store.append_node(
            sid, "assistant", "message", text("x"), run_id=run.run_id, parent_id=tip.node_id
        )
    path = await store.active_path(sid)
    assert [n.node_id for n in path][-2:] == [tip.node_id, summary.node_id]


async def test_a_sub_agents_node_under_the_tip_does_not_block_the_main_agent_in_a_unit(
    store: SessionStore,
):
    s = await store.create_session(cwd=".")
    sid = s.session_id
    tip = await store.append_node(sid, "user", "message", text("q"))
    worker = await store.create_agent(sid, "sub")
    await store.append_node(
        sid, "user", "message", text("task"), agent_id=worker.agent_id, parent_id=tip.node_id
    )
    async with store.transaction(sid) as unit:
        answer = unit.add_node("assistant", "child_result", text("done"))
        unit.add_node("assistant", "message", text("and so"))
    assert (await store.get_node(sid, answer)).parent_id == tip.node_id
    explicit = await store.append_node(
        sid, "user", "message", text("again"), agent_id=worker.agent_id, parent_id=answer
    )
    assert explicit.parent_id == answer


async def test_node_agent_must_match_run(store: SessionStore):
    s = await store.create_session(cwd=".")
    sub = await store.create_agent(s.session_id, "sub")
    run = await store.start_run(s.session_id, s.root_agent_id)
    with pytest.raises(InvalidArgument):
        await store.append_node(
            s.session_id, "user", "message", text("x"), run_id=run.run_id, agent_id=sub.agent_id
        )
    other = await store.create_session(cwd=".")
    with pytest.raises(NotFound):
        await store.append_node(other.session_id, "user", "message", text("x"), run_id=run.run_id)
    with pytest.raises(NotFound):
        await store.create_agent(other.session_id, "sub", parent_agent_id=sub.agent_id)


async def test_events_seq_and_run_seq(store: SessionStore):
    s = await store.create_session(cwd=".")
    sid = s.session_id
    run = await store.start_run(sid, s.root_agent_id)
    e1 = await store.append_event(sid, "debug_note", level="debug", payload={"a": 1})
    e2 = await store.append_event(sid, "tool_started", run_id=run.run_id, tool_call_id="c1")
    assert e2.seq == e1.seq + 1
    assert e1.run_seq is None and e2.run_seq == 2
    assert e2.agent_id == s.root_agent_id
    n = await store.append_node(sid, "user", "message", text("x"), run_id=run.run_id)
    e3 = await store.append_event(sid, "tool_failed", level="error", node_id=n.node_id)
    assert e3.node_id == n.node_id
    with pytest.raises(NotFound):
        await store.append_event(sid, "x", node_id="node_missing")
    with pytest.raises(NotFound):
        await store.append_event(sid, "x", run_id="run_missing")


async def test_timeline_filters_and_paging(store: SessionStore):
    s = await store.create_session(cwd=".")
    sid = s.session_id
    run = await store.start_run(sid, s.root_agent_id)
    for i in range(10):
        await store.append_event(sid, f"e{i}", run_id=run.run_id if i % 2 else None)
    everything = await store.timeline(sid)
    seqs = [e.seq for e in everything]
    assert seqs == list(range(1, len(seqs) + 1))
    page1 = await store.timeline(sid, limit=4)
    page2 = await store.timeline(sid, after_seq=page1[-1].seq, limit=4)
    assert [e.seq for e in page1 + page2] == seqs[:8]
    by_run = await store.timeline(sid, run_id=run.run_id)
    assert [e.run_seq for e in by_run] == list(range(1, 7))
    assert await store.timeline(sid, after_seq=10_000) == []
    with pytest.raises(InvalidArgument):
        await store.timeline(sid, limit=0)
    with pytest.raises(InvalidArgument):
        await store.timeline(sid, after_seq=-1)


async def test_fork_session_copies_active_path(store: SessionStore):
    s = await store.create_session(cwd="/p", metadata={"m": 1})
    sid = s.session_id
    n1 = await store.append_node(sid, "user", "message", text("1"), token_count=1)
    n2 = await store.append_node(sid, "assistant", "message", text("2"), metadata={"x": 1})
    await store.append_node(sid, "user", "message", text("3"))
    await store.append_node(sid, "user", "message", text("side"), parent_id=n1.node_id)
    fork = await store.fork_session(sid, n2.node_id)
    assert fork.parent_session_id == sid and fork.session_id != sid
    assert fork.cwd == "/p" and fork.metadata == {"m": 1}
    path = await store.active_path(fork.session_id)
    assert [(n.role, n.content, n.metadata, n.token_count) for n in path] == [
        (Role.USER, [TextBlock(text="1")], None, 1),
        (Role.ASSISTANT, [TextBlock(text="2")], {"x": 1}, None),
    ]
    assert all(n.agent_id == fork.root_agent_id for n in path)
    assert fork.active_node_id == path[-1].node_id
    events = await store.timeline(fork.session_id)
    node_events = [e for e in events if e.event_type == "node_created"]
    assert {e.node_id for e in node_events} == {n.node_id for n in path}
    more = await store.append_node(fork.session_id, "user", "message", text("in fork"))
    assert more.parent_id == path[-1].node_id
    assert len(await store.active_path(sid)) == 2  # the source is untouched
    with pytest.raises(NotFound):
        await store.fork_session(sid, "node_missing")


async def test_archive_refuses_writes_but_reads_and_forks(store: SessionStore):
    s = await store.create_session(cwd=".")
    sid = s.session_id
    n = await store.append_node(sid, "user", "message", text("q"))
    run = await store.start_run(sid, s.root_agent_id)
    archived = await store.archive_session(sid)
    assert archived.status == SessionStatus.ARCHIVED
    with pytest.raises(SessionArchived):
        await store.append_node(sid, "user", "message", text("no"))
    with pytest.raises(SessionArchived):
        await store.append_event(sid, "no")
    with pytest.raises(SessionArchived):
        await store.create_agent(sid, "sub")
    with pytest.raises(SessionArchived):
        await store.start_run(sid, s.root_agent_id, status="queued")
    with pytest.raises(SessionArchived):
        await store.switch_node(sid, n.node_id)
    with pytest.raises(SessionArchived):
        await store.finish_run(run.run_id, "completed", "completed")
    assert [x.node_id for x in await store.active_path(sid)] == [n.node_id]
    fork = await store.fork_session(sid, n.node_id)
    assert fork.status == SessionStatus.ACTIVE
    await store.delete_session(sid)
    with pytest.raises(NotFound):
        await store.get_session(sid)


async def test_delete_removes_rows_and_tables_and_nothing_else(
    store: SessionStore, backend: Backend
):
    keep = await store.create_session(cwd=".")
    await store.append_node(keep.session_id, "user", "message", text("keep"))
    gone = await store.create_session(cwd=".")
    gsid = gone.session_id
    run = await store.start_run(gsid, gone.root_agent_id)
    sub = await store.create_agent(gsid, "sub", created_by_run_id=run.run_id)
    await store.start_run(gsid, sub.agent_id)
    await store.append_node(gsid, "user", "message", text("bye"), run_id=run.run_id)
    await store.delete_session(gsid)
    tables = table_names(backend)
    assert nodes_table(gsid) not in tables and events_table(gsid) not in tables
    assert nodes_table(keep.session_id) in tables
    for table in ("sessions", "agents", "runs"):
        count = execute(
            backend, f"SELECT count(*) FROM {table} WHERE session_id = :sid", {"sid": gsid}
        )
        assert count == [(0,)]
    assert foreign_key_violations(backend) == []
    assert len(await store.active_path(keep.session_id)) == 1
    with pytest.raises(NotFound):
        await store.delete_session(gsid)
    with pytest.raises(NotFound):
        await store.active_path(gsid)


async def test_reopen_keeps_everything(backend: Backend):
    async with backend.store() as store:
        s = await store.create_session(cwd=".")
        sid = s.session_id
        run = await store.start_run(sid, s.root_agent_id)
        for i in range(5):
            await store.append_node(
                sid,
                "user" if i % 2 == 0 else "assistant",
                "message",
                text(str(i)),
                run_id=run.run_id,
            )
        before_path = await store.active_path(sid)
        before_events = await store.timeline(sid)
    async with backend.store() as store:
        assert await store.active_path(sid) == before_path
        assert await store.timeline(sid) == before_events
        n = await store.append_node(sid, "user", "message", text("after"), run_id=run.run_id)
        assert n.node_seq == 6 and n.parent_id == before_path[-1].node_id
        assert (await store.timeline(sid))[-1].seq == before_events[-1].seq + 1


async def test_durability_full_store_works(backend: Backend):
    async with backend.store(durability="full") as store:
        sid = (await store.create_session(cwd=".")).session_id
        await store.append_node(sid, "user", "message", text("x"))
    with pytest.raises(InvalidArgument):
        backend.store(durability="sometimes")


async def test_cwd_is_stored_absolute(store: SessionStore, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = await store.create_session(cwd="project")
    assert s.cwd == str(tmp_path / "project")
