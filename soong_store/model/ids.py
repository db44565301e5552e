"""Identifiers and times: new session and record ids (sortable by creation), and ``utc_now``.

Their checks, with every other check of a caller's argument, are :mod:`soong_store.model.checks`.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
_DIGIT_PAIRS = [high + low for high in _CROCKFORD for low in _CROCKFORD]
"""The two digits of every 10-bit value."""
_SHIFTS = tuple(range(120, -10, -10))
_PREFIXES = ("node", "evt", "agent", "run", "art")


def new_session_id(now: datetime | None = None) -> str:
    """Generate ``sess_YYYYMMDD_HHMMSS_xxxxxxxx`` (UTC, eight random lowercase hex digits)."""
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    return f"sess_{moment:%Y%m%d_%H%M%S}_{os.urandom(4).hex()}"


class _Monotonic:
    """ULID-like ids: 48-bit milliseconds then 80 bits that only grow within one millisecond.

    Sorting ids as strings sorts them by creation time; ids made by one process within the same
    millisecond keep their creation order.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_rand = 0

    def next(self) -> str:
        with self._lock:
            ms = time.time_ns() // 1_000_000
            if ms <= self._last_ms:
                ms = self._last_ms
                rand = self._last_rand + 1
                if rand >= 1 << 80:
                    ms += 1
                    rand = int.from_bytes(os.urandom(10), "big") >> 1
            else:
                rand = int.from_bytes(os.urandom(10), "big") >> 1
            self._last_ms, self._last_rand = ms, rand
        return crockford26((ms << 80) | rand)


def crockford26(number: int) -> str:
    """``number`` (below 2**130) as 26 lowercase Crockford base-32 digits, most significant first.

    Two digits at a time from a table (1.6 µs, against 3.0 µs for 26 ``divmod`` steps).
    """
    if not 0 <= number < 1 << 130:
        raise ValueError(f"{number} does not fit in 26 base-32 digits")
    return "".join([_DIGIT_PAIRS[(number >> shift) & 1023] for shift in _SHIFTS])


_generator = _Monotonic()


def new_id(prefix: str) -> str:
    """Generate a unique, time-sortable, URL-safe id such as ``node_01jf3...``."""
    if prefix not in _PREFIXES:
        raise ValueError(f"unknown id prefix {prefix!r}")
    return f"{prefix}_{_generator.next()}"


def utc_now() -> str:
    """The current UTC time as ISO-8601 text with microseconds (the timestamp column format)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")
