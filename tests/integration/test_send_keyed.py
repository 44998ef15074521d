"""``send_keyed`` (whole record batches) lands every message where ``producer.send`` would, in order."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from shared.kafka.publish import send_keyed
from shared.kafka.topic_admin import ensure_topics
from shared.kafka.topics import TopicSpec
from tests.integration.conftest import Infra

PARTITIONS = 3
N = 300


async def _read_all(bootstrap: str, topic: str, n: int) -> list[tuple[int, int, bytes, bytes, list[tuple[str, bytes]]]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        out: list[tuple[int, int, bytes, bytes, list[tuple[str, bytes]]]] = []
        for _ in range(100):
            for records in (await consumer.getmany(timeout_ms=200)).values():
                out += [(r.partition, r.offset, r.key or b"", r.value or b"", list(r.headers)) for r in records]
            if len(out) >= n:
                break
        return out
    finally:
        await consumer.stop()


async def _scenario(bootstrap: str) -> None:
    run = uuid.uuid4().hex[:8]
    batched, one_by_one = f"test-keyed-batches-{run}", f"test-keyed-send-{run}"
    await ensure_topics(bootstrap, [TopicSpec(batched, PARTITIONS, {}), TopicSpec(one_by_one, PARTITIONS, {})])
    # 40 keys, several messages each (order within a key must hold), ~1 KB values, 16 KB record batches.
    messages = [(f"doc-{i % 40}".encode(), f"{i:05d}".encode() + b"x" * 1000) for i in range(N)]
    headers = [("evidentia-event", b"ChunkEmbedded")]
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_batch_size=16 * 1024, acks="all")
    await producer.start()
    try:
        sent_batches = await send_keyed(producer, batched, messages, headers)
        for key, value in messages:
            await producer.send_and_wait(one_by_one, value, key=key)
        assert await send_keyed(producer, batched, []) == 0
    finally:
        await producer.stop()
    # 300 KB in 16 KB batches over 3 partitions: many batches, each acknowledged before send_keyed returned.
    assert sent_batches >= N * 1000 // (16 * 1024)

    got = await _read_all(bootstrap, batched, N)
    reference = await _read_all(bootstrap, one_by_one, N)
    assert len(got) == N and len(reference) == N
    assert sorted(v for *_, v, _ in got) == sorted(v for _, v in messages)
    assert all(h == headers for *_, h in got)
    where = {value: part for part, _, _, value, _ in reference}
    assert all(where[value] == part for part, _, _, value, _ in got), "a key went to another partition than send's"
    per_key: dict[bytes, list[tuple[int, bytes]]] = defaultdict(list)
    for _, offset, key, value, _ in sorted(got, key=lambda r: (r[0], r[1])):
        per_key[key].append((offset, value))
    for key, rows in per_key.items():
        assert [v for _, v in rows] == [v for k, v in messages if k == key], key
    assert len({part for part, *_ in got}) == PARTITIONS


def test_send_keyed_matches_send_partitions_order_and_headers(infra: Infra) -> None:
    asyncio.run(_scenario(infra.kafka.bootstrap))
