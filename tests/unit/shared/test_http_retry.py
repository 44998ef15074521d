"""The one retry loop of the HTTP clients: attempts, waits, Retry-After, jitter, deadline."""

from __future__ import annotations

import email.utils
import random
import time

import pytest

from shared.http_retry import RetryableResponse, RetryWait, retry_async, retry_sync


class Flaky:
    """Fails ``failures`` times (each with the given Retry-After), then returns ``"ok"``."""

    def __init__(self, failures: int, retry_after: str | None = None) -> None:
        self.failures = failures
        self.headers = {"Retry-After": retry_after} if retry_after is not None else {}
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise RetryableResponse.from_headers(f"HTTP 503 #{self.calls}", self.headers, status=503)
        return "ok"


def doubling(n: int) -> float:
    return 2.0**n


def test_retries_until_it_succeeds_waiting_the_backoff() -> None:
    slept: list[float] = []
    flaky = Flaky(3)
    assert retry_sync(flaky, wait=RetryWait(doubling), sleep=slept.append, max_attempts=5) == "ok"
    assert flaky.calls == 4 and slept == [1.0, 2.0, 4.0]


def test_gives_up_after_max_attempts_with_the_last_failure() -> None:
    slept: list[float] = []
    flaky = Flaky(10)
    with pytest.raises(RetryableResponse, match="HTTP 503 #3") as info:
        retry_sync(flaky, wait=RetryWait(doubling), sleep=slept.append, max_attempts=3)
    assert flaky.calls == 3 and len(slept) == 2 and info.value.status == 503


def test_retry_after_seconds_and_http_date_lengthen_the_wait_never_shorten_it() -> None:
    slept: list[float] = []
    retry_sync(Flaky(2, "7"), wait=RetryWait(doubling), sleep=slept.append, max_attempts=5)
    assert slept == [7.0, 7.0]
    slept.clear()
    retry_sync(Flaky(1, "0"), wait=RetryWait(lambda n: 3.0), sleep=slept.append, max_attempts=5)
    assert slept == [3.0]
    slept.clear()
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    retry_sync(Flaky(1, later), wait=RetryWait(doubling), sleep=slept.append, max_attempts=5)
    assert 25.0 <= slept[0] <= 31.0


def test_retry_after_is_capped_and_the_wait_too_unless_the_server_asks_for_more() -> None:
    wait = RetryWait(doubling, retry_after_max_s=10.0)
    assert wait.delay(0, 500.0) == 10.0 and wait.delay(5, 3.0) == 32.0
    capped = RetryWait(doubling, max_wait_s=5.0)
    assert capped.delay(6, None) == 5.0 and capped.delay(6, 20.0) == 20.0


def test_jitter_spreads_the_wait_above_the_backoff_and_retry_after() -> None:
    wait = RetryWait(doubling, jitter=0.5, rng=random.Random(3))
    delays = [wait.delay(2, 3.0) for _ in range(50)]
    assert all(4.0 <= d <= 6.0 for d in delays) and len(set(delays)) > 10


def test_an_error_that_is_not_retryable_is_raised_at_once() -> None:
    calls = 0

    def broken() -> str:
        nonlocal calls
        calls += 1
        raise ValueError("bad request")

    slept: list[float] = []
    with pytest.raises(ValueError, match="bad request"):
        retry_sync(broken, wait=RetryWait(doubling), sleep=slept.append, max_attempts=5)
    assert calls == 1 and slept == []


def test_a_wait_that_would_end_past_the_deadline_is_not_made() -> None:
    now = 1000.0
    slept: list[float] = []

    def sleep(s: float) -> None:
        nonlocal now
        slept.append(s)
        now += s

    flaky = Flaky(20)
    with pytest.raises(RetryableResponse):
        retry_sync(flaky, wait=RetryWait(doubling), sleep=sleep, max_attempts=None, deadline=1020.0, clock=lambda: now)
    assert slept == [1.0, 2.0, 4.0, 8.0]  # 15 s slept; the next 16 s would end at 1031
    assert flaky.calls == 5


def test_each_wait_is_told_before_it_is_slept() -> None:
    told: list[tuple[int, str, float]] = []
    retry_sync(
        Flaky(2),
        wait=RetryWait(doubling),
        sleep=lambda s: None,
        max_attempts=3,
        before_wait=lambda n, failure, s: told.append((n, failure.problem, s)),
    )
    assert told == [(1, "HTTP 503 #1", 1.0), (2, "HTTP 503 #2", 2.0)]


async def test_the_async_loop_awaits_its_sleep_between_attempts() -> None:
    slept: list[float] = []
    flaky = Flaky(2, "4")

    async def attempt() -> str:
        return flaky()

    async def sleep(s: float) -> None:
        slept.append(s)

    assert await retry_async(attempt, wait=RetryWait(doubling), sleep=sleep, max_attempts=3) == "ok"
    assert slept == [4.0, 4.0] and flaky.calls == 3
