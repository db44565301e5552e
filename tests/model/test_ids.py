import re
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from soong_store.errors import InvalidIdentifier
from soong_store.model.checks import check_id, check_session_id
from soong_store.model.ids import crockford26, new_id, new_session_id, utc_now


def test_session_id_format():
    sid = new_session_id(datetime(2026, 6, 12, 15, 30, 22, tzinfo=UTC))
    assert re.fullmatch(r"sess_20260612_153022_[0-9a-f]{8}", sid)
    assert check_session_id(sid) == sid


def test_session_ids_differ():
    assert len({new_session_id() for _ in range(1000)}) == 1000


@pytest.mark.parametrize(
    "bad", ["", "a-b", "x" * 57, "a;b", "a b", "ä", "a\x00", "a\n", None, 1, b"sess"]
)
def test_check_session_id_refuses(bad):
    with pytest.raises(InvalidIdentifier) as info:
        check_session_id(bad)
    assert repr(bad) in str(info.value)


def test_check_session_id_accepts_limits():
    assert check_session_id("x" * 56) == "x" * 56
    assert check_session_id("A_1") == "A_1"


@pytest.mark.parametrize("prefix", ["node", "evt", "agent", "run", "art"])
def test_record_ids_are_sortable_unique_and_url_safe(prefix):
    ids = [new_id(prefix) for _ in range(2000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    for value in ids[:10]:
        assert re.fullmatch(rf"{prefix}_[0-9a-z]{{26}}", value)
        assert check_id(value, prefix) == value


def test_unknown_prefix():
    with pytest.raises(ValueError):
        new_id("nope")


def test_utc_now_has_microseconds_and_utc():
    stamp = utc_now()
    parsed = datetime.fromisoformat(stamp)
    assert parsed.tzinfo is not None and parsed.utcoffset().total_seconds() == 0
    assert re.search(r"\.\d{6}\+00:00$", stamp)


def _digits_by_division(number: int) -> str:
    alphabet = "0123456789abcdefghjkmnpqrstvwxyz"
    chars = []
    for _ in range(26):
        number, digit = divmod(number, 32)
        chars.append(alphabet[digit])
    return "".join(reversed(chars))


@given(st.integers(min_value=0, max_value=(1 << 130) - 1))
def test_crockford_digits_match_the_division_by_32(number):
    assert crockford26(number) == _digits_by_division(number)


@pytest.mark.parametrize("number", [0, 1, 31, 32, (1 << 128) - 1, (1 << 130) - 1])
def test_crockford_digits_at_the_edges(number):
    assert crockford26(number) == _digits_by_division(number)


@pytest.mark.parametrize("number", [-1, 1 << 130])
def test_crockford_refuses_what_does_not_fit(number):
    with pytest.raises(ValueError, match=str(number)):
        crockford26(number)
