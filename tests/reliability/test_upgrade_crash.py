"""SIGKILL in a per-session upgrade after its shards committed and before the main file did.

A child running code that ships a per-session revision (:mod:`tests.pair_revision`: ``flags``
added to every nodes table) upgrades a home whose pairs live in the main file and shards,
and kills itself as the upgrade reports its last shard done: every shard is at the new revision,
the main file at the one before. Code that stops at that revision must then refuse the home
(opening it, it would archive pairs of its shape into shards recorded as new, which the resumed
upgrade skips); the newer code's upgrade finishes it and every session reads and takes appends.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import soong_store
from soong_store import SchemaVersionError, SessionStore
from soong_store.check.run import check_store
from soong_store.migrate.upgrade import current_revision
from tests.conftest import text
from tests.pair_revision import install_revision, use_newest_factory
from tests.reliability.conftest import Child, integrity
from tests.shard_support import assert_each_pair_in_one_file, limited, settle

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[2]

UPGRADER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path

    import pytest

    sys.path.insert(0, sys.argv[1])
    import soong_store
    from tests.pair_revision import install_revision

    home, versions, last = Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    install_revision(versions, pytest.MonkeyPatch())

    def progress(line):
        print(line, flush=True)
        if f": shard {last} of {last} " in line:
            os.kill(os.getpid(), signal.SIGKILL)

    soong_store.upgrade(f"sqlite:///{home / 'sessions.sqlite'}", progress=progress)
    print("DONE", flush=True)
    """
)


async def test_sigkill_after_the_last_shard_keeps_older_code_out(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spawn: Callable[..., Child]
) -> None:
    url = f"sqlite:///{home / 'sessions.sqlite'}"
    with limited():
        async with SessionStore(home=home) as store:
            sids = []
            for i in range(10):
                sid = (await store.create_session(cwd="/p")).session_id
                await store.append_node(sid, "user", "message", text(f"q{i}"))
                sids.append(sid)
            await settle(store)
        shards = sorted((home / "shards").glob("*.sqlite"))
        assert len(shards) >= 2
        before = current_revision(url)
        versions = tmp_path / "child"
        versions.mkdir()
        child = spawn(UPGRADER, str(ROOT), str(home), str(versions), str(len(shards)), cwd=tmp_path)
        lines = child.finish(timeout=120)
        assert lines and f"shard {len(shards)} of {len(shards)}" in lines[-1], child.stderr()
        assert "DONE" not in lines
        assert current_revision(url) == before

        # The code that stops at `before` (this process, without the revision) stays out.
        with pytest.raises(SchemaVersionError, match=r"shards/000\d\.sqlite") as refused:
            async with SessionStore(home=home):
                pass
        assert "ztest_pair_flags" in str(refused.value)
        assert current_revision(url) == before

        # The newer code's upgrade finishes; every session reads and takes an append.
        revision = install_revision(tmp_path, monkeypatch)
        use_newest_factory(monkeypatch)
        soong_store.upgrade(url)
        assert current_revision(url) == revision
        async with SessionStore(home=home) as store:
            for sid in sids:
                await store.append_node(sid, "assistant", "message", text("after"))
                assert len(await store.active_path(sid)) == 2
            await settle(store)
            assert (report := await check_store(store)).ok, report.problems
    assert_each_pair_in_one_file(home)
    assert integrity(home) == ["ok"]
