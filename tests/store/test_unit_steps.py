"""A unit of work's steps: a caller's writer job commits with the unit's nodes, or nothing does."""

from __future__ import annotations

import pytest
from sqlalchemy import Connection, delete, select

from soong_store import SessionStore
from soong_store.errors import InvalidArgument
from soong_store.schema.tables import keyed_states_table as states
from soong_store.store import run_read


def put_state(connection: Connection, value: str) -> None:
    connection.execute(delete(states).where(states.c.namespace == "t", states.c.key == "k"))
    connection.execute(
        states.insert(),
        {"namespace": "t", "key": "k", "state_json": value, "update_time": 1.5},
    )


def refuse(connection: Connection) -> None:
    raise InvalidArgument("refused by the step")


async def stored(store: SessionStore) -> list[str]:
    rows = await run_read(store, lambda c: list(c.execute(select(states.c.state_json))))
    return [row[0] for row in rows]


async def test_a_step_commits_with_the_nodes_of_its_unit(store: SessionStore) -> None:
    sid = (await store.create_session("/w")).session_id
    async with store.transaction(sid) as tx:
        tx.add_node("user", "message", [{"type": "text", "text": "hi"}])
        tx.add_step(lambda c: put_state(c, '{"a": 1}'))
    assert await stored(store) == ['{"a": 1}']
    assert len(await store.list_nodes(sid)) == 1


async def test_a_step_that_raises_aborts_the_whole_unit(store: SessionStore) -> None:
    sid = (await store.create_session("/w")).session_id
    with pytest.raises(InvalidArgument, match="refused by the step"):
        async with store.transaction(sid) as tx:
            tx.add_step(lambda c: put_state(c, '{"a": 2}'))
            tx.add_node("user", "message", [{"type": "text", "text": "hi"}])
            tx.add_step(refuse)
    assert await stored(store) == []
    assert await store.list_nodes(sid) == []
