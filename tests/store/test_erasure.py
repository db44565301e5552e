"""Erasure that holds on disk: once the store is closed, redacted or deleted text is in no file.

Every file under the home is read byte for byte (the database, its log, shard files, artifacts)
for each marker in the forms it could be stored in: as written, folded as the full-text index
keeps its words, and in UTF-16 and ``\\u`` escapes. A marker that was not erased must be found
the same way, so the scan is known to see what it looks for. On PostgreSQL the database is not
in the home: its rows are read instead (what its storage keeps until ``VACUUM`` is said in
docs/operations.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore
from tests.backends import Backend
from tests.helpers import snapshot

pytestmark = pytest.mark.asyncio

REDACTED = "Qxzredactedalpha7Grüße"
DELETED = "Qxzdeletedbeta8Grüße"
KEPT = "Qxzkeptgamma9Grüße"


def forms(marker: str) -> set[bytes]:
    """The byte strings ``marker`` could be stored as."""
    # The index keeps words folded, a word's first letters shared with the word before it.
    words = {marker, marker.lower(), marker.upper(), marker.split("Gr")[0][3:].lower()}
    out: set[bytes] = set()
    for word in words:
        out.add(word.encode())
        out.add(word.encode("utf-16-le"))
        out.add(word.encode("utf-16-be"))
        out.add(json.dumps(word).strip('"').encode())
    return out


def found_in(home: Path, marker: str) -> list[str]:
    """The files under ``home`` holding ``marker`` in any of its forms."""
    wanted = forms(marker)
    return sorted(
        str(path.relative_to(home))
        for path in home.rglob("*")
        if path.is_file() and any(form in path.read_bytes() for form in wanted)
    )


def rows_holding(backend: Backend, marker: str) -> list[str]:
    """The tables with a row holding ``marker`` (as written or folded)."""
    data = snapshot(backend)
    return [
        name
        for name in data["tables"]
        if any(marker in repr(row) or marker.lower() in repr(row) for row in data[name])
    ]


async def _session(store: SessionStore, marker: str, *, filler: int = 30) -> tuple[str, list[str]]:
    """A session whose nodes say ``marker`` in every kind of block, with its artifacts."""
    s = await store.create_session(cwd=".")
    sid = s.session_id
    attachment = await store.put_artifact(sid, f"attached: {marker}".encode(), summary=marker)
    ids = []
    for i in range(filler):  # other words, so that the index has more than the marker's pages
        node = await store.append_node(sid, "user", "message", [{"type": "text", "text": f"w{i}"}])
        ids.append(node.node_id)
    blocks: list[Any] = [
        {"type": "text", "text": f"the key is {marker}"},
        {"type": "artifact_ref", "artifact_id": attachment.artifact_id, "summary": marker},
        {"type": "json", "data": {"rows": [marker] * 2000}},  # spilled to an artifact
    ]
    node = await store.append_node(sid, "user", "message", blocks)
    call = await store.append_node(
        sid,
        "assistant",
        "message",
        [{"type": "tool_call", "tool_call_id": "c1", "name": "use", "arguments": {"k": marker}}],
    )
    assert await store.search(marker)  # in the full-text index's segments now
    return sid, [node.node_id, call.node_id]


@pytest.mark.parametrize("other_open", [False, True], ids=["alone", "another-store-open"])
async def test_redacted_and_deleted_text_is_in_no_file_of_the_home(
    backend: Backend, other_open: bool
):
    """``another-store-open``: the database stays open elsewhere (another process, as far as
    SQLite's files go), so closing does not delete the log: the store cuts it itself."""
    other = backend.store()
    async with backend.store() as store:
        redacted, nodes = await _session(store, REDACTED)
        deleted, _ = await _session(store, DELETED)
        await _session(store, KEPT)
        if other_open:
            await other.open()
            assert (await other.get_session(redacted)).session_id == redacted
        for node_id in nodes:
            await store.redact_node(redacted, node_id, reason="erasure request")
        await store.delete_session(deleted)
        assert await store.search(REDACTED) == []
    try:
        in_files = {m: found_in(backend.home, m) for m in (REDACTED, DELETED, KEPT)}
    finally:
        await other.close()
    assert in_files[REDACTED] == [] and in_files[DELETED] == []
    assert in_files[KEPT], "the scan must find what was not erased"
    assert rows_holding(backend, REDACTED) == [] and rows_holding(backend, DELETED) == []
    assert rows_holding(backend, KEPT)
