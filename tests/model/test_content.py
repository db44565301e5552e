import datetime
import enum
import marshal
import math
import struct

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soong_store.errors import InvalidContent
from soong_store.model import codec
from soong_store.model.content import (
    ArtifactRefBlock,
    JsonBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    content_from_json,
    content_to_json,
    validate_content,
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
ids = st.text(min_size=1, max_size=20)
leaf_blocks = st.one_of(
    st.builds(TextBlock, text=st.text()),
    st.builds(JsonBlock, data=json_values),
    st.builds(JsonBlock, summary=st.text(), artifact_ref=ids),
    st.builds(
        ArtifactRefBlock,
        artifact_id=ids,
        summary=st.none() | st.text(),
        mime_type=st.none() | st.text(),
    ),
)
blocks = st.one_of(
    leaf_blocks,
    st.builds(ToolCallBlock, tool_call_id=ids, name=ids, arguments=json_values),
    st.builds(
        ToolResultBlock,
        tool_call_id=ids,
        content=st.lists(leaf_blocks, max_size=3),
        is_error=st.booleans(),
    ),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(blocks, max_size=5))
def test_blocks_round_trip_through_json(content):
    stored = content_to_json(validate_content(content))
    assert content_from_json(stored) == content
    dicts = codec.loads(stored)
    assert validate_content(dicts) == content


def test_json_null_data_is_a_value_not_a_missing_field():
    block = validate_content([{"type": "json", "data": None}])[0]
    assert isinstance(block, JsonBlock) and block.artifact_ref is None
    assert content_from_json(content_to_json([block])) == [block]


@pytest.mark.parametrize(
    "bad",
    [
        [{"type": "json"}],
        [{"type": "json", "summary": "s"}],
        [{"type": "json", "artifact_ref": "a"}],
        [{"type": "json", "data": 1, "artifact_ref": "a", "summary": "s"}],
        [{"type": "text"}],
        [{"text": "no type"}],
        [{"type": "tool_result", "tool_call_id": "c", "content": "x"}],
        [{"type": "tool_result", "tool_call_id": "c", "content": [], "is_error": "yes"}],
        [{"type": "artifact_ref", "artifact_id": ""}],
        [None],
        None,
        42,
    ],
)
def test_invalid_content_refused(bad):
    with pytest.raises(InvalidContent):
        validate_content(bad)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_refused_anywhere(bad):
    for value in ([bad], {"a": {"b": [1, bad]}}, (bad,)):
        with pytest.raises(InvalidContent):
            codec.dumps(value)


def test_plain_nulls_are_fine():
    assert codec.dumps({"a": None, "b": [None]}) == b'{"a":null,"b":[null]}'


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_number_found_among_nulls_and_named(bad):
    rows = [{"id": i, "x": None, "v": [1.5, None]} for i in range(500)]
    rows[321]["v"][0] = bad
    with pytest.raises(InvalidContent, match=r"at \$\.rows\[321\]\.v\[0\]"):
        codec.dumps({"rows": rows})


class _FloatEnum(float, enum.Enum):
    BAD = math.nan


@pytest.mark.parametrize(
    "value",
    [
        [None, struct.unpack(">d", bytes.fromhex("7ff0000000000001"))[0]],  # a NaN of other bits
        [None, struct.unpack(">d", bytes.fromhex("fff8000000000000"))[0]],  # negative NaN
        {"e": _FloatEnum.BAD, "x": None},  # orjson writes an enum's value; marshal refuses it
        [None, [[{"deep": [math.inf]}]]],
    ],
)
def test_every_kind_of_non_finite_float_is_found(value):
    with pytest.raises(InvalidContent, match="non-finite"):
        codec.dumps(value)


@pytest.mark.parametrize(
    "value",
    [
        {"when": datetime.date(2026, 1, 2), "x": None},  # not plain: the walk decides
        [None, "Infinity", ("NaN", None)],
    ],
)
def test_finite_values_that_need_the_walk_are_fine(value):
    assert codec.dumps(value) == orjson.dumps(value)


def test_lone_surrogates_and_big_ints_refused():
    with pytest.raises(InvalidContent):
        codec.dumps("\ud800")
    with pytest.raises(InvalidContent):
        codec.dumps(2**64)
    with pytest.raises(InvalidContent):
        codec.dumps({1: "x"})


def test_bytes_that_look_like_a_marshalled_nan_are_cleared_by_the_walk():
    value = ["g", "ab", -2, None]  # ... g \xda \x02 a b \xe9 \xfe \xff \xff: a "g" and a NaN's tail
    assert codec._NON_FINITE.search(marshal.dumps(value)) is not None
    assert codec.dumps(value) == orjson.dumps(value)


def test_non_finite_found_whether_marshal_writes_the_float_once_or_shared():
    once = [None, struct.unpack(">d", bytes.fromhex("7ff8000000000000"))[0]]  # only the list has it
    shared = [None, math.inf]  # the math module holds it too: marshal flags it as shared
    assert codec._NON_FINITE.search(marshal.dumps(once)) is not None
    assert codec._SHARED_NON_FINITE.search(marshal.dumps(shared)) is not None
    for value in (once, shared):
        with pytest.raises(InvalidContent, match=r"at \$\[1\]"):
            codec.dumps(value)


@given(
    json_values,
    st.sampled_from([math.nan, math.inf, -math.inf, float("nan"), -float("nan")]),
    st.integers(0, 30),
)
@settings(max_examples=300)
def test_a_non_finite_float_is_found_anywhere_and_finite_values_pass(value, bad, where):
    assert codec.dumps([value, None]) == orjson.dumps([value, None])  # finite: orjson's output
    containers = [value]
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list | dict):
            containers.append(item)
            stack.extend(item.values() if isinstance(item, dict) else item)
    target = containers[where % len(containers)]
    if isinstance(target, list):
        target.append(bad)
    elif isinstance(target, dict):
        target["\x00nan"] = bad
    else:
        value = [value, bad]
    with pytest.raises(InvalidContent, match="non-finite"):
        codec.dumps([value, None])


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            TextBlock(text="x"),
            r"content must be a list of blocks, got a TextBlock; wrap it: \[block\]",
        ),
        ({"type": "text", "text": "x"}, r"got a dict; wrap it: \[block\]"),
        ("hello", r"got a str; text is \[\{'type': 'text', 'text': \.\.\.\}\]"),
        (None, "content must be a list of blocks, got None"),
        (
            [{"type": "text", "txt": "x"}],
            r"^content\[0\] \(type 'text'\): unknown key 'txt'; expected keys: text$",
        ),
        (
            [{"type": "text", "text": "x", "extra": 1, "more": 2}],
            r"unknown keys 'extra', 'more'; expected keys: text$",
        ),
        (
            [{"type": "text"}],
            r"^content\[0\] \(type 'text'\): missing key 'text'; expected keys: text$",
        ),
        (
            [{"type": "text", "text": 5}],
            r"^content\[0\] \(type 'text'\): 'text' must be a string, got int 5$",
        ),
        (
            [TextBlock(text="a"), {"type": "tool_call", "tool_call_id": "c", "nme": "f"}],
            r"^content\[1\] \(type 'tool_call'\): unknown key 'nme'; expected keys: tool_call_id, "
            r"name; optional: arguments$",
        ),
        (
            [{"type": "tool_call", "tool_call_id": "", "name": "f"}],
            r"content\[0\] \(type 'tool_call'\): 'tool_call_id' must not be empty, got ''",
        ),
        (
            [{"type": "artifact_ref", "artifact_id": "a", "summary": 3}],
            r"content\[0\] \(type 'artifact_ref'\): 'summary' must be a string or null, got int 3",
        ),
        (
            [{"type": "json"}],
            r"^content\[0\] \(type 'json'\): a json block needs data \(or summary and "
            r"artifact_ref\)$",
        ),
        (
            [{"type": "json", "data": 1, "dta": 2}],
            r"content\[0\] \(type 'json'\): unknown key 'dta'; expected keys: data, summary, "
            r"artifact_ref",
        ),
        (
            [{"type": "txet", "text": "x"}],
            r"^content\[0\]: unknown type 'txet'; expected one of: text, json, tool_call, "
            r"tool_result, artifact_ref, redacted$",
        ),
        (
            [{"txt": "x"}],
            r"^content\[0\]: no 'type' key \(keys given: 'txt'\); expected one of: text, json, "
            r"tool_call, tool_result, artifact_ref, redacted$",
        ),
        (
            ["hello"],
            r"^content\[0\]: expected a block \(a dict with a 'type' key, or a block model\), got "
            r"str 'hello'$",
        ),
        ([[TextBlock(text="x")]], r"^content\[0\]: expected a block .*, got list"),
        ([object()], r"^content\[0\]: expected a block .*, got object <object object at"),
        ([{}], r"^content\[0\]: no 'type' key \(keys given: none\); expected one of: text,"),
        (
            [
                {
                    "type": "tool_result",
                    "tool_call_id": "c",
                    "content": [{"type": "text", "txt": "x"}],
                }
            ],
            r"^content\[0\]\.content\[0\] \(type 'text'\): unknown key 'txt'; expected keys: text$",
        ),
        (
            [
                {
                    "type": "tool_result",
                    "tool_call_id": "c",
                    "content": [
                        TextBlock(text="x"),
                        {"type": "tool_call", "tool_call_id": "c", "name": "f"},
                    ],
                }
            ],
            r"^content\[0\]\.content\[1\]: unknown type 'tool_call'; expected one of: text, json, "
            r"artifact_ref$",
        ),
        (
            [{"type": "tool_result", "tool_call_id": "c", "content": TextBlock(text="x")}],
            r"^content\[0\] \(type 'tool_result'\): 'content' must be a list of blocks, got a "
            r"TextBlock; wrap it: \[block\]$",
        ),
        (
            [{"type": "tool_result", "tool_call_id": "c", "content": "x"}],
            r"'content' must be a list of blocks, got a str",
        ),
        (
            [{"type": "tool_result", "tool_call_id": "c", "content": [], "is_error": "yes"}],
            r"content\[0\] \(type 'tool_result'\): 'is_error' must be a boolean, got str 'yes'",
        ),
        (
            [
                {
                    "type": "tool_result",
                    "tool_call_id": "c",
                    "content": [{"type": "json", "data": 1, "artifact_ref": "a", "summary": "s"}],
                }
            ],
            r"^content\[0\]\.content\[0\] \(type 'json'\): a json block holds either data or an "
            r"artifact_ref, not both$",
        ),
    ],
)
def test_a_content_error_names_the_block_the_key_and_what_is_expected(bad, message):
    with pytest.raises(InvalidContent, match=message):
        validate_content(bad)


def test_a_content_error_names_a_value_nested_past_the_stack_and_a_long_one_shortly():
    deep: list[object] = []
    for _ in range(10_000):
        deep = [deep]
    bad = [{"type": "tool_result", "tool_call_id": "c", "content": deep}]
    with pytest.raises(
        InvalidContent, match=r"^content\[0\]\.content\[0\]: .*, got list \[+\.\.\.\]+$"
    ):
        validate_content(bad)
    with pytest.raises(InvalidContent) as info:
        validate_content([{"type": "text", "text": 5, "x" * 10_000: 1}])
    assert len(str(info.value)) < 200
