"""Export and import of a session: lossless round trips, fresh ids, refusals writing nothing."""

from __future__ import annotations

import asyncio
import base64
import io
import re
import subprocess
import sys
from collections.abc import Callable
from copy import deepcopy
from pathlib import Path
from typing import Any

import orjson
import pytest

from soong_store import InvalidArgument, TextBlock
from soong_store.check.run import check_store
from soong_store.cli.markdown import export_markdown
from soong_store.demo import write_demo
from soong_store.rules import row as rules_row
from soong_store.transfer import export_session, import_session
from soong_store.transfer.format import Encoded
from soong_store.write.session_writer import SessionWriter
from tests.backends import Backend
from tests.helpers import events_table, nodes_table, snapshot
from tests.helpers import rows as table_rows


@pytest.fixture(scope="module")
def demo(module_backend: Backend) -> tuple[Backend, str]:
    async def build() -> str:
        async with module_backend.store() as store:
            return await write_demo(store, module_backend.home / "demo-project")

    return module_backend, asyncio.run(build())


@pytest.fixture
def copy(
    demo: tuple[Backend, str], clone: Callable[[Backend, str], Backend]
) -> tuple[Backend, str]:
    return clone(demo[0], "home"), demo[1]


def rows_of(backend: Backend, sid: str) -> dict[str, list[tuple[Any, ...]]]:
    """The session's rows in every table, read behind the store's back."""
    out = {
        name: sorted(table_rows(backend, name, {"session_id": sid}))
        for name in ("sessions", "agents", "runs", "artifacts")
    }
    out["nodes"] = sorted(table_rows(backend, nodes_table(sid)))
    out["events"] = sorted(table_rows(backend, events_table(sid)))
    return out


def files_of(home: Path) -> dict[str, bytes]:
    root = home / "artifacts"
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


async def exported(
    backend: Backend, sid: str, *, with_artifacts: bool = True
) -> list[dict[str, Any]]:
    out = io.StringIO()
    async with backend.store() as store:
        await export_session(store, sid, out, with_artifacts=with_artifacts)
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def encode(lines: list[dict[str, Any]]) -> list[bytes]:
    return [orjson.dumps(line) for line in lines]


def objects(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines as objects, each a copy of its own (an import may keep them)."""
    return deepcopy(lines)


def test_round_trip_through_the_cli_is_equal(
    demo: tuple[Backend, str], new_backend: Callable[[str], Backend], tmp_path: Path
) -> None:
    backend, sid = demo
    target = new_backend("other-machine")
    dump = tmp_path / "session.jsonl"
    command = [sys.executable, "-m", "soong_store"]
    done = subprocess.run(
        [*command, *backend.cli, "export", sid, "-o", str(dump)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and done.stderr == "" and done.stdout == ""
    with dump.open("rb") as source:
        done = subprocess.run(
            [*command, *target.cli, "import", "-"], stdin=source, capture_output=True, text=True
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"imported session {sid}:")
    assert rows_of(target, sid) == rows_of(backend, sid)
    assert files_of(target.home) == files_of(backend.home)


async def test_lines_given_as_objects_import_as_their_text(
    demo: tuple[Backend, str], new_backend: Callable[[str], Backend]
) -> None:
    """An importer hands over the objects its lines encode: the same rows as the text gives."""
    backend, sid = demo
    lines = await exported(backend, sid)
    target = new_backend("objects")
    async with target.store() as store:
        result = await import_session(store, iter(lines))
        assert result.counts == lines[0]["counts"]
        assert (await check_store(store)).ok
    assert rows_of(target, sid) == rows_of(backend, sid)
    assert files_of(target.home) == files_of(backend.home)


async def test_an_importers_own_lines_are_not_decoded_again(
    demo: tuple[Backend, str],
    new_backend: Callable[[str], Backend],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Lines an importer made (``Encoded``) keep their JSON columns as the store encoded them.

    The same rows as the text gives; only their JSON columns are taken as they are, every other
    column is checked as any line's, and a plain object's content is still decoded.
    """
    backend, sid = demo
    lines = await exported(backend, sid)
    decoded: list[str] = []
    real = rules_row.decode_stored_content
    monkeypatch.setattr(rules_row, "decode_stored_content", lambda t: decoded.append(t) or real(t))
    own = [lines[0], *(Encoded(line) for line in objects(lines[1:]))]
    target = new_backend("encoded")
    async with target.store() as store:
        await import_session(store, iter(own))
        assert decoded == []
        assert (await check_store(store)).ok
    assert rows_of(target, sid) == rows_of(backend, sid)
    bad = REFUSALS["naive timestamp"](objects(lines))
    async with backend.store() as store:
        with pytest.raises(InvalidArgument, match="UTC timestamp"):
            await import_session(store, [bad[0], *(Encoded(line) for line in bad[1:])])
        with pytest.raises(InvalidArgument, match="already exists"):
            await import_session(store, objects(lines))
    assert decoded  # a plain object's content was checked as text's is


async def test_new_id_copies_next_to_the_original(copy: tuple[Backend, str]) -> None:
    backend, sid = copy
    before = rows_of(backend, sid)
    lines = await exported(backend, sid)
    async with backend.store() as store:
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
    assert rows_of(backend, sid) == before


def mutate(kind: str, change: Callable[[dict[str, Any]], Any], nth: int = 0) -> Any:
    def apply(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        matching = [line for line in lines[1:] if line["kind"] == kind]
        change(matching[nth])
        return lines

    return apply


def set_row(column: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda line: line["row"].__setitem__(column, value)


def rows(lines: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [line["row"] for line in lines[1:] if line["kind"] == kind]


def change(edit: Callable[[list[dict[str, Any]]], None]) -> Any:
    def apply(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        edit(lines)
        return lines

    return apply


def _cycle(lines: list[dict[str, Any]]) -> None:
    first, second = rows(lines, "node")[:2]
    first["parent_id"] = second["node_id"]


def _unnamed_node(lines: list[dict[str, Any]]) -> None:
    node = rows(lines, "node")[0]["node_id"]
    for event in rows(lines, "event"):
        if event["node_id"] == node:
            event["node_id"] = None


def _two_running_main_runs(lines: list[dict[str, Any]]) -> None:
    root = rows(lines, "session")[0]["root_agent_id"]
    for run in [r for r in rows(lines, "run") if r["agent_id"] == root][:2]:
        run.update(status="running", end_reason=None)


def _assistant_branch(lines: list[dict[str, Any]]) -> None:
    nodes = rows(lines, "node")
    node = next(n for n in nodes[2:] if n["role"] == "assistant")
    node["parent_id"] = nodes[0]["node_id"]


def _foreign_path(folder: str) -> Any:
    def edit(lines: list[dict[str, Any]]) -> None:
        row = rows(lines, "artifact")[0]
        name = row["path"].split("/")[-1]
        row["path"] = folder.format(sid=row["session_id"], name=name)

    return change(edit)


def _last(kind: str, column: str, step: int) -> Any:
    def edit(lines: list[dict[str, Any]]) -> None:
        rows(lines, kind)[-1][column] += step

    return change(edit)


def _run_seq_gap(lines: list[dict[str, Any]]) -> None:
    event = next(e for e in rows(lines, "event") if e["run_id"] is not None)
    event["run_seq"] += 10


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
    # what the API refuses or check reports is refused too
    "parent cycle": change(_cycle),
    "NaN in content": mutate("node", set_row("content_json", '[{"type":"json","data":NaN}]')),
    "Infinity in metadata": mutate("node", set_row("metadata_json", '{"x":Infinity}')),
    "1e400 in a payload": mutate("event", set_row("payload_json", "[1e400]")),
    "integer beyond 64 bits": mutate(
        "node", set_row("content_json", '[{"type":"json","data":18446744073709551616}]')
    ),
    "repeated key": mutate("event", set_row("payload_json", '{"a":1,"a":2}')),
    "content not as the store writes it": mutate(
        "node", set_row("content_json", '[{"type": "text", "text": "spaced"}]')
    ),
    "path into another session's folder": _foreign_path("sess_other/{name}"),
    "path into a folder that is no session": _foreign_path("not-a-session/{name}"),
    "empty path part": _foreign_path("{sid}//{name}"),
    "dot path part": _foreign_path("{sid}/./{name}"),
    "path named for another artifact": _foreign_path("{sid}/art_00000000000000000000000000.txt"),
    "content refers to an artifact not of the session": mutate(
        "node",
        set_row("content_json", '[{"type":"artifact_ref","artifact_id":"art_of_someone_else"}]'),
    ),
    "seq gap": _last("event", "seq", 1),
    "node_seq gap": _last("node", "node_seq", 5),
    "run_seq gap": change(_run_seq_gap),
    "node without event": change(_unnamed_node),
    "two running main runs": change(_two_running_main_runs),
    "root agent of type sub": mutate("agent", set_row("agent_type", "sub")),
    "assistant opens a branch": change(_assistant_branch),
    "artifact names a missing node": mutate("artifact", set_row("node_id", "node_nowhere"), 1),
    "artifact names a missing agent": mutate("artifact", set_row("agent_id", "agent_nobody"), 1),
    "cwd holding NUL": mutate("session", set_row("cwd", "/tmp/a\x00b")),
    "relative cwd": mutate("session", set_row("cwd", "project")),
    "naive timestamp": mutate("node", set_row("created_at", "2026-01-01T00:00:00.000000")),
    "timestamp not in UTC": mutate(
        "event", set_row("created_at", "2026-01-01T01:00:00.000000+01:00")
    ),
    "token_count of 2**63": mutate("node", set_row("token_count", 2**63)),
    "finished run without an end reason": mutate("run", set_row("end_reason", None)),
    "float for an integer": mutate("node", set_row("token_count", 1.0)),
    "tuple for a text": mutate("node", set_row("role", ("user",))),
}


@pytest.mark.parametrize("case", REFUSALS)
async def test_a_bad_file_is_refused_and_nothing_is_written(
    copy: tuple[Backend, str], case: str
) -> None:
    backend, sid = copy
    lines = REFUSALS[case](await exported(backend, sid))
    before, files = snapshot(backend), files_of(backend.home)
    async with backend.store() as store:
        # As text, and as the objects the lines encode (an importer's own rows): refused alike.
        for given, new_id in ((encode, False), (encode, True), (objects, False)):
            with pytest.raises(InvalidArgument) as caught:
                await import_session(store, given(lines), new_id=new_id)
            assert "\n" not in str(caught.value)
            if lines:
                assert re.search(r"^bad export file, line \d+: ", str(caught.value))
    assert snapshot(backend) == before
    assert files_of(backend.home) == files


def renamed(lines: list[dict[str, Any]], old: str, new: str) -> list[bytes]:
    return [line.replace(old.encode(), new.encode()) for line in encode(lines)]


async def test_an_existing_session_is_refused_also_in_another_case(
    copy: tuple[Backend, str], tmp_path: Path
) -> None:
    backend, sid = copy
    lines = await exported(backend, sid)
    (backend.home / "artifacts" / sid / "stray.bin").write_bytes(b"x")
    before, files = snapshot(backend), files_of(backend.home)
    async with backend.store() as store:
        for attempt in (encode(lines), renamed(lines, sid, sid.upper())):
            with pytest.raises(InvalidArgument, match="already exists"):
                await import_session(store, attempt)
        with pytest.raises(InvalidArgument, match="agent .* already exists"):
            await import_session(store, renamed(lines, sid, "sess_20000101_000000_0000"))
        await store.delete_session(sid)
    assert snapshot(backend) != before
    async with backend.store() as store:
        result = await import_session(store, encode(lines))
        assert result.session_id == sid
    assert files_of(backend.home) == files


async def test_an_orphan_file_in_the_way_is_replaced(
    copy: tuple[Backend, str], new_backend: Callable[[str], Backend]
) -> None:
    backend, sid = copy
    lines = await exported(backend, sid)
    target = new_backend("target")
    artifact = next(line for line in lines[1:] if line["kind"] == "artifact")
    squatter = target.home / "artifacts" / artifact["row"]["path"]
    squatter.parent.mkdir(parents=True)
    squatter.write_bytes(b"someone else's file")
    async with target.store() as store:
        await import_session(store, encode(lines))
        assert (await check_store(store)).ok
        data = await store.read_artifact(artifact["row"]["artifact_id"])
    assert data == base64.b64decode(artifact["data_b64"]) != b"someone else's file"


async def test_an_export_without_artifacts_imports_its_rows_and_counts_the_files(
    copy: tuple[Backend, str], new_backend: Callable[[str], Backend]
) -> None:
    backend, sid = copy
    lines = await exported(backend, sid, with_artifacts=False)
    assert lines[0]["with_artifacts"] is False
    assert all("data_b64" not in line for line in lines[1:])
    target = new_backend("target")
    async with target.store() as store:
        result = await import_session(store, encode(lines))
        assert result.missing_files == lines[0]["counts"]["artifacts"] > 0
        assert len(await store.list_artifacts(sid)) == result.missing_files
        report = await check_store(store)
    assert {p.kind for p in report.problems} == {"missing_artifact_file"}
    assert not (target.home / "artifacts").exists()


async def test_markdown_renders_the_active_path(demo: tuple[Backend, str]) -> None:
    backend, sid = demo
    out = io.StringIO()
    async with backend.store() as store:
        await export_markdown(store, sid, out)
        path = await store.active_path(sid)
    text = out.getvalue()
    assert text.startswith(f"# Session {sid}\n")
    assert text.count("\n## #") == len(path)
    assert "context the model gets starts here" in text
    assert "**tool error**" in text and "**tool call** `edit_file`" in text


async def test_new_id_rewrites_ids_only_where_ids_are_held(backend: Backend, home: Path) -> None:
    async with backend.store() as store:
        sid = (await store.create_session(cwd=home)).session_id
        root = (await store.get_session(sid)).root_agent_id
        run = await store.start_run(sid, root)
        art = await store.put_artifact(sid, b"attached", filename="a.txt", run_id=run.run_id)
        said = [
            {"type": "text", "text": art.artifact_id},
            {"type": "json", "data": {"agent": root, "run": run.run_id, "session": sid}},
            {"type": "artifact_ref", "artifact_id": art.artifact_id},
        ]
        await store.append_node(
            sid, "user", "message", said, run_id=run.run_id, metadata={"about": art.artifact_id}
        )
        await store.append_event(sid, "note", payload={"mentions": [root, art.artifact_id]})
        out = io.StringIO()
        await export_session(store, sid, out)
        result = await import_session(store, out.getvalue().splitlines(), new_id=True)
        copy = result.session_id
        (node,) = await store.list_nodes(copy)
        (new_art,) = await store.list_artifacts(copy)
        new_root = (await store.get_session(copy)).root_agent_id
        assert new_art.artifact_id != art.artifact_id and new_root != root
        assert node.content[0] == TextBlock(text=art.artifact_id)
        assert node.content[1].data == {"agent": root, "run": run.run_id, "session": sid}
        assert node.content[2].artifact_id == new_art.artifact_id
        assert node.metadata == {"about": art.artifact_id}
        assert node.agent_id == new_root and node.run_id not in (None, run.run_id)
        note = next(e for e in await store.timeline(copy) if e.event_type == "note")
        assert note.payload == {"mentions": [root, art.artifact_id]}
        created = next(e for e in await store.timeline(copy) if e.event_type == "artifact_created")
        assert created.payload["artifact_id"] == new_art.artifact_id
        assert (await check_store(store)).ok


async def test_import_and_fork_write_nodes_through_the_one_insert_path(
    copy: tuple[Backend, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, sid = copy
    lines = await exported(backend, sid)
    written: list[str] = []
    original = SessionWriter._put_nodes

    def spy(self: SessionWriter, rows: list[dict[str, Any]]) -> None:
        written.extend(self.session_id for _ in rows)
        original(self, rows)

    monkeypatch.setattr(SessionWriter, "_put_nodes", spy)
    async with backend.store() as store:
        copied = await import_session(store, encode(lines), new_id=True)
        assert written.count(copied.session_id) == copied.counts["nodes"]
        fork = await store.fork_session(sid, (await store.active_path(sid))[-1].node_id)
        assert written.count(fork.session_id) == len(await store.list_nodes(fork.session_id))
        await store.append_node(sid, "user", "message", [TextBlock(text="one more")])
        assert written[-1] == sid
