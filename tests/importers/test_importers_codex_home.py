"""A Codex sessions folder: sub-agent rollouts join their parent's session, in any order.

Codex writes each thread to a rollout of its own; a spawned sub-agent's rollout names its
parent thread in its first ``session_meta``. The rollouts here are copies of real ones from
the shared corpus with their thread ids (and parents) set to make one conversation: a root
thread, two sub-agents it spawned and a sub-agent one of them spawned.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import orjson
import pytest

from soong_store import SessionStore
from soong_store.check.run import check_store
from soong_store.importers import import_path
from soong_store.importers.codex import parent_of
from tests.importers.cuts import cut_and_continue
from tests.importers.test_import_path import CORPUS, _all

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not here")

ROOT = "019b04ae-b1c6-7c72-a134-a4c2de66058c"  # the real rollout's own id
SUB_A = "019fbcca-9fd4-7d20-83dc-0762b2f839b3"  # the real sub-agent rollout's own id
SUB_B = "019fbcca-9fd4-7d20-83dc-00000000000b"
NESTED = "019fbcd0-1111-7000-8000-000000000001"  # the thread SUB_A's rollout spawns
PARENT = CORPUS / "acceptance" / "codex" / "lanegrid__agtrace__codex_session.jsonl"
SUB = CORPUS / "acceptance" / "codex" / "kenn-io__agentsview__rollout_subagent.jsonl"


def _rollout(source: Path, folder: Path, thread: str, parent: str | None) -> Path:
    """A copy of ``source`` as thread ``thread`` (spawned by ``parent``), named as Codex would."""
    lines = source.read_bytes().splitlines(keepends=True)
    first = orjson.loads(lines[0])
    meta = first["payload"]
    meta["id"] = thread
    if parent is not None:
        meta["source"]["subagent"]["thread_spawn"]["parent_thread_id"] = parent
    lines[0] = orjson.dumps(first) + b"\n"
    target = folder / f"rollout-2026-08-01T18-07-04-{thread}.jsonl"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"".join(lines))
    return target


def _home(folder: Path) -> dict[str, Path]:
    """The rollouts of one conversation, by a short name (a day's folder, as Codex keeps them)."""
    day = folder / "sessions" / "2026" / "08" / "01"
    return {
        "root": _rollout(PARENT, day, ROOT, None),
        "a": _rollout(SUB, day, SUB_A, ROOT),
        "b": _rollout(SUB, day, SUB_B, ROOT),
        "nested": _rollout(SUB, day, NESTED, SUB_A),
    }


async def _one_shot(tmp_path: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    files = _home(tmp_path / "one")
    for name in set(files) - set(names):
        files[name].unlink()
    async with SessionStore(home=tmp_path / "one-store") as store:
        summary = await import_path(store, tmp_path / "one")
        assert [s.status for s in summary.sources] == ["imported"]
        return await _all(store)


def _subs(shape: dict[str, Any]) -> list[str]:
    return [a for a in shape["agents"] if a.startswith("sub:")]


async def test_a_codex_home_is_one_session_with_its_sub_agents(tmp_path: Path) -> None:
    got = await _one_shot(tmp_path, ["root", "a", "b", "nested"])
    assert list(got) == [ROOT]
    subs = _subs(got[ROOT])
    assert len(subs) == 3
    assert all(SUB_A in s or SUB_B in s or NESTED in s for s in subs)
    assert got[ROOT]["active"] is not None
    mains = [n for n in got[ROOT]["nodes"].values() if n[1].startswith("main:")]
    assert len(mains) > 10


@pytest.mark.parametrize("order", list(itertools.permutations(["root", "a", "b"])), ids="-".join)
async def test_any_order_of_arrival_gives_one_session(
    tmp_path: Path, order: tuple[str, ...]
) -> None:
    expected = await _one_shot(tmp_path, list(order))
    files = _home(tmp_path / "home")
    async with SessionStore(home=tmp_path / "store") as store:
        for name in order:
            summary = await import_path(store, files[name])
            assert [s.status for s in summary.sources] in (["imported"], ["continued"])
            assert [s.source_id for s in summary.sources] == [ROOT]
        assert await _all(store) == expected
        assert (await check_store(store)).ok


async def test_sub_agents_of_an_absent_parent_make_its_session(tmp_path: Path) -> None:
    expected = await _one_shot(tmp_path, ["a", "b"])
    assert list(expected) == [ROOT]
    assert len(_subs(expected[ROOT])) == 2
    assert expected[ROOT]["active"] is None  # nothing of the conversation's own rollout yet
    files = _home(tmp_path / "home")
    async with SessionStore(home=tmp_path / "store") as store:
        await import_path(store, files["b"])
        await import_path(store, files["a"])
        assert await _all(store) == expected
        summary = await import_path(store, files["root"])
        assert [s.status for s in summary.sources] == ["continued"]
        assert await _all(store) == await _one_shot(tmp_path / "all", ["root", "a", "b"])


async def test_a_grown_sub_agent_rollout_continues(tmp_path: Path) -> None:
    expected = await _one_shot(tmp_path, ["root", "a"])
    files = _home(tmp_path / "home")
    files["b"].unlink()
    files["nested"].unlink()
    whole = files["a"].read_bytes()
    lines = whole.splitlines(keepends=True)
    async with SessionStore(home=tmp_path / "store") as store:
        files["a"].write_bytes(b"".join(lines[:7]))
        await import_path(store, tmp_path / "home")
        files["a"].write_bytes(whole)
        summary = await import_path(store, tmp_path / "home")
        assert [s.status for s in summary.sources] == ["continued"]
        assert await _all(store) == expected
        again = await import_path(store, tmp_path / "home")
        assert again.sources == [] and again.unchanged_files == 2


async def test_a_forked_thread_is_a_conversation_of_its_own(tmp_path: Path) -> None:
    folder = tmp_path / "home"
    root = _rollout(PARENT, folder, ROOT, None)
    fork = folder / "rollout-fork.jsonl"
    lines = root.read_bytes().splitlines(keepends=True)
    first = orjson.loads(lines[0])
    first["payload"] |= {"id": SUB_B, "forked_from_id": ROOT}
    fork.write_bytes(b"".join([orjson.dumps(first) + b"\n", *lines[1:]]))
    async with SessionStore(home=tmp_path / "store") as store:
        summary = await import_path(store, folder)
        assert sorted(s.source_id for s in summary.sources) == sorted([ROOT, SUB_B])
        got = await _all(store)
        assert not _subs(got[SUB_B]) and not _subs(got[ROOT])
        assert len(got[SUB_B]["nodes"]) == len(got[ROOT]["nodes"])


BOTH_COPIES = [
    CORPUS / "codex" / "claude-code-transcripts__sample_codex_session.jsonl",
    CORPUS / "acceptance" / "codex" / "lanegrid__agtrace__codex_session.jsonl",
    CORPUS / "codex" / "claude-code-log__rollout-2026-01-02T03-04-05-11111111.jsonl",
    CORPUS / "codex" / "agent-sessions__codex-large.jsonl",
    CORPUS / "codex" / "agent-sessions__codex-small.jsonl",
    SUB,
]
"""The corpus rollouts that write messages twice (an ``event_msg`` and a ``response_item``),
in either order: the first two are real, the others fixtures."""


@pytest.mark.parametrize("source", BOTH_COPIES, ids=lambda p: p.stem)
async def test_a_rollout_cut_at_any_line_continues_to_the_one_shot_session(
    tmp_path: Path, source: Path
) -> None:
    meta = orjson.loads(source.read_bytes().splitlines()[0])["payload"]
    conversation = parent_of(meta) or meta["id"]  # a sub-agent's is its parent's
    lines = len(source.read_bytes().splitlines())
    await cut_and_continue(tmp_path, source, conversation, list(range(1, lines)))


async def test_a_thread_inside_a_sub_agent_rollout_continues_without_repeating_its_events(
    tmp_path: Path,
) -> None:
    # A sub-agent's rollout that holds a thread of its own (a later session_meta naming a
    # parent), its last lines that thread's events: cut there, the rest imported later.
    lines = SUB.read_bytes().splitlines(keepends=True)
    meta = orjson.loads(lines[0])
    meta["payload"] |= {"id": "inner", "parent_thread_id": SUB_A}
    event = {"type": "event_msg", "payload": {"type": "task_started", "turn_id": "inner-1"}}
    inner = [orjson.dumps(meta) + b"\n", orjson.dumps(event) + b"\n", *lines[3:6]]
    source = tmp_path / "src" / f"rollout-2026-08-01T18-07-04-{SUB_A}.jsonl"
    source.parent.mkdir()
    source.write_bytes(b"".join([*lines, *inner]))
    parent = parent_of(orjson.loads(lines[0])["payload"])
    assert parent is not None
    await cut_and_continue(tmp_path, source, parent, list(range(1, len(lines) + len(inner))))


@pytest.mark.parametrize(
    "order",
    [("nested", "a", "root", "b"), ("nested", "root", "b", "a"), ("b", "nested", "root", "a")],
    ids="-".join,
)
async def test_a_nested_sub_agent_imported_alone_finds_its_chain_on_disk(
    tmp_path: Path, order: tuple[str, ...]
) -> None:
    """Its parent's rollout, not among the paths imported, is found by its thread id beside it."""
    expected = await _one_shot(tmp_path, ["root", "a", "b", "nested"])
    files = _home(tmp_path / "home")
    async with SessionStore(home=tmp_path / "store") as store:
        for name in order:
            summary = await import_path(store, files[name])
            assert [s.source_id for s in summary.sources] == [ROOT]
        assert await _all(store) == expected
        assert (await check_store(store)).ok


async def test_a_parent_archived_by_codex_is_found_too(tmp_path: Path) -> None:
    files = _home(tmp_path / "home")
    archived = tmp_path / "home" / "archived_sessions"
    archived.mkdir()
    files["a"].rename(archived / files["a"].name)  # Codex's archive is one flat folder
    async with SessionStore(home=tmp_path / "store") as store:
        summary = await import_path(store, files["nested"])
        assert [s.source_id for s in summary.sources] == [ROOT]


async def test_a_link_to_a_parent_s_rollout_is_not_followed(tmp_path: Path) -> None:
    files = _home(tmp_path / "home")
    elsewhere = tmp_path / "elsewhere" / files["a"].name
    elsewhere.parent.mkdir()
    files["a"].rename(elsewhere)
    files["a"].symlink_to(elsewhere)
    async with SessionStore(home=tmp_path / "store") as store:
        summary = await import_path(store, files["nested"])
        assert [s.source_id for s in summary.sources] == [SUB_A]  # its parent, as when absent


async def test_outside_codex_s_dated_folders_only_the_rollout_s_own_folder_is_looked_in(
    tmp_path: Path,
) -> None:
    files = _home(tmp_path / "home")
    loose = tmp_path / "loose"
    (loose / "deeper").mkdir(parents=True)
    nested = files["nested"].rename(loose / files["nested"].name)
    files["a"].rename(loose / "deeper" / files["a"].name)
    async with SessionStore(home=tmp_path / "store") as store:
        summary = await import_path(store, nested)
        assert [s.source_id for s in summary.sources] == [SUB_A]  # not walked into: as absent
    (loose / "deeper" / files["a"].name).rename(loose / files["a"].name)
    async with SessionStore(home=tmp_path / "store2") as store:
        summary = await import_path(store, nested)
        assert [s.source_id for s in summary.sources] == [ROOT]  # beside it: found
