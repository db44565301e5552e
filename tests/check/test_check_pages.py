"""``check`` of a database file with a damaged page: SQLite-only, on purpose.

The damage overwrites a b-tree page of ``sessions.sqlite``, found through ``PRAGMA page_size``
and ``sqlite_master``, and ``check`` finds it with SQLite's ``quick_check``: both are features of
SQLite's file format. What ``check`` reports for damage made through SQL is in
``tests/check/test_check.py``.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore
from soong_store.demo import write_demo
from soong_store.schema.session_tables import session_tables
from tests.conftest import connect_raw, db_path

pytestmark = pytest.mark.sqlite


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    home = tmp_path_factory.mktemp("check") / "home"

    async def build() -> str:
        async with SessionStore(home=home) as store:
            return await write_demo(store, home / "demo-project")

    return home, asyncio.run(build())


@pytest.fixture
def damaged(demo: tuple[Path, str], tmp_path: Path) -> dict[str, Any]:
    """A copy of the demo home, its session working in the copy's own project folder."""
    home = tmp_path / "home"
    shutil.copytree(demo[0], home)
    con = connect_raw(db_path(home))
    with con:
        con.execute("UPDATE sessions SET cwd = ?", (str(home / "demo-project"),))
    con.close()
    return {"home": home, "sid": demo[1]}


def overwrite_root_page(home: Path, name: str) -> int:
    """Fill the root page of table or index ``name`` with 0xff; return its page number."""
    con = connect_raw(db_path(home))
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    con.close()
    with db_path(home).open("r+b") as db:
        db.seek((root - 1) * page_size)
        db.write(b"\xff" * page_size)
    return int(root)


def check_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "soong_store", "--home", str(home), "check", *args]
    return subprocess.run(command, capture_output=True, text=True)


def test_quick_check_finds_a_damaged_page(damaged: dict[str, Any]) -> None:
    home, sid = damaged["home"], damaged["sid"]
    (index,) = session_tables(sid).nodes.indexes
    root = overwrite_root_page(home, str(index.name))
    done = check_cli(home)
    assert done.returncode == 1 and done.stderr == ""
    # SQLite words its report differently across versions ("Page 24:" / "Tree 24 page 24:",
    # and from 3.46 an extra index-entry count).
    assert done.stdout.startswith("quick_check: ") and f"page {root}:" in done.stdout.lower()
    assert re.search(r"checked 1 session\(s\): [1-9][0-9]* problems?$", done.stdout.rstrip())


def test_a_session_with_a_damaged_table_is_reported_and_the_others_checked(
    damaged: dict[str, Any],
) -> None:
    home, sid = damaged["home"], damaged["sid"]

    async def add_session() -> str:
        async with SessionStore(home=home) as store:
            other = (await store.create_session(cwd=str(home))).session_id
            await store.append_node(other, "user", "message", [{"type": "text", "text": "hi"}])
            return other

    other = asyncio.run(add_session())
    overwrite_root_page(home, session_tables(sid).nodes.name)
    done = check_cli(home, "--json")
    assert done.returncode == 1 and done.stderr == ""
    report = json.loads(done.stdout)
    assert report["sessions_checked"] == 2
    unreadable = [p for p in report["problems"] if p["kind"] == "unreadable_session"]
    assert [p["session_id"] for p in unreadable] == [sid]
    assert "damaged" in unreadable[0]["message"]
    assert not [p for p in report["problems"] if p["session_id"] == other]
