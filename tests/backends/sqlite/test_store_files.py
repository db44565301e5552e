"""Where the store puts its database file: SQLite-only, since only SQLite keeps it in the home.

The default database is ``sessions.sqlite`` in the home (``$SOONG_AGENT_HOME`` unless given), and
``url=`` puts it elsewhere; these tests look for the file itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from soong_store import SessionStore

pytestmark = [pytest.mark.sqlite, pytest.mark.asyncio]


async def test_env_home_is_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SOONG_AGENT_HOME", str(tmp_path / "envhome"))
    async with SessionStore() as store:
        await store.create_session(cwd=".")
    assert (tmp_path / "envhome" / "sessions.sqlite").exists()


async def test_url_overrides_location(tmp_path: Path):
    db = tmp_path / "elsewhere.sqlite"
    async with SessionStore(home=tmp_path / "h", url=f"sqlite:///{db}") as store:
        await store.create_session(cwd=".")
    assert db.exists() and not (tmp_path / "h" / "sessions.sqlite").exists()
