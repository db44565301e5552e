import datetime
import enum
import math
import pickle
import struct

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soong_store import _json
from soong_store.content import (
    ArtifactRefBlock,
    JsonBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    content_from_json,
    content_to_json,
    validate_content,
)
from soong_store.errors import InvalidContent

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
    dicts = _json.loads(stored)
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
            _json.dumps(value)


def test_plain_nulls_are_fine():
    assert _json.dumps({"a": None, "b": [None]}) == b'{"a":null,"b":[null]}'


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_number_found_among_nulls_and_named(bad):
    rows = [{"id": i, "x": None, "v": [1.5, None]} for i in range(500)]
    rows[321]["v"][0] = bad
    with pytest.raises(InvalidContent, match=r"at \$\.rows\[321\]\.v\[0\]"):
        _json.dumps({"rows": rows})


class _FloatEnum(float, enum.Enum):
    BAD = math.nan


@pytest.mark.parametrize(
    "value",
    [
        [None, struct.unpack(">d", bytes.fromhex("7ff0000000000001"))[0]],  # a NaN of other bits
        [None, struct.unpack(">d", bytes.fromhex("fff8000000000000"))[0]],  # negative NaN
        {"e": _FloatEnum.BAD, "x": None},  # orjson writes an enum's value; pickle would not
        [None, [[{"deep": [math.inf]}]]],
    ],
)
def test_every_kind_of_non_finite_float_is_found(value):
    with pytest.raises(InvalidContent, match="non-finite"):
        _json.dumps(value)


@pytest.mark.parametrize(
    "value",
    [
        {"when": datetime.date(2026, 1, 2), "x": None},  # not plain: the walk decides
        [None, "Infinity", ("NaN", None)],
    ],
)
def test_finite_values_that_need_the_walk_are_fine(value):
    assert _json.dumps(value) == orjson.dumps(value)


def test_lone_surrogates_and_big_ints_refused():
    with pytest.raises(InvalidContent):
        _json.dumps("\ud800")
    with pytest.raises(InvalidContent):
        _json.dumps(2**64)
    with pytest.raises(InvalidContent):
        _json.dumps({1: "x"})


def test_text_that_looks_like_a_pickled_nan_is_cleared_by_the_walk():
    value = {"note": "G\x7f\U0001f600", "x": None}  # UTF-8: G 7f f0 9f ...
    assert _json._NON_FINITE_FLOAT.search(pickle.dumps(value, protocol=5)) is not None
    assert _json.dumps(value) == orjson.dumps(value)
