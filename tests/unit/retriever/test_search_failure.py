"""A search that fails on an outage of the database answers 503 (try again), a bug 500."""

from __future__ import annotations

import asyncpg
import pytest

from services.retriever.handlers import search_failure


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"), 503),
        (asyncpg.exceptions.ReadOnlySQLTransactionError("cannot execute INSERT in a read-only transaction"), 503),
        (asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command"), 503),
        (ConnectionRefusedError(111, "Connection refused"), 503),
        (asyncpg.exceptions.UndefinedColumnError('column "x" does not exist'), 500),
        (RuntimeError("a bug"), 500),
    ],
    ids=["closed", "read-only", "admin-shutdown", "refused", "undefined-column", "bug"],
)
def test_a_failed_search_says_503_for_an_outage_and_500_for_a_bug(exc: Exception, status: int) -> None:
    info = search_failure(exc)
    assert info.status == status
    assert info.type == type(exc).__name__
