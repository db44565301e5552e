"""What a search query and a node's content become: phrases, FTS5 strings, indexed text."""

from __future__ import annotations

import orjson

from soong_store.backends.sqlite.search import match_expression
from soong_store.model.search_query import MAX_PHRASE_CHARS, MAX_PHRASES, fts5_string, parse_query
from soong_store.search.index import node_text


def test_words_and_quoted_phrases() -> None:
    query = parse_query('fix "the parser"  now')
    assert query.phrases == ("fix", "the parser", "now")
    assert query.quoted == (False, True, False)
    assert query.words_in_order == "fix the parser now"


def test_an_unclosed_quote_runs_to_the_end() -> None:
    assert parse_query('a "b c').phrases == ("a", "b c")


def test_operators_and_unsafe_characters_are_plain_text() -> None:
    query = parse_query('NEAR(a b) OR -c* \x00 \ud800 ""')
    assert query.phrases == ("NEAR(a", "b)", "OR", "-c*")
    assert parse_query("*** ( ) -").empty


def test_long_input_is_bounded() -> None:
    query = parse_query("w " * 5_000 + "x" * 10_000)
    assert len(query.phrases) == MAX_PHRASES
    assert max(len(p) for p in parse_query("y" * 10_000).phrases) == MAX_PHRASE_CHARS


def test_a_phrase_is_one_fts5_string() -> None:
    assert fts5_string('say "hi"') == '"say ""hi"""'
    assert match_expression(parse_query("one")) == '"one"'
    assert match_expression(parse_query('a "b c"')) == '("a" "b c") OR "a b c"'


def test_the_text_of_a_node() -> None:
    content = [
        {"type": "text", "text": "hello"},
        {"type": "tool_call", "tool_call_id": "c", "name": "grep", "arguments": {"q": ["x", 2]}},
        {
            "type": "tool_result",
            "tool_call_id": "c",
            "content": [
                {"type": "text", "text": "found"},
                {"type": "json", "data": {"k": True, "v": None, "w": 1.5}},
                {
                    "type": "artifact_ref",
                    "artifact_id": "art_1",
                    "summary": "log",
                    "mime_type": "t",
                },
            ],
            "is_error": False,
        },
        {"type": "json", "summary": "big", "artifact_ref": "art_2"},
    ]
    assert node_text(orjson.dumps(content)) == "hello\ngrep\nx\n2\nfound\n1.5\nlog\nbig"
    assert node_text("[]") == ""
