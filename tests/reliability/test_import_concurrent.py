"""Four processes importing the same home at once: every record written once.

Each child is ``python -m soong_store import --json HOME`` on a home of three tools (a Claude
Code project with sub-agents of both layouts, a Codex sessions folder, a pi folder; copies of
the corpus), started together behind a barrier on one store. Afterwards the store holds
exactly what one import of the home gives (one session per conversation, every node once, the
same events and active leaves), ``check`` passes, each conversation was written by one child
("imported") and found written by the others ("up to date", or its files skipped unread), and
no child saw a conflict, a refusal or an error.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore
from soong_store.check.run import check_store
from soong_store.importers import import_path
from tests.importers.conftest import CORPUS, FILES, arrive, session_shapes
from tests.reliability.conftest import Child

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

PROCESSES = 4
ROUNDS = 3

IMPORTER = textwrap.dedent(
    """
    import os, runpy, sys, time
    import soong_store.cli.transfer, soong_store.importers  # loaded before the barrier

    home, folder, go, cwd = sys.argv[1:5]
    print("READY", flush=True)
    while not os.path.exists(go):
        time.sleep(0.002)
    os.chdir(cwd)
    sys.argv = ["soong-store", "--home", home, "import", "--json", folder]
    runpy.run_module("soong_store", run_name="__main__")
    """
)


async def _one_shot(root: Path) -> dict[str, Any]:
    home = root / "home"
    for name in FILES:
        arrive(home, name)
    async with SessionStore(home=root / "store") as store:
        await import_path(store, home, cwd=CORPUS)
        return await session_shapes(store)


def test_four_processes_importing_one_home_write_each_record_once(
    tmp_path: Path, spawn: Callable[..., Child], figures: dict[str, Any]
) -> None:
    expected = asyncio.run(_one_shot(tmp_path / "one-shot"))
    written = up_to_date = skipped_files = 0
    for round_no in range(ROUNDS):
        root = tmp_path / f"round{round_no}"
        home, store_home, go = root / "home", root / "store", root / "go"
        for name in FILES:
            arrive(home, name)
        children = [
            spawn(
                IMPORTER,
                str(store_home),
                str(home),
                str(go),
                str(CORPUS),
                cwd=root,
                name=f"importer{n}",
            )
            for n in range(PROCESSES)
        ]
        for child in children:
            child.wait_for("READY", timeout=120)
        go.touch()
        summaries = []
        for child in children:
            lines = child.finish(timeout=300)
            assert child.proc.returncode == 0, child.stderr()
            summaries.append(json.loads("".join(lines[lines.index("READY") + 1 :])))
        statuses: dict[str, Counter[str]] = {}
        for summary in summaries:
            assert not summary["unreadable"] and not summary["unknown"], summary
            skipped_files += summary["unchanged_files"]
            for source in summary["sources"]:
                key = f"{source['format']}:{source['source_id']}"
                statuses.setdefault(key, Counter())[source["status"]] += 1
        assert set(statuses) == set(expected)
        for key, seen in statuses.items():
            assert seen["imported"] == 1, (key, seen)
            assert set(seen) <= {"imported", "up to date"}, (key, seen)
            written += 1
            up_to_date += seen["up to date"]

        async def stored(home: Path = store_home) -> tuple[dict[str, Any], bool]:
            async with SessionStore(home=home) as store:
                return await session_shapes(store), (await check_store(store)).ok

        shapes, ok = asyncio.run(stored())
        assert shapes == expected
        assert ok
    figures.update(
        processes=PROCESSES,
        rounds=ROUNDS,
        sources_written=written,
        found_up_to_date=up_to_date,
        files_skipped_unread=skipped_files,
    )
