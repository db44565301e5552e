"""Records built from stored rows without validation equal the fully validated ones.

The fast builders (:func:`node_records`, :func:`event_records`, :func:`node_record`) trust what
the store wrote; here every field of what they build is compared with a record validated by
Pydantic from the same row, the content through the strict decoder of untrusted text.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soong_store.errors import StorageError
from soong_store.model import codec
from soong_store.model.content import content_to_json, decode_stored_content, validate_content
from soong_store.model.enums import EventLevel, NodeType, Role
from soong_store.model.frozen import FrozenDict, FrozenList
from soong_store.model.records import EventRecord, NodeRecord, event_record, node_record
from soong_store.model.row_records import EVENT_COLUMNS, NODE_COLUMNS, event_records, node_records
from tests.model.test_content import blocks, json_values

SID = "sess_20261201_000000_abcd"
READ_ONLY: dict[type, type] = {list: FrozenList, dict: FrozenDict}
unicode_text = st.text(st.characters(codec=None, exclude_categories=["Cs"]), max_size=40)
stamps = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
optional_ids = st.none() | st.text("abcdefghij0123456789_", min_size=1, max_size=30)


def _stamp(value: datetime) -> str:
    return value.isoformat(timespec="microseconds")


@st.composite
def node_rows(draw: st.DrawFn) -> tuple[Any, ...]:
    """A ``nodes_`` row as the store writes it: content and metadata in the store's encoding."""
    content = draw(st.lists(blocks, max_size=5))
    metadata = draw(st.none() | json_values | st.dictionaries(unicode_text, unicode_text))
    values = {
        "node_id": draw(st.text("abcdef0123456789", min_size=1, max_size=26)),
        "node_seq": draw(st.integers(1, 2**63 - 1)),
        "parent_id": draw(optional_ids),
        "agent_id": draw(st.text("abcdef0123456789", min_size=1, max_size=26)),
        "run_id": draw(optional_ids),
        "role": draw(st.sampled_from([m.value for m in Role])),
        "node_type": draw(st.sampled_from([m.value for m in NodeType])),
        "content_json": content_to_json(validate_content(content)),
        "metadata_json": codec.dumps_optional(metadata),
        "token_count": draw(st.none() | st.integers(0, 2**31)),
        "created_at": _stamp(draw(stamps)),
    }
    return tuple(values[name] for name in NODE_COLUMNS)


@st.composite
def event_rows(draw: st.DrawFn) -> tuple[Any, ...]:
    payload = draw(st.none() | json_values | st.dictionaries(unicode_text, unicode_text))
    values = {
        "event_id": draw(st.text("abcdef0123456789", min_size=1, max_size=26)),
        "seq": draw(st.integers(1, 2**63 - 1)),
        "run_seq": draw(st.none() | st.integers(1, 2**63 - 1)),
        "agent_id": draw(optional_ids),
        "run_id": draw(optional_ids),
        "level": draw(st.sampled_from([m.value for m in EventLevel])),
        "event_type": draw(unicode_text.filter(bool)),
        "node_id": draw(optional_ids),
        "tool_call_id": draw(optional_ids),
        "payload_json": codec.dumps_optional(payload),
        "created_at": _stamp(draw(stamps)),
    }
    return tuple(values[name] for name in EVENT_COLUMNS)


def validated_node(row: dict[str, Any], session_id: str = SID) -> NodeRecord:
    """The record Pydantic validates from a stored row, content through the strict decoder."""
    metadata = row["metadata_json"]
    return NodeRecord.model_validate(
        {
            **{k: v for k, v in row.items() if not k.endswith("_json")},
            "session_id": session_id,
            "content": decode_stored_content(row["content_json"]),
            "metadata": None if metadata is None else codec.loads_stored(metadata),
        }
    )


def validated_event(row: dict[str, Any], session_id: str = SID) -> EventRecord:
    """The record Pydantic validates from a stored event row."""
    payload = row["payload_json"]
    return EventRecord.model_validate(
        {
            **{k: v for k, v in row.items() if not k.endswith("_json")},
            "session_id": session_id,
            "payload": None if payload is None else codec.loads_stored(payload),
        }
    )


def assert_same_record(fast: Any, slow: Any, *, read_only: bool = False) -> None:
    """Equal, field by field and type by type, with the same fields set and the same dump.

    ``read_only``: ``fast`` is one the path cache shares, its lists and dicts read-only ones.
    """
    assert type(fast) is type(slow)
    assert fast == slow
    for name in type(slow).model_fields:
        got, want = getattr(fast, name), getattr(slow, name)
        assert type(got) is (READ_ONLY.get(type(want), type(want)) if read_only else type(want)), (
            name
        )
        assert got == want, name
    assert fast.created_at.utcoffset() == slow.created_at.utcoffset()
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.model_dump(mode="json") == slow.model_dump(mode="json")
    assert fast.model_dump_json() == slow.model_dump_json()


@settings(max_examples=300, deadline=None)
@given(st.lists(node_rows(), min_size=1, max_size=3))
def test_nodes_built_from_rows_equal_validated_nodes(rows):
    fast = node_records(SID, rows)
    for got, row in zip(fast, rows, strict=True):
        as_dict = dict(zip(NODE_COLUMNS, row, strict=True))
        slow = validated_node(as_dict)
        assert_same_record(got, slow)
        assert_same_record(node_record(SID, as_dict), slow)
        for block_got, block_want in zip(got.content, slow.content, strict=True):
            assert block_got.model_fields_set == block_want.model_fields_set


@settings(max_examples=300, deadline=None)
@given(st.lists(event_rows(), min_size=1, max_size=3))
def test_events_built_from_rows_equal_validated_events(rows):
    fast = event_records(SID, rows)
    for got, row in zip(fast, rows, strict=True):
        as_dict = dict(zip(EVENT_COLUMNS, row, strict=True))
        slow = validated_event(as_dict)
        assert_same_record(got, slow)
        assert_same_record(event_record(SID, as_dict), slow)


def _node_row(**changes: Any) -> tuple[Any, ...]:
    values = {
        "node_id": "node_1",
        "node_seq": 1,
        "parent_id": None,
        "agent_id": "agent_1",
        "run_id": None,
        "role": "user",
        "node_type": "message",
        "content_json": '[{"type":"text","text":"hi"}]',
        "metadata_json": None,
        "token_count": None,
        "created_at": "2026-12-01T00:00:00.000000+00:00",
    }
    values.update(changes)
    return tuple(values[name] for name in NODE_COLUMNS)


@pytest.mark.parametrize(
    "content_json",
    [
        '[{"type":"text","text":"hi"',  # not JSON
        '[{"type":"text","text":5}]',  # a wrong-typed field
        '[{"type":"picture","url":"x"}]',  # an unknown block
        '[{"type":"text","text":"hi","extra":1}]',  # an unknown field
        '[{"type":"json","data":1,"artifact_ref":"art_1","summary":"s"}]',  # both forms
        '[{"type":"tool_result","tool_call_id":"c","content":[{"type":"tool_call"}]}]',
        '{"type":"text","text":"hi"}',  # not a list
    ],
)
def test_a_damaged_content_row_raises_storage_error_naming_the_node(content_json):
    rows = [_node_row(), _node_row(node_id="node_2", node_seq=2, content_json=content_json)]
    with pytest.raises(StorageError, match=r"stored content of node 'node_2' .* is damaged"):
        node_records(SID, rows)


def test_damaged_metadata_or_payload_raises_storage_error():
    with pytest.raises(StorageError, match="stored metadata_json is damaged"):
        node_records(SID, [_node_row(metadata_json='{"a":')])
    event = dict.fromkeys(EVENT_COLUMNS)
    event.update(
        event_id="evt_1",
        seq=1,
        level="info",
        event_type="x",
        payload_json="[1,",
        created_at="2026-12-01T00:00:00.000000+00:00",
    )
    with pytest.raises(StorageError, match="stored payload_json is damaged"):
        event_records(SID, [tuple(event[name] for name in EVENT_COLUMNS)])


def test_records_share_a_fields_set_no_record_can_change():
    first, second = node_records(SID, [_node_row(), _node_row(node_id="node_2", node_seq=2)])
    with pytest.raises(TypeError):
        first.model_fields_set.add("extra")
    with pytest.raises(TypeError):
        first.model_fields_set.discard("node_id")
    with pytest.raises(TypeError):
        first.model_fields_set |= {"extra"}
    assert second.model_fields_set == set(NodeRecord.model_fields)
    copied = first.model_copy(update={"token_count": 3})
    assert copied.token_count == 3 and first.token_count is None
    assert copied.model_fields_set == set(NodeRecord.model_fields)
