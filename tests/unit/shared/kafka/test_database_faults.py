"""PostgreSQL errors told apart by SQLSTATE: an outage of the database (retried without limit, never
dead-lettered) from an error of the event or the code (attempted ``max_delivery_attempts`` times)."""

from __future__ import annotations

import asyncpg
import pytest
from asyncpg.exceptions import _base as asyncpg_base
from faststream.kafka import TestKafkaBroker

from shared.events import DeadLetter
from shared.kafka.broker import make_broker
from shared.kafka.context import KafkaMessage
from shared.kafka.errors import INFRASTRUCTURE_SQLSTATES, is_infrastructure_sqlstate, is_transient
from shared.settings import Settings, mask_url


def server_error(sqlstate: str, message: str = "error") -> asyncpg.PostgresError:
    """The exception asyncpg raises for an ErrorResponse carrying ``sqlstate`` (its own class lookup)."""
    error = asyncpg.PostgresError.new({"C": sqlstate, "M": message, "S": "ERROR"})
    assert isinstance(error, asyncpg.PostgresError)
    return error


INFRASTRUCTURE = {
    "08006": "connection failure",
    "08001": "could not connect",
    "25006": "cannot execute INSERT in a read-only transaction",
    "28P01": "password authentication failed",
    "3D000": 'database "evidentia" does not exist',
    "40001": "could not serialize access due to concurrent update",
    "40P01": "deadlock detected",
    "53100": "could not extend file: No space left on device",
    "53200": "out of memory",
    "53300": "sorry, too many clients already",
    "53400": "configuration limit exceeded",
    "55P03": "canceling statement due to lock timeout",
    "57014": "canceling statement due to statement timeout",
    "57P01": "terminating connection due to administrator command",
    "57P02": "terminating connection due to crash of another server process",
    "57P03": "the database system is starting up",
    "58030": "could not write to file: Input/output error",
    "53999": "a resource error of a newer server (no asyncpg class of its own)",
}

OF_THE_EVENT_OR_CODE = {
    "22003": "numeric value out of range",
    "22021": "invalid byte sequence for encoding UTF8",
    "23505": "duplicate key value violates unique constraint",
    "23502": "null value in column violates not-null constraint",
    "40002": "a deferred constraint violated at commit",
    "42601": "syntax error",
    "42P01": 'relation "chunks" does not exist',
    "42501": "permission denied for table documents",
    "54000": "index row size exceeds maximum",
    "25P02": "current transaction is aborted, commands ignored until end of transaction block",
    "0A000": "feature not supported",
    "XX000": "internal error",
    "P0001": "raised by a trigger",
}


@pytest.mark.parametrize("sqlstate", sorted(INFRASTRUCTURE))
def test_an_outage_of_the_database_is_infrastructure(sqlstate: str) -> None:
    error = server_error(sqlstate, INFRASTRUCTURE[sqlstate])
    assert error.sqlstate == sqlstate
    assert is_transient(error), (sqlstate, type(error).__name__)


@pytest.mark.parametrize("sqlstate", sorted(OF_THE_EVENT_OR_CODE))
def test_an_error_of_the_event_or_the_code_is_not(sqlstate: str) -> None:
    error = server_error(sqlstate, OF_THE_EVENT_OR_CODE[sqlstate])
    assert not is_transient(error), (sqlstate, type(error).__name__)


def test_the_errors_a_switchover_and_an_overloaded_server_raise_by_name() -> None:
    for error in (
        asyncpg.ReadOnlySQLTransactionError("cannot execute UPDATE in a read-only transaction"),
        asyncpg.QueryCanceledError("canceling statement due to statement timeout"),
        asyncpg.DiskFullError("could not extend file"),
        asyncpg.OutOfMemoryError("out of memory"),
        asyncpg.TooManyConnectionsError("too many clients"),
        asyncpg.LockNotAvailableError("lock timeout"),
        asyncpg.AdminShutdownError("terminating connection due to administrator command"),
        asyncpg.CannotConnectNowError("the database system is not accepting connections"),
        asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        asyncpg.SerializationError("could not serialize access"),
        asyncpg.DeadlockDetectedError("deadlock detected"),
        # client side: no host of a multi-host URL is the primary yet; a connection found closed
        asyncpg.TargetServerAttributeNotMatched('None of the hosts match the target attribute requirement "rw"'),
        asyncpg.InterfaceError("connection is closed"),
    ):
        assert is_transient(error), error


def test_asyncpgs_own_input_errors_are_not_infrastructure() -> None:
    """asyncpg refuses a query argument before sending it ("invalid input for query argument $1"): an
    InterfaceError like a closed connection, but retrying the same value can never pass."""
    assert not is_transient(asyncpg_base.DataError("invalid input for query argument $1: value out of int64 range"))
    assert not is_transient(asyncpg_base.ClientConfigurationError("invalid DSN"))


def test_the_taxonomy_names_classes_or_codes_each_with_a_reason() -> None:
    for key, why in INFRASTRUCTURE_SQLSTATES.items():
        assert len(key) in (2, 5) and why, key
    assert not is_infrastructure_sqlstate(None) and not is_infrastructure_sqlstate("")


async def test_a_read_only_database_outlasting_the_attempt_limit_dead_letters_nothing() -> None:
    """A switchover: every attempt for longer than ``max_delivery_attempts`` fails with 25006, then the write
    succeeds; the event is processed once it clears, and nothing is dead-lettered."""
    settings = Settings()
    settings.kafka.max_delivery_attempts = 3
    settings.kafka.retry_backoff_s = 0.0
    broker = make_broker("test", settings)
    fault = [server_error("25006", "cannot execute INSERT in a read-only transaction") for _ in range(8)]
    calls: list[int] = []
    done: list[int] = []
    letters: list[DeadLetter] = []

    @broker.subscriber("t", group_id="g")
    async def handle(msg: KafkaMessage) -> None:
        calls.append(1)
        if fault:
            raise fault.pop(0)
        done.append(1)

    @broker.subscriber("t.dlq", group_id="d")
    async def dlq(letter: DeadLetter) -> None:
        letters.append(letter)

    async with TestKafkaBroker(broker) as br:
        await br.publish({"x": 1}, topic="t")
    assert len(calls) == 9 > settings.kafka.max_delivery_attempts
    assert done == [1]
    assert letters == []


async def test_an_error_of_the_code_still_dead_letters_after_the_attempt_limit() -> None:
    settings = Settings()
    settings.kafka.max_delivery_attempts = 3
    settings.kafka.retry_backoff_s = 0.0
    broker = make_broker("test", settings)
    calls: list[int] = []
    letters: list[DeadLetter] = []

    @broker.subscriber("t", group_id="g")
    async def handle(msg: KafkaMessage) -> None:
        calls.append(1)
        raise server_error("42P01", 'relation "chunks" does not exist')

    @broker.subscriber("t.dlq", group_id="d")
    async def dlq(letter: DeadLetter) -> None:
        letters.append(letter)

    async with TestKafkaBroker(broker) as br:
        await br.publish({"x": 1}, topic="t")
    assert len(calls) == 3
    assert [(letter.error_type, letter.attempts) for letter in letters] == [("UndefinedTableError", 3)]


def test_a_multi_host_database_url_is_masked_too() -> None:
    """The URL that follows a switchover (every host, ``target_session_attrs=read-write``) prints without its
    password in ``evidentia settings --current`` (it used to raise: ``urlsplit`` cannot read its port)."""
    url = "postgresql://evidentia:db-pw@pg-1:5432,pg-2:5432/evidentia?target_session_attrs=read-write"
    assert mask_url(url) == "postgresql://evidentia:***@pg-1:5432,pg-2:5432/evidentia?target_session_attrs=read-write"
