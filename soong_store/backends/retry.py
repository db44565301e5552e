"""The one retry policy: how long, and how often, a busy database is tried again.

Every place that waits out another connection's lock (the writer's batches, reads, the open-time
upgrade, the switch to WAL) runs under the same :class:`RetryPolicy`, so a store has a single
deadline (``SessionStore(lock_wait=...)``). Delays start small and double up to a cap, each drawn
with jitter so that processes waiting on one lock do not wake in step; the last wait never runs
past the deadline. The clock, the sleep and the jitter are parameters, so the policy is tested
without waiting.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

DEFAULT_DEADLINE_S = 120.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The deadline and the backoff of every busy-retry loop of a store."""

    deadline: float = DEFAULT_DEADLINE_S
    """Seconds from the first attempt after which a busy error is final."""
    first_delay: float = 0.002
    max_delay: float = 0.25
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    jitter: Callable[[], float] = field(default=random.random, compare=False)
    """A value in [0, 1): each delay is scaled by ``0.5 + jitter()``."""

    def start(self) -> Attempts:
        """The retries of one operation, its deadline counted from now."""
        return Attempts(self)

    def run(self, attempt: Callable[[], T], busy: Callable[[BaseException], bool]) -> T:
        """Call ``attempt`` until it returns, retrying while it raises a ``busy`` error.

        An error that is not busy, or a busy one once the deadline has passed, is re-raised.
        """
        attempts = self.start()
        while True:
            try:
                return attempt()
            except Exception as exc:
                if not busy(exc) or attempts.expired:
                    raise
            attempts.wait()


class Attempts:
    """One operation's retries under a policy: when it gives up, and how long it waits next."""

    __slots__ = ("_delay", "_ends", "_policy")

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        self._ends = policy.clock() + policy.deadline
        self._delay = policy.first_delay

    @property
    def expired(self) -> bool:
        """Whether the deadline has passed (a busy error is then final)."""
        return self._policy.clock() >= self._ends

    def next_delay(self) -> float:
        """The next wait: the backoff with its jitter, cut to the time left before the deadline."""
        policy = self._policy
        delay = self._delay * (0.5 + policy.jitter())
        self._delay = min(self._delay * 2, policy.max_delay)
        return max(0.0, min(delay, self._ends - policy.clock()))

    def wait(self) -> None:
        """Sleep for :meth:`next_delay`."""
        self._policy.sleep(self.next_delay())
