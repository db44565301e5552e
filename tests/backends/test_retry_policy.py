"""The one retry policy: its deadline and its backoff, on a fake clock (nothing sleeps)."""

from __future__ import annotations

import pytest

from soong_store.backends.retry import RetryPolicy


class FakeClock:
    """A clock that moves only when the policy sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def policy(clock: FakeClock, jitter: float = 0.5, **kwargs: float) -> RetryPolicy:
    return RetryPolicy(clock=clock, sleep=clock.sleep, jitter=lambda: jitter, **kwargs)


class Busy(Exception):
    pass


def is_busy(exc: BaseException) -> bool:
    return isinstance(exc, Busy)


def test_the_deadline_counts_from_the_start_of_the_operation() -> None:
    clock = FakeClock()
    made = policy(clock, deadline=2.0)
    clock.now += 50.0  # time before start() does not count
    attempts = made.start()
    clock.now += 1.999
    assert not attempts.expired
    clock.now += 0.001
    assert attempts.expired


def test_delays_double_from_the_first_up_to_the_cap() -> None:
    clock = FakeClock()
    attempts = policy(clock, deadline=60.0, first_delay=0.01, max_delay=0.05).start()
    delays = [attempts.next_delay() for _ in range(5)]
    assert delays == pytest.approx([0.01, 0.02, 0.04, 0.05, 0.05])


@pytest.mark.parametrize(("jitter", "factor"), [(0.0, 0.5), (0.5, 1.0), (0.999, 1.499)])
def test_jitter_scales_each_delay_between_half_and_one_and_a_half(
    jitter: float, factor: float
) -> None:
    clock = FakeClock()
    attempts = policy(clock, jitter=jitter, first_delay=0.1, max_delay=0.1).start()
    assert attempts.next_delay() == pytest.approx(0.1 * factor)


def test_the_last_wait_never_runs_past_the_deadline() -> None:
    clock = FakeClock()
    attempts = policy(clock, deadline=1.0, first_delay=0.3, max_delay=0.3).start()
    clock.now += 0.9
    assert attempts.next_delay() == pytest.approx(0.1)
    clock.now += 0.5
    assert attempts.next_delay() == 0.0


def test_run_retries_busy_errors_until_the_work_succeeds() -> None:
    clock = FakeClock()
    outcomes: list[Exception | str] = [Busy(), Busy(), "done"]

    def attempt() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert policy(clock, first_delay=0.01).run(attempt, is_busy) == "done"
    assert clock.slept == pytest.approx([0.01, 0.02])


def test_run_gives_up_on_a_busy_error_once_the_deadline_has_passed() -> None:
    clock = FakeClock()
    calls = 0

    def attempt() -> None:
        nonlocal calls
        calls += 1
        raise Busy()

    with pytest.raises(Busy):
        policy(clock, deadline=1.0, first_delay=0.1, max_delay=0.4).run(attempt, is_busy)
    assert clock.now == pytest.approx(101.0)  # every wait together is the deadline, no more
    assert calls == len(clock.slept) + 1


def test_run_raises_an_error_that_is_not_busy_at_once() -> None:
    clock = FakeClock()

    def attempt() -> None:
        raise ValueError("not a lock")

    with pytest.raises(ValueError, match="not a lock"):
        policy(clock).run(attempt, is_busy)
    assert clock.slept == []
