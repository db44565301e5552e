"""``SessionStore(scrub=...)``: every text a call is given is scrubbed before it is stored.

A credential written through each call of the API is in no row of the database (every table's
rows, read behind the store's back) and not in the session's export; what the calls return is
what was stored. A scrubber that fails writes nothing.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from soong_store import InvalidArgument, SecretScrubber, SessionStore
from soong_store.transfer import export_session, import_session
from tests.backends import Backend
from tests.helpers import snapshot

SECRET = "ghp_" + "16C7e42F292c6912E7710c838347Ae178B4a"
LABEL = "[REDACTED:github-token]"


def said(text: str = "") -> str:
    return f"{text} token {SECRET} end"


@pytest.fixture
async def scrubbed(backend: Backend) -> Any:
    async with backend.store(scrub=SecretScrubber()) as opened:
        yield opened


async def exported(store: SessionStore, session_id: str) -> str:
    out = io.StringIO()
    await export_session(store, session_id, out)
    return out.getvalue()


async def assert_gone(store: SessionStore, backend: Backend, session_id: str) -> None:
    assert SECRET not in repr(snapshot(backend))
    assert await store.search(SECRET[4:]) == []  # nor in the search index
    assert await store.search("token") != []
    text = await exported(store, session_id)
    assert SECRET not in text
    assert LABEL in text


async def test_every_call_of_the_api_stores_scrubbed_text(
    scrubbed: SessionStore, backend: Backend
) -> None:
    store = scrubbed
    session = await store.create_session(".", metadata={"title": said("session")})
    sid = session.session_id
    assert session.metadata == {"title": said("session").replace(SECRET, LABEL)}
    root = session.root_agent_id
    sub = await store.create_agent(sid, "sub", parent_agent_id=root, metadata=[said("agent")])
    await store.update_agent(sub.agent_id, result={"out": said()}, metadata={"m": said()})
    run = await store.start_run(sid, root, metadata={"m": said("run")})
    await store.update_run(run.run_id, usage={"model": said()}, metadata={"m": said()})
    user = await store.append_node(
        sid,
        "user",
        "message",
        [{"type": "text", "text": said("user")}],
        run_id=run.run_id,
        metadata={"note": said()},
        event={"event_type": "message_received", "payload": {"raw": said()}},
    )
    assert user.content[0].text == said("user").replace(SECRET, LABEL)  # type: ignore[union-attr]
    call = await store.append_node(
        sid,
        "assistant",
        "message",
        [
            {"type": "json", "data": {"env": [said("json")]}},
            {"type": "tool_call", "tool_call_id": "c1", "name": "sh", "arguments": said()},
        ],
        run_id=run.run_id,
        parent_id=user.node_id,
    )
    await store.append_node(
        sid,
        "tool",
        "message",
        [
            {
                "type": "tool_result",
                "tool_call_id": "c1",
                "content": [{"type": "text", "text": said()}],
            }
        ],
        run_id=run.run_id,
        parent_id=call.node_id,
    )
    event = await store.append_event(sid, "tool_failed", level="error", payload={"e": said()})
    assert event.payload == {"e": said().replace(SECRET, LABEL)}
    async with store.transaction(sid) as tx:
        tx.add_event("note", payload=said("tx"))
        tx.add_artifact(b"bytes", summary=said("art"), metadata={"m": said()})
    await store.put_artifact(sid, b"more", summary=said(), metadata={"m": said()})
    await store.finish_run(
        run.run_id, "failed", "failed", usage={"model": said()}, error=said("err")
    )
    redacted = await store.redact_node(sid, user.node_id, reason=said("pasted a key"))
    assert redacted.content[0].reason == said("pasted a key").replace(SECRET, LABEL)  # type: ignore[union-attr]
    await assert_gone(store, backend, sid)


async def test_a_large_json_block_is_scrubbed_before_it_becomes_an_artifact(
    scrubbed: SessionStore, backend: Backend
) -> None:
    sid = (await scrubbed.create_session(".")).session_id
    data = {"lines": [said(str(i)) for i in range(2000)]}  # over the spill threshold
    node = await scrubbed.append_node(sid, "tool", "message", [{"type": "json", "data": data}])
    [artifact] = await scrubbed.list_artifacts(sid)
    assert node.content[0].artifact_ref == artifact.artifact_id  # type: ignore[union-attr]
    stored = await scrubbed.read_artifact(artifact.artifact_id)
    assert SECRET.encode() not in stored
    assert LABEL.encode() in stored
    await assert_gone(scrubbed, backend, sid)


async def test_block_models_are_scrubbed_like_dicts(scrubbed: SessionStore) -> None:
    from soong_store import TextBlock, ToolCallBlock

    sid = (await scrubbed.create_session(".")).session_id
    blocks = [TextBlock(text=said()), ToolCallBlock(tool_call_id="c", name="n", arguments=[said()])]
    node = await scrubbed.append_node(sid, "assistant", "message", blocks)
    assert SECRET not in node.model_dump_json()
    assert node.content[1].tool_call_id == "c"  # type: ignore[union-attr]


async def test_ids_types_and_keys_are_not_given_to_the_scrubber(backend: Backend) -> None:
    seen: list[str] = []

    def loud(text: str) -> str:
        seen.append(text)
        return text.upper()

    async with backend.store(scrub=loud) as store:
        sid = (await store.create_session(".")).session_id
        call = await store.append_node(
            sid,
            "assistant",
            "message",
            [
                {
                    "type": "tool_call",
                    "tool_call_id": "call_a",
                    "name": "sh",
                    "arguments": {"k": "v"},
                }
            ],
            metadata={"key": "value"},
        )
        result = await store.append_node(
            sid,
            "tool",
            "message",
            [
                {
                    "type": "tool_result",
                    "tool_call_id": "call_a",
                    "content": [{"type": "text", "text": "ok"}],
                }
            ],
            parent_id=call.node_id,
        )
    assert call.content[0].model_dump() == {  # type: ignore[union-attr]
        "type": "tool_call",
        "tool_call_id": "call_a",
        "name": "SH",
        "arguments": {"k": "V"},
    }
    assert call.metadata == {"key": "VALUE"}
    assert result.content[0].content[0].text == "OK"  # type: ignore[union-attr]
    assert sorted(seen) == ["ok", "sh", "v", "value"]


class Boom(Exception):
    pass


def failing(text: str) -> str:
    raise Boom("the scrubber's own failure")


def not_text(text: str) -> Any:
    return 42


@pytest.mark.parametrize("scrub", [failing, not_text])
async def test_a_scrubber_that_fails_writes_nothing(backend: Backend, scrub: Any) -> None:
    async with backend.store() as plain:
        sid = (await plain.create_session(".")).session_id
    before = snapshot(backend)
    async with backend.store(scrub=scrub) as store:
        with pytest.raises(InvalidArgument, match="scrubber") as caught:
            await store.append_node(sid, "user", "message", [{"type": "text", "text": said()}])
        assert SECRET not in str(caught.value)
        with pytest.raises(InvalidArgument, match="event payload"):
            await store.append_event(sid, "note", payload={"p": said()})
        with pytest.raises(InvalidArgument, match="session metadata"):
            await store.create_session(".", metadata={"m": "x"})
        with pytest.raises(InvalidArgument, match="scrubber"):
            async with store.transaction(sid) as tx:
                tx.add_node("user", "message", [{"type": "text", "text": "fine"}])
                tx.add_event("note", payload="bad")
    assert snapshot(backend) == before


def test_a_scrub_that_is_not_callable_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="invalid scrub 'no'"):
        SessionStore(home=tmp_path, scrub="no")  # type: ignore[arg-type]


async def test_an_imported_export_is_scrubbed(backend: Backend, scrubbed: SessionStore) -> None:
    async with backend.store() as plain:  # the same database, without a scrubber
        sid = (await plain.create_session(".", metadata={"m": said()})).session_id
        await plain.append_node(sid, "user", "message", [{"type": "text", "text": said()}])
        await plain.append_event(sid, "note", payload=[said()])
        text = await exported(plain, sid)
        await plain.delete_session(sid)
    assert SECRET in text
    imported = await import_session(scrubbed, text.splitlines())
    assert imported.session_id == sid
    await assert_gone(scrubbed, backend, sid)
