"""Export and import of a session: lossless round trips, fresh ids, refusals writing nothing."""

from __future__ import annotations

import asyncio
import io
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from soong_store import InvalidArgument, SessionStore
from soong_store._render import export_markdown
from soong_store.check import check_store
from soong_store.demo import write_demo
from soong_store.transfer import export_session, import_session
from tests.conftest import connect_raw, db_path, snapshot


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    home = tmp_path_factory.mktemp("transfer") / "home"

    async def build() -> str:
        async with SessionStore(home=home) as store:
            return await write_demo(store, home / "demo-project")

    return home, asyncio.run(build())


@pytest.fixture
def copy(demo: tuple[Path, str], tmp_path: Path) -> tuple[Path, str]:
    home = tmp_path / "home"
    shutil.copytree(demo[0], home)
    return home, demo[1]


def rows_of(home: Path, sid: str) -> dict[str, list[tuple[Any, ...]]]:
    """The session's rows in every table, read with raw sqlite3."""
    con = connect_raw(db_path(home))
    try:
        out = {
            name: sorted(con.execute(f"SELECT * FROM {name} WHERE session_id = ?", (sid,)))
            for name in ("sessions", "agents", "runs", "artifacts")
        }
        for name in (f"nodes_{sid}", f"events_{sid}"):
            out[name.split("_")[0]] = sorted(con.execute(f'SELECT * FROM "{name}"'))
        return out
    finally:
        con.close()


def files_of(home: Path) -> dict[str, bytes]:
    root = home / "artifacts"
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


async def exported(home: Path, sid: str, *, with_artifacts: bool = True) -> list[dict[str, Any]]:
    out = io.StringIO()
    async with SessionStore(home=home) as store:
        await export_session(store, sid, out, with_artifacts=with_artifacts)
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def encode(lines: list[dict[str, Any]]) -> list[bytes]:
    return [orjson.dumps(line) for line in lines]


def test_round_trip_through_the_cli_is_equal(demo: tuple[Path, str], tmp_path: Path) -> None:
    home, sid = demo
    target = tmp_path / "other-machine"
    dump = tmp_path / "session.jsonl"
    command = [sys.executable, "-m", "soong_store", "--home"]
    done = subprocess.run(
        [*command, str(home), "export", sid, "--with-artifacts", "-o", str(dump)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and done.stderr == "" and done.stdout == ""
    with dump.open("rb") as source:
        done = subprocess.run(
            [*command, str(target), "import", "-"], stdin=source, capture_output=True, text=True
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"imported session {sid}:")
    assert rows_of(target, sid) == rows_of(home, sid)
    assert files_of(target) == files_of(home)


async def test_new_id_copies_next_to_the_original(copy: tuple[Path, str]) -> None:
    home, sid = copy
    before = rows_of(home, sid)
    lines = await exported(home, sid, with_artifacts=False)
    async with SessionStore(home=home) as store:
        result = await import_session(store, encode(lines), new_id=True)
        new = result.session_id
        assert new != sid and result.source_session_id == sid
        assert result.counts == lines[0]["counts"]
        report = await check_store(store)
        assert report.ok, report.problems
        original_nodes = [n.content for n in await store.list_nodes(sid)]
        copied_nodes = [n.content for n in await store.list_nodes(new)]
        assert len(copied_nodes) == len(original_nodes)
        assert len(await store.active_path(new)) == len(await store.active_path(sid))
        original_art = await store.list_artifacts(sid)
        copied_art = await store.list_artifacts(new)
        for old, fresh in zip(original_art, copied_art, strict=True):
            assert fresh.artifact_id != old.artifact_id
            assert fresh.path == f"{new}/{fresh.artifact_id}{Path(old.path).suffix}"
            assert await store.read_artifact(fresh.artifact_id) == await store.read_artifact(
                old.artifact_id
            )
        refs = orjson.dumps([b.model_dump() for n in copied_nodes for b in n]).decode()
        assert all(a.artifact_id not in refs for a in original_art)
        assert sum(a.artifact_id in refs for a in copied_art) == 2
        agents = {a.agent_id for a in await store.list_agents(new)}
        assert agents.isdisjoint(a.agent_id for a in await store.list_agents(sid))
    assert rows_of(home, sid) == before


def mutate(kind: str, change: Callable[[dict[str, Any]], Any], nth: int = 0) -> Any:
    def apply(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        matching = [line for line in lines[1:] if line["kind"] == kind]
        change(matching[nth])
        return lines

    return apply


def set_row(column: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda line: line["row"].__setitem__(column, value)


REFUSALS: dict[str, Callable[[list[dict[str, Any]]], Any]] = {
    "empty file": lambda lines: [],
    "no header": lambda lines: lines[1:],
    "unknown version": lambda lines: [{**lines[0], "version": 2}, *lines[1:]],
    "not a soong export": lambda lines: [{"format": "other", "version": 1}, *lines[1:]],
    "truncated": lambda lines: lines[:-1],
    "out of order": lambda lines: [lines[0], lines[1], lines[-1], *lines[2:-1]],
    "two session rows": lambda lines: [lines[0], lines[1], *lines[1:]],
    "unknown kind": lambda lines: [*lines, {"kind": "secret", "row": {}}],
    "extra column": mutate("node", set_row("evil", 1)),
    "missing column": mutate("event", lambda line: line["row"].pop("level")),
    "wrong type": mutate("node", set_row("node_seq", "1")),
    "bool for an integer": mutate("node", set_row("token_count", True)),
    "bad enum": mutate("node", set_row("role", "wizard")),
    "bad timestamp": mutate("run", set_row("created_at", "yesterday")),
    "bad json column": mutate("event", set_row("payload_json", "{nope")),
    "NaN in json": mutate("event", set_row("payload_json", "NaN")),
    "bad content": mutate("node", set_row("content_json", '[{"type": "nope"}]')),
    "dangling parent": mutate("node", set_row("parent_id", "node_nowhere"), 3),
    "dangling event node": mutate("event", set_row("node_id", "node_nowhere"), 2),
    "unknown agent": mutate("run", set_row("agent_id", "agent_nobody")),
    "row of another session": mutate("agent", set_row("session_id", "sess_other")),
    "hostile record id": mutate("node", set_row("node_id", "node'; DROP TABLE sessions; --")),
    "duplicate node id": lambda lines: [
        *lines[:-1],
        *[line for line in lines[1:] if line["kind"] == "node"][:1],
        lines[-1],
    ],
    "artifact path escapes": mutate("artifact", set_row("path", "../../outside.txt")),
    "artifact path hidden": mutate("artifact", set_row("path", "sess_x/.tmp-evil")),
    "bad base64": mutate("artifact", lambda line: line.__setitem__("data_b64", "!!not base64")),
    "wrong artifact size": mutate("artifact", set_row("size_bytes", 1)),
}


@pytest.mark.parametrize("case", REFUSALS)
async def test_a_bad_file_is_refused_and_nothing_is_written(
    copy: tuple[Path, str], case: str
) -> None:
    home, sid = copy
    lines = REFUSALS[case](await exported(home, sid))
    before, files = snapshot(home), files_of(home)
    async with SessionStore(home=home) as store:
        for new_id in (False, True):
            with pytest.raises(InvalidArgument) as caught:
                await import_session(store, encode(lines), new_id=new_id)
            assert "\n" not in str(caught.value)
    assert snapshot(home) == before
    assert files_of(home) == files


def renamed(lines: list[dict[str, Any]], old: str, new: str) -> list[bytes]:
    return [line.replace(old.encode(), new.encode()) for line in encode(lines)]


async def test_an_existing_session_is_refused_also_in_another_case(
    copy: tuple[Path, str], tmp_path: Path
) -> None:
    home, sid = copy
    lines = await exported(home, sid)
    (home / "artifacts" / sid / "stray.bin").write_bytes(b"x")
    before, files = snapshot(home), files_of(home)
    async with SessionStore(home=home) as store:
        for attempt in (encode(lines), renamed(lines, sid, sid.upper())):
            with pytest.raises(InvalidArgument, match="already exists"):
                await import_session(store, attempt)
        with pytest.raises(InvalidArgument, match="agent .* already exists"):
            await import_session(store, renamed(lines, sid, "sess_20000101_000000_0000"))
        await store.delete_session(sid)
    assert snapshot(home) != before
    async with SessionStore(home=home) as store:
        result = await import_session(store, encode(lines))
        assert result.session_id == sid
    assert files_of(home) == files


async def test_an_artifact_file_with_other_bytes_is_not_overwritten(
    copy: tuple[Path, str], tmp_path: Path
) -> None:
    home, sid = copy
    lines = await exported(home, sid)
    target = tmp_path / "target"
    artifact = next(line for line in lines[1:] if line["kind"] == "artifact")["row"]
    squatter = target / "artifacts" / artifact["path"]
    squatter.parent.mkdir(parents=True)
    squatter.write_bytes(b"someone else's file")
    async with SessionStore(home=target) as store:
        with pytest.raises(InvalidArgument, match="other bytes"):
            await import_session(store, encode(lines))
        assert await store.list_sessions() == []
    assert files_of(target) == {artifact["path"]: b"someone else's file"}


async def test_markdown_renders_the_active_path(demo: tuple[Path, str]) -> None:
    home, sid = demo
    out = io.StringIO()
    async with SessionStore(home=home) as store:
        await export_markdown(store, sid, out)
        path = await store.active_path(sid)
    text = out.getvalue()
    assert text.startswith(f"# Session {sid}\n")
    assert text.count("\n## #") == len(path)
    assert "context the model gets starts here" in text
    assert "**tool error**" in text and "**tool call** `edit_file`" in text
