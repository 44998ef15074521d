"""Bounded work per request on the database side: statement timeouts aligned with the caller, and a
query cancelled in PostgreSQL when the request that runs it is abandoned."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import asyncpg
import pytest
from aiokafka import ConsumerRecord

from services.retriever.handlers import remaining_budget_s
from shared.db import create_pool, effective_statement_timeout
from shared.settings import DatabaseSettings


def _db(url: str = "postgresql://x@127.0.0.1:1/x", **kw: Any) -> DatabaseSettings:
    return DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": url, **kw})


def test_the_statement_timeout_is_the_shorter_of_the_setting_and_the_caller() -> None:
    assert effective_statement_timeout(_db(statement_timeout_s=120)) == 120
    assert effective_statement_timeout(_db(statement_timeout_s=120), caller_timeout_s=30) == 30
    assert effective_statement_timeout(_db(statement_timeout_s=10), caller_timeout_s=30) == 10
    assert effective_statement_timeout(_db(statement_timeout_s=0), caller_timeout_s=30) == 30
    assert effective_statement_timeout(_db(statement_timeout_s=0)) == 0


def _msg(age_s: float | None) -> Any:
    ts = None if age_s is None else int((time.time() - age_s) * 1000)
    record: ConsumerRecord[bytes, bytes] = ConsumerRecord(
        "retrieval.requests", 0, 1, ts or 0, 0, b"k", b"{}", None, 1, 2, []
    )
    if ts is None:
        record.timestamp = None  # type: ignore[assignment]
    return SimpleNamespace(raw_message=record)


def test_the_retriever_budget_is_what_the_caller_still_waits() -> None:
    assert remaining_budget_s(_msg(2.0), 30.0) == pytest.approx(28.0, abs=0.5)
    assert remaining_budget_s(_msg(45.0), 30.0) == 0.0  # the caller gave up already
    assert remaining_budget_s(_msg(None), 30.0) == 30.0
    assert remaining_budget_s(_msg(-5.0), 30.0) == 30.0  # a clock ahead never extends the budget


# ----------------------------------------------------------------------------- on a real PostgreSQL


@pytest.fixture
async def watcher(private_postgres_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(private_postgres_url)
    try:
        yield conn
    finally:
        await conn.close()


async def _sleeping(conn: asyncpg.Connection) -> int:
    n = await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'SELECT pg_sleep(%'"
    )
    return int(n)


@pytest.mark.integration
async def test_a_request_pool_never_runs_a_statement_longer_than_its_caller_waits(private_postgres_url: str) -> None:
    pool = await create_pool(
        _db(private_postgres_url, statement_timeout_s=120), run_migrations=False, caller_timeout_s=0.5
    )
    try:
        assert await pool.fetchval("SHOW statement_timeout") == "500ms"
        t0 = time.monotonic()
        with pytest.raises(asyncpg.QueryCanceledError, match="statement timeout"):
            await pool.fetchval("SELECT pg_sleep(20)")
        assert time.monotonic() - t0 < 15.0  # cancelled, not slept out (20 s)
        assert await pool.fetchval("SELECT 1") == 1  # the connection is fine afterwards
    finally:
        await pool.close()
    plain = await create_pool(_db(private_postgres_url, statement_timeout_s=120), run_migrations=False)
    try:
        assert await plain.fetchval("SHOW statement_timeout") == "2min"
    finally:
        await plain.close()


@pytest.mark.integration
async def test_an_abandoned_request_cancels_its_query_in_postgresql(
    private_postgres_url: str, watcher: asyncpg.Connection
) -> None:
    """What the retriever does when the caller's budget runs out: the task is cancelled, and with it the SQL."""
    pool = await create_pool(_db(private_postgres_url, statement_timeout_s=0), run_migrations=False)
    try:
        task = asyncio.create_task(pool.fetchval("SELECT pg_sleep(30)"))
        deadline = time.monotonic() + 10
        while await _sleeping(watcher) == 0:  # in flight in the server when we give up on it
            assert time.monotonic() < deadline, "the query never started"
            await asyncio.sleep(0.05)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await task
        deadline = time.monotonic() + 5
        while await _sleeping(watcher):
            assert time.monotonic() < deadline, "the abandoned query still runs in PostgreSQL"
            await asyncio.sleep(0.05)
    finally:
        await pool.close()
