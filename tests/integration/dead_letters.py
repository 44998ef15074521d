"""Reading the dead-letter topics in the integration tests."""

from __future__ import annotations

import time

from aiokafka import AIOKafkaConsumer, TopicPartition

from shared.events import DeadLetter
from shared.kafka.topics import dlq


async def read_dead_letters(
    bootstrap: str, topics: list[str], marker: str, want: int, wait_s: float
) -> list[DeadLetter]:
    """The dead letters of ``topics`` whose payload contains ``marker``, until ``want`` or ``wait_s``."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False, group_id=None
    )
    await consumer.start()
    found: list[DeadLetter] = []
    try:
        consumer.assign([TopicPartition(dlq(t), 0) for t in topics])  # dead-letter topics have one partition
        deadline = time.monotonic() + wait_s
        while len(found) < want and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for record in records:
                    if record.value and marker.encode() in record.value:
                        found.append(DeadLetter.model_validate_json(record.value))
        return found
    finally:
        await consumer.stop()
