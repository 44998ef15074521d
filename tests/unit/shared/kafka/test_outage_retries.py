"""What an infrastructure outage must not do: dead-letter good events, or spin aiokafka in a busy loop."""

from __future__ import annotations

import asyncio
import socket
import time

import asyncpg
from aiokafka.client import AIOKafkaClient
from faststream.kafka import TestKafkaBroker

from shared.events import DeadLetter
from shared.kafka.broker import make_broker
from shared.kafka.context import KafkaMessage
from shared.kafka.errors import is_transient
from shared.kafka.metadata_backoff import install_metadata_backoff
from shared.settings import Settings


def broker_with(attempts: int = 3):  # type: ignore[no-untyped-def]
    settings = Settings()
    settings.kafka.max_delivery_attempts = attempts
    settings.kafka.retry_backoff_s = 0.0
    return make_broker("test", settings)


def test_a_database_going_down_under_a_query_is_transient() -> None:
    assert is_transient(asyncpg.AdminShutdownError("terminating connection due to administrator command"))
    assert is_transient(asyncpg.CrashShutdownError("crash"))
    assert is_transient(asyncpg.CannotConnectNowError("the database system is shutting down"))
    assert is_transient(asyncpg.InternalClientError("cannot switch to state 15; another operation (2) is in progress"))
    assert is_transient(asyncpg.DeadlockDetectedError("deadlock detected"))
    assert is_transient(asyncpg.SerializationError("could not serialize access"))
    assert not is_transient(asyncpg.UniqueViolationError("duplicate key"))
    assert not is_transient(asyncpg.UndefinedColumnError("no such column"))


async def test_an_outage_does_not_use_up_the_attempts_of_a_good_event() -> None:
    """Odd errors at the edges of a long outage, many attempts in all: retried until it works."""
    broker = broker_with(attempts=3)
    outage: list[Exception] = [
        RuntimeError("odd error as the server goes down"),
        *(ConnectionRefusedError(111, "refused") for _ in range(6)),
        RuntimeError("odd error as it comes back"),
    ]
    calls: list[int] = []
    letters: list[DeadLetter] = []

    @broker.subscriber("t", group_id="g")
    async def handle(msg: KafkaMessage) -> None:
        calls.append(1)
        if outage:
            raise outage.pop(0)

    @broker.subscriber("t.dlq", group_id="d")
    async def dlq(letter: DeadLetter) -> None:
        letters.append(letter)

    async with TestKafkaBroker(broker) as br:
        await br.publish({"x": 1}, topic="t")
    assert len(calls) == 9
    assert letters == []


async def test_three_handler_failures_still_dead_letter_between_transient_ones() -> None:
    broker = broker_with(attempts=3)
    errors: list[Exception] = [RuntimeError("1"), OSError("net"), RuntimeError("2"), OSError("net"), RuntimeError("3")]
    letters: list[DeadLetter] = []

    @broker.subscriber("t", group_id="g")
    async def handle(msg: KafkaMessage) -> None:
        if errors:
            raise errors.pop(0)

    @broker.subscriber("t.dlq", group_id="d")
    async def dlq(letter: DeadLetter) -> None:
        letters.append(letter)

    async with TestKafkaBroker(broker) as br:
        await br.publish({"x": 1}, topic="t")
    assert len(letters) == 1
    assert letters[0].attempts == 5
    assert letters[0].error == "3"


async def test_failed_metadata_update_waits_the_retry_backoff() -> None:
    assert install_metadata_backoff()
    assert install_metadata_backoff()  # idempotent
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = AIOKafkaClient(bootstrap_servers=f"127.0.0.1:{port}", retry_backoff_ms=200)
    start = time.perf_counter()
    ok = await asyncio.wait_for(client._metadata_update(client.cluster, set()), 10)
    assert ok is False
    assert time.perf_counter() - start >= 0.19
    await client.close()


async def test_one_broken_json_record_does_not_dead_letter_its_whole_batch() -> None:
    """FastStream decodes a batch before the handler: a record declared JSON but not JSON used to fail
    the batch, and the DLQ then took the good events beside it."""
    from shared.events import PmidDiscovered
    from shared.kafka.decoding import decode_batch

    broker = broker_with()
    seen: list[tuple[list[str], int]] = []
    letters: list[DeadLetter] = []

    @broker.subscriber("p", group_id="g", batch=True)
    async def handle(msg: KafkaMessage) -> None:
        good, bad = decode_batch(PmidDiscovered, msg)
        seen.append(([e.pmid for e in good], len(bad)))

    @broker.subscriber("p.dlq", group_id="d")
    async def dlq(letter: DeadLetter) -> None:
        letters.append(letter)

    async with TestKafkaBroker(broker) as br:
        await br.publish_batch(
            b'{"broken',
            PmidDiscovered(pmid="5").model_dump_json().encode(),
            topic="p",
            headers={"content-type": "application/json"},
        )
    assert seen == [(["5"], 1)]
    assert letters == []  # the handler, not the middleware, dead-letters the one bad record
