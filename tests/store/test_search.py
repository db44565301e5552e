"""Search through the store's API: what is found, where it sits, how it ranks, what vanishes."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest

from soong_store import (
    AgentType,
    ArtifactRefBlock,
    InvalidArgument,
    InvalidIdentifier,
    JsonBlock,
    SearchHit,
    SessionStore,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from soong_store.backends import search as search_seam
from soong_store.importers import import_file
from soong_store.transfer import export_session, import_session
from tests.backends import SEARCH_FOLDS_DIACRITICS, Backend
from tests.backends.sqlite import few_variables
from tests.conftest import text
from tests.helpers import execute
from tests.importers.test_importers_corpus import CORPUS

pytestmark = pytest.mark.asyncio


def found(hits: list[SearchHit]) -> list[tuple[str, str]]:
    return [(hit.session_id, hit.node_id) for hit in hits]


async def test_a_hit_says_where_it_sits(store: SessionStore) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    first = await store.append_node(sid, "user", "message", text("where is the tokenizer?"))
    [hit] = await store.search("tokenizer")
    assert (hit.session_id, hit.node_id, hit.node_seq) == (sid, first.node_id, 1)
    assert (hit.agent_id, hit.agent_type) == (first.agent_id, AgentType.MAIN)
    assert (hit.role, hit.node_type, hit.created_at) == ("user", "message", first.created_at)
    assert hit.snippet == "where is the [tokenizer]?"
    assert hit.rank > 0


async def test_side_branches_sub_agents_and_forks_are_found(store: SessionStore) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    root = await store.append_node(sid, "user", "message", text("start"))
    side = await store.append_node(sid, "assistant", "message", text("a zebra on the side"))
    await store.append_node(sid, "user", "message", text("again"), parent_id=root.node_id)
    sub = await store.create_agent(sid, "sub")
    in_sub = await store.append_node(
        sid, "assistant", "message", text("zebra found by the worker"), agent_id=sub.agent_id
    )
    fork_agent = await store.create_agent(sid, "fork", fork_from_node_id=root.node_id)
    in_fork = await store.append_node(  # under the fork point, which has children: a branch
        sid, "user", "message", text("zebra to review"), agent_id=fork_agent.agent_id
    )
    path = {node.node_id for node in await store.active_path(sid)}
    assert side.node_id not in path
    hits = await store.search("zebra")
    assert set(found(hits)) == {(sid, side.node_id), (sid, in_sub.node_id), (sid, in_fork.node_id)}
    types = {hit.node_id: hit.agent_type for hit in hits}
    assert types[in_sub.node_id] == AgentType.SUB and types[in_fork.node_id] == AgentType.FORK
    assert found(await store.search("zebra", agent_type="sub")) == [(sid, in_sub.node_id)]
    forked = await store.fork_session(sid, root.node_id)
    await store.append_node(forked.session_id, "assistant", "message", text("zebra in the fork"))
    assert {hit.session_id for hit in await store.search("zebra")} == {sid, forked.session_id}
    copied = await store.search("start", session_id=forked.session_id)
    assert [hit.node_seq for hit in copied] == [1]  # the copy of the forked path is indexed


async def test_deleted_sessions_vanish_and_archived_ones_stay(
    store: SessionStore, backend: Backend
) -> None:
    kept = (await store.create_session(cwd=".")).session_id
    gone = (await store.create_session(cwd=".")).session_id
    for sid in (kept, gone):
        await store.append_node(sid, "user", "message", text("walrus"))
    await store.archive_session(kept)
    await store.delete_session(gone)
    assert [hit.session_id for hit in await store.search("walrus")] == [kept]
    assert await store.search("walrus", session_id=gone) == []
    rows = "SELECT session_id FROM search_text"
    assert execute(backend, rows) == [(kept,)]  # the index holds nothing of the deleted one


async def test_what_is_indexed_and_what_is_not(store: SessionStore) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    art = await store.put_artifact(sid, b"artifactbody only in the file", summary="a logfile")
    call = ToolCallBlock(tool_call_id="c1", name="ripgrep", arguments={"pattern": "needleword"})
    result = ToolResultBlock(
        tool_call_id="c1",
        content=[TextBlock(text="resultword"), JsonBlock(data={"k": "jsonvalue"})],
    )
    blocks = [
        TextBlock(text="plainword"),
        call,
        result,
        JsonBlock(summary="summaryword", artifact_ref=art.artifact_id),
        ArtifactRefBlock(artifact_id=art.artifact_id, summary="refsummary"),
    ]
    node = await store.append_node(sid, "assistant", "message", blocks)
    for word in ("plainword", "ripgrep", "needleword", "resultword", "jsonvalue", "summaryword"):
        assert found(await store.search(word)) == [(sid, node.node_id)], word
    assert found(await store.search("refsummary")) == [(sid, node.node_id)]
    for word in ("artifactbody", "pattern", "c1", "tool_call"):
        assert await store.search(word) == [], word


async def test_a_spilled_json_is_found_by_its_summary_not_its_body(
    backend_store: SessionStore,
) -> None:
    store = backend_store
    sid = (await store.create_session(cwd=".")).session_id
    big = JsonBlock(data={"spilledkey": ["first", *["spilledvalue"] * 200]})
    node = await store.append_node(sid, "tool", "message", [big])
    [stored] = node.content
    assert isinstance(stored, JsonBlock) and stored.artifact_ref is not None
    assert stored.summary is not None and "spilledkey" in stored.summary
    assert found(await store.search("spilledkey")) == [(sid, node.node_id)]
    assert await store.search("spilledvalue") == []


@pytest.fixture
async def backend_store(backend) -> SessionStore:  # type: ignore[no-untyped-def]
    async with backend.store(spill_bytes=256) as opened:
        yield opened


async def test_filters_narrow_the_hits(store: SessionStore) -> None:
    a = (await store.create_session(cwd=".")).session_id
    b = (await store.create_session(cwd=".")).session_id
    asked = await store.append_node(a, "user", "message", text("otter"))
    said = await store.append_node(a, "assistant", "message", text("otter"))
    note = await store.append_node(a, "system", "system_note", text("otter"))
    other = await store.append_node(b, "user", "message", text("otter"))
    assert len(await store.search("otter")) == 4
    assert set(found(await store.search("otter", session_id=a))) == {
        (a, n.node_id) for n in (asked, said, note)
    }
    assert set(found(await store.search("otter", role="user"))) == {
        (a, asked.node_id),
        (b, other.node_id),
    }
    assert found(await store.search("otter", node_type="system_note")) == [(a, note.node_id)]
    assert await store.search("otter", agent_type="orchestrator") == []


async def test_a_session_filter_skips_other_sessions_written_in_between(
    store: SessionStore,
) -> None:
    a = (await store.create_session(cwd=".")).session_id
    b = (await store.create_session(cwd=".")).session_id
    written: dict[str, list[str]] = {a: [], b: []}
    for i in range(6):
        sid = (a, b)[i % 2]
        node = await store.append_node(sid, "user", "message", text(f"puffin {i}"))
        written[sid].append(node.node_id)
    for sid in (a, b):
        hits = await store.search("puffin", session_id=sid)
        assert [hit.node_id for hit in hits] == written[sid][::-1]
        assert [hit.node_id for hit in await store.search("puffin", session_id=sid, offset=1)] == (
            written[sid][::-1][1:]
        )


async def test_a_phrase_beats_scattered_words_and_newer_wins_ties(store: SessionStore) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    scattered = await store.append_node(sid, "user", "message", text("red bike sold to a car"))
    phrase = await store.append_node(sid, "user", "message", text("the red car was sold bike"))
    for query in ("red car", '"red car"'):
        hits = await store.search(query)
        assert hits[0].node_id == phrase.node_id, query
    assert found(await store.search('"red car"')) == [(sid, phrase.node_id)]
    older = await store.append_node(sid, "user", "message", text("same words here"))
    newer = await store.append_node(sid, "user", "message", text("same words here"))
    hits = await store.search("same words")
    assert [hit.node_id for hit in hits] == [newer.node_id, older.node_id]
    assert hits[0].rank == hits[1].rank
    assert [h.node_id for h in await store.search("sold")][-1] == scattered.node_id


async def test_ties_go_to_the_newer_node_by_its_time_not_by_when_it_was_indexed(
    store: SessionStore, tmp_path: Path
) -> None:
    def record(uuid: str, hour: int, words: str) -> dict[str, object]:
        return {
            "type": "user",
            "uuid": uuid,
            "parentUuid": None,
            "timestamp": f"2025-01-01T{hour:02}:00:00Z",
            "sessionId": "ties",
            "message": {"role": "user", "content": words},
        }

    # Written in file order (noon first), so the index order is the opposite of the time order.
    path = tmp_path / "ties.jsonl"
    lines = [record("noon", 12, "same walrus words"), record("ten", 10, "same walrus words")]
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    [session] = await import_file(store, path)
    sid = session.session_id
    by_time = sorted(await store.list_nodes(sid), key=lambda node: node.created_at, reverse=True)
    newest_first = [node.node_id for node in by_time]
    hits = await store.search("walrus words")
    assert [hit.node_id for hit in hits] == newest_first
    assert hits[0].rank == hits[1].rank
    assert [hit.node_id for hit in await store.search("walrus", session_id=sid)] == newest_first
    pages = [await store.search("walrus", limit=1, offset=skip) for skip in (0, 1)]
    assert [hit.node_id for page in pages for hit in page] == newest_first


async def test_pages_follow_each_other(store: SessionStore) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    for i in range(7):
        await store.append_node(sid, "user", "message", text(f"heron number {i}"))
    every = await store.search("heron", limit=100)
    pages = [await store.search("heron", limit=3, offset=skip) for skip in (0, 3, 6)]
    assert [len(page) for page in pages] == [3, 3, 1]
    assert [hit for page in pages for hit in page] == every
    assert [hit.node_seq for hit in every] == [7, 6, 5, 4, 3, 2, 1]  # one score: newest first
    assert await store.search("heron", offset=7) == []
    narrowed = [await store.search("heron", session_id=sid, limit=3, offset=k) for k in (0, 3, 6)]
    assert narrowed == pages  # a filtered search orders and pages as an unfiltered one


async def test_the_newest_matches_are_ranked_window_by_window(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a window of the newest matches is ranked; an older better hit comes in the next one.

    The same order on every backend, and pages run on from one window into the next.
    """
    monkeypatch.setattr(search_seam, "WINDOW", 3)
    sid = (await store.create_session(cwd=".")).session_id
    older = [await store.append_node(sid, "user", "message", text("kiwi kiwi")) for _ in range(3)]
    newer = [await store.append_node(sid, "user", "message", text("kiwi")) for _ in range(4)]
    windows = [newer[:0:-1], [older[2], older[1], newer[0]], older[:1]]  # of 3, best first
    expected = [node.node_id for window in windows for node in window]
    hits = await store.search("kiwi", limit=100)
    assert [hit.node_id for hit in hits] == expected
    assert hits[2].rank < hits[3].rank  # the second window's better hits come after the first
    for limit in (1, 2, 4):
        pages = [await store.search("kiwi", limit=limit, offset=k) for k in range(0, 8, limit)]
        assert [hit for page in pages for hit in page] == hits, limit
    assert await store.search("kiwi", offset=7) == []
    across = await store.search("kiwi", limit=4, offset=2)
    assert [hit.node_id for hit in across] == expected[2:6]
    monkeypatch.setattr(search_seam, "WINDOW", 100)
    ranked = await store.search("kiwi", limit=100)
    assert [hit.node_id for hit in ranked] == [n.node_id for n in older[::-1] + newer[::-1]]


async def test_a_window_holds_the_newest_matches_that_pass_the_filters(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Newer matches that a filter drops take no room in the window (nor in a session's)."""
    monkeypatch.setattr(search_seam, "WINDOW", 2)
    a = (await store.create_session(cwd=".")).session_id
    b = (await store.create_session(cwd=".")).session_id
    asked = [await store.append_node(a, "user", "message", text("lynx")) for _ in range(3)]
    for sid in (a, b, a, b):
        await store.append_node(sid, "assistant", "message", text("lynx lynx"))
    newest_first = [n.node_id for n in asked[::-1]]
    assert [hit.node_id for hit in await store.search("lynx", role="user")] == newest_first
    in_a = await store.search("lynx", session_id=a, limit=100)
    assert [hit.role for hit in in_a] == ["assistant", "assistant", "user", "user", "user"]
    users = await store.search("lynx", session_id=a, role="user", limit=1, offset=2)
    assert [hit.node_id for hit in users] == newest_first[2:]
    assert await store.search("lynx", agent_type="sub") == []


TIES = 3 * few_variables.LIMIT
BETTER = 3


async def test_more_ties_than_a_statement_binds_come_in_order_page_by_page(
    backend: Backend,
) -> None:
    """Equal short texts ("continue") all score the same: the page is decided by time alone.

    On SQLite the search runs on a library that binds at most ``few_variables.LIMIT`` variables
    in a statement (where the driver can set that limit), fewer than the ties.
    """
    async with backend.store() as store:
        sid = (await store.create_session(cwd=".")).session_id
        async with store.transaction(sid) as tx:
            for _ in range(BETTER):  # the word twice scores higher, on every backend
                tx.add_node("assistant", "message", text("continue, continue"))
            for _ in range(TIES):
                tx.add_node("user", "message", text("continue"))
        nodes = await store.list_nodes(sid)
        assert len(await store.search("continue", limit=5)) == 5  # the index takes them in
    newest_first = sorted(nodes, key=lambda node: (node.created_at, node.node_seq), reverse=True)
    better = [node.node_id for node in newest_first if node.role == "assistant"]
    tied = [node.node_id for node in newest_first if node.role == "user"]
    few = backend.name == "sqlite" and few_variables.CAN_LIMIT
    options = {"sqlite_module": "tests.backends.sqlite.few_variables"} if few else {}
    async with backend.store(**options) as store:
        pages = [
            await store.search("continue", limit=20, offset=offset)
            for offset in range(0, BETTER + TIES, 20)
        ]
        edge = await store.search("continue", limit=4, offset=1)
        everything = await store.search("continue", limit=BETTER + TIES + 1)
        narrowed = await store.search("continue", session_id=sid, limit=20, offset=TIES - 7)
    hits = [hit for page in pages for hit in page]
    assert [hit.node_id for hit in hits] == better + tied
    assert hits[BETTER - 1].rank > hits[BETTER].rank and len({h.rank for h in hits[BETTER:]}) == 1
    assert [hit.snippet for hit in hits[BETTER:]] == ["[continue]"] * TIES
    assert [hit.node_id for hit in edge] == better[1:] + tied[:2]
    assert everything == hits
    assert [hit.node_id for hit in narrowed] == tied[-10:]


HOSTILE = [
    '"',
    '"unclosed phrase',
    "NEAR(a b, 2)",
    "a* -b ^c",
    "(a OR b) AND NOT c",
    "AND",
    "OR NOT",
    "col:value",
    "{a b}: c",
    '\'single\' "double"""',
    "\ud800 lone \udfff surrogates",
    "nul\x00byte",
    "*",
    "",
    "   ",
    "x" * 10_240,
    "word " * 2_048,
]


@pytest.mark.parametrize("query", HOSTILE, ids=range(len(HOSTILE)))
async def test_hostile_queries_never_fail(store: SessionStore, query: str) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    await store.append_node(sid, "user", "message", text("NEAR AND OR NOT col value word"))
    hits = await store.search(query)
    assert all(hit.session_id == sid for hit in hits)


async def test_operators_are_searched_as_words(store: SessionStore) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    node = await store.append_node(sid, "user", "message", text("use NEAR or NOT here"))
    assert found(await store.search("NOT")) == [(sid, node.node_id)]
    assert found(await store.search("near OR")) == [(sid, node.node_id)]
    assert await store.search("NEAR(use here)") == []  # one word "near(use", then "here)"


async def test_bad_arguments_are_refused(store: SessionStore) -> None:
    with pytest.raises(InvalidArgument, match="query"):
        await store.search(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="'robot'"):
        await store.search("x", role="robot")
    with pytest.raises(InvalidArgument, match="'chat'"):
        await store.search("x", node_type="chat")
    with pytest.raises(InvalidArgument, match="'boss'"):
        await store.search("x", agent_type="boss")
    with pytest.raises(InvalidArgument, match="limit 0"):
        await store.search("x", limit=0)
    with pytest.raises(InvalidArgument, match="offset -1"):
        await store.search("x", offset=-1)
    with pytest.raises(InvalidIdentifier):
        await store.search("x", session_id="bad id; DROP")


async def test_imported_sessions_are_found(store: SessionStore, tmp_path: Path) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    await store.append_node(sid, "user", "message", text("a platypus crossed"))
    out = io.StringIO()
    await export_session(store, sid, out)
    copy = await import_session(store, out.getvalue().splitlines(), new_id=True)
    assert {hit.session_id for hit in await store.search("platypus")} == {sid, copy.session_id}
    [session] = await import_file(store, CORPUS / "claude-code/agent-sessions__claude-small.jsonl")
    nodes = await store.list_nodes(session.session_id)
    words = [
        word
        for node in nodes
        for block in node.content
        if isinstance(block, TextBlock)
        for word in block.text.split()
        if word.isalpha() and len(word) > 6
    ]
    assert words, "the corpus file has text"
    hits = await store.search(words[0], session_id=session.session_id, limit=100)
    assert hits and all(hit.session_id == session.session_id for hit in hits)


async def test_case_diacritics_and_word_joints_are_ignored(
    store: SessionStore, backend: Backend
) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    node = await store.append_node(sid, "user", "message", text("Café days_in_month"))
    queries = ["café", "CAFé", "days in month", '"days in month"', "DAYS_in_month"]
    if SEARCH_FOLDS_DIACRITICS[backend.name]:
        queries += ["cafe", "CAFÉ"]
    for query in queries:
        assert found(await store.search(query)) == [(sid, node.node_id)], query
