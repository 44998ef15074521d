"""Keyed sends from a raw aiokafka producer as whole record batches, one future per batch."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer

from shared import tracing
from shared.kafka.murmur2 import partition_slots


async def send_keyed(
    producer: AIOKafkaProducer,
    topic: str,
    messages: Sequence[tuple[bytes | None, bytes]],
    headers: Sequence[tuple[str, bytes]] = (),
) -> int:
    """Send ``(key, value)`` messages as whole record batches; return once Kafka acknowledged them all.

    With tracing on, every record also carries the current span's W3C ``traceparent`` header.

    Each message goes to the partition ``producer.send`` would pick (the producer's default murmur2
    partitioner on the key, as Java clients do; hashed for the whole batch at once by
    :func:`shared.kafka.murmur2.partition_slots`), and in the given order within its partition. One
    future per record batch instead of one per message: ``send`` costs tens of microseconds of Python per message,
    which at tens of thousands of messages a second is the publisher's whole budget (docs/benchmarks.md).
    Returns the number of record batches sent.
    """
    if not messages:
        return 0
    partitions = sorted(await producer.partitions_for(topic))
    by_partition: dict[int, list[tuple[bytes | None, bytes]]] = {}
    slots = iter(partition_slots([key for key, _ in messages if key is not None], len(partitions)))
    for key, value in messages:
        part = partitions[next(slots)] if key is not None else partitions[0]
        by_partition.setdefault(part, []).append((key, value))
    hdrs = list(headers)
    tracing.inject_headers(hdrs)  # W3C traceparent of the current span, when tracing is on
    futures = []
    for part, items in by_partition.items():
        batch = producer.create_batch()
        for key, value in items:
            if batch.append(key=key, value=value, timestamp=None, headers=hdrs) is None:  # full
                futures.append(await producer.send_batch(batch, topic, partition=part))
                batch = producer.create_batch()
                if batch.append(key=key, value=value, timestamp=None, headers=hdrs) is None:
                    raise ValueError(f"a message of {len(value)} bytes does not fit a record batch")
        futures.append(await producer.send_batch(batch, topic, partition=part))
    await asyncio.gather(*futures)
    return len(futures)
