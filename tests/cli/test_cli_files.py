"""The command line where it looks at SQLite files: SQLite-only, on purpose.

The default home's ``sessions.sqlite`` (the demo's temporary home, ``$SOONG_AGENT_HOME``), a
``--url`` to another file and ``--sqlite-module``, a file that is no database or a foreign one,
and bad input proved harmless by the database file's bytes. The other commands run on every
backend in ``tests/cli/test_cli.py``, whose helpers these tests share.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from soong_store.cli import main
from soong_store.migrate.upgrade import head_revision
from tests.cli.test_cli import InProcess, as_json, many, ok, one_error_line
from tests.conftest import connect_raw, db_path

pytestmark = pytest.mark.sqlite


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One demo home shared by the read-only tests."""
    home = tmp_path_factory.mktemp("demo") / "home"
    doc = as_json(home, "demo")
    return {"home": home, "sid": doc["session_id"], "tree": doc}


def test_demo_without_home_uses_a_temporary_home_and_prints_the_tree() -> None:
    out = ok(None, "demo")
    first = out.splitlines()[0]
    home = Path(first.rsplit(" ", 1)[1])
    try:
        assert home.is_dir() and home != Path.home() / ".soong-agent"
        assert (home / "sessions.sqlite").exists()
        assert "> " in out and "[sub1]" in out and "[fork1]" in out
        assert "system/compaction" in out and "← ERROR" in out
    finally:
        shutil.rmtree(home)


def test_home_from_environment_url_and_sqlite_module(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "env-home"
    monkeypatch.setenv("SOONG_AGENT_HOME", str(home))
    assert main(["upgrade"]) == 0
    assert db_path(home).exists()
    capsys.readouterr()
    assert main(["sessions", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sessions"] == []
    url = f"sqlite:///{tmp_path / 'other.sqlite'}"
    run = InProcess(capsys, tmp_path / "h")
    assert run.json("--url", url, "--sqlite-module", "sqlite3", "upgrade")["to"] == head_revision()
    assert (tmp_path / "other.sqlite").exists()
    run("--sqlite-module", "no_such_module", "sessions", code=2)
    assert "no_such_module" in run.err


def bad_cases(sid: str, tmp: Path) -> list[tuple[str, ...]]:
    (tmp / "garbage.jsonl").write_text("not json\n")
    return [
        ("show", "x; DROP TABLE sessions"),
        ("show", "sess_20000101_000000_dead"),
        ("tree", "a-b"),
        ("path", sid, "node_unknown"),
        ("path", sid, "bad id!"),
        ("path", sid, "#999"),
        ("timeline", sid, "--run", "run_unknown' OR 1=1"),
        ("timeline", sid, "--level", "loud"),
        ("switch", sid, "node_unknown"),
        ("export", "sess_nope"),
        ("check", "sess/../x"),
        ("tasks", "sess_nope"),
        ("import", str(tmp / "missing.jsonl")),
        ("import", str(tmp / "garbage.jsonl")),
        ("frobnicate",),
        ("sessions", "--limit", "0"),
        ("tree", sid, "--depth", "many"),
        ("export", sid, "-o", str(tmp / "missing-dir" / "out.jsonl")),
        ("--sqlite-module", "no_such_module", "sessions"),
    ]


def test_bad_input_exits_2_with_one_line(
    demo: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = db_path(demo["home"]).read_bytes()
    cases = bad_cases(demo["sid"], tmp_path)
    as_subprocess = [cases[0], cases[3], cases[14]]
    for args, done in zip(as_subprocess, many(demo["home"], *as_subprocess), strict=True):
        assert one_error_line(done) and done.stdout == "", args
    run = InProcess(capsys, demo["home"])
    for args in cases:
        assert run(*args, code=2) == "", args
        assert run.err.count("\n") == 1 and run.err.startswith("soong-store: "), (args, run.err)
    assert db_path(demo["home"]).read_bytes() == before
    assert not (tmp_path / "missing-dir").exists()


def test_damaged_database_exits_1_and_a_foreign_one_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    db_path(home).write_bytes(b"this is not a database" * 100)
    foreign = tmp_path / "x.sqlite"
    con = connect_raw(foreign)
    con.execute("CREATE TABLE foreign_table (x)")
    con.close()
    run = InProcess(capsys, home)
    run("sessions", code=1)
    assert "damaged" in run.err and run.err.count("\n") == 1
    run("--url", f"sqlite:///{foreign}", "sessions", code=2)
    assert "foreign_table" in run.err and run.err.count("\n") == 1
