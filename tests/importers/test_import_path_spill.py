"""A large source goes to the import as an export on disk, its parsed shape let go first.

The import of a new source holds the source's parsed shape (ids, parents, kinds, times of every
entry) while the import keeps rows of its own; for a source over ``sources._SPILL_BYTES`` the two
must not add up (issue 47, point 11: a 116 MB transcript imported in ≤ 250 MB). These tests lower
the bound so that the corpus home takes that road, and check it gives the same sessions.
"""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore
from soong_store.importers import import_path, sources
from soong_store.importers._spool import ContentSpool
from soong_store.transfer import format as transfer_format
from soong_store.write import session_keys
from tests.importers.conftest import CORPUS, FILES, arrive, session_shapes


def _home(root: Path) -> Path:
    for name in FILES:
        arrive(root, name)
    return root


async def test_a_source_over_the_bound_is_read_from_disk_with_its_shape_let_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home(tmp_path / "home")
    async with SessionStore(home=tmp_path / "objects") as store:
        await import_path(store, home, cwd=CORPUS)
        expected = await session_shapes(store)

    entries_at_import: list[int] = []
    import_session = sources.import_session
    watched: ContextVar[list[Any]] = ContextVar("watched")  # sources are written side by side

    async def import_watched(store: SessionStore, rows: Any, **kwargs: Any) -> Any:
        entries_at_import.append(sum(len(s.entries) for s in watched.get()))
        return await import_session(store, rows, **kwargs)

    create = sources._Run.create

    async def create_watched(self: Any, session: Any, pieces: Any, *args: Any) -> None:
        watched.set([session, *(p.session for p in pieces)])
        await create(self, session, pieces, *args)

    monkeypatch.setattr(sources, "_SPILL_BYTES", 0)
    monkeypatch.setattr(sources, "import_session", import_watched)
    monkeypatch.setattr(sources._Run, "create", create_watched)
    async with SessionStore(home=tmp_path / "spilled") as store:
        summary = await import_path(store, home, cwd=CORPUS)
        assert {s.status for s in summary.sources} == {"imported"}, summary.lines()
        assert await session_shapes(store) == expected
    assert entries_at_import and set(entries_at_import) == {0}  # every shape let go first


async def test_a_large_source_written_meanwhile_by_another_import_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    arrive(home, FILES[0])

    async def taken(store: SessionStore, rows: Any, **kwargs: Any) -> Any:
        for _ in rows:  # the export is read, then another import's commit wins
            pass
        raise session_keys.KeyTaken("taken", session_id="sess_other")

    monkeypatch.setattr(sources, "_SPILL_BYTES", 0)
    monkeypatch.setattr(sources, "import_session", taken)
    async with SessionStore(home=tmp_path / "store") as store:
        summary = await import_path(store, home, cwd=CORPUS)
        [result] = summary.sources
        assert (result.status, result.session_id) == ("refused", "sess_other")
        assert result.detail is not None and "import again" in result.detail
        assert await store.list_sessions() == []


def test_the_import_spool_holds_neither_line_nor_row_while_a_row_is_out() -> None:
    spool = transfer_format.Spool()
    try:
        for seq in (2, 1):
            spool.add("node", {"node_seq": seq, "content_json": "x" * 10_000})
        rows = spool.rows("node")
        row = next(rows)
        assert row["node_seq"] == 1
        frame = rows.gi_frame
        assert frame is not None
        held = [v for v in frame.f_locals.values() if isinstance(v, (bytes, dict))]
        held += [v for v in frame.f_locals.values() if isinstance(v, list) and v]
        assert not [v for v in held if v is row or (isinstance(v, bytes) and len(v) > 1000)]
        assert not [v for v in held if isinstance(v, list) and any(isinstance(x, bytes) for x in v)]
        rows.close()
    finally:
        spool.close()


async def test_a_source_over_the_park_bound_parks_its_content_and_gives_the_same_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``sources._PARK_BYTES`` a source's content stays in its entries, over it waits on
    disk (:class:`ContentSpool`): the sessions are the same either way."""
    home = _home(tmp_path / "home")
    parked: list[object] = []
    park = ContentSpool.park
    monkeypatch.setattr(ContentSpool, "park", lambda self, e: parked.append(e) or park(self, e))
    shapes = []
    for bound in (sources._PARK_BYTES, 0):
        monkeypatch.setattr(sources, "_PARK_BYTES", bound)
        async with SessionStore(home=tmp_path / f"parked-{bound}") as store:
            summary = await import_path(store, home, cwd=CORPUS)
            assert {s.status for s in summary.sources} == {"imported"}, summary.lines()
            shapes.append(await session_shapes(store))
        assert bool(parked) == (bound == 0)
    assert shapes[0] == shapes[1]


def test_the_import_spool_holds_a_short_sessions_rows_and_spills_the_rest() -> None:
    rows = [{"node_seq": seq, "content_json": "x" * 1000} for seq in (3, 1, 2, 5, 4)]
    short = transfer_format.Spool(hold=10_000)
    try:
        for row in rows:
            short.add("node", row)
        assert short._file is None  # a short session never touches the disk
        assert [r["node_seq"] for r in short.rows("node")] == [1, 2, 3, 4, 5]
        assert list(short.rows("node")) == sorted(rows, key=lambda r: r["node_seq"])
    finally:
        short.close()
    long = transfer_format.Spool(hold=3000)  # two rows held, three on disk
    try:
        for row in rows:
            long.add("node", row)
        assert long._file is not None and len(long._held) == 2
        for _ in range(2):  # as many times as a retried write asks
            assert list(long.rows("node")) == sorted(rows, key=lambda r: r["node_seq"])
    finally:
        long.close()


async def test_a_run_reads_the_imported_sources_once_and_again_only_when_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One read of every imported source's key per run, not one per source; a session held
    at the start and deleted meanwhile is looked up again (the source is imported anew)."""
    home = _home(tmp_path / "home")
    lookups: list[str] = []
    run_read = sources.run_read

    async def counted(store: SessionStore, job: Any) -> Any:
        if getattr(job, "func", None) is session_keys.lookup:
            lookups.append(job.keywords["key"])
        return await run_read(store, job)

    monkeypatch.setattr(sources, "run_read", counted)
    real = sources._imported_sources
    stale: dict[tuple[str, str], str] = {}

    def with_stale(connection: Any) -> dict[tuple[str, str], str]:
        return {**real(connection), **stale}

    monkeypatch.setattr(sources, "_imported_sources", with_stale)
    async with SessionStore(home=tmp_path / "store") as store:
        summary = await import_path(store, home, cwd=CORPUS)
        assert {s.status for s in summary.sources} == {"imported"}, summary.lines()
        assert lookups == []
        first = summary.sources[0]
        await store.delete_session(first.session_id)
        stale[(f"import:{first.format}", first.source_id)] = first.session_id
        again = await import_path(store, first.files[0], cwd=CORPUS)
        [result] = again.sources
        assert result.status == "imported", again.lines()
        assert result.session_id != first.session_id
        assert lookups == [first.source_id]
