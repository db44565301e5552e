"""A transcript cut at a line, imported, then imported again once whole: the one-shot session?

Each cut is imported as a conversation of its own (its source id renamed in every line), so
that every cut of a file goes to one store; a session is compared as text, by the source's own
identities (its nodes, events, active node and runs), the renamed id read back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soong_store import SessionStore
from soong_store.check.run import check_store
from soong_store.importers import import_path
from soong_store.model import codec
from tests.importers.conftest import source_names
from tests.importers.test_import_path import _shape


async def session_text(store: SessionStore, session_id: str, named: str, source_id: str) -> str:
    """What a session holds as text, its source id ``named`` read as ``source_id``."""
    shape = await _shape(store, session_id)
    nodes = await store.list_nodes(session_id)
    names = source_names(nodes)
    held = await store.list_runs(session_id)
    runs = sorted(
        [
            names[run.start_node_id or ""],
            names[run.end_node_id or ""],
            run.status.value,
            run.usage,
            run.created_at,
            run.updated_at,
            sorted(names[n.node_id] for n in nodes if n.run_id == run.run_id),
        ]
        for run in held
    )
    events = sorted([list(key), count] for key, count in shape["events"].items())
    whole: dict[str, Any] = {
        **shape,
        "nodes": sorted(shape["nodes"].items()),
        "events": events,
        "runs": runs,
    }
    return codec.dumps_text(whole).replace(named, source_id)


async def cut_and_continue(tmp_path: Path, source: Path, source_id: str, cuts: list[int]) -> None:
    """Import ``source`` cut after each line of ``cuts``, then whole: the one-shot session.

    ``source_id`` is the id of the conversation the file is (it names the session).
    """
    data = source.read_bytes()
    lines = data.splitlines(keepends=True)
    async with SessionStore(home=tmp_path / "one") as store:
        whole = tmp_path / "one-home" / source.name
        whole.parent.mkdir()
        whole.write_bytes(data)
        (done,) = (await import_path(store, whole)).sources
        assert done.session_id is not None
        expected = await session_text(store, done.session_id, source_id, source_id)
    async with SessionStore(home=tmp_path / "store") as store:
        for at in cuts:
            named = f"{source_id}-cut{at}"
            renamed = [line.replace(source_id.encode(), named.encode()) for line in lines]
            target = tmp_path / "home" / f"cut{at}" / source.name
            target.parent.mkdir(parents=True)
            target.write_bytes(b"".join(renamed[:at]))
            await import_path(store, target)
            target.write_bytes(b"".join(renamed))
            summary = await import_path(store, target)
            (done,) = summary.sources
            assert done.status in ("continued", "up to date"), (at, summary.lines())
            assert done.session_id is not None
            got = await session_text(store, done.session_id, named, source_id)
            assert got == expected, at
        assert (await check_store(store)).ok
