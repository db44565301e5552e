"""SoongSessionService: ADK's session-service contract, each behaviour on a fresh home."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.session import Session
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types

from soong_store import JsonBlock, SessionStore
from soong_store.check.run import check_store
from soong_store.integrations.adk import SoongSessionService, owner_of

APP = "app"


@pytest.fixture
def place(tmp_path: Path) -> dict[str, Any]:
    """Where the test's store is: a fresh home (``test_adk_postgresql.py``: a database)."""
    return {"home": tmp_path / "home"}


@pytest.fixture
async def service(place: dict[str, Any]) -> AsyncIterator[SoongSessionService]:
    async with SoongSessionService(**place) as made:
        yield made


def event(author: str = "user", **fields: Any) -> Event:
    return Event(author=author, invocation_id=fields.pop("invocation_id", "inv"), **fields)


def delta(**state: Any) -> EventActions:
    return EventActions(state_delta=state)


async def got(service: SoongSessionService, user: str, sid: str, **config: Any) -> Session:
    found = await service.get_session(
        app_name=APP,
        user_id=user,
        session_id=sid,
        config=GetSessionConfig(**config) if config else None,
    )
    assert found is not None
    return found


def test_importing_the_store_does_not_import_adk() -> None:
    code = (
        "import sys, soong_store; print('google.adk' in sys.modules, 'google.genai' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_it_is_an_adk_session_service_with_nothing_left_abstract() -> None:
    assert issubclass(SoongSessionService, BaseSessionService)
    assert not getattr(SoongSessionService, "__abstractmethods__", None)
    assert "get_user_state" in SoongSessionService.__dict__


async def test_an_unknown_session_is_none(service: SoongSessionService) -> None:
    assert await service.get_session(app_name=APP, user_id="u", session_id="nope") is None


async def test_created_session_reads_back_equal_and_deletes(service: SoongSessionService) -> None:
    made = await service.create_session(app_name=APP, user_id="u", state={"k": "v"})
    assert made.id and made.state == {"k": "v"} and made.events == []
    assert await got(service, "u", made.id) == made
    await service.delete_session(app_name=APP, user_id="u", session_id=made.id)
    assert await service.get_session(app_name=APP, user_id="u", session_id=made.id) is None
    await service.delete_session(app_name=APP, user_id="u", session_id=made.id)  # no error


async def test_a_taken_id_raises_already_exists(service: SoongSessionService) -> None:
    await service.create_session(app_name=APP, user_id="u", session_id="s")
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name=APP, user_id="u", session_id="s")


async def test_the_same_id_under_two_users_is_two_sessions(service: SoongSessionService) -> None:
    one = await service.create_session(app_name=APP, user_id="u1", session_id="s")
    await service.append_event(one, event())
    await service.create_session(app_name=APP, user_id="u2", session_id="s")
    two = await got(service, "u2", "s")
    assert two.user_id == "u2" and two.events == []
    assert len((await got(service, "u1", "s")).events) == 1
    ids = {
        await service.store_session_id(app_name=APP, user_id=u, session_id="s")
        for u in ("u1", "u2")
    }
    assert len(ids) == 2 and None not in ids


async def test_a_padded_id_names_the_session_of_the_stripped_one(
    service: SoongSessionService,
) -> None:
    made = await service.create_session(app_name=APP, user_id="u", session_id=" s ")
    assert made.id == "s"
    assert (await got(service, "u", "  s")).id == "s"
    await service.delete_session(app_name=APP, user_id="u", session_id="s ")
    assert await service.get_session(app_name=APP, user_id="u", session_id="s") is None


async def test_lists_by_user_or_app_oldest_update_first_without_events(
    service: SoongSessionService,
) -> None:
    for user, sid in (("u1", "a"), ("u1", "b"), ("u2", "c")):
        await service.create_session(app_name=APP, user_id=user, session_id=sid, state={"k": sid})
    a = await got(service, "u1", "a")
    await service.append_event(a, event(timestamp=a.last_update_time + 100))
    await service.create_session(app_name="other", user_id="u1", session_id="x")
    mine = (await service.list_sessions(app_name=APP, user_id="u1")).sessions
    assert [s.id for s in mine] == ["b", "a"]
    assert [s.state for s in mine] == [{"k": "b"}, {"k": "a"}]
    every = (await service.list_sessions(app_name=APP)).sessions
    assert [(s.user_id, s.id) for s in every] == [("u1", "b"), ("u2", "c"), ("u1", "a")]
    assert all(s.events == [] for s in every)
    assert (await service.list_sessions(app_name=APP, user_id="nobody")).sessions == []


async def test_app_state_is_shared_by_every_user_of_the_app(service: SoongSessionService) -> None:
    one = await service.create_session(app_name=APP, user_id="u1", state={"app:a": 1})
    await service.append_event(one, event(actions=delta(**{"app:b": 2})))
    two = await service.create_session(app_name=APP, user_id="u2")
    assert two.state == {"app:a": 1, "app:b": 2}
    assert (await got(service, "u1", one.id)).state == {"app:a": 1, "app:b": 2}
    other = await service.create_session(app_name="other", user_id="u1")
    assert other.state == {}


async def test_user_state_is_shared_by_the_users_sessions_only(
    service: SoongSessionService,
) -> None:
    one = await service.create_session(app_name=APP, user_id="u1", state={"user:a": 1})
    await service.append_event(one, event(actions=delta(**{"user:b": 2})))
    again = await service.create_session(app_name=APP, user_id="u1")
    assert again.state == {"user:a": 1, "user:b": 2}
    assert (await service.create_session(app_name=APP, user_id="u2")).state == {}
    assert await service.get_user_state(app_name=APP, user_id="u1") == {"a": 1, "b": 2}
    assert await service.get_user_state(app_name=APP, user_id="u2") == {}
    listed = (await service.list_sessions(app_name=APP)).sessions
    assert {s.id: s.state for s in listed}[again.id] == {"user:a": 1, "user:b": 2}


async def test_user_state_is_the_apps_own(service: SoongSessionService) -> None:
    one = await service.create_session(app_name=APP, user_id="u")
    await service.append_event(one, event(actions=delta(**{"user:k": 1})))
    assert await service.get_user_state(app_name="other", user_id="u") == {}
    assert (await service.create_session(app_name="other", user_id="u")).state == {}


async def test_a_value_json_cannot_hold_is_stored_as_its_text(service: SoongSessionService) -> None:
    one = await service.create_session(app_name=APP, user_id="u")
    await service.append_event(one, event(actions=delta(callback=lambda: 1, ok=2)))
    read = await got(service, "u", one.id)
    assert len(read.events) == 1 and read.state["ok"] == 2
    assert isinstance(read.state["callback"], str)


async def test_concurrent_creates_of_one_id_make_one_session(service: SoongSessionService) -> None:
    made = await asyncio.gather(
        *(service.create_session(app_name=APP, user_id="u", session_id="race") for _ in range(3)),
        return_exceptions=True,
    )
    failed = [m for m in made if isinstance(m, BaseException)]
    assert len(failed) == 2
    assert all(isinstance(f, AlreadyExistsError) and "race" in str(f) for f in failed)
    listed = (await service.list_sessions(app_name=APP, user_id="u")).sessions
    assert [s.id for s in listed] == ["race"]


async def test_session_state_is_the_sessions_own(service: SoongSessionService) -> None:
    one = await service.create_session(app_name=APP, user_id="u", state={"a": 1})
    await service.append_event(one, event(actions=delta(b=2)))
    assert (await got(service, "u", one.id)).state == {"a": 1, "b": 2}
    assert (await service.create_session(app_name=APP, user_id="u")).state == {}


async def test_a_delta_replaces_a_value_and_stores_none(service: SoongSessionService) -> None:
    one = await service.create_session(app_name=APP, user_id="u", state={"a": {"x": 1}})
    await service.append_event(one, event(actions=delta(a={"y": 2}, b=None)))
    assert (await got(service, "u", one.id)).state == {"a": {"y": 2}, "b": None}


async def test_temp_keys_are_neither_state_nor_stored_in_the_event(
    service: SoongSessionService,
) -> None:
    one = await service.create_session(app_name=APP, user_id="u")
    await service.append_event(one, event(actions=delta(**{"temp:t": 1, "k": 2})))
    assert one.state["temp:t"] == 1  # the caller's copy has it for the invocation
    read = await got(service, "u", one.id)
    assert read.state == {"k": 2}
    assert read.events[0].actions.state_delta == {"k": 2}


async def test_an_event_round_trips_exactly(service: SoongSessionService) -> None:
    one = await service.create_session(app_name=APP, user_id="u")
    content = types.Content(
        role="user",
        parts=[
            types.Part(text="look"),
            types.Part.from_bytes(data=b"\x00\xffimage", mime_type="image/png"),
        ],
    )
    complete = event(
        content=content,
        timestamp=1733000000.123456789,
        turn_complete=True,
        actions=EventActions(
            state_delta={"k": [1, 2.5]},
            artifact_delta={"file": 0},
            transfer_to_agent="agent",
            escalate=True,
            skip_summarization=True,
            requested_auth_configs={},
            requested_tool_confirmations={
                "call_1": ToolConfirmation(hint="sure?", confirmed=False, payload={"id": 1})
            },
        ),
        long_running_tool_ids={"t1", "t2"},
        error_code="code",
        error_message="message",
        interrupted=True,
        branch="root.sub",
        grounding_metadata=types.GroundingMetadata(
            search_entry_point=types.SearchEntryPoint(sdk_blob=b"blob"),
            web_search_queries=["q"],
        ),
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=1, candidates_token_count=1, total_token_count=2
        ),
        citation_metadata=types.CitationMetadata(),
        custom_metadata={"custom": {"nested": [1, None, True]}},
        input_transcription=types.Transcription(text="in", finished=True),
        output_transcription=types.Transcription(text="out", finished=True),
    )
    await service.append_event(one, complete)
    read = await got(service, "u", one.id)
    assert read == one
    [back] = read.events
    assert back == complete and back.timestamp == 1733000000.123456789
    assert back.long_running_tool_ids == {"t1", "t2"}
    assert back.content is not None and back.content.parts is not None
    inline = back.content.parts[1].inline_data
    assert inline is not None and inline.data == b"\x00\xffimage"


async def test_a_large_event_spills_to_a_file_and_reads_back(place: dict[str, Any]) -> None:
    async with SessionStore(**place, spill_bytes=1024) as store:
        service = SoongSessionService(store=store)
        one = await service.create_session(app_name=APP, user_id="u")
        big = event(custom_metadata={"blob": "x" * 5000})
        await service.append_event(one, big)
        sid = await service.store_session_id(app_name=APP, user_id="u", session_id=one.id)
        assert sid is not None and len(await store.list_artifacts(sid)) == 1
        assert (await got(service, "u", one.id)).events == [big]


async def test_last_update_time_is_the_events_timestamp(service: SoongSessionService) -> None:
    one = await service.create_session(app_name=APP, user_id="u")
    later = one.last_update_time + 10.000001
    await service.append_event(one, event(timestamp=later))
    assert one.last_update_time == later
    assert (await got(service, "u", one.id)).last_update_time == later


async def test_config_reads_the_recent_events_and_those_after_a_time(
    service: SoongSessionService,
) -> None:
    one = await service.create_session(app_name=APP, user_id="u")
    for t in range(1, 6):
        await service.append_event(one, event(timestamp=float(t)))

    def times(session: Session) -> list[float]:
        return [e.timestamp for e in session.events]

    assert times(await got(service, "u", one.id)) == [1, 2, 3, 4, 5]
    assert times(await got(service, "u", one.id, num_recent_events=3)) == [3, 4, 5]
    assert times(await got(service, "u", one.id, num_recent_events=0)) == []
    assert times(await got(service, "u", one.id, after_timestamp=4.0)) == [4, 5]
    assert times(await got(service, "u", one.id, after_timestamp=50.0)) == []
    both = await got(service, "u", one.id, after_timestamp=4.0, num_recent_events=3)
    assert times(both) == [4, 5]
    assert times(await got(service, "u", one.id, after_timestamp=2.0, num_recent_events=2)) == [
        4,
        5,
    ]


async def test_config_reads_only_the_tail_it_returns(
    service: SoongSessionService, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = await service.create_session(app_name=APP, user_id="u")
    for t in range(1, 201):
        await service.append_event(one, event(timestamp=float(t)))
    limits: list[int | None] = []
    real = SessionStore.active_path

    async def spy(store: SessionStore, session_id: str, **kw: Any) -> Any:
        limits.append(kw.get("limit"))
        return await real(store, session_id, **kw)

    monkeypatch.setattr(SessionStore, "active_path", spy)
    assert len((await got(service, "u", one.id, num_recent_events=3)).events) == 3
    assert limits == [3]
    limits.clear()
    assert len((await got(service, "u", one.id, after_timestamp=190.0)).events) == 11
    assert limits == [64]
    limits.clear()
    await service.list_sessions(app_name=APP)
    assert limits == []


async def test_partial_events_are_neither_stored_nor_added(service: SoongSessionService) -> None:
    one = await service.create_session(app_name=APP, user_id="u")
    await service.append_event(one, event(partial=True))
    assert one.events == []
    assert (await got(service, "u", one.id)).events == []


async def test_appending_to_a_deleted_session_raises(service: SoongSessionService) -> None:
    one = await service.create_session(app_name=APP, user_id="u")
    await service.delete_session(app_name=APP, user_id="u", session_id=one.id)
    with pytest.raises(SessionNotFoundError):
        await service.append_event(one, event())
    never = Session(app_name=APP, user_id="u", id="never", last_update_time=0.0)
    with pytest.raises(SessionNotFoundError):
        await service.append_event(never, event())


async def test_a_stale_writer_raises_and_writes_nothing(service: SoongSessionService) -> None:
    one = await service.create_session(app_name=APP, user_id="u")
    stale = await got(service, "u", one.id)
    fresh = await got(service, "u", one.id)
    await service.append_event(fresh, event(timestamp=one.last_update_time + 1))
    with pytest.raises(StaleSessionError):
        await service.append_event(
            stale, event(timestamp=one.last_update_time + 2, actions=delta(k=1))
        )
    read = await got(service, "u", one.id)
    assert len(read.events) == 1 and read.state == {}


async def test_a_stale_writers_error_says_so_in_adks_words(service: SoongSessionService) -> None:
    """ADK's database, MongoDB and Firestore services say "modified in storage"."""
    one = await service.create_session(app_name=APP, user_id="u", session_id="s")
    stale = await got(service, "u", "s")
    await service.append_event(
        await got(service, "u", "s"), event(timestamp=one.last_update_time + 1)
    )
    with pytest.raises(StaleSessionError, match="modified in storage") as raised:
        await service.append_event(stale, event(timestamp=one.last_update_time + 2))
    assert '"s"' in str(raised.value)


async def test_concurrent_appends_of_equal_copies_keep_every_event_in_order(
    place: dict[str, Any],
) -> None:
    async with SoongSessionService(**place) as a, SoongSessionService(**place) as b:
        one = await a.create_session(app_name=APP, user_id="u", session_id="s")
        copies = [await got(s, "u", "s") for s in (a, b, a, b)]
        at = one.last_update_time
        events = [event(invocation_id=f"i{n}", timestamp=at) for n in range(4)]
        await asyncio.gather(
            *(s.append_event(c, e) for s, c, e in zip((a, b, a, b), copies, events, strict=True))
        )
        read = await got(a, "u", "s")
        assert sorted(e.id for e in read.events) == sorted(e.id for e in events)


async def test_events_are_nodes_of_agents_and_runs(service: SoongSessionService) -> None:
    one = await service.create_session(app_name=APP, user_id="u")
    text = types.Content(role="model", parts=[types.Part(text="hello")])
    await service.append_event(one, event(invocation_id="i1"))
    await service.append_event(one, event("root", invocation_id="i1", content=text))
    await service.append_event(one, event("helper", invocation_id="i1", branch="root.helper"))
    await service.append_event(one, event(invocation_id="i2"))
    store = service.store
    sid = await service.store_session_id(app_name=APP, user_id="u", session_id=one.id)
    assert sid is not None
    agents = {a.agent_id: a for a in await store.list_agents(sid)}
    names = {a.metadata.get("name"): a for a in agents.values() if a.metadata}
    assert set(names) == {"root", "helper"}
    assert names["helper"].parent_agent_id == names["root"].agent_id
    nodes = await store.list_nodes(sid)
    assert [agents[n.agent_id].metadata for n in nodes][1:3] == [
        names["root"].metadata,
        names["helper"].metadata,
    ]
    assert [n.role for n in nodes] == ["user", "assistant", "assistant", "user"]
    assert nodes[1].content[0].type == "text" and isinstance(nodes[1].content[-1], JsonBlock)
    runs = {r.run_id: r for r in await store.list_runs(sid)}
    assert len(runs) == 4  # i1 of the session, root and helper; i2 of the session
    assert [str(r.status) for r in runs.values()].count("running") == 1
    assert len({n.run_id for n in nodes[:3]}) == 3


async def test_appends_between_another_services_go_under_its_events(
    place: dict[str, Any],
) -> None:
    async with SoongSessionService(**place) as a, SoongSessionService(**place) as b:
        mine = await a.create_session(app_name=APP, user_id="u", session_id="s")
        at = mine.last_update_time
        sent = [event(timestamp=at) for _ in range(4)]
        await a.append_event(mine, sent[0])
        await b.append_event(await got(b, "u", "s"), sent[1])  # same agent and invocation
        await a.append_event(mine, sent[2])
        await b.append_event(
            await got(b, "u", "s"), event("agent", invocation_id="i2", timestamp=at)
        )
        await a.append_event(mine, sent[3])  # its run was ended by invocation i2
        read = await got(b, "u", "s")
        assert [e.id for e in read.events] == [
            *(e.id for e in sent[:3]),
            read.events[3].id,
            sent[3].id,
        ]
        sid = await a.store_session_id(app_name=APP, user_id="u", session_id="s")
        assert sid is not None
        nodes = await a.store.list_nodes(sid)
        assert [n.parent_id for n in nodes] == [None, *(n.node_id for n in nodes[:-1])]


async def test_a_session_made_again_elsewhere_takes_the_next_append(
    place: dict[str, Any],
) -> None:
    async with SoongSessionService(**place) as a, SoongSessionService(**place) as b:
        first = await a.create_session(app_name=APP, user_id="u", session_id="s")
        await a.append_event(first, event(timestamp=first.last_update_time))
        await b.delete_session(app_name=APP, user_id="u", session_id="s")
        await b.create_session(app_name=APP, user_id="u", session_id="s")
        again = await got(a, "u", "s")
        await a.append_event(again, event(timestamp=again.last_update_time))
        assert len((await got(b, "u", "s")).events) == 1


async def test_what_the_service_writes_passes_the_stores_check(
    service: SoongSessionService,
) -> None:
    one = await service.create_session(app_name=APP, user_id="u", state={"app:a": 1})
    await service.append_event(one, event(invocation_id="i1"))
    await service.append_event(one, event("root", invocation_id="i1", actions=delta(k=1)))
    await service.append_event(one, event("helper", invocation_id="i1", branch="root.helper"))
    await service.append_event(one, event(invocation_id="i2"))
    sid = await service.store_session_id(app_name=APP, user_id="u", session_id=one.id)
    assert sid is not None
    report = await check_store(service.store)
    assert report.ok, report


async def test_the_user_is_the_sessions_owner_encoded_where_an_owner_cannot_hold_it(
    service: SoongSessionService, place: dict[str, Any]
) -> None:
    long = "ü" * 40  # 80 bytes of UTF-8: hashed
    users = ["ann", "ann:x", "bob smith", "", long, "x:616e6e"]
    for user in users:
        await service.create_session(app_name=APP, user_id=user, session_id="s")
    owners = [owner_of(user) for user in users]
    assert owners[:4] == ["ann", "x:" + b"ann:x".hex(), "x:" + b"bob smith".hex(), "x:"]
    assert owners[4].startswith("h:") and len(owners[4]) == 66
    assert owners[5] == "x:" + b"x:616e6e".hex()  # a plain-looking encoded id is encoded again
    assert len(set(owners)) == len(users)
    async with SessionStore(**place) as store:
        for user, owner in zip(users, owners, strict=True):
            sid = await service.store_session_id(app_name=APP, user_id=user, session_id="s")
            listed = await store.scoped(owner).list_sessions()
            assert [s.session_id for s in listed] == [sid]
            assert (await store.get_session(sid)).owner == owner
