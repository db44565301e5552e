"""A pi session with compactions, cut at a line and imported again once whole.

A compaction comes after the entries it keeps: imported in two parts, the kept entries are in
the store before their compaction is read. The session must still be the one-shot import's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.importers.cuts import cut_and_continue
from tests.importers.test_import_path import CORPUS

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not here")

SMALL = CORPUS / "pi" / "agent-sessions__pi-small.jsonl"
"""Written by pi itself (version 3): two compactions keeping the same first entry."""
REAL = CORPUS / "pi" / "pi-mono__session.jsonl"
"""A real version 1 session: its last line is a compaction keeping its last 108 entries."""
SMALL_ID = "019e19b4-eb48-746a-aa6b-8dfcfa37954b"
REAL_ID = "5fd1e58c-9635-410e-a644-133a96057c90"


async def test_a_pi_session_cut_at_any_line_continues_to_the_one_shot_session(
    tmp_path: Path,
) -> None:
    await cut_and_continue(
        tmp_path, SMALL, SMALL_ID, list(range(1, len(SMALL.read_bytes().splitlines())))
    )


@pytest.mark.slow
async def test_a_real_pi_session_cut_among_what_its_compaction_keeps(tmp_path: Path) -> None:
    # Before the first kept entry (index 355, line 356), on it, within, and before the
    # compaction itself (the last line).
    await cut_and_continue(tmp_path, REAL, REAL_ID, [300, 356, 357, *range(370, 462, 15), 462])
