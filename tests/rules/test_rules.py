"""The one rule set of stored rows, as pure functions: no database."""

from __future__ import annotations

from typing import Any

import pytest

from soong_store.model import codec
from soong_store.rules.row import RowError, check_row, check_timestamp
from soong_store.rules.session import Found, SessionRows, row_problems, session_problems

SID = "sess_20260101_000000_0000"
ROOT = "agent_root"
SUB = "agent_sub"
T = "2026-01-01T00:00:00.000000+00:00"


def session(**changes: Any) -> dict[str, Any]:
    row = {
        "session_id": SID,
        "cwd": "/srv/project",
        "root_agent_id": ROOT,
        "active_node_id": None,
        "parent_session_id": None,
        "status": "active",
        "metadata_json": None,
        "created_at": T,
        "updated_at": T,
        "owner": None,
        "key": None,
    }
    return {**row, **changes}


def agent(agent_id: str, agent_type: str, parent: str | None = None) -> dict[str, Any]:
    return {
        "agent_id": agent_id,
        "session_id": SID,
        "parent_agent_id": parent,
        "agent_type": agent_type,
        "created_by_run_id": None,
        "fork_from_node_id": None,
        "status": "idle",
        "result_json": None,
        "metadata_json": None,
        "created_at": T,
        "updated_at": T,
    }


def node(seq: int, parent: int | None, role: str = "user", **changes: Any) -> dict[str, Any]:
    row = {
        "node_id": f"node_{seq}",
        "node_seq": seq,
        "parent_id": None if parent is None else f"node_{parent}",
        "agent_id": ROOT,
        "run_id": None,
        "role": role,
        "node_type": "message",
        "content_json": '[{"type":"text","text":"hi"}]',
        "metadata_json": None,
        "token_count": None,
        "created_at": T,
    }
    return {**row, **changes}


def event(seq: int, node_id: str | None) -> dict[str, Any]:
    return {
        "event_id": f"evt_{seq}",
        "seq": seq,
        "run_seq": None,
        "agent_id": None,
        "run_id": None,
        "level": "info",
        "event_type": "node_created",
        "node_id": node_id,
        "tool_call_id": None,
        "payload_json": None,
        "created_at": T,
    }


def rows_of(nodes: list[dict[str, Any]], agents: list[dict[str, Any]] | None = None) -> SessionRows:
    rows = SessionRows(SID)
    mine = [n["node_id"] for n in nodes if n["agent_id"] == ROOT]
    rows.rows["session"] = [session(active_node_id=mine[-1] if mine else None)]
    rows.rows["agent"] = agents or [agent(ROOT, "main")]
    rows.rows["node"] = nodes
    rows.rows["event"] = [event(i, n["node_id"]) for i, n in enumerate(nodes, 1)]
    return rows


def kinds(rows: SessionRows) -> set[str]:
    return {p.kind for p in session_problems(rows)}


def test_a_valid_session_has_no_problem() -> None:
    rows = rows_of([node(1, None), node(2, 1, "assistant"), node(3, 2), node(4, 2)])
    assert kinds(rows) == set()
    for kind, found in rows.rows.items():
        for row in found:
            assert row_problems(Found(SID), kind, row)


def test_only_a_user_message_or_imported_history_opens_a_branch() -> None:
    base = [node(1, None), node(2, 1, "assistant")]
    assert kinds(rows_of([*base, node(3, 1, "assistant")])) == {"branch_rule"}
    assert kinds(rows_of([*base, node(3, 1, "user")])) == set()
    imported = node(3, 1, "assistant", metadata_json='{"imported_from":{"format":"x"}}')
    assert kinds(rows_of([*base, imported])) == set()
    summary = node(3, 1, "user", node_type="compaction")
    assert kinds(rows_of([*base, summary])) == {"branch_rule"}


def test_a_second_root_of_the_root_agent_is_a_branch_but_a_sub_agents_root_is_not() -> None:
    base = [node(1, None), node(2, 1, "assistant")]
    assert kinds(rows_of([*base, node(3, None, "assistant")])) == {"branch_rule"}
    assert kinds(rows_of([*base, node(3, None, "user")])) == set()
    agents = [agent(ROOT, "main"), agent(SUB, "sub", ROOT)]
    worker = node(3, None, "assistant", agent_id=SUB)
    assert kinds(rows_of([*base, worker], agents)) == set()


def test_only_a_child_of_the_same_agent_makes_a_branch() -> None:
    fork = agent("agent_fork", "fork", ROOT)
    fork["fork_from_node_id"] = "node_2"
    agents = [agent(ROOT, "main"), fork]
    base = [node(1, None), node(2, 1, "assistant")]
    forked = node(3, 2, agent_id="agent_fork")
    assert (
        kinds(rows_of([*base, forked, node(4, 2, "assistant", node_type="compaction")], agents))
        == set()
    )
    again = node(4, 2, "assistant", agent_id="agent_fork")
    assert kinds(rows_of([*base, forked, again], agents)) == {"branch_rule"}


def test_the_active_node_is_the_root_agents() -> None:
    agents = [agent(ROOT, "main"), agent(SUB, "sub", ROOT)]
    rows = rows_of([node(1, None), node(2, None, agent_id=SUB)], agents)
    assert kinds(rows) == set()
    rows.rows["session"] = [session(active_node_id="node_2")]
    found = session_problems(rows)
    assert [(p.kind, p.ids) for p in found] == [("active_node_agent", (SID, "node_2"))]


def test_parents_come_first_so_a_cycle_is_found_twice_over() -> None:
    nodes = [node(1, None), node(2, 3), node(3, 2)]
    assert kinds(rows_of(nodes)) == {"node_order", "parent_cycle"}
    assert kinds(rows_of([node(1, None), node(2, 3), node(3, 1)])) == {"node_order"}


def test_sequences_are_dense_and_run_seq_follows_seq() -> None:
    rows = rows_of([node(1, None), node(2, 1, "assistant")])
    rows.rows["run"] = [
        {
            "run_id": "run_1",
            "session_id": SID,
            "agent_id": ROOT,
            "status": "running",
            "start_node_id": None,
            "end_node_id": None,
            "end_reason": None,
            "turn_count": None,
            "usage_json": None,
            "error_json": None,
            "metadata_json": None,
            "created_at": T,
            "updated_at": T,
        }
    ]
    first, second = rows.rows["event"]
    first.update(run_id="run_1", run_seq=2)
    second.update(run_id="run_1", run_seq=1)
    assert kinds(rows) == {"run_seq"}
    second["seq"] = 5
    assert kinds(rows) == {"run_seq", "seq"}


def test_the_root_agent_and_its_children() -> None:
    nodes = [node(1, None)]
    assert kinds(rows_of(nodes, [agent(ROOT, "sub")])) == {"agent_rule"}
    child = agent(SUB, "main", ROOT)
    assert kinds(rows_of(nodes, [agent(ROOT, "main"), child])) == {"agent_rule"}
    orphan = agent(SUB, "sub", None)
    assert kinds(rows_of(nodes, [agent(ROOT, "main"), orphan])) == {"agent_rule"}
    fork = agent(SUB, "fork", ROOT)
    assert kinds(rows_of(nodes, [agent(ROOT, "main"), fork])) == {"agent_rule"}


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("node_seq", 0),
        ("token_count", -1),
        ("token_count", 2**63),
        ("token_count", True),
        ("role", "wizard"),
        ("node_id", "node with spaces"),
        ("created_at", "2026-01-01T00:00:00"),
        ("created_at", "2026-01-01T00:00:00.000000+01:00"),
        ("created_at", "2026-02-30T00:00:00.000000+00:00"),
        ("metadata_json", '{"a":NaN}'),
        ("metadata_json", '{"a": 1}'),
        ("metadata_json", '{"a":1,"a":2}'),
        ("metadata_json", "18446744073709551616"),
        ("content_json", '[{"type":"json","data":1e400}]'),
        ("content_json", '[{"type":"tool_result","tool_call_id":"c","content":[]}]'),
        ("content_json", '{"type":"text","text":"hi"}'),
    ],
)
def test_a_node_row_the_store_would_never_write(column: str, value: Any) -> None:
    with pytest.raises(RowError) as caught:
        check_row(SID, "node", node(1, None, **{column: value}))
    assert caught.value.column == column


def test_session_rows_on_their_own() -> None:
    for changes in ({"cwd": "relative"}, {"cwd": "/a\x00b"}, {"session_id": "sess_other"}):
        with pytest.raises(RowError):
            check_row(SID, "session", session(**changes))
    with pytest.raises(RowError, match="exactly"):
        check_row(SID, "session", {**session(), "extra": 1})


def test_stored_json_is_exactly_the_stores_encoding() -> None:
    for text in ('{"a":1}', "[1.5,-0.0,9223372036854775807]", '"é"', "null"):
        assert codec.dumps_text(codec.loads_stored(text)) == text
    for text in (
        "NaN",
        "[Infinity]",
        "1e400",
        "[18446744073709551616]",
        '{"a":1, "b":2}',
        '"\\u00e9"',
    ):
        with pytest.raises(ValueError):
            codec.loads_stored(text)


def test_timestamps_are_utc_with_microseconds() -> None:
    check_timestamp(T)
    for bad in ("2026-01-01", "2026-01-01T00:00:00+00:00", "2026-01-01 00:00:00.000000+00:00"):
        with pytest.raises(ValueError):
            check_timestamp(bad)
