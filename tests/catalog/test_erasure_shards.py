"""Erasure where pairs live in shard files: what was removed is in no file once the store closed.

A session idle in a shard is redacted after its pair came back to the main file (the shard's
copy is dropped), or deleted where it is (the writer's maintenance drops the copy). Both leave
freed pages in the shard, which are zeroed; the scan is :mod:`tests.store.test_erasure`'s.
These tests look at the files behind the store's back, so they live with the SQLite tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from soong_store import RedactedBlock, SessionStore
from soong_store.catalog import lookup as catalog
from soong_store.catalog import moves
from tests.shard_support import limited, settle
from tests.store.test_erasure import found_in

pytestmark = [pytest.mark.sqlite, pytest.mark.asyncio]


def marker(i: int) -> str:
    return f"Qxzshard{i}secretGrüße"


async def test_erasure_reaches_shard_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    with limited():
        async with SessionStore(home=home) as store:
            sids, nodes = [], []
            for i in range(10):
                sid = (await store.create_session(cwd="/p")).session_id
                for j in range(3):
                    text = f"{marker(i)} turn {j}" if j == 1 else f"turn {j}"
                    node = await store.append_node(
                        sid, "user", "message", [{"type": "text", "text": text}]
                    )
                    if j == 1:
                        nodes.append(node.node_id)
                sids.append(sid)
            assert await store.search(marker(0))
            placed = await settle(store)
            in_shards = [i for i, sid in enumerate(sids) if placed[sid][0] != catalog.MAIN]
            assert len(in_shards) >= 4
            redact, delete = in_shards[0], in_shards[1]
            assert found_in(home, marker(redact)) and found_in(home, marker(delete))
            # No more rounds of the writer's maintenance: the deleted pair's copy stays in its
            # shard until the close, which must drop it itself.
            monkeypatch.setattr(moves.Maintenance, "__call__", lambda self, connection: False)
            node = await store.redact_node(sids[redact], nodes[redact], reason="erasure")
            assert node.content == [RedactedBlock(reason="erasure")]
            await store.delete_session(sids[delete])  # its copy may still be in the shard
        kept = in_shards[2]
    assert found_in(home, marker(redact)) == []
    assert found_in(home, marker(delete)) == []
    assert found_in(home, marker(kept)), "the scan must find what was not erased"
