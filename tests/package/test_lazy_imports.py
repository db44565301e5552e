"""Importing the package or printing the help loads nothing heavy; a write loads no query parser."""

from __future__ import annotations

import subprocess
import sys

import pytest

import soong_store

HEAVY = ("sqlalchemy", "pydantic", "alembic", "orjson", "asyncio", "starlette", "uvicorn", "jinja2")

PROBE = """
import sys
{action}
heavy = {heavy!r}
print("loaded:", *(name for name in heavy if name in sys.modules))
"""


def loaded_after(action: str) -> list[str]:
    code = PROBE.format(action=action, heavy=HEAVY)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1].split()
    assert last[0] == "loaded:"
    return last[1:]


@pytest.mark.parametrize(
    "action",
    [
        "import soong_store",
        "import soong_store\nsoong_store.NotFound, soong_store.NodeType.MESSAGE",
        "from soong_store.cli import build_parser\nbuild_parser().format_help()",
        "from soong_store.__main__ import main\n"
        "sys.argv = ['soong-store', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass",
    ],
)
def test_nothing_heavy_is_loaded_before_it_is_used(action: str):
    assert loaded_after(action) == []


def test_a_public_name_is_imported_on_first_use():
    assert loaded_after("import soong_store\nsoong_store.SessionStore") != []
    assert soong_store.SessionStore.__name__ == "SessionStore"
    assert "SessionStore" in dir(soong_store)
    with pytest.raises(AttributeError, match="no_such_name"):
        soong_store.no_such_name  # type: ignore[attr-defined]  # noqa: B018


CREATE = """
import asyncio, sys
from soong_store import SessionStore

async def main(home):
    async with SessionStore(home=home) as store:
        print((await store.create_session(cwd=home)).session_id)

asyncio.run(main(sys.argv[1]))
"""

WRITE_THEN_SEARCH = """
import asyncio, sys
from soong_store import SessionStore

async def main(home, session_id):
    async with SessionStore(home=home) as store:
        content = [{"type": "text", "text": "find the fox"}]
        await store.append_node(session_id, "user", "message", content)
        print("after a write:", "soong_store.model.search_query" in sys.modules)
        hits = await store.search("fox")
        print("after a search:", "soong_store.model.search_query" in sys.modules, len(hits))

asyncio.run(main(*sys.argv[1:]))
"""


def run_probe(code: str, *args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_new_process_writing_to_a_store_loads_no_query_parser(tmp_path):
    (session_id,) = run_probe(CREATE, str(tmp_path))  # creating the schema loads it, once
    got = run_probe(WRITE_THEN_SEARCH, str(tmp_path), session_id)
    assert got == ["after a write: False", "after a search: True 1"]
