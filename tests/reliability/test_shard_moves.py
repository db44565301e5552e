"""SIGKILL during moves: a child appends to sessions that keep moving between files, and dies.

With a hot bound of 3 and shards of 4, eight sessions written at random keep the writer moving
pairs: each write to an idle session brings its pair back (in that write's transaction), each
idle moment moves the least recently updated out again. The child prints one line per
acknowledged append. Half the rounds kill it at a step of the move protocol (its step hook
raises SIGKILL the n-th time the round's step is reached, each step in turn), half after a
random delay, anywhere (SQLite's commits included). After every kill, before and after
recovery: every acknowledged append is there and each session is whole; after recovery the
journal is empty and each pair is in exactly the one file the catalog names. A reader in a
process of its own reads every session throughout and reports any read that is not whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import subprocess
import textwrap
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore
from soong_store.check.run import check_store
from tests.reliability.conftest import Child, assert_dense, integrity
from tests.shard_support import (
    assert_each_pair_in_one_file,
    assert_no_stray_shard_file,
    limited,
    settle,
    stray_shard_files,
)

pytestmark = pytest.mark.reliability

ROUNDS = 24
SEED = 4321
SESSIONS = 8
STEPS = (
    "archive:T0",
    "archive:L",
    "archive:T1 copied",
    "archive:T1 before commit",
    "archive:T1",
    "archive:T2 before commit",
    "archive:T2",
    "reactivate:journaled",
    "reactivate:copied",
    "recover:copy dropped",
    "recover:settled",
)

RECLAIM_STEPS = ("reclaim:forgotten", "reclaim:removed", "reclaim:brought back")
RECLAIM_ROUNDS = 18

PRELUDE = """
import asyncio, os, random, signal, sys, threading
from soong_store import SessionStore
from soong_store.catalog import moves
moves.LIMITS = moves.Limits(hot=3, shard=4, batch=2)
_said = threading.Lock()

def say(line):  # the writer thread says steps, the loop acknowledgements: whole lines only
    with _said:
        sys.stdout.write(line + "\\n")
        sys.stdout.flush()
"""

APPENDER = PRELUDE + textwrap.dedent(
    """
    async def main(home, seed, step, nth):
        rng = random.Random(int(seed))
        hits = 0

        def hook(name):
            nonlocal hits
            say("STEP " + name)
            if name == step:
                hits += 1
                if hits >= int(nth):
                    os.kill(os.getpid(), signal.SIGKILL)

        moves.step_hook = hook
        async with SessionStore(home=home) as store:
            sids = sorted(s.session_id for s in await store.list_sessions())
            print("READY", flush=True)
            i = 0
            while True:
                sid = rng.choice(sids)
                node = await store.append_node(
                    sid, "user", "message", [{"type": "text", "text": f"{seed}-{i}"}]
                )
                say(f"ACK {sid} {node.node_id}")
                i += 1
                if i % 3 == 0:
                    await asyncio.sleep(0.01)  # idle moments: the writer archives

    asyncio.run(main(*sys.argv[1:]))
    """
)

READER = PRELUDE + textwrap.dedent(
    """
    def whole(path, nodes, events):
        seqs = [n.node_seq for n in nodes]
        if seqs != list(range(1, len(seqs) + 1)):
            return f"node_seq {seqs}"
        if [n.node_seq for n in path] != seqs:
            return f"path {[n.node_seq for n in path]} of {seqs}"
        if [e.seq for e in events] != list(range(1, len(events) + 1)):
            return "seq"
        return None

    async def main(home):
        async with SessionStore(home=home) as store:
            sids = sorted(s.session_id for s in await store.list_sessions())
            print("READY", flush=True)
            reads = 0
            while True:
                for sid in sids:
                    path = await store.active_path(sid)
                    nodes = await store.list_nodes(sid)
                    events = await store.timeline(sid)
                    # Three snapshots: each must be whole on its own; the path is one.
                    for problem in (whole(path, path, events[:0]), whole(nodes, nodes, events)):
                        if problem:
                            print(f"BAD {sid} {problem}", flush=True)
                    reads += 3
                print(f"READS {reads}", flush=True)
                await asyncio.sleep(0.02)  # two cores: leave the writers most of them

    asyncio.run(main(*sys.argv[1:]))
    """
)


async def _reclaimed(home: Path, timeout: float = 60.0) -> None:
    """Wait for the writer's reclaim at start (a round of its own after recovery)."""
    deadline = time.monotonic() + timeout
    while stray := stray_shard_files(home):
        if time.monotonic() > deadline:
            pytest.fail(f"files no shard_files row names stayed: {stray}")
        await asyncio.sleep(0.05)


async def _check_sessions(store: SessionStore, acked: dict[str, set[str]]) -> None:
    for session in await store.list_sessions():
        sid = session.session_id
        nodes = await store.list_nodes(sid)
        ids = {n.node_id for n in nodes}
        assert acked[sid] <= ids, f"{sid} lost {acked[sid] - ids}"
        assert_dense([n.node_seq for n in nodes], f"node_seq of {sid}")
        events = await store.timeline(sid)
        assert_dense([e.seq for e in events], f"seq of {sid}")
        assert {e.node_id for e in events if e.event_type == "node_created"} == ids
        path = await store.active_path(sid)
        assert [n.node_id for n in path] == [n.node_id for n in nodes]
        active = (await store.get_session(sid)).active_node_id
        assert active == (nodes[-1].node_id if nodes else None)


@pytest.mark.slow
async def test_sigkill_during_moves_loses_nothing(
    home: Path, tmp_path: Path, figures: dict[str, Any], spawn: Callable[..., Child]
) -> None:
    await _kill_rounds(home, tmp_path, figures, spawn, STEPS, ROUNDS, step_wait=1.5)


@pytest.mark.slow
async def test_sigkill_while_shards_are_reclaimed_loses_nothing(
    home: Path, tmp_path: Path, figures: dict[str, Any], spawn: Callable[..., Child]
) -> None:
    """The same rounds, killed at the steps of removing an emptied shard and emptying a sparse
    one; after recovery no file is left on disk that no ``shard_files`` row names."""
    await _kill_rounds(home, tmp_path, figures, spawn, RECLAIM_STEPS, RECLAIM_ROUNDS, step_wait=8)


async def _kill_rounds(
    home: Path,
    tmp_path: Path,
    figures: dict[str, Any],
    spawn: Callable[..., Child],
    steps: tuple[str, ...],
    rounds: int,
    *,
    step_wait: float,
) -> None:
    """Kill an appender ``rounds`` times: every other round at a step of ``steps`` (waiting
    up to ``step_wait`` s for it: reclaim's steps come after whole moves), else anywhere."""
    rng = random.Random(SEED)
    with limited():
        async with SessionStore(home=home) as store:
            for _ in range(SESSIONS):
                await store.create_session(cwd=str(tmp_path))
        reader = spawn(READER, str(home), cwd=tmp_path, name="reader")
        reader.wait_for("READY", timeout=60)
        acked: dict[str, set[str]] = defaultdict(set)
        hit: Counter[str] = Counter()
        killed_at: Counter[str] = Counter()
        started = time.monotonic()
        for rnd in range(rounds):
            step = steps[rnd // 2 % len(steps)] if rnd % 2 == 0 else ""
            args = (str(home), str(SEED + rnd), step, str(rng.randint(1, 3)))
            child = spawn(APPENDER, *args, cwd=tmp_path)
            child.wait_for("READY", timeout=60)
            delay = rng.uniform(0.05, 0.5)
            with contextlib.suppress(subprocess.TimeoutExpired):  # died at its step already
                child.proc.wait(timeout=step_wait if step else delay)
            child.kill()
            lines = child.finish(timeout=30)
            if step and lines and lines[-1] == f"STEP {step}":
                killed_at[step] += 1
            for line in lines:
                kind, _, rest = line.partition(" ")
                if kind == "ACK":
                    sid, node_id = rest.split()
                    acked[sid].add(node_id)
                elif kind == "STEP":
                    hit[rest] += 1
            async with SessionStore(home=home) as store:
                await _check_sessions(store, acked)  # as the crash left it, recovery under way
                await settle(store)
                await _check_sessions(store, acked)
                await _reclaimed(home)
                if rnd == rounds - 1:
                    assert (await check_store(store)).ok
            assert_each_pair_in_one_file(home)
            assert_no_stray_shard_file(home)
        reader.kill()
        seen = reader.finish(timeout=30)
    bad = [line for line in seen if line.startswith("BAD")]
    reads = max((int(line.split()[1]) for line in seen if line.startswith("READS")), default=0)
    assert bad == []
    assert reads > 0
    assert integrity(home) == ["ok"]
    assert sum(killed_at.values()) >= rounds // 4  # most step rounds died at their step
    figures.update(
        rounds=rounds,
        acknowledged=sum(len(ids) for ids in acked.values()),
        steps_killed=dict(sorted(killed_at.items())),
        reader_reads=reads,
        seconds=round(time.monotonic() - started, 1),
    )
