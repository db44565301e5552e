"""``docs/cli.md`` and the CLI's ``--help`` checked against each other (as sqlite-utils does)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from soong_store import transfer
from soong_store.check import run as check
from soong_store.cli import build_parser, main

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
ROW = re.compile(r"^\| `([^`]+)` \| (.+) \|$")


def sections() -> dict[str, list[str]]:
    """The lines of each section: "global" and one per ``### `command` `` heading."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        if line == "## Global options":
            current = found.setdefault("global", [])
        elif heading := re.fullmatch(r"### `([a-z]+)`", line):
            current = found.setdefault(heading.group(1), [])
        elif line.startswith("## "):
            current = None
        elif current is not None:
            current.append(line)
    return found


def documented(lines: list[str]) -> list[tuple[str, str]]:
    """The rows of a section's argument table (the one headed ``argument`` or ``option``)."""
    rows: list[tuple[str, str]] = []
    in_table = False
    for line in lines:
        if line in ("| argument | meaning |", "| option | meaning |"):
            in_table = True
        elif in_table and (match := ROW.match(line)):
            rows.append((match.group(1), match.group(2)))
        elif in_table and not line.startswith("| ---"):
            in_table = False
    return rows


def invocation(action: argparse.Action) -> str:
    if not action.option_strings:
        return str(action.metavar or action.dest)
    shown = ", ".join(action.option_strings)
    if action.nargs != 0:
        choices = "{" + ",".join(map(str, action.choices)) + "}" if action.choices else None
        shown += f" {action.metavar or choices or action.dest.upper()}"
    return shown


def actions(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    return [
        (invocation(a), str(a.help))
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)
    ]


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def help_output(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    return squeeze(capsys.readouterr().out)


def squeeze(text: str) -> str:
    """Text without whitespace: argparse wraps help at spaces and at hyphens."""
    return "".join(text.split())


def test_every_command_is_documented_and_nothing_else() -> None:
    assert set(sections()) == {"global", *commands()}


def test_global_options_match(capsys: pytest.CaptureFixture[str]) -> None:
    rows = documented(sections()["global"])
    assert rows == actions(build_parser())
    shown = help_output(capsys)
    for _, meaning in rows:
        assert squeeze(meaning) in shown


@pytest.mark.parametrize("name", sorted(commands()))
def test_command_help_and_docs_match(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = commands()[name]
    lines = sections()[name]
    assert documented(lines) == actions(parser), f"docs/cli.md section {name!r} is out of date"
    first = next(line for line in lines if line.strip())
    assert first == parser.description
    shown = help_output(capsys, name)
    assert squeeze(f"usage: soong-store {name}") in shown
    assert squeeze(str(parser.description)) in shown
    for _, meaning in documented(lines):
        assert squeeze(meaning) in shown


def test_check_kinds_and_export_format_are_documented() -> None:
    text = DOCS.read_text(encoding="utf-8")
    assert check.__doc__ is not None
    kinds = set(re.findall(r"``([a-z_]+)``", check.__doc__.split("Kinds of problem:")[1]))
    table = re.findall(r"^\| `([a-z_]+)`(?:, `([a-z_]+)`)? \|", text, re.MULTILINE)
    assert kinds == {kind for pair in table for kind in pair if kind}
    flat = " ".join(text.split())
    assert f'"format": "{transfer.FORMAT}", "version": {transfer.FORMAT_VERSION}' in flat
