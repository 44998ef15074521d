"""The engine's background jobs' locks: one replica at a time each (session advisory locks, tried, never
waited for)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

#: The retriever's background jobs, one replica at a time each (session advisory locks, tried, never waited
#: for). The lexical writers' transaction lock is (4542054, 14) (the store's lexical triggers, compaction).
COMPACTION_LOCK = (4542054, 15)


ANN_MAINTENANCE_LOCK = (4542054, 16)


@asynccontextmanager
async def advisory_session(pool: asyncpg.Pool, key: tuple[int, int]) -> AsyncIterator[asyncpg.Connection | None]:
    """A connection that holds the session advisory lock ``key`` for the block (released after it), or None
    when another session holds it: the job is then another replica's."""
    async with pool.acquire() as conn:
        if not await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", *key):
            yield None
            return
        try:
            yield conn
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1, $2)", *key)
