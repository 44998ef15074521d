"""Issue #16 items 1, 3 and 6 on a real Kafka broker and PostgreSQL (no services: a broker in this process).

- A record whose header is not UTF-8 is dead-lettered with the reason (FastStream alone skipped it).
- A handler retrying an outage for longer than ``max_poll_interval_ms`` keeps its partitions (they are
  paused and polled): the event is handled once and committed, not handed to a rejoin and run twice.
- ``evidentia dlq list`` shows the letter; a replay sends it back (key and headers kept) and is recorded,
  so a second replay without ``force`` is skipped.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from faststream.middlewares import AckPolicy

from shared.db import create_pool
from shared.events import DeadLetter
from shared.kafka import dlq
from shared.kafka.broker import make_broker
from shared.kafka.context import KafkaMessage
from shared.kafka.topic_admin import ensure_topics
from shared.kafka.topics import TopicSpec
from shared.settings import DatabaseSettings, Settings
from tests.integration.conftest import Infra

ROOT = Path(__file__).resolve().parents[2]


def settings_for(infra: Infra) -> Settings:
    s = Settings()
    s.kafka.bootstrap = infra.kafka.bootstrap
    s.kafka.retry_backoff_s = 0.5
    s.kafka.max_delivery_attempts = 2
    return s


async def committed(bootstrap: str, group: str, topic: str) -> int | None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return await consumer.committed(TopicPartition(topic, 0))
    finally:
        await consumer.stop()


async def wait_for(cond: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        await asyncio.sleep(0.2)
    return bool(cond())


async def _outage_scenario(infra: Infra) -> None:
    topic, group = f"itest-outage-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    await ensure_topics(infra.kafka.bootstrap, [TopicSpec(topic, 1), TopicSpec(f"{topic}.dlq", 1)])
    broker = make_broker("itest", settings_for(infra))
    started = time.monotonic()
    attempts: list[float] = []
    handled: list[bytes] = []

    @broker.subscriber(
        topic, group_id=group, auto_offset_reset="earliest", ack_policy=AckPolicy.ACK, max_poll_interval_ms=10_000
    )
    async def handle(msg: KafkaMessage) -> None:
        attempts.append(time.monotonic() - started)
        if time.monotonic() - first[0] < 14:  # an outage longer than the poll interval
            raise ConnectionRefusedError("database down")
        handled.append(msg.body)

    first = [float("inf")]
    await broker.start()
    try:
        producer = AIOKafkaProducer(bootstrap_servers=infra.kafka.bootstrap)
        await producer.start()
        first[0] = time.monotonic()
        await producer.send_and_wait(topic, b'{"n": 1}', key=b"k")
        await producer.stop()
        assert await wait_for(lambda: handled, 60), "never handled"
        await asyncio.sleep(8)  # a rejoin after a lost membership would redeliver it within this
    finally:
        await broker.stop()
    assert handled == [b'{"n": 1}'], f"handled {len(handled)} times"
    assert len(attempts) >= 4 and attempts[-1] - attempts[0] > 12, "the outage outlasted the poll interval"
    assert await committed(infra.kafka.bootstrap, group, topic) == 1


def test_an_outage_longer_than_the_poll_interval_keeps_the_partition(infra: Infra) -> None:
    asyncio.run(_outage_scenario(infra))


async def _dead_letter_scenario(infra: Infra) -> None:
    topic, group = f"itest-dlq-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    bootstrap = infra.kafka.bootstrap
    await ensure_topics(bootstrap, [TopicSpec(topic, 1), TopicSpec(f"{topic}.dlq", 1)])
    settings = settings_for(infra)
    broker = make_broker("itest", settings)
    fixed = [False]
    handled: list[tuple[bytes, dict[str, str]]] = []

    @broker.subscriber(topic, group_id=group, auto_offset_reset="earliest", ack_policy=AckPolicy.ACK)
    async def handle(msg: KafkaMessage) -> None:
        if not fixed[0]:
            raise RuntimeError("bug in the handler")
        handled.append((msg.body, dict(msg.headers)))

    database = DatabaseSettings()
    database.url = infra.postgres.url
    pool = await create_pool(database)
    await broker.start()
    try:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        await producer.send_and_wait(topic, b'{"n": "bad header"}', key=b"k1", headers=[("trace-id", b"\xff\xfe")])
        await producer.send_and_wait(topic, b'{"n": "buggy"}', key=b"k2", headers=[("origin", b"test")])
        await producer.send_and_wait(topic, b"not json at all", key=b"k3")
        await producer.stop()
        letters: list[dlq.LetterView] = []

        async def poll() -> bool:
            letters[:] = await dlq.read_letters(settings.kafka, f"{topic}.dlq", timeout_ms=1000)
            return len(letters) >= 3

        for _ in range(60):
            if await poll():
                break
            await asyncio.sleep(0.5)
        by_key = {v.letter.key: v for v in letters}
        assert set(by_key) == {"k1", "k2", "k3"}, [v.letter for v in letters]
        not_json = by_key["k3"].letter
        assert not_json.payload == "not json at all" and not_json.payload_json is None
        assert not_json.original() == b"not json at all"
        bad_header = by_key["k1"].letter
        assert bad_header.error_type == "PoisonEvent" and "trace-id" in bad_header.error and bad_header.attempts == 1
        assert (bad_header.topic, bad_header.partition, bad_header.offset) == (topic, 0, 0)
        buggy = by_key["k2"].letter
        assert buggy.error_type == "RuntimeError" and buggy.attempts == 2 and buggy.payload_json == {"n": "buggy"}
        assert buggy.headers.get("origin") == "test"

        cli = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "cli.main", "dlq", "list", topic],
            cwd=ROOT,
            env=dict(os.environ)
            | {
                "EVIDENTIA_KAFKA_BOOTSTRAP": bootstrap,
                "EVIDENTIA_DATABASE_URL": infra.postgres.url,
                "PYTHONPATH": str(ROOT),
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cli.returncode == 0, cli.stderr
        assert f"in {topic}.dlq" in cli.stdout and "RuntimeError: bug in the handler" in cli.stdout

        fixed[0] = True  # the cause is fixed: replay the buggy one
        outcomes = await dlq.replay(settings.kafka, [by_key["k2"]], pool=pool)
        assert [o.status for o in outcomes] == ["replayed"]
        assert await wait_for(lambda: handled, 30)
        body, headers = handled[0]
        assert body in (b'{"n":"buggy"}', b'{"n": "buggy"}')
        assert headers.get("origin") == "test" and headers.get(dlq.REPLAY_HEADER, "").startswith(f"{topic}.dlq:")
        again = await dlq.replay(settings.kafka, await dlq.mark_replayed(pool, [by_key["k2"]]), pool=pool)
        assert [o.status for o in again] == ["skipped"]
    finally:
        await broker.stop()
        await pool.close()


def test_undecodable_records_are_dead_lettered_and_letters_can_be_replayed(infra: Infra) -> None:
    asyncio.run(_dead_letter_scenario(infra))


async def _paged_replay_scenario(infra: Infra) -> None:
    topic = f"itest-pages-{uuid.uuid4().hex[:8]}"
    settings = settings_for(infra)
    await ensure_topics(settings.kafka, [TopicSpec(topic, 1), TopicSpec(f"{topic}.dlq", 2)])
    count, page_size = 23, 5
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap)
    await producer.start()
    try:
        for n in range(count):
            letter = DeadLetter(
                topic=topic,
                key=f"k{n}",
                service="itest",
                error_type="Boom",
                error="x",
                attempts=1,
                payload_json={"n": n},
            )
            await producer.send_and_wait(f"{topic}.dlq", letter.model_dump_json().encode(), partition=n % 2)
    finally:
        await producer.stop()
    database = DatabaseSettings()
    database.url = infra.postgres.url
    pool = await create_pool(database)
    held: list[int] = []
    real_send_back = dlq._send_back

    async def send_back(producer: Any, kafka: Any, views: Any, **kw: Any) -> Any:
        held.append(len(views))
        return await real_send_back(producer, kafka, views, **kw)

    dlq._send_back = send_back  # type: ignore[assignment]
    try:
        outcomes = [
            o
            async for o in dlq.replay_chosen(settings.kafka, f"{topic}.dlq", pool=pool, every=True, page_size=page_size)
        ]
        first_pages = list(held)
        again = [o async for o in dlq.replay_chosen(settings.kafka, f"{topic}.dlq", pool=pool, every=True, page_size=7)]
    finally:
        dlq._send_back = real_send_back  # type: ignore[assignment]
        await pool.close()
    assert sorted(o.status for o in outcomes) == ["replayed"] * count
    assert first_pages == [5, 5, 5, 5, 3]  # one page at a time, across both partitions
    assert again == []  # every letter is recorded as replayed: "all" chooses none of them again
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=settings.kafka.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        bodies: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(bodies) < count and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                bodies += [r.value for r in records]
    finally:
        await consumer.stop()
    assert sorted(json.loads(b)["n"] for b in bodies) == list(range(count))


def test_replaying_every_letter_pages_through_the_topic(infra: Infra) -> None:
    # Issue #40 item 6: more letters than a page (over two partitions), all replayed, never more than a page held.
    asyncio.run(_paged_replay_scenario(infra))
