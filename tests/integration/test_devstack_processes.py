"""The local dev stack (devstack): real PostgreSQL and Kafka start/stop cycles.

The ``integration`` tests start a real PostgreSQL and a real Kafka broker on free ports in
temporary directories (never the developer's ``.data`` stack), so they can run beside it.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack import LocalKafka, LocalPostgres
from devstack.common import free_ports

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- real processes


@pytest.fixture
def postgres() -> Iterator[LocalPostgres]:
    # Not under tmp_path: when we are root the server runs as another user that must traverse
    # every parent directory, and each new pytest session (ours or a concurrent one) resets
    # /tmp/pytest-of-<user> to 0700.
    data_dir = Path(tempfile.mkdtemp(prefix="evidentia-test-pg-"))
    (port,) = free_ports(1)
    server = LocalPostgres(data_dir, port=port)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[LocalKafka]:
    port, controller_port = free_ports(2)
    broker = LocalKafka(tmp_path / "kafka", port=port, controller_port=controller_port)
    try:
        yield broker
    finally:
        broker.stop()


async def _vector_version(url: str) -> str:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        version = await conn.fetchval("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        await conn.execute("CREATE TEMP TABLE probe (v vector(3))")
        await conn.execute("INSERT INTO probe VALUES ('[1,2,3]')")
        distance = await conn.fetchval("SELECT v <-> '[1,2,4]' FROM probe")
        assert distance == pytest.approx(1.0)
        return str(version)
    finally:
        await conn.close()


@pytest.mark.integration
@pytest.mark.slow
async def test_postgres_starts_with_pgvector_and_restarts(postgres: LocalPostgres) -> None:
    assert await asyncio.to_thread(postgres.start) is True
    assert postgres.is_running()
    assert re.fullmatch(r"\d+\.\d+\.\d+", await _vector_version(postgres.url))

    assert await asyncio.to_thread(postgres.start) is False  # already running: reused
    assert await asyncio.to_thread(postgres.stop) is True
    assert not postgres.is_running()

    assert await asyncio.to_thread(postgres.start) is True  # same data directory, no re-init
    assert await _vector_version(postgres.url)
    assert await asyncio.to_thread(postgres.stop) is True
    assert await asyncio.to_thread(postgres.stop) is False


async def _produce(bootstrap: str, topic: str, value: bytes) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=b"k")
    finally:
        await producer.stop()


async def _consume_all(bootstrap: str, topic: str, wait_s: float = 30.0) -> list[bytes]:
    """Every value on ``topic`` from the beginning (no consumer group, so no rebalance wait)."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    values: list[bytes] = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while not values and loop.time() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            values += [record.value for records in batches.values() for record in records if record.value]
    finally:
        await consumer.stop()
    return values


@pytest.mark.integration
@pytest.mark.slow
async def test_kafka_round_trip_survives_a_restart(kafka: LocalKafka) -> None:
    assert await asyncio.to_thread(kafka.start) is True
    assert kafka.is_running()
    assert kafka.pid_file.exists()

    await _produce(kafka.bootstrap, "devstack-smoke", b"hello evidentia")
    assert await _consume_all(kafka.bootstrap, "devstack-smoke") == [b"hello evidentia"]

    assert await asyncio.to_thread(kafka.start) is False  # already running: reused
    assert await asyncio.to_thread(kafka.stop) is True
    assert not kafka.is_running()
    assert not kafka.pid_file.exists()

    assert await asyncio.to_thread(kafka.start) is True  # same data directory, no reformat
    assert await _consume_all(kafka.bootstrap, "devstack-smoke") == [b"hello evidentia"]
    assert await asyncio.to_thread(kafka.stop) is True
    assert await asyncio.to_thread(kafka.stop) is False
