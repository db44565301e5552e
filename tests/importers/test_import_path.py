"""import_path over agent homes: one session per conversation, incremental, conflicts.

The homes are built from copies of the shared corpus (never the originals). A session is
compared as what it holds, by the source's own identities (the store's ids are new on every
import): its agents, nodes (place, content, time, tokens), events and active node.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soong_store import SessionStore
from soong_store.check.run import check_store
from soong_store.importers import import_path
from soong_store.model import codec
from tests.importers.conftest import source_names

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
if not CORPUS.is_dir():  # the corpus sits beside the checkout
    CORPUS = Path(os.environ.get("SOONG_CORPUS", "../shared/corpus")).resolve()
pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not here")

MAIN_SID = "0a1b2c3d-4e5f-4061-8071-2a3b4c5d6e7f"
OLD_SID = "7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9"


def _project(root: Path) -> dict[str, Path]:
    """A Claude Code project folder of both sub-agent layouts; its files by a short name.

    A new-layout session with two sub-agents, an old-layout session with its sub-agent's
    file beside it.
    """
    sub = CORPUS / "claude-code" / "agent-sessions__subagent"
    acc = CORPUS / "acceptance" / "claude-code"
    folder = root / "project"
    subs = folder / MAIN_SID / "subagents"
    subs.mkdir(parents=True)
    files = {
        "main": folder / f"{MAIN_SID}.jsonl",
        "sub1": subs / "agent-a0ad4f44468bdf20d.jsonl",
        "sub2": subs / "agent-a7be2f0.jsonl",
        "old": folder / f"{OLD_SID}.jsonl",
        "old_sub": folder / "agent-0c4c3cf8.jsonl",
    }
    shutil.copy(sub / f"{MAIN_SID}.jsonl", files["main"])
    shutil.copy(sub / MAIN_SID / "subagents" / "agent-a0ad4f44468bdf20d.jsonl", files["sub1"])
    shutil.copy(sub / MAIN_SID / "subagents" / "agent-a0ad4f44468bdf20d.meta.json", subs)
    shutil.copy(acc / "marot__spotter__agent-a7be2f0.jsonl", files["sub2"])
    shutil.copy(acc / "lanegrid__agtrace__claude_session.jsonl", files["old"])
    shutil.copy(acc / "lanegrid__agtrace__claude_agent.jsonl", files["old_sub"])
    return files


async def _shape(store: SessionStore, sid: str) -> dict[str, Any]:
    """What a session holds, by source identity: comparable across imports."""
    agents = {a.agent_id: a for a in await store.list_agents(sid)}

    def agent(agent_id: str | None) -> str:
        if agent_id is None:
            return ""
        found = agents[agent_id]
        return f"{found.agent_type}:{codec.dumps_text(found.metadata)}"

    nodes = await store.list_nodes(sid)
    names = source_names(nodes)
    shaped = {
        names[n.node_id]: (
            names.get(n.parent_id or ""),
            agent(n.agent_id),
            n.role.value,
            n.node_type.value,
            [b.model_dump(mode="json") for b in n.content if b.type != "artifact_ref"],
            n.token_count,
            n.created_at,
        )
        for n in nodes
    }
    events = Counter(
        (
            e.event_type,
            names.get(e.node_id or ""),
            agent(e.agent_id),
            codec.dumps_text(e.payload) if e.event_type == "imported_record" else "",
            e.created_at,
        )
        for e in await store.timeline(sid)
        if e.event_type != "session_created"
    )
    session = await store.get_session(sid)
    return {
        "agents": sorted(agent(a) for a in agents),
        "nodes": shaped,
        "events": events,
        "active": names.get(session.active_node_id or ""),
    }


async def _all(store: SessionStore) -> dict[str, dict[str, Any]]:
    out = {}
    for s in await store.list_sessions():
        source = s.metadata["imported_from"]["source_session_id"]
        out[source] = await _shape(store, s.session_id)
    return out


async def test_a_home_of_three_tools_imports_whole(tmp_path: Path) -> None:
    _project(tmp_path / "home")
    shutil.copytree(CORPUS / "codex", tmp_path / "home" / "codex")
    shutil.copytree(CORPUS / "pi", tmp_path / "home" / "pi")
    (tmp_path / "home" / "notes.txt").write_text("not a session")
    async with SessionStore(home=tmp_path / "store") as store:
        ticks: list[tuple[int, int]] = []
        summary = await import_path(
            store, tmp_path / "home", progress=lambda d, t, _: ticks.append((d, t))
        )
        assert summary.unknown == [str(tmp_path / "home" / "notes.txt")]
        assert not summary.of("refused") and not summary.of("conflict")
        assert ticks[-1][0] == ticks[-1][1] == 5 + 6 + 6 + 1
        by_source = {s.source_id: s for s in summary.sources}
        assert len(by_source[MAIN_SID].files) == 3
        assert len(by_source[OLD_SID].files) == 2
        shapes = await _all(store)
        subs = [a for a in shapes[MAIN_SID]["agents"] if a.startswith("sub:")]
        assert len(subs) == 2
        assert [a for a in shapes[OLD_SID]["agents"] if a.startswith("sub:")]
        assert (await check_store(store)).ok
        assert len(summary.lines()) == len(summary.sources) + 3  # 2 files had lines skipped

        again = await import_path(store, tmp_path / "home")
        assert again.sources == []
        assert again.unchanged_files == 5 + 6 + 6
        assert await _all(store) == shapes


async def test_touched_files_are_read_again_and_found_up_to_date(tmp_path: Path) -> None:
    _project(tmp_path / "home")
    async with SessionStore(home=tmp_path / "store") as store:
        await import_path(store, tmp_path / "home")
        before = await _all(store)
        for file in (tmp_path / "home").rglob("*.jsonl"):
            os.utime(file)
        summary = await import_path(store, tmp_path / "home")
        assert {s.status for s in summary.sources} == {"up to date"}
        assert await _all(store) == before
        assert (await import_path(store, tmp_path / "home")).unchanged_files == 5


async def _one_shot(tmp_path: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    files = _project(tmp_path / "one")
    for name in set(files) - set(names):
        files[name].unlink()
    async with SessionStore(home=tmp_path / "one-store") as store:
        await import_path(store, tmp_path / "one")
        return await _all(store)


@pytest.mark.parametrize(
    "order", list(itertools.permutations(["main", "sub1", "sub2"])), ids="-".join
)
async def test_any_order_of_arrival_gives_one_session(
    tmp_path: Path, order: tuple[str, ...]
) -> None:
    expected = await _one_shot(tmp_path, list(order))
    files = _project(tmp_path / "home")
    async with SessionStore(home=tmp_path / "store") as store:
        for name in order:
            summary = await import_path(store, files[name])
            assert [s.status for s in summary.sources] in (["imported"], ["continued"])
        assert await _all(store) == expected
        assert (await check_store(store)).ok


@pytest.mark.parametrize("order", [("old", "old_sub"), ("old_sub", "old")], ids="-".join)
async def test_old_layout_sub_agent_joins_its_session(
    tmp_path: Path, order: tuple[str, ...]
) -> None:
    expected = await _one_shot(tmp_path, list(order))
    files = _project(tmp_path / "home")
    async with SessionStore(home=tmp_path / "store") as store:
        for name in order:
            await import_path(store, files[name])
        got = await _all(store)
        assert got == expected
        assert any(a.startswith("sub:") for a in got[OLD_SID]["agents"])


CUT_FILES = [
    CORPUS / "claude-code" / "agent-sessions__claude-small.jsonl",
    CORPUS / "claude-code" / "claude-code-log__dag_compact_after_rewind.jsonl",
    CORPUS / "claude-code" / "claude-code-log__sidechain_integrated.jsonl",
    CORPUS / "acceptance" / "claude-code" / "marot__spotter__subagent.jsonl",
    CORPUS / "pi" / "agent-sessions__openclaw-large.jsonl",
]
"""Codex rollouts and pi compactions are cut at every line in their own tests
(``test_importers_codex_home.py``, ``test_importers_pi_cuts.py``)."""


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(which=st.sampled_from(CUT_FILES), cut=st.floats(0.0, 1.0))
async def test_a_transcript_cut_anywhere_continues_to_the_one_shot_session(
    tmp_path_factory: pytest.TempPathFactory, which: Path, cut: float
) -> None:
    tmp = tmp_path_factory.mktemp("cut")
    data = which.read_bytes()
    lines = data.splitlines(keepends=True)
    named = next(i for i, line in enumerate(lines) if b'"sessionId"' in line or b'"id"' in line)
    at = max(named + 1, round(cut * len(lines)))  # a prefix that names its conversation
    target = tmp / "home" / which.name
    target.parent.mkdir()
    target.write_bytes(data)
    async with SessionStore(home=tmp / "one") as store:
        await import_path(store, target)
        expected = await _all(store)
    target.write_bytes(b"".join(lines[:at]))
    async with SessionStore(home=tmp / "store") as store:
        await import_path(store, target)
        target.write_bytes(data)
        summary = await import_path(store, target)
        done = {s.status for s in summary.sources}
        assert done <= {"continued", "up to date"}, summary.lines()
        assert await _all(store) == expected
        assert (await check_store(store)).ok


async def test_a_changed_history_is_a_conflict_and_writes_nothing(tmp_path: Path) -> None:
    source = CORPUS / "claude-code" / "claude-code-log__dag_compact_after_rewind.jsonl"
    target = tmp_path / "home" / source.name
    target.parent.mkdir()
    shutil.copy(source, target)
    async with SessionStore(home=tmp_path / "store") as store:
        await import_path(store, target)
        before = await _all(store)
        text = target.read_text()
        first = text.splitlines()[1]
        changed = first.replace('"text":"Ready"', '"text":"Not ready"', 1)
        assert changed != first
        target.write_text(text.replace(first, changed, 1) + text.splitlines()[-1] + "\n")
        summary = await import_path(store, target)
        assert [s.status for s in summary.sources] == ["conflict"]
        assert await _all(store) == before
