"""Import under SIGKILL, and hostile import files: no partial session, orphans left only for gc.

A child imports one export (with many artifact files) again and again under fresh ids, printing
an acknowledgement after each import returns, and is killed at a random moment: while it stages
files, inside the writer's transaction, or between the two. Each session in the home is then
either there whole (every row of the export, every file) or not at all; files a killed import
left behind are named by no row, and ``gc`` removes them.
"""

from __future__ import annotations

import random
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from soong_store import InvalidArgument, SessionStore
from soong_store.check.run import check_store
from soong_store.transfer import export_session, import_session
from tests.conftest import text
from tests.reliability.conftest import Child, artifact_files, integrity, pair_rows, rows

pytestmark = pytest.mark.reliability

ROUNDS = 16
SEED = 4321
ARTIFACTS = 30

IMPORTER = textwrap.dedent(
    """
    import asyncio, sys
    from soong_store import InvalidArgument, SessionStore
    from soong_store.transfer import import_session

    async def main(home, source):
        async with SessionStore(home=home) as store:
            print("READY", flush=True)
            while True:
                with open(source, "rb") as lines:
                    result = await import_session(store, lines, new_id=True)
                print("ACK " + result.session_id, flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def build_export(home: Path, target: Path) -> dict[str, int]:
    rng = random.Random(SEED)
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=home)).session_id
        for i in range(ARTIFACTS):
            async with store.transaction(sid) as tx:
                aid = tx.add_artifact(rng.randbytes(40_000), filename=f"f{i}.bin")
                tx.add_node(
                    "user",
                    "message",
                    [*text(f"file {i}"), {"type": "artifact_ref", "artifact_id": aid}],
                )
        with target.open("w") as out:
            return await export_session(store, sid, out)


async def test_sigkill_during_imports_leaves_no_partial_session(
    tmp_path: Path, figures: dict[str, Any], spawn: Callable[..., Child]
) -> None:
    source = tmp_path / "export.jsonl"
    counts = await build_export(tmp_path / "source", source)
    home = tmp_path / "home"
    async with SessionStore(home=home):
        pass
    rng = random.Random(SEED)
    acked: set[str] = set()
    for _ in range(ROUNDS):
        child = spawn(IMPORTER, str(home), str(source), cwd=tmp_path)
        child.wait_for("READY", timeout=120)
        time.sleep(rng.uniform(0.0, 1.5))
        child.kill()
        lines = child.finish(timeout=60)
        acked.update(line[4:] for line in lines if line.startswith("ACK "))
        assert integrity(home) == ["ok"]
        sessions = [sid for (sid,) in rows(home, "SELECT session_id FROM sessions")]
        assert acked <= set(sessions)
        files = artifact_files(home)
        for sid in sessions:  # whole or absent
            # Past the hot file's bound, idle pairs have moved to shards: read where they are.
            assert pair_rows(home, sid, "SELECT count(*) FROM {nodes}") == [(counts["nodes"],)]
            assert pair_rows(home, sid, "SELECT count(*) FROM {events}") == [(counts["events"],)]
            paths = rows(home, "SELECT path FROM artifacts WHERE session_id = ?", sid)
            assert len(paths) == counts["artifacts"]
            assert all(path in files for (path,) in paths)
    named = {path for (path,) in rows(home, "SELECT path FROM artifacts")}
    orphans = set(artifact_files(home)) - named
    async with SessionStore(home=home) as store:
        removed = await store.gc(min_age=0)
        assert set(removed) == orphans
        report = await check_store(store)
        assert report.ok, [p.message for p in report.problems]
    assert set(artifact_files(home)) == named
    figures.update(
        rounds=ROUNDS,
        imports_acknowledged=len(acked),
        sessions_whole=len(sessions),
        partial_sessions=0,
        orphan_files_collected=len(removed),
    )


def cyclic_export(nodes: int) -> list[bytes]:
    """A well-formed export of one long chain whose first node names the last as its parent."""
    sid = "sess_20260101_000000_cafe"
    t = "2026-01-01T00:00:00.000000+00:00"
    root = "agent_root"
    lines: list[dict[str, Any]] = [
        {
            "format": "soong-store-session",
            "version": 1,
            "session_id": sid,
            "exported_at": t,
            "with_artifacts": True,
            "counts": {"agents": 1, "runs": 0, "nodes": nodes, "events": nodes, "artifacts": 0},
        },
        {
            "kind": "session",
            "row": {
                "session_id": sid, "cwd": "/project", "root_agent_id": root,
                "active_node_id": f"node_{nodes}", "parent_session_id": None,
                "status": "active", "metadata_json": None, "created_at": t, "updated_at": t,
            },
        },
        {
            "kind": "agent",
            "row": {
                "agent_id": root, "session_id": sid, "parent_agent_id": None,
                "agent_type": "main", "created_by_run_id": None, "fork_from_node_id": None,
                "status": "idle", "result_json": None, "metadata_json": None,
                "created_at": t, "updated_at": t,
            },
        },
    ]  # fmt: skip
    for i in range(1, nodes + 1):
        parent = f"node_{nodes}" if i == 1 else f"node_{i - 1}"
        lines.append(
            {
                "kind": "node",
                "row": {
                    "node_id": f"node_{i}", "node_seq": i, "parent_id": parent,
                    "agent_id": root, "run_id": None, "role": "user", "node_type": "message",
                    "content_json": '[{"type":"text","text":"x"}]', "metadata_json": None,
                    "token_count": None, "created_at": t,
                },
            }
        )  # fmt: skip
    for i in range(1, nodes + 1):
        lines.append(
            {
                "kind": "event",
                "row": {
                    "event_id": f"evt_{i}", "seq": i, "run_seq": None, "agent_id": None,
                    "run_id": None, "level": "info", "event_type": "node_created",
                    "node_id": f"node_{i}", "tool_call_id": None, "payload_json": None,
                    "created_at": t,
                },
            }
        )  # fmt: skip
    return [orjson.dumps(line) for line in lines]


async def test_an_import_with_a_parent_cycle_is_refused_fast(
    tmp_path: Path, figures: dict[str, Any]
) -> None:
    lines = cyclic_export(50_000)
    async with SessionStore(home=tmp_path / "home") as store:
        started = time.monotonic()
        with pytest.raises(InvalidArgument, match="line 4: .*before its parent"):
            await import_session(store, lines)
        took = time.monotonic() - started
        assert await store.list_sessions() == []
    figures.update(nodes=50_000, refused_in_s=round(took, 2))
