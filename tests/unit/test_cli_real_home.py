"""A test run never touches the real home: commands run without a home land in the test's own.

``soong-store --url URL upgrade`` (and any store opened without a home) makes the default home,
``~/.soong-agent``; run by the suite, in process or as a subprocess, that must be the test's
``$HOME`` (``tests/conftest.py``), never the home of whoever runs the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from soong_store.cli import main
from soong_store.home import default_home
from tests.conftest import REAL_HOME


def test_the_default_home_is_the_tests_own() -> None:
    """Asked of the environment, not of the fixture: what a test that names no fixture gets."""
    assert not Path.home().is_relative_to(REAL_HOME)
    assert default_home() == Path.home() / ".soong-agent"
    assert "SOONG_AGENT_HOME" not in os.environ


def test_a_command_without_a_home_makes_it_in_the_tests_home(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    user_home = Path.home()
    assert not user_home.is_relative_to(REAL_HOME)
    assert main(["--url", f"sqlite:///{tmp_path / 'in-process.sqlite'}", "upgrade"]) == 0
    assert (user_home / ".soong-agent").is_dir()
    (user_home / ".soong-agent").rmdir()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "soong_store",
            "--url",
            f"sqlite:///{tmp_path / 'child.sqlite'}",
            "upgrade",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (user_home / ".soong-agent").is_dir(), "the subprocess inherits the test's home"
