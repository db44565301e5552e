"""Revision 0010 enters the usage runs already hold into the ledger, free-form usage leniently."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from soong_store import SessionStore, UsageRow
from tests.conftest import connect_raw, db_path

pytestmark = pytest.mark.sqlite

STORED = [  # usage_json as homes before the shape held it, and what the ledger takes of it
    ([{"model": "m", "input_tokens": 5}, {"model": "m", "output_tokens": 2}], ("m", 5, 2)),
    ({"model": "m", "input_tokens": 1, "requests": 3, "output_tokens": -4}, ("m", 1, 0)),
    ({"in": 3, "out": 4}, None),  # nothing of the shape: no entry
    ("a lot", None),
    ([7, {"input_tokens": True, "output_tokens": 6}], (None, 0, 6)),
]


async def test_runs_before_the_revision_are_in_the_ledger(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home) as store:
        s = await store.create_session(cwd=tmp_path)
        runs = []
        for _ in STORED:
            run = await store.start_run(s.session_id, s.root_agent_id, status="queued")
            runs.append(run.run_id)
    raw = connect_raw(db_path(home))
    try:  # the database as revision 0009 left it, its runs holding free-form usage
        for run_id, (stored, _) in zip(runs, STORED, strict=True):
            raw.execute(
                "UPDATE runs SET usage_json = ? WHERE run_id = ?",
                (orjson.dumps(stored).decode(), run_id),
            )
        raw.execute("DROP TABLE run_usage")
        raw.execute("UPDATE alembic_version SET version_num = '0009'")
        raw.commit()
    finally:
        raw.close()
    async with SessionStore(home=home) as store:
        rows = await store.usage(by="model")
        for run_id, (stored, _) in zip(runs, STORED, strict=True):
            assert (await store.get_run(run_id)).usage == stored  # read back as stored
    taken = [want for _, want in STORED if want is not None]
    assert rows == [
        UsageRow(
            key="m",
            runs=2,
            input_tokens=sum(w[1] for w in taken if w[0] == "m"),
            output_tokens=sum(w[2] for w in taken if w[0] == "m"),
            cache_read_tokens=0,
            cache_write_tokens=0,
            cost_usd=None,
        ),
        UsageRow(
            key=None,
            runs=1,
            input_tokens=0,
            output_tokens=6,
            cache_read_tokens=0,
            cache_write_tokens=0,
            cost_usd=None,
        ),
    ]
