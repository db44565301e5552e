"""The SDK's own session tests, run against SoongSession with only the constructor substituted.

The test downloads the sdist of the installed ``openai-agents`` (``pip download --no-binary``;
skipped, saying why, where no package index can be reached),
takes its ``tests/memory/test_session.py`` and ``test_session_limit.py`` (nothing of them is kept
in this repository), replaces their ``SQLiteSession`` import by a subclass of ``SoongSession``
that takes ``SQLiteSession``'s arguments, and runs them. Every test passes except those of
``SQLiteSession``'s own machinery, listed below with the reason each does not apply.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CONNECTIONS = "SQLiteSession's own sqlite3 connections per thread (the store owns its connections)"
CORRUPT = "rows of bad JSON written into SQLiteSession's table with sqlite3 (the store has none)"
NOT_APPLICABLE = {
    "test_sqlite_session_close_closes_worker_thread_connections": CONNECTIONS,
    "test_sqlite_session_reaps_connections_from_exited_worker_threads": CONNECTIONS,
    "test_sqlite_session_closes_retired_connections_before_the_next_allocation": CONNECTIONS,
    "test_sqlite_session_keeps_connections_of_live_worker_threads": CONNECTIONS,
    "test_sqlite_session_rollback_failure_evicts_connection": CONNECTIONS,
    "test_sqlite_session_close_retries_quarantined_connection": CONNECTIONS,
    "test_sqlite_session_closed_rejects_empty_add_items": (
        "SQLiteSession.close() is final; SoongSession's close() lets go of its store, which "
        "it opens again on next use"
    ),
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": CORRUPT,
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": CORRUPT,
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": CORRUPT,
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": CORRUPT,
    "test_sqlite_session_file_lock_is_shared_across_instances": "SQLiteSession's process lock",
    "test_sqlite_session_failed_add_items_releases_write_lock": CONNECTIONS,
    "test_sqlite_session_failed_clear_session_rolls_back": CONNECTIONS,
    "test_sqlite_session_failed_pop_item_releases_write_lock": CONNECTIONS,
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": (
        "patches SQLiteSession's sqlite3 connection to pause its commit"
    ),
}

SHIM = """\
import tempfile
from pathlib import Path

from agents import set_tracing_disabled

from soong_store.integrations.openai_agents import SoongSession

set_tracing_disabled(True)


class SQLiteSession(SoongSession):
    def __init__(self, session_id, db_path=":memory:", sessions_table="agent_sessions",
                 messages_table="agent_messages", session_settings=None):
        memory = str(db_path) == ":memory:"
        home = Path(tempfile.mkdtemp()) if memory else Path(db_path).parent / f"{db_path}.home"
        super().__init__(session_id, home=home, session_settings=session_settings)
"""
FILES = ("tests/__init__.py", "tests/test_responses.py", "tests/memory/test_session.py")
FILES += ("tests/memory/test_session_limit.py",)


def substituted(text: str) -> str:
    """The module with ``SQLiteSession`` imported from the shim instead of ``agents``."""
    out, count = [], 0
    for line in text.splitlines(keepends=True):
        names = line.removeprefix("from agents import ").strip().split(", ")
        if line.startswith("from agents import ") and "SQLiteSession" in names:
            rest = [n for n in names if n != "SQLiteSession"]
            line = f"from agents import {', '.join(rest)}\nfrom shim import SQLiteSession\n"
            count += 1
        out.append(line)
    assert count == 1, "the SQLiteSession import moved"
    return "".join(out)


def sdk_tests(folder: Path) -> Path:
    wanted = f"openai-agents=={version('openai-agents')}"
    fetched = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
        + [wanted, "-d", str(folder)],
        capture_output=True,
        text=True,
    )
    if fetched.returncode != 0:  # no package index reachable: our own tests cover the behaviours
        last = (fetched.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"the source of {wanted} could not be downloaded: {last}")
    [sdist] = folder.glob("openai_agents-*.tar.gz")
    suite = folder / "suite"
    with tarfile.open(sdist) as archive:
        top = archive.getnames()[0].split("/")[0]
        for name in FILES:
            source = archive.extractfile(f"{top}/{name}")
            assert source is not None, name
            target = suite / name
            target.parent.mkdir(parents=True, exist_ok=True)
            text = source.read().decode()
            if name.startswith("tests/memory/"):
                text = substituted(text)
            target.write_text(text)
    (suite / "tests/memory/__init__.py").touch()
    (suite / "shim.py").write_text(SHIM)
    (suite / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
    return suite


def test_the_sdks_session_tests_pass_but_those_of_sqlite_session_internals(
    tmp_path: Path,
) -> None:
    suite = sdk_tests(tmp_path)
    report = tmp_path / "report.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
        + ["tests/memory"],
        cwd=suite,
        env={**os.environ, "PYTHONPATH": str(suite)},
        capture_output=True,
        timeout=600,
    )
    passed, failed = [], []
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.attrib["name"].split("[")[0]
        bad = case.find("failure") is not None or case.find("error") is not None
        (failed if bad else passed).append(name)
    assert sorted(set(failed) - set(NOT_APPLICABLE)) == []
    assert len(passed) >= 50
    for behaviour in ("pop_item", "get_items_with_limit", "memory_basic_functionality"):
        assert any(behaviour in name for name in passed), behaviour
