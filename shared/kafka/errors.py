"""Which failures are outages and which are the event's fault: what decides retry versus dead letter.

An outage (:func:`is_transient`: the database or broker unreachable, a read-only or overloaded database, a
statement timeout) is retried without limit, because the event is not the problem and dead-lettering it would
lose work. A poison event (:data:`POISON_ERRORS`) can never succeed and goes to the dead-letter topic at once.
Anything else is an error of the event or the code, tried ``max_delivery_attempts`` times.
"""

from __future__ import annotations

import json

import asyncpg
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError
from pydantic import ValidationError


class PoisonEvent(Exception):
    """An event that can never be processed, however often it is retried (bad payload, bad XML...)."""


class TransientError(Exception):
    """A failure of something outside the event (a remote service down, a 5xx, a timeout): the event is
    retried without limit, never dead-lettered. Services subclass it for their own outage errors."""


#: PostgreSQL errors that say the database cannot serve now, whatever the event: by SQLSTATE class (two
#: characters) or code (five), each with why. The event is retried with back-off and without limit, its
#: partitions paused (:class:`shared.kafka.retry.DeadLetterPolicy`): counting such errors toward
#: ``max_delivery_attempts`` would dead-letter good work whenever a fault outlasts a few attempts.
#: Everything else (class 22 data, 23 integrity, 42 syntax or a missing table, 54 a statement too large,
#: XX internal, P0 a trigger's own ``RAISE``) stays an error of the event or the code: attempted
#: ``max_delivery_attempts`` times. The price: an event whose own statement always times out or always
#: runs the server out of memory is retried until an operator acts, holding its consumer's partitions;
#: ``evidentia_handler_retries_total{transient="true"}`` and the consumer lag show it.
INFRASTRUCTURE_SQLSTATES: dict[str, str] = {
    "08": "connection exception: the server refused or dropped the connection (down, restarting, network)",
    "25006": "read-only transaction: a write reached a primary demoted in a switchover, a standby, or a database "
    "set read-only (default_transaction_read_only) while an operator works on it; the same write succeeds "
    "once the connection reaches the new primary or the setting is lifted",
    "28": "invalid authorization, raised only when connecting: credentials rotated or pg_hba being changed; no "
    "event's content can cause it",
    "3D000": "no such database, raised only when connecting: a database being restored or recreated",
    "40": "transaction rollback: a serialization failure (40001) or deadlock (40P01) with a concurrent "
    "transaction, or a commit whose outcome the server lost (40003); rerunning the handler is PostgreSQL's "
    "documented remedy",
    "53": "insufficient resources: disk full (53100), out of memory (53200), too many connections (53300), a "
    "server limit on shared resources (53400); the same statement succeeds once the server has room again",
    "55P03": "lock not available: lock_timeout expired while another session (a migration, a reindex, a vacuum) "
    "held the lock",
    "57": "operator intervention: a statement timeout or a cancel (57014), an admin or crash shutdown "
    "(57P01, 57P02), a server starting up or shutting down (57P03), a session timeout (57P05); the server "
    "was stopped or was too slow, not the event wrong",
    "58": "system error outside PostgreSQL: an I/O error of its disk (58030), a file it cannot open",
}
#: Codes inside the classes above that do blame the event.
EVENT_SQLSTATES: dict[str, str] = {
    "40002": "an integrity constraint checked at commit (a deferred one): the row itself breaks it, like class 23",
}


def is_infrastructure_sqlstate(sqlstate: str | None) -> bool:
    """Whether a PostgreSQL error of this SQLSTATE is an outage of the database (:data:`INFRASTRUCTURE_SQLSTATES`)."""
    if not sqlstate or sqlstate in EVENT_SQLSTATES:
        return False
    return sqlstate in INFRASTRUCTURE_SQLSTATES or sqlstate[:2] in INFRASTRUCTURE_SQLSTATES


TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    TransientError,
    OSError,
    TimeoutError,
    # Client side: a connection the client found closed or broken mid-operation, a pool closing, no host of a
    # multi-host URL matching target_session_attrs (TargetServerAttributeNotMatched, mid-switchover).
    # Errors of the server are classified by SQLSTATE (is_infrastructure_sqlstate).
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NodeNotReadyError,
)
POISON_ERRORS: tuple[type[BaseException], ...] = (
    PoisonEvent,
    ValidationError,
    json.JSONDecodeError,
    UnicodeDecodeError,
)


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is an outage (retried without limit) rather than an error of the event or the code."""
    if isinstance(exc, POISON_ERRORS):
        return False
    if isinstance(exc, asyncpg.PostgresError):
        return is_infrastructure_sqlstate(exc.sqlstate)
    if isinstance(exc, asyncpg.InterfaceError) and isinstance(exc, ValueError):
        # asyncpg's own DataError ("invalid input for query argument $1": an integer past int64, a value of the
        # wrong type) or ClientConfigurationError: the call is wrong, and no retry makes it right.
        return False
    return isinstance(exc, TRANSIENT_ERRORS)


#: Errors that name something in the event's own data: a poison payload, or a value the database refuses
#: (SQLSTATE class 22, "data exception": a vector value out of range, text it cannot store; class 23, an
#: integrity constraint the row breaks). Only these are worth bisecting a batch over to find the record.
DATA_ERRORS: tuple[type[BaseException], ...] = (
    *POISON_ERRORS,
    asyncpg.DataError,
    asyncpg.IntegrityConstraintViolationError,
)


def is_data_error(exc: BaseException) -> bool:
    """Whether ``exc`` blames the data being processed (:data:`DATA_ERRORS`), not an outage or the code: a
    batch handler may then split its batch to set the one bad record aside. Any other error is raised to
    the dead-letter policy, which retries the whole batch (an outage without limit, anything else up to
    ``max_delivery_attempts`` times) instead of dead-lettering every record one by one."""
    return isinstance(exc, DATA_ERRORS) and not is_transient(exc)
