"""Runs' usage: one shape, validated where it is written, and summed on the database."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest

from soong_store import InvalidArgument, SessionStore, UsageRow
from soong_store.model.usage import Usage
from tests.helpers import snapshot


async def _run(store: SessionStore, cwd: str = ".") -> tuple[str, str]:
    s = await store.create_session(cwd=cwd)
    run = await store.start_run(s.session_id, s.root_agent_id)
    return s.session_id, run.run_id


def _row(key: str | None, runs: int, **counts: Any) -> UsageRow:
    values: dict[str, Any] = dict.fromkeys(
        ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"), 0
    )
    values["cost_usd"] = None
    values.update(counts)
    return UsageRow(key=key, runs=runs, **values)


BAD_USAGE = [
    ({"input_tokens": -1}, "input_tokens -1"),
    ({"input_tokens": 1.5}, "input_tokens 1.5"),
    ({"output_tokens": "12"}, "output_tokens '12'"),
    ({"cache_read_tokens": True}, "cache_read_tokens True"),
    ({"cache_write_tokens": 10**13}, "cache_write_tokens 10000000000000"),
    ({"cost_usd": -0.5}, "cost_usd -0.5"),
    ({"cost_usd": float("nan")}, "cost_usd nan"),
    ({"cost_usd": "0.1"}, "cost_usd '0.1'"),
    ({"model": ""}, "model ''"),
    ({"model": 4}, "model 4"),
    ({"tokens": 5}, "unknown key 'tokens'"),
    ([{"input_tokens": 1}, {"output_tokens": -2}], "usage[1] output_tokens -2"),
    ([{"input_tokens": 1}, 7], "usage[1] 7"),
    (42, "usage 42"),
    ("lots", "usage 'lots'"),
]


@pytest.mark.parametrize(("usage", "named"), BAD_USAGE, ids=lambda v: repr(v)[:40])
@pytest.mark.parametrize("call", ["update_run", "finish_run"])
async def test_bad_usage_is_refused_naming_it_and_nothing_is_written(
    store: SessionStore, call: str, usage: Any, named: str
) -> None:
    _, run_id = await _run(store)
    before = snapshot(store)
    args = ("completed", "completed") if call == "finish_run" else ()
    with pytest.raises(InvalidArgument) as refused:
        await getattr(store, call)(run_id, *args, usage=usage)
    assert named in str(refused.value)
    assert snapshot(store) == before


async def test_usage_is_stored_in_its_shape(store: SessionStore) -> None:
    _, run_id = await _run(store)
    model = Usage(model="m", input_tokens=3)
    done = await store.finish_run(
        run_id, "completed", "completed", usage=[model, {"output_tokens": 2, "cost_usd": 1}]
    )
    assert done.usage == [{"model": "m", "input_tokens": 3}, {"output_tokens": 2, "cost_usd": 1.0}]
    assert (await store.get_run(run_id)).usage == done.usage


async def test_usage_sums_by_model_day_session_and_cwd(store: SessionStore, tmp_path) -> None:
    first, a = await _run(store, str(tmp_path / "one"))
    second, b = await _run(store, str(tmp_path / "two"))
    third, c = await _run(store, str(tmp_path / "two"))
    await store.finish_run(
        a,
        "completed",
        "completed",
        usage=[
            {"model": "big", "input_tokens": 100, "output_tokens": 10, "cost_usd": 0.25},
            {"model": "small", "input_tokens": 5, "cache_read_tokens": 50},
        ],
    )
    await store.finish_run(
        b, "completed", "completed", usage={"model": "big", "output_tokens": 1, "cost_usd": 0.5}
    )
    await store.finish_run(c, "completed", "completed", usage={"cache_write_tokens": 7})
    today = (await store.get_run(a)).created_at.date().isoformat()

    assert await store.usage(by="model") == [
        _row("big", 2, input_tokens=100, output_tokens=11, cost_usd=0.75),
        _row("small", 1, input_tokens=5, cache_read_tokens=50),
        _row(None, 1, cache_write_tokens=7),
    ]
    everything = _row(
        today,
        3,
        input_tokens=105,
        output_tokens=11,
        cache_read_tokens=50,
        cache_write_tokens=7,
        cost_usd=0.75,
    )
    assert await store.usage() == [everything]
    assert await store.usage(by="session") == [
        _row(first, 1, input_tokens=105, output_tokens=10, cache_read_tokens=50, cost_usd=0.25),
        _row(second, 1, output_tokens=1, cost_usd=0.5),
        _row(third, 1, cache_write_tokens=7),
    ]
    by_cwd = await store.usage(by="cwd")
    assert [(r.key, r.runs) for r in by_cwd] == [
        (str(tmp_path / "one"), 1),
        (str(tmp_path / "two"), 2),
    ]


async def test_a_later_usage_of_a_run_replaces_its_earlier_one(store: SessionStore) -> None:
    _, run_id = await _run(store)
    await store.update_run(run_id, usage={"model": "m", "input_tokens": 10})
    await store.update_run(run_id, turn_count=1)  # no usage given: the ledger keeps it
    assert await store.usage(by="model") == [_row("m", 1, input_tokens=10)]
    await store.finish_run(
        run_id, "completed", "completed", usage={"model": "m", "input_tokens": 12}
    )
    assert await store.usage(by="model") == [_row("m", 1, input_tokens=12)]


async def test_usage_leaves_with_its_session(store: SessionStore) -> None:
    sid, run_id = await _run(store)
    await store.finish_run(run_id, "completed", "completed", usage={"input_tokens": 4})
    assert len(await store.usage()) == 1
    await store.delete_session(sid)
    assert await store.usage() == []


async def test_since_and_until_bound_the_runs_start(store: SessionStore) -> None:
    _, run_id = await _run(store)
    await store.finish_run(run_id, "completed", "completed", usage={"input_tokens": 4})
    started = (await store.get_run(run_id)).created_at
    assert len(await store.usage(since=started)) == 1  # since is inclusive
    assert await store.usage(until=started) == []  # until is not
    assert len(await store.usage(until=started + timedelta(microseconds=1))) == 1
    assert await store.usage(since=started + timedelta(microseconds=1)) == []
    assert len(await store.usage(since=started.date())) == 1
    assert await store.usage(until=started.date()) == []
    east = started.astimezone(timezone(timedelta(hours=5)))
    assert len(await store.usage(since=east)) == 1
    assert await store.usage(since=date(2999, 1, 1)) == []


async def test_usage_by_owner_and_of_one_owner(store: SessionStore) -> None:
    made = []
    for owner, tokens in (("alice", 10), ("bob", 100), ("alice", 1), (None, 1000)):
        s = await store.create_session(cwd=".", owner=owner)
        run = await store.start_run(s.session_id, s.root_agent_id)
        await store.finish_run(run.run_id, "completed", "completed", usage={"input_tokens": tokens})
        made.append(s.session_id)
    assert await store.usage(by="owner") == [
        _row(None, 1, input_tokens=1000),
        _row("bob", 1, input_tokens=100),
        _row("alice", 2, input_tokens=11),
    ]
    assert await store.usage(by="session", owner="alice") == [
        _row(made[0], 1, input_tokens=10),
        _row(made[2], 1, input_tokens=1),
    ]
    assert await store.usage(by="owner", owner="bob") == [_row("bob", 1, input_tokens=100)]
    assert await store.usage(owner="carol") == []
    alice = store.scoped("alice")
    assert await alice.usage(by="session") == await store.usage(by="session", owner="alice")
    with pytest.raises(InvalidArgument):
        await alice.usage(by="owner")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"by": "week"},
        {"by": None},
        {"by": "tenant"},
        {"owner": "not an owner"},
        {"since": datetime(2026, 1, 1)},  # no time zone: which day is meant is unknown
        {"until": "2026-01-01"},
        {"since": 5},
    ],
    ids=repr,
)
async def test_bad_usage_arguments_are_refused(store: SessionStore, kwargs: dict[str, Any]):
    with pytest.raises(InvalidArgument) as refused:
        await store.usage(**kwargs)
    assert repr(next(iter(kwargs.values()))) in str(refused.value)


async def test_a_day_is_the_utc_date_of_the_runs_start(store: SessionStore) -> None:
    _, run_id = await _run(store)
    await store.finish_run(run_id, "completed", "completed", usage={"input_tokens": 1})
    started = (await store.get_run(run_id)).created_at
    assert started.tzinfo is not None
    (row,) = await store.usage(by="day")
    assert row.key == started.astimezone(UTC).date().isoformat()


async def test_an_exported_session_imports_with_its_usage(store: SessionStore, tmp_path) -> None:
    from soong_store.transfer import export_session, import_session

    sid, run_id = await _run(store)
    await store.finish_run(
        run_id, "completed", "completed", usage={"model": "m", "input_tokens": 9}
    )
    path = tmp_path / "s.jsonl"
    with path.open("w") as out:
        await export_session(store, sid, out)
    await store.delete_session(sid)
    assert await store.usage() == []
    with path.open() as lines:
        await import_session(store, lines)
    assert await store.usage(by="model") == [_row("m", 1, input_tokens=9)]
