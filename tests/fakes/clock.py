"""A clock for code that waits: time passes only when the code under test sleeps (one caller at a time)."""

from __future__ import annotations


class FakeClock:
    """``clock()`` reads the time; ``sleep(s)`` records ``s`` in ``slept`` and moves the time on by it."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
