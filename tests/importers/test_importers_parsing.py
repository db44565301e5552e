"""The importers' pure parts, without a database: reading, times, blocks, tree rules, parsers."""

from __future__ import annotations

import copy
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soong_store.importers import _PARSERS as PARSERS
from soong_store.importers import _blocks as b
from soong_store.importers import claude_code, codex, openhands, pi
from soong_store.importers._detect import detect
from soong_store.importers._model import Entry, SourceSession
from soong_store.importers._read import parse_time, read_jsonl
from soong_store.importers._rows import build
from soong_store.importers._tree import arrange, counts, depth_first
from soong_store.transfer.format import read_export

CORPUS = Path(__file__).resolve().parent.parent / "corpus"


def jsonl(*records: Any) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


# -- reading ----------------------------------------------------------------------------------


def test_joined_objects_are_split_and_other_damage_skipped() -> None:
    data = b'{"a": 1}\n{"b": 2}{"c": 3}\n{"d": \n\n42\n{"e": NaN}\n{"f": 1} tail\n'
    records, issues = read_jsonl(data)
    assert records == [(1, {"a": 1}), (2, {"b": 2}), (2, {"c": 3})]
    assert [(i.line, i.action) for i in issues] == [
        (2, "recovered"),
        (3, "skipped"),
        (5, "skipped"),
        (6, "skipped"),
        (7, "skipped"),
    ]
    assert issues[2].reason == "a JSON int, not an object"


def test_a_line_nested_deeper_than_any_reader_is_skipped() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    data = b'{"a": 1}\n{"b": ' + deep + b'}\n{"c": ' + deep + b'}{"d": 2}\n{"e": 3}\n'
    records, issues = read_jsonl(data)
    assert records == [(1, {"a": 1}), (4, {"e": 3})]
    assert [(i.line, i.action) for i in issues] == [(2, "skipped"), (3, "skipped")]
    assert issues[0].reason.startswith("not JSON")


def test_a_bom_and_crlf_line_ends_are_read() -> None:
    records, issues = read_jsonl(b'\xef\xbb\xbf{"a": 1}\r\n{"b": 2}\r\n')
    assert records == [(1, {"a": 1}), (2, {"b": 2})] and issues == []


@pytest.mark.parametrize(
    ("value", "moment", "exact"),
    [
        ("2025-01-02T03:04:05.678Z", datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC), True),
        ("2025-01-02T05:04:05+02:00", datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC), True),
        ("2025-01-02T03:04:05", datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC), False),
        (1714585031.5, datetime(2024, 5, 1, 17, 37, 11, 500000, tzinfo=UTC), True),
        (1778547747671, datetime(2026, 5, 12, 1, 2, 27, 671000, tzinfo=UTC), True),
        ("[trimmed for fixture]", None, False),
        ("9999-99-99", None, False),
        (True, None, False),
        (None, None, False),
    ],
)
def test_source_times(value: object, moment: datetime | None, exact: bool) -> None:
    assert parse_time(value) == (moment, exact)


# -- blocks -----------------------------------------------------------------------------------


def test_tool_arguments_keep_their_text_when_it_is_not_canonical() -> None:
    assert b.arguments('{"a":1}') == ({"a": 1}, {"arguments_json": True})
    assert b.arguments('{"a": 1}') == (
        {"a": 1},
        {"arguments_json": True, "arguments_text": '{"a": 1}'},
    )
    assert b.arguments("not json") == ("not json", {"arguments_text": True})
    assert b.arguments({"a": 1}) == ({"a": 1}, {})


def test_results_without_ids_answer_the_oldest_open_call() -> None:
    calls = b.ToolCalls()
    first, made = calls.call(None)
    second, _ = calls.call("c2")
    assert made and first != second
    assert calls.result(None) == (first, True)
    assert calls.result("c2") == ("c2", False)
    orphan, made = calls.result(None)
    assert made and orphan not in (first, second)


def test_images_become_artifacts_and_bad_base64_stays_data() -> None:
    out = b.Content("k")
    items, lost = b.result_items(
        [
            {"type": "text", "text": "see"},
            {"type": "image", "data": "iVBORw==", "mimeType": "image/png"},
            {"type": "image", "data": "%%%", "mimeType": "image/png"},
            {"type": "input_text", "text": "typed"},
        ],
        out,
    )
    assert [i["type"] for i in items] == ["text", "artifact_ref", "json", "text"]
    assert out.artifacts[0].data == b"\x89PNG" and out.artifacts[0].mime_type == "image/png"
    assert lost == {"1": {"type": "image", "mimeType": "image/png"}, "3": {"type": "input_text"}}


# -- tree -------------------------------------------------------------------------------------


def entry(key: str, parent: str | None, node_type: str = "message", **kw: Any) -> Entry:
    return Entry(key, parent, "user", node_type, [b.text(key)], {"id": key}, **kw)


def session_of(*entries: Entry, leaf: str | None = None) -> SourceSession:
    return SourceSession("test", "s", None, {}, entries=list(entries), leaf=leaf)


def path_to(entries: list[Entry], key: str) -> list[str]:
    by_key = {e.key: e for e in entries}
    out: list[str] = []
    node: Entry | None = by_key[key]
    while node is not None:
        out.append(node.key)
        node = by_key.get(node.parent or "")
    return out[::-1]


def test_a_compaction_is_followed_by_copies_of_the_entries_it_keeps() -> None:
    # The compaction comes after what it keeps: the kept entries are copied under it, never
    # moved (a source read in parts has them in the store before the compaction comes).
    s = session_of(
        entry("a", None),
        entry("b", "a"),
        entry("c", "b"),
        entry("k", "c", "compaction", keeps_from="b"),
        entry("d", "k"),
        leaf="d",
    )
    order = arrange(s)
    assert [e.key for e in order] == ["a", "b", "c", "k", "b~k", "c~k", "d"]
    assert path_to(order, "d") == ["a", "b", "c", "k", "b~k", "c~k", "d"]
    assert s.entries[3].source["kept"] == {"mode": "copied", "first_kept": "b", "entries": 2}
    counted = counts(s, order)
    assert (counted["nodes"], counted["messages"]) == (7, 4)


def test_a_later_compaction_keeps_the_copies_on_its_path() -> None:
    s = session_of(
        entry("a", None),
        entry("b", "a"),
        entry("k", "b", "compaction", keeps_from="b"),
        entry("c", "k"),
        entry("l", "c", "compaction", keeps_from="b"),
        entry("d", "l"),
    )
    order = arrange(s)
    assert path_to(order, "d") == ["a", "b", "k", "b~k", "c", "l", "b~k~l", "c~l", "d"]


def test_a_compaction_that_ends_the_file_leaves_the_leaf_on_what_it_kept() -> None:
    s = session_of(
        entry("a", None), entry("b", "a"), entry("k", "b", "compaction", keeps_from="b"), leaf="k"
    )
    order = arrange(s)
    assert s.leaf == "b~k" and path_to(order, "b~k") == ["a", "b", "k", "b~k"]


def test_kept_entries_shared_with_a_branch_are_copied() -> None:
    s = session_of(
        entry("a", None),
        entry("b", "a"),
        entry("x", "b"),
        entry("c", "b"),
        entry("k", "c", "compaction", keeps_from="b"),
        entry("d", "k"),
    )
    order = arrange(s)
    keys = [e.key for e in order]
    assert keys == ["a", "b", "x", "c", "k", "b~k", "c~k", "d"]
    assert path_to(order, "d") == ["a", "b", "c", "k", "b~k", "c~k", "d"]
    assert path_to(order, "x") == ["a", "b", "x"]


def test_a_parent_chain_that_loops_is_cut() -> None:
    s = session_of(entry("a", "b"), entry("b", "a"))
    order = arrange(s)
    assert [(e.key, e.parent) for e in order] == [("b", None), ("a", "b")]
    assert order[0].source["cycle_cut"] == "a"


def test_counts_of_a_tree() -> None:
    s = session_of(
        entry("a", None), entry("b", "a"), entry("c", "a"), entry("r", None, "system_note")
    )
    found = counts(s, arrange(s))
    assert (found["messages"], found["roots"], found["branch_points"]) == (3, 2, 1)


def test_depth_first_follows_the_listed_children() -> None:
    parent = {"r": None, "x": "r", "y": "r", "z": "x", "q": "nowhere"}
    assert depth_first(["z", "y", "x", "r", "q"], parent, {"r": ["y", "x"]}) == [
        "r",
        "y",
        "x",
        "z",
        "q",
    ]


# -- parsers ----------------------------------------------------------------------------------


def test_claude_code_parents_name_the_latest_line_with_that_uuid() -> None:
    def line(uuid: str, parent: str | None, text: str) -> dict[str, Any]:
        return {
            "type": "user",
            "uuid": uuid,
            "parentUuid": parent,
            "sessionId": "s",
            "message": {"role": "user", "content": text},
        }

    data = jsonl(
        line("a", None, "1"), line("b", "a", "2"), line("b", "b", "3"), line("c", "b", "4")
    )
    session = claude_code.parse(Path("x.jsonl"), data).sessions[0]
    assert [(e.key, e.parent) for e in session.entries] == [
        ("a", None),
        ("b", "a"),
        ("b@2", "b"),
        ("c", "b@2"),
    ]
    assert session.leaf == "c"


def test_claude_code_without_links_is_read_in_file_order() -> None:
    data = jsonl(
        {"type": "user", "uuid": "u", "parentUuid": None, "message": {"content": "hi"}},
        {"type": "summary", "summary": "s", "leafUuid": "u"},
        {"type": "assistant", "uuid": "a", "parentUuid": None, "message": {"content": "yo"}},
    )
    session = claude_code.parse(Path("x.jsonl"), data).sessions[0]
    assert [(e.key, e.parent) for e in session.entries] == [("u", None), ("a", "u")]
    assert [e.payload["type"] for e in session.events] == ["summary"]


def test_claude_code_tool_result_without_id_answers_the_call_above_it() -> None:
    data = jsonl(
        {
            "type": "assistant",
            "uuid": "a",
            "parentUuid": None,
            "message": {"content": [{"type": "tool_use", "name": "ls", "input": {}}]},
        },
        {
            "type": "user",
            "uuid": "r1",
            "parentUuid": "a",
            "message": {"content": [{"type": "tool_result", "content": "one"}]},
        },
        {
            "type": "user",
            "uuid": "r2",
            "parentUuid": "a",
            "message": {"content": [{"type": "tool_result", "content": "two", "is_error": True}]},
        },
    )
    a, r1, r2 = claude_code.parse(Path("x.jsonl"), data).sessions[0].entries
    call = a.blocks[0]["tool_call_id"]
    assert r1.blocks[0]["tool_call_id"] == r2.blocks[0]["tool_call_id"] == call
    assert (r1.role, r2.blocks[0]["is_error"]) == ("tool", True)


def test_pi_v1_compaction_keeps_by_entry_index() -> None:
    data = jsonl(
        {"type": "session", "id": "p", "cwd": "/x"},
        {"type": "message", "message": {"role": "user", "content": "one"}},
        {"type": "message", "message": {"role": "assistant", "content": []}},
        {"type": "compaction", "summary": "sum", "firstKeptEntryIndex": 2},
    )
    session = pi.parse(Path("p.jsonl"), data).sessions[0]
    assert [(e.key, e.parent) for e in session.entries] == [("1", None), ("2", "1"), ("3", "2")]
    assert session.entries[2].keeps_from == "2"


def test_codex_output_failure() -> None:
    assert codex._failed({"output": '{"output": "x", "metadata": {"exit_code": 2}}'})
    assert not codex._failed({"output": '{"output": "x", "metadata": {"exit_code": 0}}'})
    assert codex._failed({"result": {"exitCode": 1}})
    assert not codex._failed({"output": "plain text"})


def test_openhands_observation_failure() -> None:
    assert openhands._failed({"observation": "error"})
    assert openhands._failed({"observation": "run", "extras": {"metadata": {"exit_code": 1}}})
    assert not openhands._failed({"observation": "run", "extras": {"metadata": {"exit_code": -1}}})
    assert openhands._failed({"observation": "run", "exit_code": 127})


@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        ("claude-code/claude-code-transcripts__sample_session.jsonl", "claude-code"),
        ("codex/agent-sessions__codex_053_rate_limit.jsonl", "codex"),
        ("pi/pi-mono__session.jsonl", "pi"),
        ("librechat/chatgpt-tree.json", "chatgpt"),
        ("librechat/librechat-tree.json", "librechat"),
        ("librechat/openwebui-export.json", "openwebui"),
        ("openhands/openhands__trajs-basic_interactions.json", "openhands"),
        ("openhands/openhands__resolver-mock-output.jsonl", "openhands"),
    ],
)
def test_formats_are_told_from_the_content(path: str, fmt: str, tmp_path: Path) -> None:
    copy = tmp_path / "no-hint-in-the-name"
    copy.write_bytes((CORPUS / path).read_bytes())
    assert detect(copy, copy.read_bytes()) == fmt


def test_an_unknown_content_has_no_format(tmp_path: Path) -> None:
    assert detect(tmp_path / "x", b'{"hello": "world"}\n[1]\n') is None


def test_pi_tool_result_without_id_answers_the_open_call() -> None:
    call = {"type": "toolCall", "id": "t1", "name": "read", "arguments": {"path": "a"}}
    data = jsonl(
        {"type": "session", "version": 3, "id": "p", "cwd": "/x"},
        {
            "type": "message",
            "id": "a",
            "parentId": None,
            "message": {"role": "assistant", "content": [call]},
        },
        {
            "type": "message",
            "id": "r",
            "parentId": "a",
            "message": {"role": "toolResult", "content": "text", "isError": True},
        },
    )
    assistant, result = pi.parse(Path("p.jsonl"), data).sessions[0].entries
    assert assistant.blocks[0]["tool_call_id"] == "t1"
    assert (result.role, result.blocks[0]["tool_call_id"], result.blocks[0]["is_error"]) == (
        "tool",
        "t1",
        True,
    )
    assert result.source["block_extras"] == {"0": {"id_generated": True}}


# -- odd values -------------------------------------------------------------------------------

ODD: list[Any] = [None, 0, -1, 2**62, 1.5, "", "x", [], {}, [1], {"a": 1}, True]
ODD += [[{"type": "text"}], [{"type": "tool_use"}], [{"type": "tool_result", "content": 5}]]
ODD += [[{"type": "image", "source": {"data": 5}}], "2025-01-01T00:00:00Z", "\x00"]
SMALL = sorted(
    p
    for p in CORPUS.rglob("*")
    if p.suffix in (".json", ".jsonl")
    and p.stat().st_size < 60_000
    and not p.name.endswith(".meta.json")
)


def mutate(value: Any, rnd: random.Random) -> Any:
    """``value`` with one field somewhere in it replaced by an odd value."""
    if isinstance(value, dict) and value and rnd.random() < 0.8:
        key = rnd.choice(list(value))
        value[key] = (
            mutate(value[key], rnd) if rnd.random() < 0.6 else copy.deepcopy(rnd.choice(ODD))
        )
        return value
    if isinstance(value, list) and value and rnd.random() < 0.8:
        index = rnd.randrange(len(value))
        value[index] = mutate(value[index], rnd)
        return value
    return copy.deepcopy(rnd.choice(ODD))


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(SMALL), st.randoms(use_true_random=False))
def test_odd_values_anywhere_never_break_a_parser(path: Path, rnd: random.Random) -> None:
    data = path.read_bytes()
    fmt = detect(path, data)
    assert fmt is not None
    if path.suffix == ".json":
        document = orjson.loads(data)
        for _ in range(4):
            document = mutate(document, rnd)
        data = orjson.dumps(document)
    else:
        lines = data.split(b"\n")
        for _ in range(4):
            index = rnd.randrange(len(lines))
            try:
                record = orjson.loads(lines[index])
            except orjson.JSONDecodeError:  # blank, or damaged in the corpus already
                continue
            lines[index] = orjson.dumps(mutate(record, rnd))
        data = b"\n".join(lines)
    detect(path, data)
    for session in PARSERS[fmt](path, data).sessions:
        session.source_id = session.source_id or "fuzz"
        built = build(session, "/", datetime.now(UTC), {})
        assert read_export(built.lines).session_id == built.session_id


def test_the_format_of_a_long_file_of_lines_is_told_from_its_head(tmp_path: Path) -> None:
    import tracemalloc

    from soong_store.importers import detect_format

    line = orjson.dumps({"type": "user", "uuid": "u", "message": {"content": "x" * 1000}})
    long = tmp_path / "long.jsonl"
    long.write_bytes(b"\n".join([line] * 20_000))  # 20 MB
    document = tmp_path / "chat.json"
    document.write_bytes(orjson.dumps([{"mapping": {}, "current_node": None, "pad": "x" * 2**21}]))
    tracemalloc.start()
    try:
        assert detect_format(long) == "claude-code"
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000, f"{peak:,} bytes to tell the format of a 20 MB file"
    assert detect_format(document) == "chatgpt"  # one document, read whole


def test_lines_are_read_one_at_a_time_not_split_into_a_list() -> None:
    import tracemalloc

    data = (b" " * 1000 + b"\n") * 20_000 + b'{"a": 1}'  # 20 MB of blank lines, then one object
    tracemalloc.start()
    try:
        records, issues = read_jsonl(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert records == [(20_001, {"a": 1})] and issues == []
    assert peak < 1_000_000, f"{peak:,} bytes to read a 20 MB file of lines"
    assert read_jsonl(b'\xef\xbb\xbf{"a": 1}\n\n{"b": 2}\n')[0] == [(1, {"a": 1}), (3, {"b": 2})]


def test_a_long_line_is_parsed_holding_two_copies_of_it() -> None:
    import tracemalloc

    size = 20 * 2**20
    data = orjson.dumps({"type": "user", "text": "y" * size, "n": [1, 2.5, None]}) + b"\n"
    tracemalloc.start()
    try:
        records, issues = read_jsonl(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert records == [(1, {"type": "user", "text": "y" * size, "n": [1, 2.5, None]})]
    assert issues == []
    assert peak < 2.5 * size, f"{peak:,} bytes at the peak to read a {size:,}-byte line"


def test_a_long_line_gets_the_verdict_a_short_one_gets() -> None:
    pad = " " * 2**22  # JSON's own whitespace: the line is long, its value small
    lines = [
        b'{"a": NaN}',
        b'{"a": 1e400}',
        b'{"a": 18446744073709551616}',
        b'{"a": "\\ud800"}',
        b'{"a": "\\ud83d\\ude00", "b": -9223372036854775808, "c": 0.1}',
        b'{"a": 1}{"b": 2}',
        b'["a list"]',
        b'{"a": "\xff"}',
        b"[" * 1100 + b"]" * 1100,
    ]
    short = read_jsonl(b"\n".join(lines))
    long = read_jsonl(b"\n".join(line + pad.encode() for line in lines))
    assert long == short
    assert long[0][0] == (3, {"a": 18446744073709551616.0})  # as orjson reads it
    assert [i.line for i in short[1]] == [1, 2, 4, 6, 7, 8, 9]


def test_a_token_count_of_true_is_no_count(tmp_path: Path) -> None:
    """JSON ``true`` is an ``int`` to Python: a LibreChat ``tokenCount`` of ``true`` is dropped,
    not stored as 1 (nor refused by the export's check, which failed the whole import)."""
    data = orjson.loads((CORPUS / "librechat" / "librechat-opts-nonr-branches.json").read_bytes())

    def mark(value: Any) -> None:
        if isinstance(value, dict):
            if "tokenCount" in value:
                value["tokenCount"] = True
            for inner in value.values():
                mark(inner)
        elif isinstance(value, list):
            for inner in value:
                mark(inner)

    mark(data)
    path = tmp_path / "export.json"
    path.write_bytes(orjson.dumps(data))
    parsed = PARSERS["librechat"](path, path.read_bytes())
    entries = [e for s in parsed.sessions for e in s.entries]
    assert entries and all(e.token_count is None for e in entries)
