"""The process-wide token bucket: 3/s without an API key, 10/s with one, checked on a fake clock."""

from __future__ import annotations

import asyncio

import pytest

from services.fetcher.eutils import EutilsClient
from services.fetcher.ratelimit import TokenBucket, process_limiter, rate_for
from shared.settings import NcbiSettings
from tests.fakes.clock import FakeClock


def _max_in_window(starts: list[float], window: float = 1.0) -> int:
    eps = 1e-9
    return max(sum(1 for t in starts if s - eps <= t < s + window - eps) for s in starts)


async def test_sequential_calls_are_spaced_one_third_of_a_second() -> None:
    t = FakeClock()
    bucket = TokenBucket(3, clock=t, sleep=t.sleep)
    starts = []
    for _ in range(10):
        await bucket.acquire()
        starts.append(t.now)
    assert starts[0] == 0.0
    assert starts[-1] == pytest.approx(3.0)
    assert _max_in_window(starts) == 3
    assert all(d == pytest.approx(1 / 3) for d in t.slept)


async def test_concurrent_coroutines_share_the_bucket_in_order() -> None:
    now = [0.0]
    waits: list[float] = []

    async def sleep(delay: float) -> None:  # records, lets the others run, does not move the clock
        waits.append(delay)
        await asyncio.sleep(0)

    bucket = TokenBucket(3, clock=lambda: now[0], sleep=sleep)
    await asyncio.gather(*(bucket.acquire() for _ in range(7)))
    # The first goes at once; the others were given slots 1/3 s apart.
    assert sorted(waits) == pytest.approx([i / 3 for i in range(1, 7)])
    assert _max_in_window([0.0, *waits]) == 3


async def test_ten_per_second_with_an_api_key() -> None:
    assert rate_for(None) == 3
    assert rate_for("abc") == 10
    assert rate_for("abc", override=50) == 50
    t = FakeClock()
    bucket = TokenBucket(rate_for("abc"), clock=t, sleep=t.sleep)
    starts = []
    for _ in range(21):
        await bucket.acquire()
        starts.append(t.now)
    assert starts[-1] == pytest.approx(2.0)
    assert _max_in_window(starts) == 10


async def test_idle_time_refills_only_up_to_the_burst() -> None:
    t = FakeClock()
    bucket = TokenBucket(3, clock=t, sleep=t.sleep)
    await bucket.acquire()
    t.now += 60  # a long idle minute does not buy a burst of 180 calls
    await bucket.acquire()
    assert t.slept == []
    await bucket.acquire()
    assert t.slept == [pytest.approx(1 / 3)]


async def test_a_cancelled_waiter_gives_its_token_back() -> None:
    now = [0.0]
    gate = asyncio.Event()

    async def sleep(delay: float) -> None:
        await gate.wait()

    bucket = TokenBucket(3, clock=lambda: now[0], sleep=sleep)
    await bucket.acquire()
    waiter = asyncio.create_task(bucket.acquire())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert bucket.reserve() == pytest.approx(1 / 3)  # not 2/3: the cancelled slot was returned


def test_one_bucket_per_process_and_rate() -> None:
    assert process_limiter(3.0) is process_limiter(3.0)
    assert process_limiter(3.0) is not process_limiter(10.0)
    with_key = EutilsClient(NcbiSettings(ncbi_api_key="k"))  # type: ignore[arg-type]
    without = EutilsClient(NcbiSettings())
    other = EutilsClient(NcbiSettings())
    assert with_key.limiter.rate == 10
    assert without.limiter.rate == 3
    assert without.limiter is other.limiter  # every client of the process shares it


def test_bad_rates_are_refused() -> None:
    with pytest.raises(ValueError):
        TokenBucket(0)
    with pytest.raises(ValueError):
        TokenBucket(3, burst=0.5)
