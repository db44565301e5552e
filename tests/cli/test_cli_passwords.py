"""No command prints a database password: not on stdout, not on stderr, not in a log record.

Every command of the parser (enumerated from it, so a new one is covered) runs with a URL that
carries a password, to a server that is not there (the error paths); the success paths, which
need a server that takes the URL, are in ``tests/cli/test_cli.py``.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from soong_store.cli import _Parser, build_parser, main
from soong_store.cli.redact import masked
from soong_store.cli.search import _prefix

SECRET = "s3cret"
NOWHERE = f"postgresql+psycopg://user:{SECRET}@127.0.0.1:1/db"
"""A URL with a password, to a port nothing listens on: connecting is refused at once."""
URLS = {
    "userinfo": NOWHERE,
    "query": f"postgresql+psycopg://user@127.0.0.1:1/db?password={SECRET}",
    "unparsable": f"postgresql+psycopg://user:{SECRET}@127.0.0.1:notaport/db",
    "at in password": f"postgresql+psycopg://user:p@{SECRET}@127.0.0.1:1/db",
}
VALUES = {"session_id": "sess_20240101_000000_abcd", "node": "#1", "query": "word"}
"""What a command's positional argument gets (any other: a file that exists)."""


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert isinstance(sub.choices, dict)
    return sub.choices


def argv_of(name: str, command: argparse.ArgumentParser, file: Path) -> list[str]:
    words = [name]
    for action in command._actions:
        if not action.option_strings and action.nargs in (None, 1):
            words.append(VALUES.get(action.dest, str(file)))
    return words


def test_every_command_is_enumerated() -> None:
    assert {"sessions", "show", "search", "upgrade", "demo", "import"} <= set(commands())
    assert all(isinstance(p, _Parser) for p in commands().values())


@pytest.mark.parametrize("placement", ["before", "after"])
@pytest.mark.parametrize("url", URLS.values(), ids=URLS.keys())
@pytest.mark.parametrize("name", sorted(commands()))
def test_no_command_prints_the_password_on_its_error_paths(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    name: str,
    url: str,
    placement: str,
) -> None:
    file = tmp_path / "file.jsonl"
    file.write_text("{}\n", encoding="utf-8")
    words = argv_of(name, commands()[name], file)
    location = ["--home", str(tmp_path / "home"), "--url", url]
    argv = location + words if placement == "before" else words + location
    caplog.set_level(logging.DEBUG)
    for extra in ([], ["--json"]):
        code = main(argv + extra)
        out, err = capsys.readouterr()
        assert code != 0, out
        assert err.startswith("soong-store: ")
        assert SECRET not in out + err
    logged = "\n".join(caplog.text.splitlines())
    assert SECRET not in logged


def test_the_open_hint_of_a_search_hit_masks_the_password() -> None:
    args = argparse.Namespace(home=None, url=NOWHERE, sqlite_module=None)
    assert _prefix(args) == "soong-store --url 'postgresql+psycopg://user:***@127.0.0.1:1/db'"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (NOWHERE, "postgresql+psycopg://user:***@127.0.0.1:1/db"),
        (f"in 'postgresql://u:p@{SECRET}@h/db': no", "in 'postgresql://u:***@h/db': no"),
        (
            f"postgresql://u@h/db?sslmode=require&PASSWORD={SECRET}&x=1",
            "postgresql://u@h/db?sslmode=require&PASSWORD=***&x=1",
        ),  # fmt: skip
        (f"postgresql://:{SECRET}@h/db", "postgresql://:***@h/db"),
        ("postgresql://user@h:5432/db", "postgresql://user@h:5432/db"),
        ("sqlite:////tmp/h/sessions.sqlite", "sqlite:////tmp/h/sessions.sqlite"),
        ("no database in home /tmp/a:b@c", "no database in home /tmp/a:b@c"),
    ],
)
def test_masked_shows_each_password_as_stars(text: str, shown: str) -> None:
    assert masked(text) == shown
