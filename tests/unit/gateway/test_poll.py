"""poll_until: ask until done or the deadline, on a fake clock."""

from __future__ import annotations

import pytest

from services.gateway.livefetch.poll import poll_until
from tests.fakes.clock import FakeClock


@pytest.mark.parametrize("done_after", [1, 3])
async def test_stops_as_soon_as_it_is_done(done_after: int) -> None:
    time, calls = FakeClock(100.0), []

    async def done() -> bool:
        calls.append(time.now)
        return len(calls) >= done_after

    assert await poll_until(done, 110.0, clock=time, sleep=time.sleep, interval_s=0.25)
    assert len(calls) == done_after and time.slept == [0.25] * (done_after - 1)


async def test_gives_up_at_the_deadline_without_sleeping_past_it() -> None:
    time, calls = FakeClock(100.0), []

    async def never() -> bool:
        calls.append(time.now)
        return False

    assert not await poll_until(never, 101.0, clock=time, sleep=time.sleep, interval_s=0.3)
    assert time.now == pytest.approx(101.0) and time.slept == pytest.approx([0.3, 0.3, 0.3, 0.1])
    assert calls[-1] == pytest.approx(101.0)  # asked once more at the deadline


async def test_asks_once_even_when_the_deadline_has_passed() -> None:
    time, calls = FakeClock(100.0), []

    async def done() -> bool:
        calls.append(time.now)
        return True

    assert await poll_until(done, 50.0, clock=time, sleep=time.sleep, interval_s=1.0)
    assert calls == [100.0] and time.slept == []
