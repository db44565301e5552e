"""A test run never touches the real home: commands run without a home land in the test's own.

A store opened without a home uses the default home, ``~/.soong-agent``; run by the suite, in
process or as a subprocess, that must be the test's ``$HOME`` (``tests/conftest.py``), never the
home of whoever runs the suite. A store given a URL and no home makes no home folder at all.
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


def test_a_subprocess_s_default_home_is_the_tests_own() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from soong_store.home import default_home; print(default_home())"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == Path.home() / ".soong-agent"
    assert not Path(done.stdout.strip()).is_relative_to(REAL_HOME)


def test_a_url_without_a_home_makes_no_home_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The database is elsewhere: the default home would hold only artifacts, made by the first."""
    url = f"sqlite:///{tmp_path / 'elsewhere.sqlite'}"
    assert main(["--url", url, "upgrade"]) == 0
    assert main(["--url", url, "sessions"]) == 0
    done = subprocess.run(
        [sys.executable, "-m", "soong_store", "--url", url, "sessions", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert not (Path.home() / ".soong-agent").exists()
    assert main(["--home", str(tmp_path / "named"), "--url", url, "upgrade"]) == 0
    assert (tmp_path / "named").is_dir()  # a home that is named is made
