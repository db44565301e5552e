"""``encode_content`` writes each value once and never parses its output, with the old outcome.

The reference below is how content was encoded before: the spill encoded each JSON block's data
to measure it, then the whole content was dumped, encoded and parsed back. The one-pass encoder
must give the same text, the same blocks (the ones a read returns, to the types of their values
and the fields they have set) and the same errors, for plain and for odd values.
"""

import dataclasses
import datetime
import enum
import math
import re
from collections import namedtuple
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from soong_store.errors import InvalidContent
from soong_store.files.artifact_op import ArtifactOp, SpillPolicy
from soong_store.model import codec
from soong_store.model import content as content_module
from soong_store.model.content import (
    CONTENT,
    ArtifactRefBlock,
    JsonBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    content_from_json,
    encode_content,
    validate_content,
)
from soong_store.write import unit_of_work as spill_module


def reference_encode(blocks: list[Any]) -> tuple[str, list[Any]]:
    text = codec.dumps_text(CONTENT.dump_python(blocks), what="content")
    try:
        stored = CONTENT.validate_json(text)
    except ValidationError as exc:
        raise InvalidContent(f"content cannot be read back: {exc.errors()[0]['msg']}") from exc
    return text, stored


def reference_spill(
    blocks: list[Any], policy: SpillPolicy
) -> tuple[str, list[Any], list[ArtifactOp]]:
    spilled: list[ArtifactOp] = []

    def visit(block: Any, tool_call_id: str | None, where: str) -> Any:
        if isinstance(block, ToolResultBlock):
            inner = [
                visit(item, block.tool_call_id, f"{where}.content[{i}]")
                for i, item in enumerate(block.content)
            ]
            changed = any(a is not b for a, b in zip(inner, block.content, strict=True))
            return block.model_copy(update={"content": inner}) if changed else block
        if not isinstance(block, JsonBlock) or block.artifact_ref is not None:
            return block
        what = f"{where}.data"
        data = codec.encode(block.data, what=what)
        if len(data) <= policy.max_bytes and (
            len(data) <= policy.max_tokens
            or spill_module.estimate_tokens(data) <= policy.max_tokens
        ):
            codec.check_finite(data, block.data, what=what)
            return block
        op = ArtifactOp.build(
            "sess_x", data, policy=policy, mime_type="application/json", tool_call_id=tool_call_id
        )
        spilled.append(op)
        op.summary = spill_module.summarize_json(block.data, len(data))
        codec.check_finite(data, block.data, what=what)
        return JsonBlock(summary=op.summary, artifact_ref=op.artifact_id)

    stored = [visit(block, None, f"content[{i}]") for i, block in enumerate(blocks)]
    text, read = reference_encode(stored)
    return text, read, spilled


class Pending:
    path = "sess_x/f"

    def when_done(self, callback: Any) -> None:
        callback()

    def error(self) -> None:
        return None

    def drop(self) -> None:
        pass


def new_spill(blocks: list[Any], policy: SpillPolicy) -> tuple[str, list[Any], list[ArtifactOp]]:
    return spill_module.spill_large_json("sess_x", blocks, policy, lambda path, data: Pending())


def shape(value: Any) -> Any:
    """A value with its types spelled out: blocks field by field, lists apart from tuples."""
    if isinstance(value, BaseModel) and type(value).__module__.startswith("soong_store"):
        fields = {name: shape(getattr(value, name)) for name in type(value).model_fields}
        return (type(value).__name__, fields)
    if isinstance(value, dict):
        return ("dict", type(value).__name__, [(shape(k), shape(v)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return (type(value).__name__, [shape(v) for v in value])
    return (type(value).__name__, repr(value))


def outcome(call: Any) -> Any:
    try:
        result = call()
    except InvalidContent as exc:
        return ("refused", type(exc).__name__, str(exc))
    return ("stored", result)


_ART = re.compile(r"art_[0-9A-Za-z_-]+")


def normalized(result: Any) -> Any:
    """A spill's outcome with its random artifact ids numbered in order of appearance."""
    if result[0] == "refused":
        return result
    text, blocks, ops = result[1]
    names: dict[str, str] = {}

    def rename(found: re.Match[str]) -> str:
        return names.setdefault(found.group(0), f"art_{len(names)}")

    dumped = repr(shape(blocks))
    return (
        _ART.sub(rename, text),
        _ART.sub(rename, dumped),
        [(op.data, op.summary, op.tool_call_id) for op in ops],
    )


class Mood(enum.Enum):
    CALM = "calm"


class Level(enum.IntEnum):
    HIGH = 3


class Name(str):
    pass


@dataclasses.dataclass
class Point:
    x: int
    y: list[int]


class Model(BaseModel):
    a: int = 1


Pair = namedtuple("Pair", "left right")


def nested(depth: int, leaf: Any = 0) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


plain_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
odd_scalars = st.sampled_from(
    [
        math.nan,
        -math.inf,
        "lone \ud800",
        2**64,
        -(2**63) - 1,
        Mood.CALM,
        Level.HIGH,
        Name("sub"),
        datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
        datetime.date(2026, 1, 2),
        Point(1, [2]),
        Model(),
        Pair(1, "x"),
        {1, 2},
        b"bytes",
        {1: "int key"},
        -0.0,
        nested(197),
        nested(198),
        nested(198, []),
        nested(199),
        nested(199, {}),
        nested(203),
        nested(260),
        [[['[\\"{']], "}}]]"],
    ]
)
values = st.recursive(
    plain_values | odd_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children)
    ),
    max_leaves=6,
)
texts = st.text(max_size=30) | st.just("a \udfff b")
ids = st.text(min_size=1, max_size=12)
leaves = st.one_of(
    st.builds(TextBlock, text=texts),
    st.builds(JsonBlock, data=values),
    st.builds(JsonBlock, data=values, summary=st.text(max_size=5)),
    st.builds(JsonBlock, summary=texts, artifact_ref=ids),
    st.builds(ArtifactRefBlock, artifact_id=ids, summary=st.none() | texts),
    st.builds(
        ArtifactRefBlock,
        type=st.just("artifact_ref"),
        artifact_id=ids,
        summary=st.none() | texts,
        mime_type=st.none() | st.text(max_size=5),
    ),
    st.fixed_dictionaries({"type": st.just("text"), "text": texts}),
    st.fixed_dictionaries({"type": st.just("json"), "data": values}),
)
blocks = st.one_of(
    leaves,
    st.builds(ToolCallBlock, tool_call_id=ids, name=ids, arguments=values),
    st.fixed_dictionaries(
        {"type": st.just("tool_call"), "tool_call_id": ids, "name": ids, "arguments": values}
    ),
    st.builds(
        ToolResultBlock,
        tool_call_id=ids,
        content=st.lists(leaves, max_size=3),
        is_error=st.booleans(),
    ),
)


def valid(content: list[Any]) -> list[Any]:
    try:
        return validate_content(content)
    except InvalidContent:
        return []


@settings(max_examples=400, deadline=None)
@given(st.lists(blocks, max_size=4))
def test_one_pass_encoding_gives_the_old_text_blocks_and_errors(content):
    validated = valid(content)
    new, old = (
        outcome(lambda: encode_content(validated)),
        outcome(lambda: reference_encode(validated)),
    )
    assert new[:1] == old[:1]
    if new[0] == "refused":
        assert new == old
    else:
        assert new[1][0] == old[1][0]
        assert shape(new[1][1]) == shape(old[1][1])


@settings(max_examples=300, deadline=None)
@given(st.lists(blocks, max_size=4), st.integers(1, 120), st.integers(1, 40))
def test_the_spill_encodes_once_with_the_old_outcome(content, max_bytes, max_tokens):
    validated = valid(content)
    policy = SpillPolicy(max_bytes=max_bytes, max_tokens=max_tokens)
    new = outcome(lambda: new_spill(validated, policy))
    old = outcome(lambda: reference_spill(validated, policy))
    assert normalized(new) == normalized(old)


def test_the_blocks_handed_out_are_those_a_read_returns():
    content = validate_content(
        [
            TextBlock(text="hi"),
            {"type": "json", "data": (1, [2, (3,)], {"k": Name("v")})},
            JsonBlock(data=1, summary="dropped on the way"),
            ArtifactRefBlock(artifact_id="art_1"),
            ToolCallBlock(
                tool_call_id="c", name="n", arguments={"when": datetime.date(2026, 1, 2)}
            ),
            ToolResultBlock(tool_call_id="c", content=[JsonBlock(data=(1,))]),
        ]
    )
    text, stored = encode_content(content)
    assert shape(stored) == shape(content_from_json(text))
    assert stored[1].data == [1, [2, [3]], {"k": "v"}] and type(stored[1].data[2]["k"]) is str
    assert stored[2].summary is None
    assert stored[4].arguments == {"when": "2026-01-02"}


def test_plain_content_is_neither_parsed_back_nor_encoded_twice(monkeypatch):
    def forbidden(*_: Any) -> Any:
        raise AssertionError("the whole content was encoded again and parsed back")

    monkeypatch.setattr(content_module, "_encode_exact", forbidden)
    data = {"rows": [{"id": i, "name": f"row {i}", "v": [i, None]} for i in range(300)]}
    encoded: list[Any] = []
    real_encode = codec.encode
    monkeypatch.setattr(codec, "encode", lambda v, **kw: encoded.append(v) or real_encode(v, **kw))
    content = validate_content(
        [
            {"type": "text", "text": "look"},
            {"type": "tool_call", "tool_call_id": "c", "name": "n", "arguments": {"q": [1, 2]}},
            {
                "type": "tool_result",
                "tool_call_id": "c",
                "content": [{"type": "json", "data": data}],
            },
        ]
    )
    text, stored = spill_module.spill_large_json(
        "sess_x", content, SpillPolicy(max_bytes=1 << 20, max_tokens=1 << 20), forbidden
    )[:2]
    assert encoded == [
        data
    ]  # the data once, to measure it; its bytes went into the text as they were
    assert orjson.loads(text)[2]["content"][0]["data"] == data
    assert stored == content_from_json(text)


def test_nesting_is_refused_exactly_where_the_reader_stops():
    deepest = content_module._READER_DEPTH - 2
    for data in (nested(deepest), nested(deepest, []), nested(deepest, {})):  # empty: no deeper
        text, stored = encode_content(validate_content([{"type": "json", "data": data}]))
        assert stored == content_from_json(text)
    for data in (nested(deepest + 1), nested(deepest + 1, []), [nested(deepest, [0])]):
        with pytest.raises(InvalidContent, match="content cannot be read back"):
            encode_content(validate_content([{"type": "json", "data": data}]))
    inner = content_module._READER_DEPTH - 4  # a tool result's item holds its data two deeper
    item = {"type": "json", "data": nested(inner)}
    encode_content(
        validate_content([{"type": "tool_result", "tool_call_id": "c", "content": [item]}])
    )
    item = {"type": "json", "data": nested(inner + 1)}
    with pytest.raises(InvalidContent, match="content cannot be read back"):
        encode_content(
            validate_content([{"type": "tool_result", "tool_call_id": "c", "content": [item]}])
        )


def depth_of(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    return 0


@settings(max_examples=300)
@given(
    st.recursive(
        st.none()
        | st.integers(-(2**63), 2**63 - 1)
        | st.text(alphabet='[]{}"\\/ab\n\u00e9\U0001f600'),
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(st.text(alphabet='[]{}"\\a', max_size=4), children, max_size=3)
        ),
        max_leaves=25,
    )
)
def test_nesting_is_read_from_the_bytes_as_a_parse_would(value):
    assert codec.nesting(orjson.dumps(value)) == depth_of(value)


def test_nesting_stops_counting_at_its_bound():
    assert codec.nesting(orjson.dumps(nested(50)), stop=10) == 10
    assert codec.nesting(b'["]]]]", {"[[": "\\\\"}]') == 2


def test_the_blocks_handed_out_share_no_container_with_the_callers_values():
    data, arguments = {"rows": [1, 2]}, {"paths": ["a"]}
    content = validate_content(
        [
            {"type": "json", "data": data},
            {"type": "tool_call", "tool_call_id": "c", "name": "n", "arguments": arguments},
        ]
    )
    _, stored = encode_content(content)
    data["rows"].append(3)
    arguments["paths"].clear()
    assert stored[0].data == {"rows": [1, 2]} and stored[1].arguments == {"paths": ["a"]}
