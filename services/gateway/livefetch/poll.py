"""Waiting on work another service does: ask until it is done or the deadline passes.

The live fetch waits for its documents' stages, the interaction check for its label job; both ask the store
at an interval and never sleep past their deadline. The clock and the sleep come from the caller, so tests run
the wait on a fake clock.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable


async def poll_until(
    done: Callable[[], Awaitable[bool]],
    deadline: float,
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], Awaitable[None]],
    interval_s: float,
) -> bool:
    """Call ``done`` until it returns true or ``clock()`` reaches ``deadline``, sleeping ``interval_s`` (never
    past the deadline) in between; whether it was done. ``done`` is always called at least once."""
    while True:
        if await done():
            return True
        if clock() >= deadline:
            return False
        await sleep(min(interval_s, max(0.0, deadline - clock())))
