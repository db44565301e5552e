"""What the CLI's text says: folding keeps the active node, columns and fields are labelled."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from soong_store.cli import main
from tests.backends import Backend
from tests.conftest import text


def run(capsys: pytest.CaptureFixture[str], backend: Backend, *args: str) -> str:
    capsys.readouterr()
    code = main([*backend.cli, *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


async def deep_branches(backend: Backend) -> dict[str, str]:
    """Branches three levels deep, the active node at the bottom of the deepest one."""
    async with backend.store() as store:
        sid = (await store.create_session(cwd=".")).session_id
        parent = None
        for depth in range(3):
            q = await store.append_node(sid, "user", "message", text(f"q{depth}"), parent_id=parent)
            a = await store.append_node(sid, "assistant", "message", text(f"a{depth}"))
            await store.append_node(
                sid, "user", "message", text(f"side{depth}"), parent_id=q.node_id
            )
            await store.switch_node(sid, a.node_id)
            parent = a.node_id
            await store.append_node(
                sid, "user", "message", text(f"other{depth}"), parent_id=a.node_id
            )
        last = await store.append_node(sid, "user", "message", text("deepest"), parent_id=parent)
        leaf = await store.append_node(sid, "assistant", "message", text("the active leaf"))
        run = await store.start_run(sid, (await store.get_session(sid)).root_agent_id)
        await store.append_node(sid, "user", "message", text("in a run"), run_id=run.run_id)
        await store.finish_run(run.run_id, "failed", "max_turns", turn_count=7)
        await store.switch_node(sid, leaf.node_id)
        return {"sid": sid, "last": last.node_id, "leaf": leaf.node_id, "run": run.run_id}


@pytest.fixture
def session(backend: Backend) -> dict[str, str]:
    return asyncio.run(deep_branches(backend))


@pytest.mark.parametrize("depth", ["0", "1", "2"])
def test_tree_depth_keeps_the_active_node_visible(
    backend: Backend, session: dict[str, str], capsys: pytest.CaptureFixture[str], depth: str
) -> None:
    full = run(capsys, backend, "tree", session["sid"])
    folded = run(capsys, backend, "tree", session["sid"], "--depth", depth)
    assert "folded from" in folded
    path = [line for line in full.splitlines() if line[:1] in "*>"]
    assert [line for line in folded.splitlines() if line[:1] in "*>"] == path
    assert any(line.startswith(">") and "the active leaf" in line for line in folded.splitlines())
    assert ("side0" in folded) == (depth != "0")  # a branch at level 1, folded at depth 0
    assert "other2" not in folded and "side2" not in folded


def test_timeline_names_nodes_by_seq_and_labels_its_columns(
    backend: Backend, session: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    lines = run(capsys, backend, "timeline", session["sid"], "--width", "300").splitlines()
    assert lines[0].split() == ["seq", "run_seq", "time", "level", "event"]
    created = [line for line in lines if " node_created " in line]
    assert [re.search(r"node=(\S+)", line).group(1) for line in created] == [  # type: ignore[union-attr]
        f"#{n}" for n in range(1, len(created) + 1)
    ]
    assert "node=node_" not in "\n".join(lines)
    in_run = next(line for line in created if f"run={session['run']}" in line)
    assert in_run.split()[1] == "2"  # its run_seq, under that column's name


def test_show_labels_run_status_and_end_reason(
    backend: Backend, session: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(capsys, backend, "show", session["sid"])
    line = next(line for line in out.splitlines() if session["run"] in line)
    assert "status=failed" in line and "end_reason=max_turns" in line and "turns=7" in line


NODE_ID = re.compile(r"node_[0-9a-z]{20,}")


async def tools_and_fork(backend: Backend) -> dict[str, str]:
    """A tool call and its result, a fork agent off the main chain, a run of unknown turns."""
    async with backend.store() as store:
        sid = (await store.create_session(cwd=".")).session_id
        q = await store.append_node(sid, "user", "message", text("read it"))
        call = [{"type": "tool_call", "tool_call_id": "call_abc", "name": "read", "arguments": {}}]
        await store.append_node(sid, "assistant", "message", call)
        result = [{"type": "tool_result", "tool_call_id": "call_abc", "content": text("done")}]
        await store.append_node(sid, "tool", "message", result)
        fork = await store.create_agent(sid, "fork", fork_from_node_id=q.node_id)
        await store.append_node(
            sid, "user", "message", text("forked"), agent_id=fork.agent_id, parent_id=q.node_id
        )
        await store.switch_node(sid, q.node_id)
        run = await store.start_run(sid, (await store.get_session(sid)).root_agent_id)
        await store.finish_run(run.run_id, "completed", "completed")
        return {"sid": sid, "run": run.run_id, "asked": q.node_id}


@pytest.fixture
def tools(backend: Backend) -> dict[str, str]:
    return asyncio.run(tools_and_fork(backend))


def test_path_and_tree_show_the_tool_call_id(
    backend: Backend, tools: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = run(capsys, backend, "path", tools["sid"], "#3")
    assert "→ [call_abc] read({})" in path and "← [call_abc] done" in path
    tree = run(capsys, backend, "tree", tools["sid"])
    assert "[call_abc] read" in tree and "[call_abc] done" in tree


def test_nodes_are_named_by_seq_where_ids_were_shown(
    backend: Backend, tools: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    sid = tools["sid"]
    timeline = run(capsys, backend, "timeline", sid, "--width", "300")
    switched = next(line for line in timeline.splitlines() if " node_switched " in line)
    assert '"from":"#3","to":"#1"' in switched.replace(" ", "")
    assert NODE_ID.search(timeline) is None
    show = run(capsys, backend, "show", sid)
    assert "fork_from=#1" in show
    assert NODE_ID.findall(show) == [tools["asked"]]  # the active node: "#1 node_..."
    forked = run(capsys, backend, "tree", sid, "--agent", "fork1")
    assert "(under #1)" in forked and NODE_ID.search(forked) is None
    under = run(capsys, backend, "tree", sid, "--agent", "fork1", "--json")
    assert '"parent_seq": 1' in under.replace(":1", ": 1")


def test_show_prints_an_unknown_turn_count_as_unknown(
    backend: Backend, tools: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(capsys, backend, "show", tools["sid"])
    line = next(line for line in out.splitlines() if tools["run"] in line)
    assert "turns=-" in line and "turns=0" not in line


def test_timeline_limit_shows_the_first_events_that_pass_the_filters(
    backend: Backend, session: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    sid = session["sid"]
    every = json.loads(run(capsys, backend, "timeline", sid, "--json"))["events"]
    created = [e["seq"] for e in every if e["event_type"] == "node_created"]
    first = json.loads(run(capsys, backend, "timeline", sid, "--limit", "3", "--json"))
    assert [e["seq"] for e in first["events"]] == [e["seq"] for e in every[:3]]
    typed = json.loads(
        run(capsys, backend, "timeline", sid, "--type", "node_created", "--limit", "4", "--json")
    )
    assert [e["seq"] for e in typed["events"]] == created[:4]
    lines = run(capsys, backend, "timeline", sid, "--limit", "2").splitlines()
    assert len(lines) == 1 + 2 + 1 and lines[-1] == f"more may follow: --after {every[1]['seq']}"
    assert len(run(capsys, backend, "timeline", sid, "--limit", "1000").splitlines()) == 1 + len(
        every
    )
