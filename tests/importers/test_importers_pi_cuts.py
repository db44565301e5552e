"""A pi session with compactions, cut at a line and imported again once whole.

A compaction comes after the entries it keeps: imported in two parts, the kept entries are in
the store before their compaction is read. The session must still be the one-shot import's.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from soong_store import SessionStore
from soong_store.check.run import check_store
from soong_store.importers import import_path
from soong_store.model import codec
from tests.importers.test_import_path import CORPUS, _all, _shape

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not here")

SMALL = CORPUS / "pi" / "agent-sessions__pi-small.jsonl"
"""Written by pi itself (version 3): two compactions keeping the same first entry."""
REAL = CORPUS / "pi" / "pi-mono__session.jsonl"
"""A real version 1 session: its last line is a compaction keeping its last 108 entries."""


def _canon(shape: dict[str, object], named: str, source_id: str) -> str:
    """A session's shape as text, its source id ``named`` read as ``source_id``."""
    events = shape["events"]
    assert isinstance(events, dict)
    nodes = shape["nodes"]
    assert isinstance(nodes, dict)
    whole = {
        **shape,
        "nodes": sorted(nodes.items()),
        "events": sorted([list(k), n] for k, n in events.items()),
    }
    return codec.dumps_text(whole).replace(named, source_id)


async def _cuts(tmp_path: Path, source: Path, cuts: list[int]) -> None:
    """Import ``source`` cut after each line of ``cuts``, then whole: the one-shot session."""
    data = source.read_bytes()
    lines = data.splitlines(keepends=True)
    source_id = orjson.loads(lines[0])["id"]
    async with SessionStore(home=tmp_path / "one") as store:
        whole = tmp_path / "one-home" / source.name
        whole.parent.mkdir()
        whole.write_bytes(data)
        await import_path(store, whole)
        expected = _canon((await _all(store))[source_id], source_id, source_id)
    async with SessionStore(home=tmp_path / "store") as store:
        for at in cuts:  # each cut is a session of its own id
            named = f"{source_id}-cut{at}"
            renamed = [line.replace(source_id.encode(), named.encode()) for line in lines]
            target = tmp_path / "home" / f"cut{at}" / source.name
            target.parent.mkdir(parents=True)
            target.write_bytes(b"".join(renamed[:at]))
            await import_path(store, target)
            target.write_bytes(b"".join(renamed))
            summary = await import_path(store, target)
            done = {s.status for s in summary.sources}
            assert done <= {"continued", "up to date"}, (at, summary.lines())
            got = await _shape(store, summary.sources[0].session_id)
            assert _canon(got, named, source_id) == expected, at
        assert (await check_store(store)).ok


async def test_a_pi_session_cut_at_any_line_continues_to_the_one_shot_session(
    tmp_path: Path,
) -> None:
    await _cuts(tmp_path, SMALL, list(range(1, len(SMALL.read_bytes().splitlines()))))


@pytest.mark.slow
async def test_a_real_pi_session_cut_among_what_its_compaction_keeps(tmp_path: Path) -> None:
    # Before the first kept entry (index 355, line 356), on it, within, and before the
    # compaction itself (the last line).
    await _cuts(tmp_path, REAL, [300, 356, 357, *range(370, 462, 15), 462])
