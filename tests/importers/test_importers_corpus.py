"""Every file of the corpus imports: its counts, its active leaf, check, and an export round trip.

The counts are read back from the store (an export of the session), not from the import's own
summary, and compared with what the corpus README says of each file (where the README counts
differently, the entry says why).
"""

from __future__ import annotations

import io
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from soong_store import SessionStore
from soong_store.check.run import check_store
from soong_store.importers import import_report
from soong_store.transfer import export_session, import_session

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
SUBAGENT = "claude-code/agent-sessions__subagent/0a1b2c3d-4e5f-4061-8071-2a3b4c5d6e7f"


@dataclass(frozen=True)
class Case:
    """What one corpus file holds once imported (one session unless ``sessions`` says more)."""

    path: str
    format: str
    messages: int
    leaf: Any
    roots: int = 1
    branch_points: int = 0
    compactions: int = 0
    sub_agents: int = 0
    forks: int = 0
    tool_errors: int = 0
    skipped: tuple[int, ...] = ()
    recovered: tuple[int, ...] = ()
    sessions: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


CASES = [
    # README: "6 branch points and 4 roots", "2 tool errors" (it counts the is_error of the
    # toolUseResult copy too: there is one failed tool_result block).
    Case(
        "claude-code/agent-sessions__claude-small.jsonl",
        "claude-code",
        messages=20,
        leaf={"line": 87},
        roots=4,
        branch_points=6,
        compactions=2,
        tool_errors=1,
    ),
    Case("claude-code/agent-sessions__claude-schema_drift.jsonl", "claude-code", 5, "u2"),
    Case(
        "claude-code/claude-code-log__dag_compact_after_rewind.jsonl",
        "claude-code",
        messages=11,
        leaf="p1a",
        branch_points=1,
        compactions=1,
        extra={"context": ["cb", "cs", "p1u", "p1a"]},
    ),
    Case(
        "claude-code/claude-code-log__edge_cases.jsonl",
        "claude-code",
        messages=14,
        leaf={"line": 18},
        tool_errors=1,
        skipped=(13, 15, 16),
    ),
    Case(
        "claude-code/claude-code-log__representative_messages.jsonl", "claude-code", 11, "msg_011"
    ),
    # Two dangling parents (lines removed): the first line and a sidechain line are roots.
    Case(
        "claude-code/claude-code-log__sidechain_integrated.jsonl",
        "claude-code",
        messages=6,
        leaf="91c82c1c-29b0-4149-a261-e5582d944ac6",
        roots=3,
        sub_agents=1,
    ),
    Case("claude-code/claude-code-transcripts__sample_session.jsonl", "claude-code", 7, "msg-007"),
    Case(
        f"{SUBAGENT}.jsonl",
        "claude-code",
        messages=5,
        leaf="pa1",
        roots=2,
        sub_agents=1,
    ),
    Case(f"{SUBAGENT}/subagents/agent-a0ad4f44468bdf20d.jsonl", "claude-code", 3, "cu2"),
    Case(f"{SUBAGENT}/subagents/agent-a0ad4f44468bdf20d.meta.json", "claude-code", 3, "cu2"),
    Case("codex/agent-sessions__codex-large.jsonl", "codex", 16, {"line": 20}),
    # README: 6 compacted records, 7 session_meta (2 sub-agent threads, 1 fork; the others
    # continue the main thread). Messages include the replacement histories' items.
    Case(
        "codex/agent-sessions__codex-small.jsonl",
        "codex",
        messages=154,
        leaf={"line": 116},
        roots=3,
        compactions=6,
        sub_agents=2,
        forks=1,
    ),
    Case("codex/agent-sessions__codex_053_rate_limit.jsonl", "codex", 0, None, roots=0),
    Case(
        "codex/claude-code-log__rollout-2026-01-02T03-04-05-11111111.jsonl",
        "codex",
        9,
        {"line": 13},
    ),
    Case(
        "codex/claude-code-log__rollout-66666666-malformed.jsonl",
        "codex",
        messages=1,
        leaf={"line": 2},
        skipped=(3,),
    ),
    Case("codex/claude-code-transcripts__sample_codex_session.jsonl", "codex", 3, {"line": 4}),
    # README: 453 assistant + 373 toolResult + 88 user messages, 19 tool errors.
    Case("pi/pi-mono__large-session.jsonl", "pi", 914, {"line": 1019}, tool_errors=19),
    # The compaction joined to line 1013 keeps nothing (its first kept index is itself).
    Case(
        "pi/pi-mono__compact.jsonl",
        "pi",
        messages=1011,
        leaf={"line": 1013, "index": 1013},
        compactions=2,
        tool_errors=17,
        recovered=(1013,),
        extra={"artifacts": 3, "context": 1},
    ),
    # The compaction is the last entry: the path ends at the entry before it, which it keeps.
    Case(
        "pi/pi-mono__session.jsonl",
        "pi",
        messages=454,
        leaf={"line": 462},
        compactions=1,
        tool_errors=12,
        recovered=(440,),
        extra={"context": 109},
    ),
    Case(
        "pi/agent-sessions__pi-small.jsonl",
        "pi",
        messages=4,
        leaf="4a666296",
        compactions=2,
        extra={
            "context": [
                "2c19d326",
                "f7c7091e",
                "3a59c5dd",
                "30c6a75f",
                "22a2720e",
                "ddd2179a",
                "4a666296",
            ]
        },
    ),
    # README: 2 branch points, counting the header: entries whose parentId is the session id
    # are roots here (2 roots), and tool results naming their call's id hang under that call.
    Case("pi/agent-sessions__openclaw-large.jsonl", "pi", 7, "m6", roots=2, branch_points=1),
    # README: 1 branch point, the header's two children (2 roots here).
    Case("pi/agent-sessions__openclaw-schema_drift.jsonl", "pi", 4, "unknown-1", roots=2),
    Case(
        "librechat/chatgpt-tree.json",
        "chatgpt",
        messages=12,
        leaf="f63b8e17-aa5c-4ca6-a1bf-d4d285e269b8",
        branch_points=2,
    ),
    Case(
        "librechat/librechat-tree.json",
        "librechat",
        messages=9,
        leaf="1f062c99-ff0a-4cf4-a1cf-7150261a24e2",
        branch_points=2,
    ),
    Case(
        "librechat/librechat-opts-nonr-branches.json",
        "librechat",
        messages=5,
        leaf="de9a4e7c-020d-4856-a5a6-ce6794efef99",
        roots=2,
        branch_points=1,
    ),
    Case(
        "librechat/openwebui-export.json",
        "openwebui",
        messages=2,
        leaf="ra2",
        sessions=3,
        extra={"leaves": ["ra2", "ta2", "sa2"]},
    ),
    # Tool errors: observation "error" and commands that exited non-zero.
    Case(
        "openhands/openhands__multi_swe_bench-output.jsonl",
        "openhands",
        messages=47,
        leaf=49,
        tool_errors=5,
        sessions=3,
        extra={"leaves": [49, 70, 103], "messages": [47, 68, 101], "tool_errors": [5, 3, 13]},
    ),
    Case(
        "openhands/openhands__resolver-mock-output.jsonl",
        "openhands",
        messages=8,
        leaf={"index": 7},
        sessions=2,
    ),
    Case("openhands/openhands__trajs-basic_gui_mode.json", "openhands", 10, 15, tool_errors=1),
    Case("openhands/openhands__trajs-basic_interactions.json", "openhands", 6, 15),
    Case("openhands/openhands__trajs-wrong_initial_state.json", "openhands", 8, 9),
]


def stored_counts(rows: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    """The counts of one exported session, computed from its rows."""
    nodes = rows["node"]
    children = Counter(n["parent_id"] for n in nodes if n["parent_id"] is not None)
    agents = Counter(a["agent_type"] for a in rows["agent"])
    return {
        "messages": sum(
            n["node_type"] == "message" and "kept_copy_by" not in n["metadata_json"] for n in nodes
        ),
        "roots": sum(n["parent_id"] is None for n in nodes),
        "branch_points": sum(count > 1 for count in children.values()),
        "compactions": sum(n["node_type"] == "compaction" for n in nodes),
        "sub_agents": agents["sub"],
        "forks": agents["fork"],
        "tool_errors": sum(e["event_type"] == "tool_failed" for e in rows["event"]),
    }


async def export_rows(store: SessionStore, session_id: str) -> tuple[str, dict[str, Any]]:
    out = io.StringIO()
    await export_session(store, session_id, out, with_artifacts=True)
    rows: dict[str, list[dict[str, Any]]] = {}
    for line in out.getvalue().splitlines()[1:]:
        item = orjson.loads(line)
        rows.setdefault(item["kind"], []).append(item["row"])
    for kind in ("agent", "node", "event", "artifact"):
        rows.setdefault(kind, [])
    return out.getvalue(), rows


def matches(node: Any, leaf: Any) -> bool:
    origin = node.metadata["imported_from"]
    if isinstance(leaf, dict):
        return all(origin.get(k) == v for k, v in leaf.items())
    return bool(origin.get("id") == leaf)


def data_files() -> list[str]:
    return sorted(
        str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.is_file() and p.suffix != ".md"
    )


def test_every_corpus_file_has_a_case() -> None:
    assert len(data_files()) == 31
    assert sorted(c.path for c in CASES) == data_files()


@pytest.mark.parametrize("case", CASES, ids=[c.path.rsplit("/", 1)[-1] for c in CASES])
async def test_corpus_file_imports(case: Case, store: SessionStore, tmp_path: Path) -> None:
    report = await import_report(store, CORPUS / case.path, cwd=tmp_path)
    assert report.format == case.format
    assert [i.line for i in report.skipped_lines] == list(case.skipped)
    assert [i.line for i in report.recovered_lines] == list(case.recovered)
    assert len(report.sessions) == case.sessions
    leaves = case.extra.get("leaves", [case.leaf])
    messages = case.extra.get("messages", [case.messages] * len(leaves))
    errors = case.extra.get("tool_errors", [case.tool_errors] * len(leaves))
    for index, session in enumerate(report.sessions[: len(leaves)]):
        text, rows = await export_rows(store, session.session_id)
        want = {
            "messages": messages[index],
            "roots": case.roots,
            "branch_points": case.branch_points,
            "compactions": case.compactions,
            "sub_agents": case.sub_agents,
            "forks": case.forks,
            "tool_errors": errors[index],
        }
        assert stored_counts(rows) == want
        summary = report.summaries[index].counts
        assert {k: summary[k] for k in want} == want
        path = await store.active_path(session.session_id)
        if leaves[index] is None:
            assert path == []
        else:
            assert path and matches(path[-1], leaves[index])
        if "artifacts" in case.extra:
            assert len(rows["artifact"]) == case.extra["artifacts"]
        if "context" in case.extra:
            context = await store.context(session.session_id)
            if isinstance(case.extra["context"], int):
                assert len(context.nodes) == case.extra["context"]
                assert context.nodes[0].node_type == "compaction"
            else:
                ids = [n.metadata["imported_from"]["id"] for n in context.nodes]
                assert ids == case.extra["context"]
        copy = await import_session(store, text.splitlines(), new_id=True)
        _, copied = await export_rows(store, copy.session_id)
        assert stored_counts(copied) == want
    assert (await check_store(store)).ok
