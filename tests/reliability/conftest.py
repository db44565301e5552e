"""Helpers of the reliability suite: child processes, raw database reads, invariants, figures.

Every test here breaks something on purpose (SIGKILL, a full disk, a damaged file, hostile input,
cancellation) and then checks the guarantees of DESIGN.md §5 from the outside. The figures each
test records (rounds, units written, units lost ...) are printed at the end of the run, and
written as JSON to ``$SOONG_RELIABILITY_FIGURES`` when that is set (``docs/reliability.md`` quotes
them).
"""

from __future__ import annotations

import faulthandler
import hashlib
import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import connect_raw, db_path

FIGURES: dict[str, dict[str, Any]] = {}
TEST_TIMEOUT_S = 400


@pytest.fixture(autouse=True)
def never_hang() -> Iterator[None]:
    """A test that hangs (a wedged writer, a lost child) ends the run with every thread's stack."""
    faulthandler.dump_traceback_later(TEST_TIMEOUT_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """A dict the test fills with its figures; printed (and saved) at the end of the run."""
    found: dict[str, Any] = {}
    start = time.monotonic()
    yield found
    if found:
        found["duration_s"] = round(time.monotonic() - start, 1)
        FIGURES[request.node.name] = found


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not FIGURES:
        return
    terminalreporter.section("reliability figures")
    for name, values in FIGURES.items():
        shown = ", ".join(f"{key}={value}" for key, value in values.items())
        terminalreporter.write_line(f"{name}: {shown}")
    target = os.environ.get("SOONG_RELIABILITY_FIGURES")
    if target:
        Path(target).write_text(json.dumps(FIGURES, indent=2, sort_keys=True) + "\n")


# -- raw reads ----------------------------------------------------------------------------------


@contextmanager
def raw(home: Path) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection to the store's file (never through the store)."""
    con = connect_raw(db_path(home), timeout=30)
    try:
        yield con
    finally:
        con.close()


def rows(home: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with raw(home) as con:
        return con.execute(sql, params).fetchall()


def pair_rows(home: Path, session_id: str, sql: str) -> list[tuple[Any, ...]]:
    """``sql`` run in the file the catalog names for the session's pair (a shard, or the home's).

    ``{nodes}`` and ``{events}`` in ``sql`` stand for the pair's table names.
    """
    placed = rows(home, "SELECT file FROM session_files WHERE session_id = ?", session_id)
    file = placed[0][0] if placed else "main"
    path = db_path(home) if file == "main" else home / file
    con = connect_raw(path, timeout=30)
    try:
        query = sql.format(nodes=f'"nodes_{session_id}"', events=f'"events_{session_id}"')
        return con.execute(query).fetchall()
    finally:
        con.close()


def integrity(home: Path) -> list[str]:
    return [r[0] for r in rows(home, "PRAGMA integrity_check")]


def assert_dense(values: list[int], what: str) -> None:
    """Unique and dense from 1: exactly 1..n in some order."""
    assert sorted(values) == list(range(1, len(values) + 1)), f"{what} not dense: {values}"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def artifact_files(home: Path) -> dict[str, Path]:
    """Every file under ``<home>/artifacts`` by its path relative to that folder."""
    root = home / "artifacts"
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p for p in root.rglob("*") if p.is_file()}


def tree_files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes (to prove a failed call changed nothing)."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# -- child processes ----------------------------------------------------------------------------


class Child:
    """A Python child running ``script``; its stdout lines arrive on a queue as they are printed.

    stderr goes to a file (no pipe to fill up). Only complete lines (ending in a newline) count:
    a line cut by SIGKILL was never acknowledged.
    """

    def __init__(self, script: str, *args: str, cwd: Path, name: str = "child") -> None:
        self.stderr_path = cwd / f"{name}.{time.monotonic_ns()}.stderr"
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, *args],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=cwd,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw_line in self.proc.stdout:
            if raw_line.endswith(b"\n"):
                self.lines.put(raw_line.decode().rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, prefix: str, timeout: float) -> str:
        """The next line starting with ``prefix`` (fails on EOF or after ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                pytest.fail(f"no {prefix!r} line within {timeout} s; stderr:\n{self.stderr()}")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                self.finish(timeout=30)
                pytest.fail(f"child exited before {prefix!r}; stderr:\n{self.stderr()}")
            self.seen.append(line)
            if line.startswith(prefix):
                return line

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)

    def finish(self, timeout: float) -> list[str]:
        """Wait for the child to end; return every complete stdout line it printed."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait(timeout=30)
            self._close()
            pytest.fail(f"child did not finish within {timeout} s; stderr:\n{self.stderr()}")
        self._thread.join(timeout=30)
        self._close()
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.seen.append(line)
        return self.seen

    def _close(self) -> None:
        if self.proc.stdout is not None and not self._thread.is_alive():
            self.proc.stdout.close()
        if not self._stderr.closed:
            self._stderr.close()

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-4000:]


@pytest.fixture
def spawn() -> Iterator[Callable[..., Child]]:
    """Start children; any still running when the test ends (a failure) is killed and reaped."""
    started: list[Child] = []

    def start(script: str, *args: str, cwd: Path, name: str = "child") -> Child:
        child = Child(script, *args, cwd=cwd, name=name)
        started.append(child)
        return child

    yield start
    for child in started:
        if child.proc.returncode is None:
            child.kill()
            child.proc.wait(timeout=30)
        child._thread.join(timeout=30)
        child._close()
