"""Integers beyond a column's range are refused before the queue, or taken as "all"."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from soong_store import InvalidArgument, SessionStore
from soong_store.cli import main
from tests.backends import Backend
from tests.conftest import text
from tests.helpers import snapshot

TOO_BIG = [2**63, 10**30, 10**5000]
MAX = 2**63 - 1


def bits(value: object) -> str:
    """A test id for a value (a huge integer cannot be printed)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{'-' if value < 0 else ''}{value.bit_length()}bits"
    return repr(value)


@pytest.fixture
async def seeded(store: SessionStore) -> dict[str, str]:
    session = await store.create_session(cwd=".")
    sid = session.session_id
    run = await store.start_run(sid, session.root_agent_id)
    await store.append_node(sid, "user", "message", text("q"), run_id=run.run_id)
    return {"sid": sid, "run": run.run_id}


def counts(
    seeded: dict[str, str], value: int
) -> dict[str, Callable[[SessionStore], Awaitable[Any]]]:
    sid, run = seeded["sid"], seeded["run"]
    return {
        "token_count": lambda s: s.append_node(
            sid, "user", "message", text("x"), token_count=value
        ),
        "tx token_count": lambda s: _tx_node(s, sid, value),
        "update_run turn_count": lambda s: s.update_run(run, turn_count=value),
        "finish_run turn_count": lambda s: s.finish_run(
            run, "completed", "completed", turn_count=value
        ),
    }


async def _tx_node(store: SessionStore, sid: str, tokens: int) -> None:
    async with store.transaction(sid) as tx:
        tx.add_node("user", "message", text("x"), token_count=tokens)


@pytest.mark.parametrize("value", TOO_BIG + [-(2**63) - 1, -(10**5000)], ids=bits)
@pytest.mark.parametrize("name", sorted(counts({"sid": "", "run": ""}, 0)))
async def test_counts_out_of_range_are_invalid_and_change_nothing(
    store: SessionStore, seeded: dict[str, str], name: str, value: int
) -> None:
    before = snapshot(store)
    with pytest.raises(InvalidArgument, match="turn_count|token_count") as raised:
        await counts(seeded, value)[name](store)
    assert f"to {MAX}" in str(raised.value)
    assert snapshot(store) == before


async def test_the_largest_count_is_stored(store: SessionStore, seeded: dict[str, str]) -> None:
    node = await store.append_node(seeded["sid"], "user", "message", text("x"), token_count=MAX)
    assert (await store.get_node(seeded["sid"], node.node_id)).token_count == MAX
    run = await store.update_run(seeded["run"], turn_count=MAX)
    assert run.turn_count == MAX


@pytest.mark.parametrize("value", TOO_BIG, ids=bits)
async def test_a_huge_bound_means_all(
    store: SessionStore, seeded: dict[str, str], value: int
) -> None:
    sid = seeded["sid"]
    everything = await store.timeline(sid)
    assert await store.timeline(sid, limit=value) == everything
    assert await store.timeline(sid, run_id=seeded["run"], limit=value) == [
        e for e in everything if e.run_id == seeded["run"]
    ]
    assert await store.timeline(sid, after_seq=value) == []
    assert await store.list_sessions(limit=value) == await store.list_sessions()


@pytest.mark.parametrize("value", [0, -1, -(2**63), -(10**5000), True, 1.5, "3"], ids=bits)
async def test_bad_bounds_are_invalid(
    store: SessionStore, seeded: dict[str, str], value: object
) -> None:
    sid = seeded["sid"]
    with pytest.raises(InvalidArgument, match="limit"):
        await store.timeline(sid, limit=value)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="limit"):
        await store.list_sessions(limit=value)  # type: ignore[arg-type]
    if value != 0:
        with pytest.raises(InvalidArgument, match="after_seq"):
            await store.timeline(sid, after_seq=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["spill_bytes", "spill_tokens", "max_artifact_bytes"])
def test_constructor_integers_out_of_range_are_invalid(backend: Backend, name: str) -> None:
    for bad in (0, -1, -(10**5000), True, "1", 1.0):
        with pytest.raises(InvalidArgument, match=name):
            backend.store(**{name: bad})


@pytest.mark.parametrize(
    "options",
    [
        {"spill_bytes": 10**5000},
        {"spill_tokens": 10**5000},
        {"max_artifact_bytes": 10**5000},
        {"spill_bytes": 2**63, "spill_tokens": 2**63},
    ],
    ids=lambda options: "+".join(options),
)
async def test_huge_constructor_integers_mean_no_limit(
    backend: Backend, options: dict[str, int]
) -> None:
    async with backend.store(**options) as store:
        sid = (await store.create_session(cwd=".")).session_id
        big = [{"type": "json", "data": {"rows": ["x" * 100] * 400}}]
        node = await store.append_node(sid, "tool", "message", big)
        spilled = node.content[0].artifact_ref is not None  # type: ignore[union-attr]
        assert spilled == ("spill_tokens" not in options or "spill_bytes" not in options)
        art = await store.put_artifact(sid, b"abc")
        assert await store.read_artifact(art.artifact_id) == b"abc"


def test_cli_paging_and_cursors_take_any_integer(
    backend: Backend, capsys: pytest.CaptureFixture[str]
) -> None:
    huge = str(10**40)

    def run(*args: str) -> str:
        capsys.readouterr()
        code = main([*backend.cli, *args])
        out, err = capsys.readouterr()
        assert code == 0, err
        return out

    run("demo")
    sid = run("sessions", "--json").split('"session_id":"')[1].split('"')[0]
    assert sid in run("sessions", "--limit", huge)
    assert "(no sessions)" in run("sessions", "--offset", huge)
    assert "(no sessions)" in run("sessions", "--offset", huge, "--limit", huge)
    assert len(run("timeline", sid, "--after", huge).splitlines()) == 1  # the column names
    assert run("timeline", sid, "--after", huge, "--json").count('"events":[]') == 1
    assert "#1 " in run("tree", sid, "--depth", huge, "--width", huge)
