"""What the command line says about arguments it refuses."""

from __future__ import annotations

import pytest

from soong_store.cli import main


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["sessions", "--home", "X"], "--home"),
        (["sessions", "--home=X"], "--home"),
        (["show", "sess_20240101_000000_abcd", "--url", "sqlite:///x.sqlite"], "--url"),
        (["check", "--sqlite-module", "sqlite3"], "--sqlite-module"),
    ],
)
def test_a_global_option_after_the_command_is_said_to_go_before_it(
    capsys: pytest.CaptureFixture[str], argv: list[str], option: str
) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert "unrecognized arguments" in err
    assert f"{option} is a global option: put it before the command" in err
    assert f"'soong-store {option} ... {argv[0]} ...'" in err


def test_another_unrecognized_argument_gets_no_such_hint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["sessions", "--nope"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --nope" in err and "global options" not in err
