"""Imports into a store run once per backend: ``home`` and ``store`` are the store suite's.

Also a home of three tools made of corpus copies (:data:`FILES`, :func:`arrive`), and sessions
shaped to compare across imports (:func:`session_shapes`).
"""

import os
import shutil
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from soong_store import SessionStore
from soong_store.importers._rows import identity
from soong_store.model import codec
from soong_store.model.records import NodeRecord
from tests.store.conftest import home, store

__all__ = ["CORPUS", "FILES", "arrive", "home", "session_shapes", "source_names", "store"]

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
    claude, codex, pi = CORPUS / "claude-code", CORPUS / "codex", CORPUS / "pi"
    sub = claude / "agent-sessions__subagent"
    agent = Path(NEW_SID, "subagents", "agent-a0ad4f44468bdf20d.jsonl")
    plan = {
        PROJECT / f"{NEW_SID}.jsonl": sub / f"{NEW_SID}.jsonl",
        PROJECT / agent: sub / agent,
        PROJECT / "sidechain.jsonl": claude / "claude-code-log__sidechain_integrated.jsonl",
        PROJECT / "rewind.jsonl": claude / "claude-code-log__dag_compact_after_rewind.jsonl",
        CODEX / "rollout-a.jsonl": codex / "agent-sessions__codex-large.jsonl",
        CODEX / "rollout-b.jsonl": codex
        / "claude-code-log__rollout-2026-01-02T03-04-05-11111111.jsonl",
        CODEX / "rollout-c.jsonl": codex / "claude-code-transcripts__sample_codex_session.jsonl",
        PI / "small.jsonl": pi / "agent-sessions__pi-small.jsonl",
        PI / "openclaw.jsonl": pi / "agent-sessions__openclaw-large.jsonl",
    }
    if SHARED.is_dir():  # a sub-agent file of the older layout, beside its session's
        old = SHARED / "claude-code"
        plan[PROJECT / f"{OLD_SID}.jsonl"] = old / "lanegrid__agtrace__claude_session.jsonl"
        plan[PROJECT / "agent-0c4c3cf8.jsonl"] = old / "lanegrid__agtrace__claude_agent.jsonl"
    return plan


PLAN = _plan()
"""The home's files (relative to it) and the corpus files they are copies of."""
FILES = sorted(PLAN)
"""The files of a home of three tools (:func:`arrive` copies one into a home)."""
META = PROJECT / NEW_SID / "subagents" / "agent-a0ad4f44468bdf20d.meta.json"


def arrive(home: Path, name: Path) -> Path:
    """Copy one file of the plan into ``home`` (a sub-agent's metadata with it); its path."""
    target = home / name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(PLAN[name], target)
    if name.name == "agent-a0ad4f44468bdf20d.jsonl":
        shutil.copy(PLAN[name].with_suffix(".meta.json"), home / META)
    return target


def source_names(nodes: Iterable[NodeRecord]) -> dict[str, str]:
    """Node id -> the source record it came from (``identity#n``): the same across imports."""
    names: dict[str, str] = {}
    seen: Counter[str] = Counter()
    for node in nodes:
        ident = identity(node.metadata["imported_from"])
        seen[ident] += 1
        names[node.node_id] = f"{ident}#{seen[ident]}"
    return names


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
    # The hash of its file is of the file as it was when the session was made (it may grow).
    metadata = dict(session.metadata)
    metadata["imported_from"] = {
        k: v for k, v in metadata["imported_from"].items() if k != "sha256"
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


async def session_shapes(store: SessionStore) -> dict[str, dict[str, Any]]:
    """Every session of the store by its source conversation, as :func:`_session` shapes it.

    Two stores that imported the same sources compare equal: the store's own ids are replaced
    by the source identities they stand for.
    """
    out: dict[str, dict[str, Any]] = {}
    for found in await store.list_sessions():
        origin = found.metadata["imported_from"]
        key = f"{origin['format']}:{origin['source_session_id']}"
        assert key not in out, f"two sessions of {key}"
        out[key] = await _session(store, found.session_id)
    return out
