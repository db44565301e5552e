"""The parser of the one command a command line names parses it as the whole parser does."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import pytest

from soong_store import cli
from soong_store.cli import HANDLERS, build_parser, command_named
from soong_store.errors import InvalidArgument

SID = "sess_20261202_020000_0a1b2c3d"
LINES = [
    ["sessions"],
    ["--home", "h", "sessions", "--status", "archived", "--limit", "5", "--json"],
    ["--home=h", "--url", "sqlite:///x.sqlite", "sessions", "--stat", "active"],
    ["--sqlite-module", "sqlite3", "sessions", "--offset", "50"],
    ["sessions", "--limit", "0"],
    ["sessions", "--status", "gone"],
    ["sessions", "extra"],
    ["sessions", "--home", "h"],
    ["--home", "sessions", "sessions"],
    ["--home", "-x", "sessions"],
    ["show", SID, "--json"],
    ["tree", SID, "--depth", "2", "--agent", "main", "--width", "80"],
    ["path", SID, "#3", "--limit", "4"],
    ["timeline", SID, "--level", "warning", "--type", "a", "--type", "b", "--follow"],
    ["switch", SID, "--none"],
    ["tasks", SID, "plan"],
    ["gc", "--dry-run", "--min-age", "nan"],
    ["check"],
    ["export", SID, "-o", "out.jsonl", "--format", "markdown", "--json"],
    ["import", "-", "--format", "codex", "--new-id"],
    ["search", "word", "--role", "user", "--limit", "3"],
    ["upgrade", "--json"],
    ["demo"],
]


def parsed(parser: argparse.ArgumentParser, words: Sequence[str]) -> argparse.Namespace | str:
    """The namespace, or the refusal's message."""
    try:
        return parser.parse_args(words)
    except InvalidArgument as exc:
        return str(exc)


@pytest.mark.parametrize("words", LINES, ids=" ".join)
def test_the_parser_of_the_named_command_parses_as_the_whole_parser(words: list[str]) -> None:
    name = command_named(words)
    assert name is not None
    assert parsed(build_parser(name), words) == parsed(build_parser(), words)


@pytest.mark.parametrize("name", [name for names in HANDLERS.values() for name in names])
def test_a_command_prints_the_same_help_from_its_own_parser(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    helps = []
    for parser in (build_parser(name), build_parser()):
        with pytest.raises(SystemExit):
            parser.parse_args([name, "--help"])
        helps.append(capsys.readouterr().out)
    assert helps[0] == helps[1]
    assert f"usage: soong-store {name}" in helps[0]


def test_the_parser_of_one_command_knows_no_other() -> None:
    with pytest.raises(InvalidArgument, match="invalid choice: 'show'"):
        build_parser("sessions").parse_args(["show", SID])


@pytest.mark.parametrize(
    "words",
    [
        [],
        ["--help"],
        ["--version"],
        ["-h", "sessions"],
        ["--ho", "h", "sessions"],
        ["--home"],
        ["--", "sessions"],
        ["nothing"],
        ["--home", "h", "--json", "sessions"],
    ],
    ids=" ".join,
)
def test_a_line_that_names_no_command_plainly_gets_the_whole_parser(words: list[str]) -> None:
    assert command_named(words) is None


def test_a_command_line_builds_only_its_commands_parser(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    built: list[str | None] = []

    def recorded(only: str | None = None) -> argparse.ArgumentParser:
        built.append(only)
        return build_parser(only)

    monkeypatch.setattr(cli, "build_parser", recorded)
    assert cli.main(["--home", str(tmp_path / "none"), "sessions"]) == 2
    assert cli.main([]) == 0
    assert "no database in home" in capsys.readouterr().err
    assert built == ["sessions", None]
