"""Whole homes arriving in any order: every order gives the sessions of one import of the home.

A home is built from copies of the corpus: a Claude Code project folder (a session with a
sub-agent of the newer layout, one with its sidechain inside its own file and, where the shared
corpus is beside the checkout, one with a sub-agent file of the older layout beside it), a Codex
sessions folder and a pi sessions folder. Hypothesis picks an order of the files and cuts it
into calls of one to three files; each call either names the files that arrived, or imports the
whole home folder with only those there so far. The store then holds what one import of the
whole home gives: the same sessions, agents, nodes (by source identity, with their parents,
content, times and tokens), runs, events and active leaves, and ``check`` passes.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from soong_store import SessionStore
from soong_store.check.run import check_store
from soong_store.importers import import_path, import_paths
from soong_store.model import codec
from tests.importers.conftest import source_names

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "acceptance"
if not SHARED.is_dir():  # the shared corpus sits beside the checkout, where it is at all
    SHARED = Path(os.environ.get("SOONG_CORPUS", "../shared/corpus")).resolve() / "acceptance"

NEW_SID = "0a1b2c3d-4e5f-4061-8071-2a3b4c5d6e7f"
OLD_SID = "7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9"
PROJECT = Path("claude", "projects", "-home-dev-app")
CODEX = Path("codex", "sessions", "2026", "01", "02")
PI = Path("pi", "agent", "sessions", "--home-dev-app--")


def _plan() -> dict[Path, Path]:
    """Each file of the home (relative to it) and the corpus file it is a copy of."""
    sub = CORPUS / "claude-code" / "agent-sessions__subagent"
    subs = Path(NEW_SID, "subagents")
    plan = {
        PROJECT / f"{NEW_SID}.jsonl": sub / f"{NEW_SID}.jsonl",
        PROJECT / subs / "agent-a0ad4f44468bdf20d.jsonl": sub
        / subs
        / "agent-a0ad4f44468bdf20d.jsonl",
        PROJECT / "sidechain.jsonl": CORPUS
        / "claude-code"
        / "claude-code-log__sidechain_integrated.jsonl",
        PROJECT / "rewind.jsonl": CORPUS
        / "claude-code"
        / "claude-code-log__dag_compact_after_rewind.jsonl",
        CODEX / "rollout-a.jsonl": CORPUS / "codex" / "agent-sessions__codex-large.jsonl",
        CODEX / "rollout-b.jsonl": CORPUS
        / "codex"
        / "claude-code-log__rollout-2026-01-02T03-04-05-11111111.jsonl",
        CODEX / "rollout-c.jsonl": CORPUS
        / "codex"
        / "claude-code-transcripts__sample_codex_session.jsonl",
        PI / "small.jsonl": CORPUS / "pi" / "agent-sessions__pi-small.jsonl",
        PI / "openclaw.jsonl": CORPUS / "pi" / "agent-sessions__openclaw-large.jsonl",
    }
    if SHARED.is_dir():
        old = SHARED / "claude-code"
        plan[PROJECT / f"{OLD_SID}.jsonl"] = old / "lanegrid__agtrace__claude_session.jsonl"
        plan[PROJECT / "agent-0c4c3cf8.jsonl"] = old / "lanegrid__agtrace__claude_agent.jsonl"
    return plan


PLAN = _plan()
FILES = sorted(PLAN)
META = PROJECT / NEW_SID / "subagents" / "agent-a0ad4f44468bdf20d.meta.json"


def _arrive(home: Path, name: Path) -> Path:
    """Copy one file of the plan into ``home`` (a sub-agent's metadata with it); its path."""
    target = home / name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(PLAN[name], target)
    if name.name == "agent-a0ad4f44468bdf20d.jsonl":
        shutil.copy(PLAN[name].with_suffix(".meta.json"), home / META)
    return target


def _named(ids: dict[str, str], value: Any) -> Any:
    """``value`` with every store id in it replaced by the source name it stands for."""
    if isinstance(value, str):
        return ids.get(value, value)
    if isinstance(value, list):
        return [_named(ids, v) for v in value]
    if isinstance(value, dict):
        return {k: _named(ids, v) for k, v in value.items()}
    return value


_STORE_OWN = {"session_id", "updated_at"}
"""What the store sets of its own on every write (the ids it names are mapped, not dropped)."""


async def _session(store: SessionStore, sid: str) -> dict[str, Any]:
    """What one session holds, with the store's own ids replaced by source identities."""
    session = await store.get_session(sid)
    agents = await store.list_agents(sid)
    nodes = await store.list_nodes(sid)
    runs = await store.list_runs(sid)
    ids: dict[str, str] = {sid: "session"}
    ids.update(source_names(nodes))
    for agent in agents:
        ids[agent.agent_id] = f"{agent.agent_type}:{codec.dumps_text(agent.metadata)}"
    for run in runs:
        ids[run.run_id] = f"run:{codec.dumps_text(_named(ids, run.metadata))}"  # names a node
    assert len(ids) == 1 + len(nodes) + len(agents) + len(runs), "an id names two things"
    # The file a session was first made from is noted in it: whichever came first.
    metadata = dict(session.metadata)
    metadata["imported_from"] = {
        k: v for k, v in metadata["imported_from"].items() if k not in ("file", "index", "sha256")
    }
    return {
        "session": _named(
            ids, session.model_dump(mode="json", exclude=_STORE_OWN) | {"metadata": metadata}
        ),
        "agents": sorted(
            codec.dumps_text(_named(ids, a.model_dump(mode="json", exclude=_STORE_OWN)))
            for a in agents
        ),
        "nodes": {
            ids[n.node_id]: (
                ids.get(n.parent_id or ""),
                ids.get(n.agent_id or ""),
                ids.get(n.run_id or ""),
                n.role.value,
                n.node_type.value,
                _named(ids, [b.model_dump(mode="json") for b in n.content]),
                _named(ids, n.metadata),
                n.token_count,
                n.created_at,
            )
            for n in nodes
        },
        "runs": sorted(
            codec.dumps_text(_named(ids, r.model_dump(mode="json", exclude={"session_id"})))
            for r in runs
        ),
        "events": Counter(
            codec.dumps_text(
                _named(ids, e.model_dump(mode="json", exclude={"event_id", "seq", "run_seq"}))
            )
            for e in await store.timeline(sid)
        ),
    }


async def _sessions(store: SessionStore) -> dict[str, dict[str, Any]]:
    """Every session of the store by its source conversation."""
    out: dict[str, dict[str, Any]] = {}
    for found in await store.list_sessions():
        origin = found.metadata["imported_from"]
        key = f"{origin['format']}:{origin['source_session_id']}"
        assert key not in out, f"two sessions of {key}"
        out[key] = await _session(store, found.session_id)
    return out


_ONE_SHOT: dict[str, dict[str, Any]] = {}


async def _one_shot(root: Path) -> dict[str, Any]:
    """The sessions one import of the whole home gives (made once per run of the tests)."""
    if not _ONE_SHOT:
        home = root / "home"
        for name in FILES:
            _arrive(home, name)
        async with SessionStore(home=root / "store") as store:
            summary = await import_path(store, home, cwd=CORPUS)
            assert {s.status for s in summary.sources} == {"imported"}, summary.lines()
            _ONE_SHOT.update(await _sessions(store))
    return _ONE_SHOT


@st.composite
def arrivals(draw: st.DrawFn) -> tuple[list[list[Path]], bool]:
    """An order of the home's files cut into calls of one to three, and how they are named."""
    order = draw(st.permutations(FILES))
    calls: list[list[Path]] = []
    while order:
        size = draw(st.integers(1, 3))
        calls.append(list(order[:size]))
        order = order[size:]
    return calls, draw(st.booleans())


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(arrival=arrivals())
@example(arrival=([[name] for name in FILES], False))  # a sub-agent before its session
@example(arrival=([[name] for name in reversed(FILES)], True))
async def test_any_order_of_arrival_gives_the_one_shot_home(
    tmp_path_factory: pytest.TempPathFactory, arrival: tuple[list[list[Path]], bool]
) -> None:
    calls, whole_home = arrival
    expected = await _one_shot(tmp_path_factory.mktemp("one-shot"))
    root = tmp_path_factory.mktemp("arrival")
    home = root / "home"
    home.mkdir()
    async with SessionStore(home=root / "store") as store:
        for call in calls:
            arrived = [_arrive(home, name) for name in call]
            summary = await import_paths(store, [home] if whole_home else arrived, cwd=CORPUS)
            statuses = {s.status for s in summary.sources}
            assert statuses <= {"imported", "continued", "up to date"}, summary.lines()
            assert not summary.unreadable and not summary.unknown, summary.lines()
        assert await _sessions(store) == expected
        assert (await check_store(store)).ok
        again = await import_path(store, home, cwd=CORPUS)
        assert again.sources == [] and again.unchanged_files == len(FILES)
