"""Importing the package and printing the CLI's help load no heavy dependency."""

from __future__ import annotations

import subprocess
import sys

import pytest

import soong_store

HEAVY = ("sqlalchemy", "pydantic", "alembic", "orjson", "asyncio")

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
