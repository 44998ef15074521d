"""Conversation retention: a periodic job of the gateway that deletes conversations, and stored guideline
consultations (a patient's findings are kept no longer than a conversation), idle longer than
``EVIDENTIA_GATEWAY_CONVERSATION_RETENTION_DAYS`` (0, the default: kept until deleted).

The job runs once when the gateway starts, then every ``conversation_retention_interval_s``. Each run deletes
in batches of ``conversation_retention_batch`` conversations (one short statement each, oldest first) until
none is left, so a large backlog never holds long locks; every gateway replica may run it (rows one replica
is deleting are skipped by the others). Deleted conversations are counted in
``evidentia_conversations_deleted_total{reason="retention"}``, consultations in
``evidentia_consultations_deleted_total{reason="retention"}``; a failed run (PostgreSQL away) is logged,
counted in ``evidentia_conversation_retention_failures_total`` and tried again at the next interval. The task
is cancelled when the gateway stops, before its pool is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

import asyncpg
from prometheus_client import Counter

from services.gateway.store.consultations import delete_idle_consultations
from services.gateway.store.conversations import delete_idle_conversations
from shared import metrics
from shared.settings import GatewaySettings

log = logging.getLogger(__name__)

#: One batch: (idle for, batch size) -> conversations deleted (tests pass their own).
DeleteBatch = Callable[[timedelta, int], Awaitable[int]]


class ConversationRetention:
    """Deletes idle conversations now and then; :meth:`start` and :meth:`stop` follow the gateway's lifespan."""

    def __init__(
        self, settings: GatewaySettings, delete_batch: DeleteBatch, delete_consultations: DeleteBatch | None = None
    ):
        self.days = settings.conversation_retention_days
        self.interval_s = settings.conversation_retention_interval_s
        self.batch = settings.conversation_retention_batch
        self._delete_batch = delete_batch
        self._delete_consultations = delete_consultations
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def over(cls, settings: GatewaySettings, pool: Callable[[], asyncpg.Pool]) -> ConversationRetention:
        """The job over the gateway's pool (``pool`` is called when a batch runs: the pool opens at start)."""

        async def delete_batch(idle_for: timedelta, batch: int) -> int:
            return await delete_idle_conversations(pool(), idle_for, batch)

        async def delete_consultations(idle_for: timedelta, batch: int) -> int:
            return await delete_idle_consultations(pool(), idle_for, batch)

        return cls(settings, delete_batch, delete_consultations)

    @property
    def enabled(self) -> bool:
        return self.days > 0

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def purge(self) -> int:
        """One run: every conversation (then every stored consultation) idle longer than the retention, deleted
        batch by batch; how many conversations."""
        if not self.enabled:
            return 0
        idle_for = timedelta(days=self.days)
        total = await self._purge(self._delete_batch, idle_for, metrics.CONVERSATIONS_DELETED)
        if total:
            log.info("conversation retention deleted conversations", extra={"deleted": total, "days": self.days})
        if self._delete_consultations is not None:
            gone = await self._purge(self._delete_consultations, idle_for, metrics.CONSULTATIONS_DELETED)
            if gone:
                log.info("conversation retention deleted consultations", extra={"deleted": gone, "days": self.days})
        return total

    async def _purge(self, delete_batch: DeleteBatch, idle_for: timedelta, counter: Counter) -> int:
        total = 0
        while True:
            deleted = await delete_batch(idle_for, self.batch)
            total += deleted
            counter.labels("retention").inc(deleted)
            if deleted < self.batch:
                return total
            await asyncio.sleep(0)  # let requests use the pool between batches

    async def _run(self) -> None:
        while True:
            try:
                await self.purge()
            except asyncio.CancelledError:
                raise
            except Exception:
                metrics.CONVERSATION_RETENTION_FAILURES.inc()
                log.exception("conversation retention run failed; trying again at the next interval")
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        """Start the periodic task (nothing with retention 0)."""
        if self.enabled and not self.running:
            self._task = asyncio.create_task(self._run(), name="conversation-retention")

    async def stop(self) -> None:
        """Cancel the task and wait until it has stopped (a batch in flight is rolled back by PostgreSQL)."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
