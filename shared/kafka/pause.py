"""Waiting out a retry without losing the consumer's partitions to a rebalance."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

log = logging.getLogger(__name__)


class PartitionPause:
    """Pauses a consumer's partitions while a handler waits to retry, and keeps polling meanwhile.

    A handler that sleeps between retries (an outage) does not poll: past ``max_poll_interval_ms``
    Kafka gives its partitions to another replica, which runs the same event again. Instead, the
    wait pauses every assigned partition and polls (``getmany`` on paused partitions returns nothing
    and counts as a poll); records of partitions assigned meanwhile are put back with ``seek``. The
    partitions are resumed when the event is finished. Without a real consumer (FastStream's test
    client) it just sleeps.
    """

    def __init__(self, consumer: Any) -> None:
        real = all(hasattr(consumer, a) for a in ("pause", "resume", "assignment", "getmany", "seek"))
        self.consumer = consumer if real else None
        self.paused: set[Any] = set()

    async def wait(self, seconds: float) -> None:
        consumer = self.consumer
        if consumer is None:
            await asyncio.sleep(seconds)
            return
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                fresh = set(consumer.assignment()) - self.paused
                if fresh:
                    consumer.pause(*fresh)
                    self.paused |= fresh
                got = await consumer.getmany(timeout_ms=max(1, int(min(left, 1.0) * 1000)))
            except asyncio.CancelledError:
                raise
            except Exception:  # a rebalance or a broker outage: wait out the rest without polling
                log.debug("polling a paused consumer failed", exc_info=True)
                await asyncio.sleep(min(left, 1.0))
                continue
            for tp, records in got.items():  # a partition assigned between pause and poll: put it back
                if records:
                    consumer.seek(tp, records[0].offset)

    def resume(self) -> None:
        if self.consumer is not None and self.paused:
            try:
                assigned = set(self.consumer.assignment())
                self.consumer.resume(*(tp for tp in self.paused if tp in assigned))
            except Exception:  # partitions gone in a rebalance: nothing to resume
                log.debug("resuming partitions failed", exc_info=True)
        self.paused.clear()
