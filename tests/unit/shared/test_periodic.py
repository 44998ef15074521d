"""shared.periodic.run_every: a timer loop that outlives the failures of its steps."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import pytest

from shared.periodic import run_every

log = logging.getLogger("tests.periodic")


async def _run_until(task: asyncio.Task[None], done: asyncio.Event) -> None:
    try:
        await asyncio.wait_for(done.wait(), timeout=5.0)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_failed_step_is_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[float] = []
    third = asyncio.Event()

    async def step() -> None:
        calls.append(time.monotonic())
        if len(calls) == 3:
            third.set()
        if len(calls) == 1:
            raise ConnectionResetError("database restarting")

    with caplog.at_level(logging.WARNING, logger=log.name):
        task = asyncio.create_task(run_every(0.01, step, failure="thing not done", log=log, level=logging.WARNING))
        await _run_until(task, third)
    assert len(calls) >= 3
    [record] = [r for r in caplog.records if r.name == log.name]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "thing not done; retried in 0 s"
    assert record.exc_info is not None and isinstance(record.exc_info[1], ConnectionResetError)


async def test_wait_first_delays_the_first_step_by_the_interval() -> None:
    for wait_first, at_least, below in ((True, 1.0, None), (False, 0.0, 0.9)):
        first = asyncio.Event()
        started = time.monotonic()
        seen: list[float] = []

        async def step(seen: list[float] = seen, first: asyncio.Event = first) -> None:
            seen.append(time.monotonic())
            first.set()

        task = asyncio.create_task(run_every(1.0, step, failure="x", log=log, wait_first=wait_first))
        await _run_until(task, first)
        waited = seen[0] - started
        assert waited >= at_least, (wait_first, waited)
        if below is not None:
            assert waited < below, (wait_first, waited)


async def test_cancellation_inside_a_step_ends_the_loop() -> None:
    entered = asyncio.Event()

    async def step() -> None:
        entered.set()
        await asyncio.sleep(3600)

    task = asyncio.create_task(run_every(0.01, step, failure="x", log=log))
    await asyncio.wait_for(entered.wait(), timeout=5.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
