"""Background work repeated on a timer by a long-running service, surviving its own failures."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable


async def run_every(
    every_s: float,
    step: Callable[[], Awaitable[object]],
    *,
    failure: str,
    log: logging.Logger,
    wait_first: bool = False,
    level: int = logging.ERROR,
) -> None:
    """Await ``step()`` every ``every_s`` seconds until cancelled (after a first wait with ``wait_first``). A step
    that raises is logged at ``level`` as "``failure``; retried in N s", with its traceback, and run again at the
    next turn: one failed turn (a database restarting) never ends the loop."""
    if wait_first:
        await asyncio.sleep(every_s)
    while True:
        try:
            await step()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.log(level, "%s; retried in %.0f s", failure, every_s, exc_info=True)
        await asyncio.sleep(every_s)
