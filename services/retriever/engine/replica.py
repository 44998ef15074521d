"""How far the searched database lags its primary (0 on a primary), as a gauge."""

from __future__ import annotations

import logging

import asyncpg

from shared.metrics import SEARCH_REPLICA_LAG
from shared.periodic import run_every

log = logging.getLogger(__name__)


async def replica_lag_s(pool: asyncpg.Pool) -> float:
    """How far behind its primary the database of ``pool`` is, in seconds: 0 on a primary, and on a streaming
    replica that has replayed all the WAL it received; else the age of the last transaction it replayed."""
    lag = await pool.fetchval(
        """SELECT CASE WHEN NOT pg_is_in_recovery() THEN 0
                       WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
                       ELSE coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp()), 0) END"""
    )
    return max(0.0, float(lag))


async def watch_replica_lag(pool: asyncpg.Pool, every_s: float = 15.0) -> None:
    """Keep ``evidentia_retriever_search_replica_lag_seconds`` current for ``pool`` until cancelled."""

    async def step() -> None:
        SEARCH_REPLICA_LAG.set(await replica_lag_s(pool))

    await run_every(every_s, step, failure="replica lag not read", log=log, level=logging.WARNING)
