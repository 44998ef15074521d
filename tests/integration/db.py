"""One-shot PostgreSQL queries for the integration tests: connect, fetch, close (asyncpg, run to completion);
and the store tests' vector index of seeded random vectors."""

from __future__ import annotations

import asyncio

import asyncpg
import numpy as np

from services.retriever.engine.vector.tables import VectorIndex, create_index, upsert_vectors
from shared.settings import DatabaseSettings

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


async def index_random_vectors(
    pool: asyncpg.Pool, db: DatabaseSettings, model: str, dim: int, seed: int
) -> tuple[VectorIndex, np.ndarray]:
    """Every stored chunk (in chunk id order) given a seeded random unit vector in a new active index named
    ``model``: the index and the vectors, for store tests that need dense search without an encoder."""
    index = await create_index(pool, model, dim, db, activate=True)
    rows = await pool.fetch("SELECT chunk_id, document_id FROM chunks ORDER BY chunk_id")
    vectors = np.random.default_rng(seed).normal(size=(len(rows), dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    await upsert_vectors(pool, index, [r["chunk_id"] for r in rows], [r["document_id"] for r in rows], vectors)
    return index, vectors
