"""One-shot PostgreSQL queries for the integration tests: connect, fetch, close (asyncpg, run to completion)."""

from __future__ import annotations

import asyncio

import asyncpg

#: How long a connection attempt may take (asyncpg's own default is 60 s).
CONNECT_TIMEOUT_S = 10.0
#: :func:`db_try` gives up sooner: it is polled while the database may be down.
TRY_CONNECT_TIMEOUT_S = 5.0


async def _fetch(url: str, sql: str, *args: object, timeout: float = CONNECT_TIMEOUT_S) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(url, timeout=timeout)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


def db_fetch(url: str, sql: str, *args: object, timeout: float = CONNECT_TIMEOUT_S) -> list[asyncpg.Record]:
    """The rows of one query on a fresh connection (``timeout``: for connecting)."""
    return asyncio.run(_fetch(url, sql, *args, timeout=timeout))


def db_try(url: str, sql: str, *args: object, timeout: float = TRY_CONNECT_TIMEOUT_S) -> list[asyncpg.Record] | None:
    """Like :func:`db_fetch`, None while the database is unreachable."""
    try:
        return db_fetch(url, sql, *args, timeout=timeout)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
        return None


def active_vector_table(url: str) -> str:
    """The table of the active vector index."""
    return str(db_fetch(url, "SELECT table_name FROM vector_indexes WHERE state = 'active'")[0]["table_name"])
