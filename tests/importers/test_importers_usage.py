"""The source's token usage becomes the nodes' ``token_count`` and per-turn runs.

Expected values are computed here from the source lines themselves (a reading independent of
the importers'), on copies of the shared corpus's real files.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore
from soong_store.check.run import check_store
from soong_store.importers import import_path
from soong_store.model import codec
from tests.importers.conftest import source_names

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
if not CORPUS.is_dir():  # the corpus sits beside the checkout
    CORPUS = Path(os.environ.get("SOONG_CORPUS", "../shared/corpus")).resolve()
pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not here")

CLAUDE = CORPUS / "acceptance" / "claude-code" / "lanegrid__agtrace__claude_session.jsonl"
CLAUDE_LONG = CORPUS / "acceptance" / "claude-code" / "marot__spotter__subagent.jsonl"
CODEX = CORPUS / "acceptance" / "codex" / "lanegrid__agtrace__codex_session.jsonl"
CODEX_SUB = CORPUS / "acceptance" / "codex" / "kenn-io__agentsview__rollout_subagent.jsonl"
PI = CORPUS / "acceptance" / "pi" / "kvsankar__agent-history__session-01.jsonl"
PI_LONG = CORPUS / "pi" / "pi-mono__session.jsonl"
PI_FIXTURE = CORPUS / "acceptance" / "pi" / "kenn-io__agentsview__session.jsonl"


def _records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Every JSON object of every line (a line of two joined objects gives both)."""
    out = []
    decoder = json.JSONDecoder()
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        at = 0
        while at < len(line.rstrip()):
            try:
                record, at = decoder.raw_decode(line, at)
            except ValueError:
                break
            if isinstance(record, dict):
                out.append((lineno, record))
    return out


def _claude_expected(path: Path) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """The calls' usage (one per message id, its last line's) and each line's output tokens."""
    calls: dict[str, dict[str, Any]] = {}
    tokens: dict[int, int] = {}
    counted: dict[str, int] = {}
    for lineno, r in _records(path):
        message = r.get("message")
        if r.get("type") != "assistant" or not isinstance(message, dict):
            continue
        usage = message.get("usage")
        if not isinstance(usage, dict) or message.get("model") == "<synthetic>":
            continue
        names = {
            "input_tokens": "input_tokens",
            "output_tokens": "output_tokens",
            "cache_read_input_tokens": "cache_read_tokens",
            "cache_creation_input_tokens": "cache_write_tokens",
        }
        found = {"model": message["model"]}
        found |= {ours: usage[theirs] for theirs, ours in names.items() if theirs in usage}
        calls[str(message.get("id"))] = found
        tokens[lineno] = usage["output_tokens"] - counted.get(str(message.get("id")), 0)
        counted[str(message.get("id"))] = usage["output_tokens"]
    return list(calls.values()), tokens


def _codex_expected(path: Path) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """One call per ``token_count`` that does not repeat the total before it; no node counts."""
    calls: list[dict[str, Any]] = []
    model = None
    total = None
    for _, r in _records(path):
        payload = r.get("payload") or {}
        if r.get("type") == "turn_context":
            model = payload.get("model", model)
        if r.get("type") != "event_msg" or payload.get("type") != "token_count":
            continue
        info = payload.get("info")
        if not info or info.get("total_token_usage") == total:
            continue
        total = info.get("total_token_usage")
        last = info["last_token_usage"]
        calls.append(
            {
                "model": model,
                "input_tokens": last["input_tokens"] - last["cached_input_tokens"],
                "output_tokens": last["output_tokens"],
                "cache_read_tokens": last["cached_input_tokens"],
            }
        )
    return calls, {}


def _pi_expected(path: Path) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """One call per assistant message with usage; its output tokens on its node."""
    calls: list[dict[str, Any]] = []
    tokens: dict[int, int] = {}
    names = {
        "input": "input_tokens",
        "output": "output_tokens",
        "cacheRead": "cache_read_tokens",
        "cacheWrite": "cache_write_tokens",
    }
    for lineno, r in _records(path):
        message = r.get("message") or {}
        if message.get("role") != "assistant" or "usage" not in message:
            continue
        usage = message["usage"]
        found = {"model": message["model"]}
        found |= {ours: usage[theirs] for theirs, ours in names.items() if theirs in usage}
        found["cost_usd"] = usage["cost"]["total"]
        calls.append(found)
        tokens[lineno] = usage["output"]
    return calls, tokens


def _openhands_expected(path: Path) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """One call per model response an action names (by its id); no node counts."""
    calls: dict[str, dict[str, Any]] = {}
    for event in json.loads(path.read_text()):
        response = (event.get("tool_call_metadata") or {}).get("model_response") or {}
        usage = response.get("usage")
        if not usage or "action" not in event:
            continue
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        found = {"model": response["model"]}
        found["input_tokens"] = usage["prompt_tokens"] - (cached or 0)
        found["output_tokens"] = usage["completion_tokens"]
        if cached is not None:
            found["cache_read_tokens"] = cached
        calls[response["id"]] = found
    return list(calls.values()), {}


async def _runs(store: SessionStore, sid: str) -> dict[str, Any]:
    """The session's runs by the identity of the node that opened their turn, comparable."""
    nodes = await store.list_nodes(sid)
    names = source_names(nodes)
    members: dict[str, list[str]] = {}
    for node in nodes:
        if node.run_id is not None:
            members.setdefault(node.run_id, []).append(names[node.node_id])
    return {
        names[run.metadata["imported_from"]["turn"]]: (
            run.agent_id,
            run.status.value,
            run.usage,
            run.created_at,
            run.updated_at,
            sorted(members[run.run_id]),
        )
        for run in await store.list_runs(sid)
    }


async def _import(home: Path, path: Path) -> tuple[str, list[Any]]:
    async with SessionStore(home=home) as store:
        await import_path(store, path)
        (session,) = await store.list_sessions()
        runs = await store.list_runs(session.session_id)
        nodes = await store.list_nodes(session.session_id)
        assert (await check_store(store)).ok
        return session.session_id, [runs, nodes, await store.usage(by="model")]


def _ledger(calls: list[dict[str, Any]]) -> dict[str | None, tuple[int, ...]]:
    """The calls' usage summed by model, as ``store.usage(by="model")`` should have it."""
    sums: dict[str | None, list[int]] = {}
    for call in calls:
        into = sums.setdefault(call.get("model"), [0, 0, 0, 0])
        for i, name in enumerate(
            ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
        ):
            into[i] += call.get(name, 0)
    return {model: tuple(found) for model, found in sums.items()}


EXPECTED = {
    "claude-code": _claude_expected,
    "codex": _codex_expected,
    "pi": _pi_expected,
    "openhands": _openhands_expected,
}


@pytest.mark.parametrize(
    ("fmt", "source"),
    [
        ("claude-code", CLAUDE),
        ("claude-code", CLAUDE_LONG),
        ("codex", CODEX),
        ("codex", CODEX_SUB),
        ("pi", PI),
        ("pi", PI_LONG),
        ("pi", PI_FIXTURE),
        ("openhands", CORPUS / "openhands" / "openhands__trajs-wrong_initial_state.json"),
        (
            "openhands",
            CORPUS / "acceptance" / "openhands" / "All-Hands-AI__OpenHands__trajs-basic.json",
        ),
    ],
    ids=lambda p: p.stem if isinstance(p, Path) else p,
)
async def test_usage_becomes_token_counts_and_runs(tmp_path: Path, fmt: str, source: Path) -> None:
    copy = tmp_path / "home" / source.name
    copy.parent.mkdir()
    shutil.copy(source, copy)
    calls, tokens = EXPECTED[fmt](source)
    assert calls
    _, (runs, nodes, ledger) = await _import(tmp_path / "store", copy)
    copies = [n for n in nodes if "kept_copy_by" in n.metadata["imported_from"]]
    assert all(n.run_id is None for n in copies)  # a compaction's copies of what it keeps
    nodes = [n for n in nodes if n not in copies]
    runs.sort(key=lambda run: (run.created_at, run.run_id))
    assert [u for run in runs for u in run.usage] == calls
    summed = {
        row.key: (
            row.input_tokens,
            row.output_tokens,
            row.cache_read_tokens,
            row.cache_write_tokens,
        )
        for row in ledger
    }
    assert summed == _ledger(calls)
    by_line: dict[int, list[Any]] = {}
    for n in nodes:
        by_line.setdefault(n.metadata["imported_from"].get("line", 0), []).append(n)
    counted = {  # a line may hold two joined records: one count at most per line
        line: [n.token_count for n in by_line[line] if n.token_count is not None] for line in tokens
    }
    assert counted == {line: [count] for line, count in tokens.items()}
    others = [n for line, found in by_line.items() if line not in tokens for n in found]
    assert all(n.token_count is None for n in others)
    assert sum(n.token_count or 0 for n in nodes) == sum(tokens.values())
    for run in runs:
        mine = [n for n in nodes if n.run_id == run.run_id]
        assert {n.agent_id for n in mine} == {run.agent_id}
        assert run.status.value == "completed"
        assert run.created_at == min(n.created_at for n in mine)
        assert run.updated_at == max(n.created_at for n in mine)
        (opener,) = [n for n in mine if n.node_id == run.metadata["imported_from"]["turn"]]
        assert opener.role.value == "user"


async def test_a_source_without_usage_gets_no_runs(tmp_path: Path) -> None:
    source = CORPUS / "claude-code" / "claude-code-transcripts__sample_session.jsonl"
    copy = tmp_path / source.name
    shutil.copy(source, copy)
    _, (runs, nodes, ledger) = await _import(tmp_path / "store", copy)
    assert (
        runs == []
        and ledger == []
        and all(n.run_id is None and n.token_count is None for n in nodes)
    )


async def test_damaged_usage_fields_are_dropped_and_the_import_goes_on(tmp_path: Path) -> None:
    lines = CLAUDE.read_bytes().splitlines(keepends=True)
    damaged = []
    bad_values: list[Any] = [-5, "12", 1.5, 10**15]
    for i, line in enumerate(lines):
        record = json.loads(line)
        message = record.get("message")
        if isinstance(message, dict) and "usage" in message and bad_values:
            message["usage"]["output_tokens"] = bad_values.pop()
            message["usage"]["cache_read_input_tokens"] = None
            lines[i] = json.dumps(record).encode() + b"\n"
            damaged.append(i + 1)
    copy = tmp_path / CLAUDE.name
    copy.write_bytes(b"".join(lines))
    async with SessionStore(home=tmp_path / "store") as store:
        summary = await import_path(store, copy)
        (session,) = await store.list_sessions()
        runs = await store.list_runs(session.session_id)
        nodes = await store.list_nodes(session.session_id)
        assert (await check_store(store)).ok
    recovered = [i for found in summary.issues.values() for i in found]
    assert sorted(i.line for i in recovered) == damaged
    assert all(i.action == "recovered" and "output_tokens" in i.reason for i in recovered)
    calls = [u for run in runs for u in run.usage]
    assert len(calls) == len(_claude_expected(CLAUDE)[0])
    by_line = {n.metadata["imported_from"]["line"]: n for n in nodes}
    for line in damaged:
        assert by_line[line].token_count is None
    assert all("model" in u and "input_tokens" in u for u in calls)


@pytest.mark.parametrize(
    ("source", "first"),
    [(CLAUDE, b'"sessionId"'), (PI, b'"type":"session"'), (CODEX, b'"type":"message"')],
    ids=lambda v: v.stem if isinstance(v, Path) else "",
)
async def test_every_cut_of_a_transcript_continues_to_the_one_shot_runs(
    tmp_path: Path, source: Path, first: bytes
) -> None:
    """Cut after every line from the first that names the conversation (Codex: from its first
    message item, see ``CUT_FILES`` in test_import_path), imported, then imported whole."""
    data = source.read_bytes()
    lines = data.splitlines(keepends=True)
    target = tmp_path / "home" / source.name
    target.parent.mkdir()
    target.write_bytes(data)
    async with SessionStore(home=tmp_path / "one") as store:
        await import_path(store, target)
        (session,) = await store.list_sessions()
        expected = await _runs(store, session.session_id)
        ledger = await store.usage(by="model")
    assert expected and ledger
    named = next(i for i, line in enumerate(lines) if first in line)
    for at in range(named + 1, len(lines)):
        target.write_bytes(b"".join(lines[:at]))
        async with SessionStore(home=tmp_path / f"cut{at}") as store:
            await import_path(store, target)
            target.write_bytes(data)
            summary = await import_path(store, target)
            assert {s.status for s in summary.sources} <= {"continued", "up to date"}, at
            (session,) = await store.list_sessions()
            got = await _runs(store, session.session_id)
            agents = {a.agent_id: a.agent_type for a in await store.list_agents(session.session_id)}
            assert {k: (agents[v[0]], *v[1:]) for k, v in got.items()} == {
                k: ("main", *v[1:]) for k, v in expected.items()
            }, at
            assert await store.usage(by="model") == ledger, at
            assert (await check_store(store)).ok, at
        shutil.rmtree(tmp_path / f"cut{at}")


async def test_an_unchanged_source_with_runs_writes_nothing(tmp_path: Path) -> None:
    copy = tmp_path / "home" / CLAUDE_LONG.name
    copy.parent.mkdir()
    shutil.copy(CLAUDE_LONG, copy)
    async with SessionStore(home=tmp_path / "store") as store:
        await import_path(store, copy)
        (session,) = await store.list_sessions()
        before = (
            await store.list_runs(session.session_id),
            await store.timeline(session.session_id),
        )
        os.utime(copy, (1, 1))  # touched: read again, found the same
        summary = await import_path(store, copy)
        assert [s.status for s in summary.sources] == ["up to date"]
        after = (
            await store.list_runs(session.session_id),
            await store.timeline(session.session_id),
        )
        assert after == before


async def _all_runs(store: SessionStore) -> dict[str, Any]:
    """Every session's runs by its source id, their agents by type and source (not ids)."""
    out = {}
    for session in await store.list_sessions():
        sid = session.session_id
        agents = {
            a.agent_id: f"{a.agent_type.value}:{codec.dumps_text(a.metadata)}"
            for a in await store.list_agents(sid)
        }
        runs = await _runs(store, sid)
        source = session.metadata["imported_from"]["source_session_id"]
        out[source] = {k: (agents[v[0]], *v[1:]) for k, v in runs.items()}
    return out


@pytest.mark.parametrize(
    "order",
    [("main", "sub1", "sub2", "old", "old_sub"), ("sub2", "old_sub", "sub1", "old", "main")],
    ids="-".join,
)
async def test_sub_agent_runs_are_the_same_in_any_order_of_arrival(
    tmp_path: Path, order: tuple[str, ...]
) -> None:
    from tests.importers.test_import_path import _project

    _project(tmp_path / "one")
    async with SessionStore(home=tmp_path / "one-store") as store:
        await import_path(store, tmp_path / "one")
        expected = await _all_runs(store)
    subs = [run for runs in expected.values() for run in runs.values() if run[0].startswith("sub")]
    assert subs  # the sub-agents' transcripts record usage: their turns are runs of theirs
    files = _project(tmp_path / "home")
    async with SessionStore(home=tmp_path / "store") as store:
        for name in order:
            await import_path(store, files[name])
        assert await _all_runs(store) == expected
        assert (await check_store(store)).ok
