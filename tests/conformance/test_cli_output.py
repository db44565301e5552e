"""What the CLI's text says: folding keeps the active node, columns and fields are labelled."""

from __future__ import annotations

import asyncio
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
