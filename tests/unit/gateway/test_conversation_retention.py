"""The conversation retention job (services/gateway/retention.py): batches until a short one, nothing with
retention 0, runs at start and every interval, survives a failed run, stops cleanly. The SQL of a batch runs
on PostgreSQL in ``tests/integration/test_conversation_store.py``; the job in a running gateway in
``tests/integration/test_conversation_lifecycle.py``."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from services.gateway.retention import ConversationRetention
from shared import metrics
from shared.settings import GatewaySettings


def sample(name: str, labels: dict[str, str] | None = None) -> float:
    return metrics.registry.get_sample_value(name, labels or {}) or 0.0


class Backlog:
    """``n`` idle conversations; each call deletes at most ``batch`` of them."""

    def __init__(self, n: int, fail_first: int = 0):
        self.n = n
        self.fail_first = fail_first
        self.calls: list[tuple[timedelta, int]] = []

    async def __call__(self, idle_for: timedelta, batch: int) -> int:
        self.calls.append((idle_for, batch))
        if self.fail_first:
            self.fail_first -= 1
            raise OSError("connection refused")
        deleted = min(batch, self.n)
        self.n -= deleted
        return deleted


def settings(days: int, interval_s: float = 3600, batch: int = 500) -> GatewaySettings:
    return GatewaySettings(  # type: ignore[call-arg]
        conversation_retention_days=days,
        conversation_retention_interval_s=interval_s,
        conversation_retention_batch=batch,
    )


async def test_a_run_deletes_in_batches_until_a_short_one() -> None:
    backlog = Backlog(1234)
    before = sample("evidentia_conversations_deleted_total", {"reason": "retention"})
    assert await ConversationRetention(settings(30), backlog).purge() == 1234
    assert backlog.calls == [(timedelta(days=30), 500)] * 3  # 500, 500, 234
    assert backlog.n == 0
    assert sample("evidentia_conversations_deleted_total", {"reason": "retention"}) == before + 1234
    assert await ConversationRetention(settings(30), backlog).purge() == 0  # nothing left: one empty batch


async def test_retention_zero_keeps_everything_and_starts_no_task() -> None:
    backlog = Backlog(10)
    job = ConversationRetention(settings(0), backlog)
    job.start()
    assert not job.running
    assert await job.purge() == 0 and backlog.calls == []
    await job.stop()


async def test_the_job_runs_at_start_then_every_interval_and_stops_cleanly() -> None:
    backlog = Backlog(3)
    job = ConversationRetention(settings(7, interval_s=0.05, batch=2), backlog)
    job.start()
    assert job.running
    for _ in range(100):
        if len(backlog.calls) >= 4:  # first run: 2 + 1; then one empty batch per interval
            break
        await asyncio.sleep(0.02)
    await job.stop()
    assert not job.running
    assert backlog.n == 0 and len(backlog.calls) >= 4
    calls = len(backlog.calls)
    await asyncio.sleep(0.15)
    assert len(backlog.calls) == calls  # stopped: no run after stop()


async def test_a_failed_run_is_counted_and_retried_at_the_next_interval() -> None:
    backlog = Backlog(5, fail_first=1)
    failures = sample("evidentia_conversation_retention_failures_total")
    job = ConversationRetention(settings(1, interval_s=0.05), backlog)
    job.start()
    for _ in range(100):
        if backlog.n == 0:
            break
        await asyncio.sleep(0.02)
    await job.stop()
    assert backlog.n == 0  # the second run deleted them
    assert sample("evidentia_conversation_retention_failures_total") == failures + 1


async def test_stop_cancels_a_batch_in_flight() -> None:
    started = asyncio.Event()

    async def hangs(idle_for: timedelta, batch: int) -> int:
        started.set()
        await asyncio.Event().wait()  # a statement that never returns
        return 0

    job = ConversationRetention(settings(1), hangs)
    job.start()
    await asyncio.wait_for(started.wait(), 5)
    await asyncio.wait_for(job.stop(), 5)
    assert not job.running


def test_the_settings_are_bounded() -> None:
    with pytest.raises(ValueError):
        settings(-1)
    with pytest.raises(ValueError):
        settings(1, interval_s=0)
    with pytest.raises(ValueError):
        settings(1, batch=0)


async def test_stored_consultations_are_deleted_by_the_same_retention() -> None:
    conversations, consultations = Backlog(3), Backlog(700)
    before = sample("evidentia_consultations_deleted_total", {"reason": "retention"})
    job = ConversationRetention(settings(14), conversations, consultations)
    assert await job.purge() == 3  # the conversations deleted
    assert consultations.calls == [(timedelta(days=14), 500)] * 2  # 500, then 200
    assert consultations.n == 0
    assert sample("evidentia_consultations_deleted_total", {"reason": "retention"}) == before + 700
    kept = Backlog(5)
    assert await ConversationRetention(settings(0), Backlog(1), kept).purge() == 0
    assert kept.calls == [] and kept.n == 5  # retention 0 keeps consultations too
