"""The demo session of ``soong-store demo``: one realistic session, written through the public API.

It shows every feature a reader of the README meets (turns, tool calls, a failed tool, an
attachment, a spilled JSON result, a branch, a compaction, sub-agents, a fork, a task DAG), and
the CLI and transfer tests use it as their fixture.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soong_store.model.content import (
    ArtifactRefBlock,
    JsonBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from soong_store.model.records import NodeRecord
from soong_store.store import SessionStore

_CI_LOG = b"FAILED tests/test_dates.py::test_parse_iso - parse('2024-02-30') returned 2024-03-01\n"
_ASK = "tests/test_dates.py::test_parse_iso fails since yesterday. Can you find out why?"
_TEST_SRC = "def test_parse_iso():\n    assert parse('2024-02-30') is None\n"
_FOUND = "Found it: the month table gives every month 31 days, so 2024-02-30 becomes March 1."
_SUMMARY = "Summary: days_in_month() reads a legacy table with 31-day months; pytest now runs."
_WORKER = (
    ("List the month-length edge cases a date parser must handle.", "Leap Feb 29; 30-day months."),
    ("Same question for century years.", "1900 and 2100 are not leap years; 2000 is."),
)


def _text(text: str) -> TextBlock:
    return TextBlock(text=text)


def _call(call_id: str, name: str, **arguments: Any) -> ToolCallBlock:
    return ToolCallBlock(tool_call_id=call_id, name=name, arguments=arguments)


def _result(call_id: str, item: Any, is_error: bool = False) -> ToolResultBlock:
    return ToolResultBlock(tool_call_id=call_id, content=[item], is_error=is_error)


async def write_demo(store: SessionStore, project: Path) -> str:
    """Write one realistic session through the public API only; return its id.

    A main agent with several turns and tool calls, a failed tool, an attachment, a large JSON
    tool result (spilled to an artifact by the store), a branch opened by a switch, a
    compaction, a ``sub`` worker dispatched on two branches, a ``fork`` reviewer, a task DAG.
    """
    project.mkdir(parents=True, exist_ok=True)
    meta = {"title": "Fix the failing date parser test"}
    session = await store.create_session(cwd=project, metadata=meta)
    sid, main = session.session_id, session.root_agent_id
    run = ""

    async def say(role: str, tokens: int, *blocks: Any, **extra: Any) -> NodeRecord:
        kind = extra.pop("node_type", "message")
        extra.setdefault("run_id", run)
        return await store.append_node(sid, role, kind, list(blocks), token_count=tokens, **extra)

    async def finish(run_id: str, turns: int, tokens_in: int, tokens_out: int) -> None:
        usage = {"input_tokens": tokens_in, "output_tokens": tokens_out}
        await store.finish_run(run_id, "completed", "completed", usage=usage, turn_count=turns)

    run = (await store.start_run(sid, main)).run_id
    await say("user", 22, _text(_ASK))
    await say("assistant", 31, _text("Reading the test."), _call("c1", "read_file", path="t.py"))
    await say("tool", 25, _result("c1", _text(_TEST_SRC)))
    await say("assistant", 18, _call("c2", "run_tests", args=["-k", "parse_iso"]))
    async with store.transaction(sid) as tx:
        error = _result("c2", _text("pytest: command not found"), is_error=True)
        failed = tx.add_node("tool", "message", [error], run_id=run, token_count=9)
        why = {"tool": "run_tests", "exit_code": 127}
        ids = {"run_id": run, "node_id": failed, "tool_call_id": "c2"}
        tx.add_event("tool_failed", level="error", payload=why, **ids)
    stuck = await say("assistant", 16, _text("pytest is missing here. Can you paste the CI log?"))
    log = await store.put_artifact(
        sid, _CI_LOG, filename="ci-log.txt", mime_type="text/plain", summary="CI log", run_id=run
    )
    ref = ArtifactRefBlock(artifact_id=log.artifact_id, summary="CI log", mime_type="text/plain")
    await say("user", 70, _text("Here is the CI log."), ref)
    await say("assistant", 12, _call("c3", "query_calendar", table="month_lengths"))
    rows = [{"year": y, "month": m, "days": 31} for y in range(1970, 2030) for m in range(1, 13)]
    await say("tool", 120, _result("c3", JsonBlock(data=rows)))
    usage = {"input_tokens": 3120, "output_tokens": 96}
    await store.append_event(sid, "model_response", level="debug", run_id=run, payload=usage)
    await say("assistant", 40, _text(_FOUND))
    await finish(run, 5, 5210, 812)

    run = (await store.start_run(sid, main)).run_id
    await store.switch_node(sid, stuck.node_id)
    await say("user", 15, _text("Don't wait for the log: install pytest and run it again."))
    await say("assistant", 20, _call("c4", "shell", command="pip install pytest && pytest"))
    await say("tool", 24, _result("c4", _text("1 failed: parse('2024-02-30') is 2024-03-01")))
    limit = {"tokens": 118_000, "limit": 128_000}
    await store.append_event(sid, "context_near_limit", level="warning", run_id=run, payload=limit)
    compacted = {"purpose": "compact", "compacted_nodes": 7}
    await say("system", 38, _text(_SUMMARY), node_type="compaction", metadata=compacted)
    await say("assistant", 25, _text("Plan: a worker lists edge cases, I fix, a reviewer checks."))
    worker = await store.create_agent(
        sid, "sub", created_by_run_id=run, metadata={"purpose": "worker"}
    )
    first: NodeRecord | None = None
    for question, answer in _WORKER:
        wrun = (await store.start_run(sid, worker.agent_id)).run_id
        branch = None if first is None else first.node_id
        asked = await say("user", 14, _text(question), run_id=wrun, parent_id=branch)
        first = first or asked
        await say("assistant", 24, _text(answer), run_id=wrun)
        await finish(wrun, 1, 300, 40)
    await store.update_agent(worker.agent_id, status="completed", result={"edge_cases": 6})
    found = _text("worker: 6 edge cases (leap years, 30-day months, century years)")
    await say("user", 18, found, node_type="child_result", metadata={"agent": worker.agent_id})
    await say("assistant", 30, _call("c5", "edit_file", path="src/dates.py", patch="monthrange"))
    patched = await say("tool", 8, _result("c5", _text("src/dates.py: 1 hunk applied")))
    reviewer = await store.create_agent(
        sid, "fork", fork_from_node_id=patched.node_id, metadata={"purpose": "review"}
    )
    frun = (await store.start_run(sid, reviewer.agent_id)).run_id
    await say("user", 10, _text("Review the patch for off-by-one errors."), run_id=frun)
    await say("assistant", 22, _text("Correct. Add a test for 2100-02-29."), run_id=frun)
    await finish(frun, 1, 900, 60)
    await store.update_agent(reviewer.agent_id, status="completed", result={"approved": True})
    await say("user", 12, _text("Reviewer says: add a test for 2100-02-29."))
    tasks = await store.task_dag(sid, "fix date parser")
    await tasks.add("reproduce", "Reproduce the test_parse_iso failure")
    await tasks.add("edge-cases", "Collect month-length edge cases")
    await tasks.add("fix", "Fix days_in_month()", depends_on=["reproduce"])
    await tasks.add("tests", "Add regression tests", depends_on=["fix", "edge-cases"])
    for done in ("reproduce", "edge-cases", "fix"):
        await tasks.set_status(done, "completed")
    await say("system", 40, _text(tasks.summary()), node_type="task_board")
    await say("assistant", 14, _text("Fixed. Next ready task: the regression tests."))
    await finish(run, 6, 7400, 1020)
    return sid
