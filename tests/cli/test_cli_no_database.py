"""A command that reads a home without a database says so and creates nothing.

SQLite-only, on purpose: "no database" is a home without ``sessions.sqlite`` (or a ``--url`` to
a file that is not there), and the messages name the home or that file's URL.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from soong_store import SessionStore
from soong_store.cli import main
from tests.conftest import text

pytestmark = pytest.mark.sqlite

SID = "sess_20240101_000000_abcd"
NODE = "node_01m8rfgay19mbhqry6bfye0yy5"


def reading(tmp: Path) -> list[list[str]]:
    return [
        ["sessions"],
        ["sessions", "--json"],
        ["show", SID],
        ["tree", SID],
        ["path", SID],
        ["timeline", SID],
        ["switch", SID, NODE],
        ["switch", SID, "--none"],
        ["tasks", SID],
        ["tasks", SID, "plan"],
        ["check"],
        ["check", SID],
        ["export", SID],
        ["export", SID, "-o", str(tmp / "out.jsonl")],
        ["gc"],
    ]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("soong-store: ")
    return lines[0]


def files_under(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*"))


@pytest.mark.parametrize("index", range(len(reading(Path()))))
@pytest.mark.parametrize("home_exists", [False, True], ids=["no home", "empty home"])
def test_no_database_exits_2_naming_the_home_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], index: int, home_exists: bool
) -> None:
    home = tmp_path / "home"
    if home_exists:
        home.mkdir()
    before = files_under(tmp_path)
    code, out, err = run(capsys, "--home", str(home), *reading(tmp_path)[index])
    assert code == 2
    assert out == ""
    line = one_line(err)
    assert f"no database in home {home}" in line
    assert files_under(tmp_path) == before


def test_home_from_the_environment_and_a_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "env-home"
    monkeypatch.setenv("SOONG_AGENT_HOME", str(home))
    code, _, err = run(capsys, "sessions")
    assert code == 2 and f"no database in home {home}" in one_line(err)
    url = f"sqlite:///{tmp_path / 'elsewhere' / 'db.sqlite'}"
    code, _, err = run(capsys, "--url", url, "show", SID)
    assert code == 2 and f"no database in {url}" in one_line(err)
    assert files_under(tmp_path) == []


def test_commands_that_write_still_create_the_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    code, _, err = run(capsys, "--home", str(home), "upgrade")
    assert code == 0, err
    assert (home / "sessions.sqlite").exists()
    code, out, err = run(capsys, "--home", str(home), "sessions")
    assert code == 0 and out == "(no sessions)\n", err


@pytest.mark.parametrize(
    "argv",
    [
        ["show", SID],
        ["tree", SID],
        ["path", SID],
        ["timeline", SID],
        ["switch", SID, NODE],
        ["switch", SID, "--none"],
        ["tasks", SID],
        ["check", SID],
        ["export", SID],
    ],
    ids=lambda argv: " ".join(argv[:1] + argv[2:]),
)
def test_an_unknown_session_is_named_with_where_it_was_looked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    home = tmp_path / "home"

    async def seed() -> None:
        async with SessionStore(home=home) as store:
            sid = (await store.create_session(cwd=".")).session_id
            await store.append_node(sid, "user", "message", text("q"))

    asyncio.run(seed())
    code, _, err = run(capsys, "--home", str(home), *argv)
    assert code == 2
    assert one_line(err).endswith(f"no session {SID!r} in home {home}")
    url = f"sqlite:///{home / 'sessions.sqlite'}"
    code, _, err = run(capsys, "--url", url, *argv)
    assert code == 2
    assert one_line(err).endswith(f"no session {SID!r} in {url}")
