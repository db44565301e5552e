"""Corruption: damaged database pages, damaged stored values, cut WAL files, broken task WALs.

What the store does with each (also written down in docs/reliability.md):

- a structurally damaged b-tree page: every read or write that touches it raises
  ``StorageError("the database file is damaged: database disk image is malformed")``,
  ``PRAGMA quick_check`` through the store's own connection lists the damage, other sessions'
  tables stay readable and writable, and the writer survives;
- a database file that is not a database at all: opening the store raises ``StorageError``;
- a stored value whose bytes were changed so that it no longer parses (JSON or content blocks):
  the read raises ``StorageError`` saying the stored data is damaged, and ``check`` names the node;
  a change that still parses (one letter of a text) cannot be noticed: SQLite keeps no page
  checksums (a genuine limitation, asserted as such below);
- a ``-wal`` file cut short or damaged in the middle after a writer was killed: SQLite's frame
  checksums stop the replay at the first bad frame, so the database opens at the last whole commit
  before the cut; the units after it are lost, never half of one, and the store keeps working;
- a damaged task WAL: that task's DAG raises ``TaskDagUnavailable`` (path, line, reason) and its
  file is left untouched; every other task DAG and every conversation read and write carry on.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore, StorageError, TaskDagUnavailable
from soong_store.check.run import check_store
from soong_store.store import run_read, runtime_of
from soong_store.tasks.task import encode_record
from tests.conftest import db_path, text
from tests.reliability.conftest import Child, assert_dense, integrity, raw

pytestmark = pytest.mark.reliability

SEED = 1234


def quick_check(connection: Any) -> list[str]:
    return [str(r[0]) for r in connection.exec_driver_sql("PRAGMA quick_check")]


async def two_sessions(home: Path, nodes_a: int) -> tuple[str, str]:
    async with SessionStore(home=home) as store:
        a = (await store.create_session(cwd=".")).session_id
        b = (await store.create_session(cwd=".")).session_id
        for i in range(nodes_a):
            role = "user" if i % 2 == 0 else "assistant"
            await store.append_node(a, role, "message", text(f"PAGE-MARKER-A-{i:04d}-" + "a" * 300))
        for i in range(5):
            await store.append_node(
                b, "user" if i % 2 == 0 else "assistant", "message", text(f"b{i}")
            )
    assert not Path(f"{db_path(home)}-wal").exists(), "closing the store should checkpoint"
    return a, b


def offset_of(path: Path, marker: bytes) -> int:
    data = path.read_bytes()
    at = data.find(marker)
    assert at > 0 and data.find(marker, at + 1) == -1, marker
    return at


def patch_file(path: Path, offset: int, data: bytes) -> None:
    with path.open("r+b") as f:
        f.seek(offset)
        f.write(data)


PAGE_DAMAGE = {  # offset in the leaf page -> bytes written there
    "page type": (0, b"\x07"),
    "page header": (1, b"\xff" * 7),  # freeblock, cell count, content start
    "cell pointers": (8, b"\xff" * 64),
    "cell bytes": (2048, b"\xff" * 64),
    "zeroed cells": (2048, b"\x00" * 512),
}


async def says_damaged(awaitable: Any) -> str:
    """``quick_check`` either reports the damage or stops at it with a StorageError saying so."""
    try:
        lines = await awaitable
    except StorageError as exc:
        assert "damaged" in str(exc), exc
        return str(exc)
    assert lines != ["ok"], lines
    return str(lines)


@pytest.mark.parametrize("damage", list(PAGE_DAMAGE))
async def test_damaged_btree_page_is_reported_and_contained(home: Path, damage: str):
    a, b = await two_sessions(home, nodes_a=200)
    page_size = 4096
    with raw(home) as con:
        assert con.execute("PRAGMA page_size").fetchone()[0] == page_size
    # In the node's content_json (the search index holds the same text, unquoted).
    leaf = offset_of(db_path(home), b'"text":"PAGE-MARKER-A-0100-') // page_size * page_size
    where, data = PAGE_DAMAGE[damage]
    patch_file(db_path(home), leaf + where, data)

    async with SessionStore(home=home) as store:
        # A pair's tables are WITHOUT ROWID b-trees: some damage stops a read ("malformed"),
        # some leaves cells that decode as rows the rules refuse (a broken parent chain).
        with pytest.raises(StorageError, match="damaged"):
            await store.active_path(a)
        await says_damaged(run_read(store, quick_check))
        found = await check_store(store)  # reports the damage and goes on past it
        assert any(p.kind == "quick_check" for p in found.problems)
        assert {p.session_id for p in found.problems if p.session_id is not None} == {a}
        assert b in found.sessions  # checked past the damage, and found whole
        assert not [p for p in found.problems if p.session_id == b]
        # Another session's tables are other pages: still readable and writable.
        path = await store.active_path(b)
        assert [n.content[0].text for n in path] == [f"b{i}" for i in range(5)]
        await store.append_node(b, "user", "message", text("b5"))
        try:
            await store.append_node(a, "user", "message", text("into the damaged table"))
        except StorageError as exc:
            assert "damaged" in str(exc)
        assert runtime_of(store).writer_alive
        assert len(await store.timeline(b)) == 1 + 6


@pytest.mark.parametrize("damage", ["random bytes", "header"])
async def test_file_that_is_not_a_database_is_refused_clearly(home: Path, damage: str):
    if damage == "header":
        await two_sessions(home, nodes_a=3)
        patch_file(db_path(home), 0, b"SQLite format 0\x00")
    else:
        home.mkdir(parents=True)
        db_path(home).write_bytes(random.Random(SEED).randbytes(8192))
    before = db_path(home).read_bytes()
    with pytest.raises(StorageError, match="not a database"):
        async with SessionStore(home=home):
            pass
    assert db_path(home).read_bytes() == before


async def test_damaged_stored_json_is_reported_not_misread(home: Path):
    a, _b = await two_sessions(home, nodes_a=4)
    with raw(home) as con:
        node_ids = [r[0] for r in con.execute(f"SELECT node_id FROM nodes_{a} ORDER BY node_seq")]
    # Broken structure: the block no longer parses. Same length, so the page stays valid.
    at = offset_of(db_path(home), b'"text":"PAGE-MARKER-A-0001-')
    patch_file(db_path(home), at, b'"text"!')
    # A letter of the text: still valid JSON, undetectable without page checksums.
    at = offset_of(db_path(home), b'"text":"PAGE-MARKER-A-0002-')
    patch_file(db_path(home), at, b'"text":"PAGE-MARKER-X')
    assert integrity(home) == ["ok"]  # SQLite itself sees nothing wrong with either

    async with SessionStore(home=home) as store:
        with pytest.raises(StorageError, match="damaged"):
            await store.get_node(a, node_ids[1])
        with pytest.raises(StorageError, match="damaged"):
            await store.active_path(a)
        report = await check_store(store, a)
        assert [(p.kind, p.ids) for p in report.problems] == [("invalid_content", (node_ids[1],))]
        # The limitation: a changed letter reads back as stored.
        changed = await store.get_node(a, node_ids[2])
        assert changed.content[0].text.startswith("PAGE-MARKER-X-0002-")
        assert (await store.get_node(a, node_ids[3])).content[0].text.startswith("PAGE-MARKER-A")


WAL_WRITER = textwrap.dedent(
    """
    import asyncio, json, sys
    from soong_store import SessionStore

    async def main(home, sid):
        async with SessionStore(home=home) as store:
            i = 0
            while True:
                unit = f"u{i}"
                async with store.transaction(sid) as tx:
                    for k in range(3):
                        tx.add_node("user" if k == 0 else "assistant", "message",
                                    [{"type": "text", "text": unit + "-" + "w" * 700}],
                                    metadata={"unit": unit, "k": k})
                    tx.add_event("unit_mark", payload={"unit": unit})
                print("ACK " + unit, flush=True)
                i += 1

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)

WAL_HEADER = 32
FRAME_HEADER = 24


def surviving_units(home: Path, sid: str) -> list[str]:
    """The units in the database, checked whole, in commit order."""
    with raw(home) as con:
        nodes = con.execute(
            f"SELECT node_id, node_seq, metadata_json FROM nodes_{sid} ORDER BY node_seq"
        ).fetchall()
        events = con.execute(
            f"SELECT seq, event_type, node_id, payload_json FROM events_{sid}"
        ).fetchall()
    assert_dense([n[1] for n in nodes], "node_seq")
    assert_dense([e[0] for e in events], "seq")
    assert {n[0] for n in nodes} == {e[2] for e in events if e[1] == "node_created"}
    units: dict[str, list[int]] = {}
    for _node_id, _seq, meta in nodes:
        info = json.loads(meta)
        units.setdefault(info["unit"], []).append(info["k"])
    marks = [json.loads(e[3])["unit"] for e in sorted(events) if e[1] == "unit_mark"]
    assert list(units) == marks, "a unit is partial"
    assert all(ks == [0, 1, 2] for ks in units.values()), "a unit is partial"
    return marks


async def test_cut_or_damaged_wal_of_a_killed_writer_opens_at_a_whole_commit(
    home: Path, tmp_path: Path, figures: dict[str, Any], spawn: Callable[..., Child]
):
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
        await store.append_event(sid, "first write: the pair exists")  # checkpointed at close
    child = spawn(WAL_WRITER, str(home), sid, cwd=tmp_path)
    for _ in range(20):  # fewer pages than SQLite's automatic checkpoint: all in the WAL
        child.wait_for("ACK ", timeout=120)
    child.kill()
    acked = [line[4:] for line in child.finish(timeout=60) if line.startswith("ACK ")]
    wal = Path(f"{db_path(home)}-wal")
    assert wal.stat().st_size > WAL_HEADER, "the killed writer's commits should be in its WAL"
    pristine = tmp_path / "pristine"
    shutil.copytree(home, pristine)  # copied before anything opens (and recovers) the file
    with (pristine / "sessions.sqlite").open("rb") as f:
        page_size = int.from_bytes(f.read(18)[16:18], "big")
    frame = FRAME_HEADER + page_size
    frames = (wal.stat().st_size - WAL_HEADER) // frame
    rng = random.Random(SEED)
    cuts = [WAL_HEADER, WAL_HEADER + 5, WAL_HEADER + frame * frames]
    cuts += [WAL_HEADER + frame * rng.randrange(frames) + rng.randrange(frame) for _ in range(6)]
    damages = [
        WAL_HEADER + frame * rng.randrange(1, frames) + rng.randrange(frame) for _ in range(3)
    ]
    kept_counts = []
    for kind, where in [("cut", c) for c in cuts] + [("damage", d) for d in damages]:
        trial = tmp_path / f"trial-{kind}-{where}"
        shutil.copytree(pristine, trial)
        trial_wal = Path(f"{db_path(trial)}-wal")
        if kind == "cut":
            os.truncate(trial_wal, where)
        else:
            patch_file(trial_wal, where, rng.randbytes(64))
        async with SessionStore(home=trial) as store:  # no error: a consistent earlier state
            assert await run_read(store, quick_check) == ["ok"]
            kept = surviving_units(trial, sid)
            assert kept == [f"u{i}" for i in range(len(kept))]  # a prefix of the commit order
            node = await store.append_node(sid, "user", "message", text("after the cut"))
            assert (await store.active_path(sid))[-1].node_id == node.node_id
        assert integrity(trial) == ["ok"]
        kept_counts.append(len(kept))
        shutil.rmtree(trial)
    assert kept_counts[0] == 0 and kept_counts[2] >= len(acked)  # nothing cut: nothing lost
    figures.update(
        acknowledged_units=len(acked),
        wal_frames=frames,
        trials=len(kept_counts),
        units_kept_per_trial=kept_counts,
        partial_units=0,
    )


# -- task WALs ----------------------------------------------------------------------------------


def damage_task_wal(path: Path, how: str) -> int:
    """Damage a task WAL of at least five records; return the 1-based line that is bad."""
    lines = path.read_bytes().splitlines(keepends=True)
    if how == "flipped byte":
        line = lines[2]
        at = line.index(b'"title":"') + 10
        lines[2] = line[:at] + bytes([line[at] ^ 0x01]) + line[at + 1 :]
        bad = 3
    elif how == "missing line":
        del lines[2]
        bad = 3
    elif how == "garbage line":
        lines.insert(3, b"\x00\xff garbage \x07\n")
        bad = 4
    elif how == "cycle":
        lines.append(
            encode_record(len(lines) + 1, "add_dependency", {"task_id": "a", "depends_on": "c"})
        )
        bad = len(lines)
    elif how == "binary file":
        path.write_bytes(random.Random(SEED).randbytes(3000) + b"\n")
        return 1
    else:
        raise AssertionError(how)
    path.write_bytes(b"".join(lines))
    return bad


@pytest.mark.parametrize(
    "how", ["flipped byte", "missing line", "garbage line", "cycle", "binary file"]
)
async def test_damaged_task_wal_blocks_only_its_own_dag(home: Path, tmp_path: Path, how: str):
    async with SessionStore(home=home) as store:
        a = (await store.create_session(cwd=str(tmp_path / "pa"))).session_id
        b = (await store.create_session(cwd=str(tmp_path / "pb"))).session_id
        for sid in (a, b):
            await store.append_node(sid, "user", "message", text("plan"))
            for name in ("plan", "fine"):
                dag = await store.task_dag(sid, name)
                await dag.add("a", "A")
                await dag.add("b", "B", depends_on=["a"])
                await dag.add("c", "C", depends_on=["b"])
                await dag.set_status("a", "completed")
        broken = (await store.task_dag(a, "plan")).path
    bad_line = damage_task_wal(broken, how)
    damaged = broken.read_bytes()

    async with SessionStore(home=home) as store:
        with pytest.raises(TaskDagUnavailable) as info:
            await store.task_dag(a, "plan")
        assert (info.value.path, info.value.line) == (broken, bad_line)
        assert info.value.reason
        with pytest.raises(TaskDagUnavailable):  # asking again says the same, nothing repaired
            await store.task_dag(a, "plan")
        for sid, name in ((a, "fine"), (b, "plan"), (b, "fine")):
            dag = await store.task_dag(sid, name)
            assert [t.task_id for t in dag.ready()] == ["b"]
            await dag.set_status("b", "completed")
        for sid in (a, b):
            await store.append_node(sid, "assistant", "message", text("the conversation goes on"))
            assert len(await store.active_path(sid)) == 2
            assert (await store.timeline(sid))[-1].event_type == "node_created"
        report = await check_store(store, a)
        assert [p.kind for p in report.problems] == ["task_wal"]
        assert (await check_store(store, b)).ok
    assert broken.read_bytes() == damaged  # left as found, for a person to look at
