"""The ``soong-store`` command line, every command run as a subprocess on a fresh database."""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import make_url

from soong_store import __version__
from soong_store.cli import build_parser, main
from soong_store.migrate.upgrade import head_revision
from tests.backends import Backend, Kind
from tests.conftest import text
from tests.helpers import execute

Where = Backend | Path | None
"""What a command is pointed at: a backend's home and url, a home alone, or the default."""


def location(where: Where) -> list[str]:
    """The options that point the command at ``where``."""
    if where is None:
        return []
    if isinstance(where, Backend):
        return where.cli
    return ["--home", str(where)]


def cli(where: Where, *args: str, env: dict[str, str] | None = None, **kw: Any):
    base = [sys.executable, "-m", "soong_store", *location(where)]
    environ = {k: v for k, v in os.environ.items() if k != "SOONG_AGENT_HOME"}
    environ.update(env or {})
    return subprocess.run(
        base + list(args), capture_output=True, text=True, env=environ, timeout=60, **kw
    )


def ok(where: Where, *args: str) -> str:
    done = cli(where, *args)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


def as_json(where: Where, *args: str) -> Any:
    return json.loads(ok(where, *args, "--json"))


def many(where: Where, *commands: tuple[str, ...]) -> list[subprocess.CompletedProcess[str]]:
    """Run several commands as subprocesses at once (each start costs most of a second)."""
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda args: cli(where, *args), commands))


class InProcess:
    """``cli.main`` in this process, for the many variants of a command already run as one."""

    def __init__(self, capsys: pytest.CaptureFixture[str], where: Where) -> None:
        self.capsys, self.where = capsys, where

    def __call__(self, *args: str, code: int = 0) -> str:
        self.capsys.readouterr()
        status = main([*location(self.where), *args])
        out, self.err = self.capsys.readouterr()
        assert status == code, self.err
        return out

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json"))


def one_error_line(done: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert done.returncode == code, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("soong-store: ")
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def demo(module_backend: Backend) -> dict[str, Any]:
    """One demo shared by the read-only tests (clone it before changing anything)."""
    doc = as_json(module_backend, "demo")
    return {"backend": module_backend, "home": module_backend.home, "sid": doc["session_id"],
            "tree": doc}  # fmt: skip


@pytest.fixture
def demo_copy(demo: dict[str, Any], clone: Callable[[Backend, str], Backend]) -> dict[str, Any]:
    """A copy of the demo whose session works in the copy's own project folder."""
    copy = clone(demo["backend"], "home")
    execute(copy, "UPDATE sessions SET cwd = :cwd", {"cwd": str(copy.home / "demo-project")})
    return {**demo, "backend": copy, "home": copy.home}


def test_every_command_runs_as_a_subprocess(
    demo: dict[str, Any], clone: Callable[[Backend, str], Backend]
) -> None:
    """Each command once through the real entry point (demo: the fixture; export, import and
    check: test_transfer and test_check); their variants run in-process below."""
    backend, sid = demo["backend"], demo["sid"]
    copy = clone(backend, "copy")
    reads = many(
        backend,
        ("show", sid),
        ("tree", sid),
        ("path", sid),
        ("timeline", sid),
        ("tasks", sid, "fix date parser"),
        ("sessions",),
    )
    writes = many(copy, ("switch", sid, "#6"), ("gc", "--dry-run"), ("upgrade",))
    for done in reads + writes:
        assert done.returncode == 0 and done.stderr == "", done.stderr
    show, tree, path, timeline, tasks, sessions = (r.stdout for r in reads)
    assert "agents (3)" in show and "runs (5)" in show and "purpose=worker" in show
    assert "> " in tree and "[fork1]" in tree
    assert "before the compaction" in path and path.rstrip().endswith("tokens")
    assert "tool_failed" in timeline
    assert "ready: tests" in tasks
    assert sid in sessions
    assert "#6" in writes[0].stdout
    assert "would remove 0" in writes[1].stdout
    assert "already at revision" in writes[2].stdout


def test_version_and_bare_invocation(backend: Backend, capsys: pytest.CaptureFixture[str]) -> None:
    run = InProcess(capsys, backend)
    assert "usage: soong-store" in run()
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"soong-store {__version__}"


def test_demo_session_holds_every_feature(
    demo: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    run = InProcess(capsys, demo["backend"])
    sid, tree = demo["sid"], demo["tree"]
    shown = run.json("show", sid)
    assert sorted(a["agent_type"] for a in shown["agents"]) == ["fork", "main", "sub"]
    assert all(r["status"] == "completed" for r in shown["runs"])
    assert shown["usage"]["input_tokens"] > 0
    nodes = {n["node_id"]: n for n in tree["nodes"]}
    main_id = tree["root_agent_id"]
    branches = [n for n in nodes.values() if n["agent_id"] == main_id and len(n["children"]) > 1]
    assert branches, "a branch opened by switch + a user message"
    assert any(n["node_type"] == "compaction" for n in nodes.values())
    worker = next(a for a in tree["agents"] if a["agent_type"] == "sub")
    worker_root = next(
        n for n in nodes.values() if n["agent_id"] == worker["agent_id"] and n["parent_id"] is None
    )
    assert len(worker_root["children"]) == 2, "two dispatch branches of the worker"
    fork = next(a for a in tree["agents"] if a["agent_type"] == "fork")
    fork_first = next(n for n in nodes.values() if n["agent_id"] == fork["agent_id"])
    assert fork_first["parent_id"] == fork["fork_from_node_id"]
    kinds = {a["mime_type"] for a in shown["artifacts"]}
    assert kinds == {"application/json", "text/plain"}, "a spilled JSON and an attachment"
    assert any("[json in art_" in n["text"] for n in nodes.values())
    assert any("[attachment art_" in n["text"] for n in nodes.values())
    events = run.json("timeline", sid, "--type", "tool_failed")["events"]
    assert len(events) == 1 and events[0]["level"] == "error"
    failed = nodes[events[0]["node_id"]]
    assert failed["role"] == "tool" and "ERROR" in failed["text"]
    tasks = run.json("tasks", sid, "fix date parser")
    assert [t["task_id"] for t in tasks["tasks"]][:1] == ["reproduce"]
    assert tasks["ready"] == ["tests"]


def test_upgrade_prints_from_and_to(
    backend_kind: Kind, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with backend_kind.empty(tmp_path / "home") as backend:
        run = InProcess(capsys, backend)
        first = run.json("upgrade")
        assert first["from"] is None and first["to"] == first["head"] == head_revision()
        assert "already at revision" in run("upgrade")


async def make_sessions(backend: Backend, count: int) -> list[str]:
    async with backend.store() as store:
        cwd = str(backend.home)
        made = [(await store.create_session(cwd=cwd)).session_id for _ in range(count)]
        await store.archive_session(made[0])
    return made


def test_sessions_pages_and_filters(backend: Backend, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    made = asyncio.run(make_sessions(backend, 3))
    run = InProcess(capsys, backend)
    first = run.json("sessions", "--limit", "2")
    assert [s["session_id"] for s in first["sessions"]] == [made[0], made[2]]
    assert first["next_offset"] == 2
    rest = run.json("sessions", "--limit", "2", "--offset", "2")
    assert [s["session_id"] for s in rest["sessions"]] == [made[1]]
    assert rest["next_offset"] is None
    archived = run.json("sessions", "--status", "archived")["sessions"]
    assert [s["session_id"] for s in archived] == [made[0]]
    assert "--offset 2" in run("sessions", "--limit", "2")


def test_tree_marks_folds_and_filters(
    demo: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    run, sid = InProcess(capsys, demo["backend"]), demo["sid"]
    lines = run("tree", sid, "--width", "100").splitlines()
    assert all(len(line) <= 100 for line in lines)
    active = [line for line in lines if line.startswith("> ")]
    assert len(active) == 1 and "#27 " in active[0]
    path_length = run.json("path", sid)["path_length"]
    assert sum(line.startswith("* ") for line in lines) == path_length - 1
    folded = run("tree", sid, "--depth", "0")
    assert "nodes folded from #7" in folded and "#8 " not in folded
    sub = run("tree", sid, "--agent", "sub1")
    assert "[sub1]" in sub and "[fork1]" not in sub and "#1 " not in sub
    run("tree", sid, "--agent", "nobody", code=2)
    assert "nobody" in run.err and run.err.count("\n") == 1


async def build_long_session(backend: Backend) -> str:
    async with backend.store() as store:
        sid = (await store.create_session(cwd=str(backend.home))).session_id
        long = "word " * 200
        async with store.transaction(sid) as tx:
            previous = None
            for index in range(1000):
                role = "user" if index % 2 == 0 else "assistant"
                previous = tx.add_node(role, "message", text(f"{index} {long}"), parent_id=previous)
        chain = await store.list_nodes(sid)
        await store.append_node(sid, "user", "message", text("branch"), parent_id=chain[10].node_id)
    return sid


def test_tree_of_a_thousand_nodes(backend: Backend, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    sid = asyncio.run(build_long_session(backend))
    started = time.monotonic()
    lines = InProcess(capsys, backend)("tree", sid, "--width", "120").splitlines()
    assert time.monotonic() - started < 5
    assert len(lines) == 1 + 1 + 1001
    assert max(len(line) for line in lines) <= 120
    assert sum(line.startswith(("* ", "> ")) for line in lines) == 12


def test_path_shows_the_cut_and_the_token_total(
    demo: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    run, sid = InProcess(capsys, demo["backend"]), demo["sid"]
    doc = run.json("path", sid)
    assert doc["nodes"][0]["node_type"] == "compaction"
    assert doc["nodes_cut"] == 9 and doc["path_length"] == 9 + len(doc["nodes"])
    assert doc["token_count"] == sum(n["token_count"] for n in doc["nodes"])
    out = run("path", sid)
    assert "9 earlier nodes" in out and f"{doc['token_count']} tokens" in out
    early = run.json("path", sid, "#9")
    assert early["nodes_cut"] == 0 and len(early["nodes"]) == 9


def test_path_limit_shows_the_last_nodes_of_the_context(
    demo: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    run, sid = InProcess(capsys, demo["backend"]), demo["sid"]
    whole = run.json("path", sid)
    tail = run.json("path", sid, "--limit", "2")
    assert [n["node_id"] for n in tail["nodes"]] == [n["node_id"] for n in whole["nodes"][-2:]]
    assert tail["nodes_hidden"] == len(whole["nodes"]) - 2 and tail["limit"] == 2
    assert tail["nodes_cut"] == whole["nodes_cut"] and tail["cut_before"] == whole["cut_before"]
    assert tail["token_count"] == sum(n["token_count"] for n in tail["nodes"])
    out = run("path", sid, "--limit", "2")
    assert f"{len(whole['nodes']) - 2} earlier nodes of the context not shown" in out
    assert "context: last 2 nodes" in out
    assert run.json("path", sid, "--limit", "100000")["nodes"] == whole["nodes"]


def test_timeline_filters(demo: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    run, sid = InProcess(capsys, demo["backend"]), demo["sid"]
    every = run.json("timeline", sid)["events"]
    assert [e["seq"] for e in every] == list(range(1, len(every) + 1))
    high = run.json("timeline", sid, "--level", "warning")["events"]
    assert {e["level"] for e in high} == {"warning", "error"}
    run_id = every[1]["run_id"]
    mine = run.json("timeline", sid, "--run", run_id)["events"]
    assert [e["run_seq"] for e in mine] == list(range(1, len(mine) + 1))
    later = run.json("timeline", sid, "--after", "50")["events"]
    assert [e["seq"] for e in later] == list(range(51, len(every) + 1))
    typed = run("timeline", sid, "--type", "tool_failed", "--type", "model_response")
    assert len(typed.splitlines()) == 1 + 2  # the column names, then the two events


async def test_timeline_follow_prints_new_events_until_interrupted(
    demo_copy: dict[str, Any],
) -> None:
    backend, sid = demo_copy["backend"], demo_copy["sid"]
    async with backend.store() as store:
        last = (await store.timeline(sid))[-1].seq
    environ = {k: v for k, v in os.environ.items() if k != "SOONG_AGENT_HOME"}
    args = ["timeline", sid, "--follow", "--json", "--after", str(last), "--interval", "0.05"]
    process = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-m", "soong_store", *backend.cli, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
        # A run started in the background by a shell inherits SIGINT ignored, and Python then
        # ignores Ctrl-C too: the child gets the default back, as a terminal would give it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    printed: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None and process.stderr is not None
    reader = threading.Thread(target=lambda: [printed.put(line) for line in process.stdout])
    reader.start()
    try:
        async with backend.store() as store:
            await store.append_event(sid, "late_event", payload={"n": 1})
        line = printed.get(timeout=30)
        assert json.loads(line)["event_type"] == "late_event"
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # hung: faulthandler prints every thread's stack
            process.send_signal(signal.SIGABRT)
            process.wait()
            reader.join()
            pytest.fail(f"timeline --follow did not stop on SIGINT:\n{process.stderr.read()}")
        assert code == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        reader.join()
        err = process.stderr.read()
        process.stdout.close()
        process.stderr.close()
    assert err == "" and printed.empty()


def test_switch_moves_the_active_node(
    demo_copy: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    run, sid = InProcess(capsys, demo_copy["backend"]), demo_copy["sid"]
    node = next(n for n in demo_copy["tree"]["nodes"] if n["node_seq"] == 10)
    assert run.json("switch", sid, "#10")["active_node_id"] == node["node_id"]
    assert any(
        line.startswith("> #10 ") or "> " in line[:2] and "#10 " in line
        for line in run("tree", sid).splitlines()
    )
    assert run.json("switch", sid, node["node_id"])["active_node_id"] == node["node_id"]


def test_switch_to_another_agents_node_is_refused(
    demo_copy: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    run, sid, doc = InProcess(capsys, demo_copy["backend"]), demo_copy["sid"], demo_copy["tree"]
    node = next(n for n in doc["nodes"] if n["agent_id"] != doc["root_agent_id"])
    before = run.json("show", sid)["session"]["active_node_id"]
    run("switch", sid, node["node_id"], code=2)
    assert run.err.count("\n") == 1 and run.err.startswith("soong-store: ")
    assert node["node_id"] in run.err and node["agent_id"] in run.err
    assert run.json("show", sid)["session"]["active_node_id"] == before


def test_tasks_lists_and_shows_dags(
    demo_copy: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    run, sid = InProcess(capsys, demo_copy["backend"]), demo_copy["sid"]
    listed = run.json("tasks", sid)["tasks"]
    assert [(t["task_name"], t["counts"]) for t in listed] == [
        ("fix date parser", {"completed": 3, "pending": 1})
    ]
    run("tasks", sid, "no such task", code=2)
    wal = Path(listed[0]["path"])
    lines = wal.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b"edge", b"EDGE")
    wal.write_bytes(b"\n".join(lines))
    run("tasks", sid, "fix date parser", code=1)
    assert run.err.count("\n") == 1 and "checksum mismatch" in run.err
    assert "unavailable" in run("tasks", sid)


def test_gc_removes_old_orphan_files(
    demo_copy: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    run, sid = InProcess(capsys, demo_copy["backend"]), demo_copy["sid"]
    orphan = demo_copy["home"] / "artifacts" / sid / "art_orphan.bin"
    orphan.write_bytes(b"left by a crash")
    assert run.json("gc", "--dry-run")["paths"] == []
    os.utime(orphan, (time.time() - 3600, time.time() - 3600))
    assert run.json("gc", "--dry-run")["paths"] == [f"{sid}/art_orphan.bin"]
    assert orphan.exists()
    assert "removed 1 orphan" in run("gc")
    assert not orphan.exists()
    assert run("check").endswith("no problems\n")


def with_password(url: str) -> str | None:
    """``url`` with a password its server ignores, or ``None`` where a URL takes none.

    The test servers trust local connections, so a password in the URL changes nothing but what
    a command could print; SQLite's URLs have no place for one.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return None
    return parsed.set(password=SECRET).render_as_string(hide_password=False)


SECRET = "s3cret-pw"


def test_no_command_prints_the_password_of_its_url(
    demo_copy: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every command of the parser, on its success path, with a URL that carries a password
    (the error paths: ``tests/cli/test_cli_passwords.py``)."""
    backend, sid = demo_copy["backend"], demo_copy["sid"]
    url = with_password(backend.url)
    if url is None:
        pytest.skip("a SQLite URL carries no password")
    export = tmp_path / "export.jsonl"
    argvs = {
        "upgrade": ["upgrade"],
        "sessions": ["sessions"],
        "show": ["show", sid],
        "tree": ["tree", sid],
        "path": ["path", sid],
        "timeline": ["timeline", sid],
        "switch": ["switch", sid, "#6"],
        "tasks": ["tasks", sid],
        "gc": ["gc", "--dry-run"],
        "check": ["check"],
        "export": ["export", sid, "-o", str(export)],
        "import": ["import", str(export), "--new-id"],
        "demo": ["demo"],
        "usage": ["usage"],
        "retention": ["retention", "--delete-after", "3650d", "--dry-run"],
        "search": ["search", "date"],  # last: its open hint is looked at below
        "serve": ["serve", "--port", "0"],  # runs until stopped: its own check below
    }
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(argvs) == set(sub.choices), "a new command: add its success path here"
    served = argvs.pop("serve")
    for argv in argvs.values():
        for extra in ([], ["--json"]) if argv[0] != "export" else ([],):
            code = main(["--home", str(backend.home), "--url", url, *argv, *extra])
            out, err = capsys.readouterr()
            assert code == 0, err
            assert SECRET not in out + err, argv
    assert "--url" in out and ":***@" in out  # search's open hint: the password masked
    child = [sys.executable, "-m", "soong_store", "--home", str(backend.home), "--url", url]
    server = subprocess.Popen(
        [*child, *served], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        first = server.stdout.readline()  # "... viewer of URL: http://127.0.0.1:PORT ..."
    finally:
        server.terminate()
        rest, err = server.communicate(timeout=60)
    assert "http://127.0.0.1:" in first, first + rest + err
    assert SECRET not in first + rest + err
