"""Deleting what the gateway stores about a person's questions once it has been idle too long: one batch of
the retention job (:mod:`services.gateway.retention`) for conversations and stored consultations alike."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

import asyncpg

IdleTable = Literal["conversations", "consultations"]
"""The tables the retention job covers; each has ``<name>_id`` as its key and an ``updated_at`` column."""

_KEYS: dict[IdleTable, str] = {"conversations": "conversation_id", "consultations": "consultation_id"}


async def delete_idle(pool: asyncpg.Pool, table: IdleTable, idle_for: timedelta, batch: int) -> int:
    """Delete at most ``batch`` rows of ``table`` not updated for ``idle_for`` (by the database's clock, oldest
    first); the number deleted. Rows another transaction holds (a turn being stored, another gateway's purge)
    are skipped, not waited for, so a purge never queues behind a request."""
    key = _KEYS[table]  # the table and key are this module's constants, never input
    deleted: int = await pool.fetchval(
        f"""WITH doomed AS (
               SELECT {key} FROM {table} WHERE updated_at < now() - $1::interval
               ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED),
           gone AS (
               DELETE FROM {table} t USING doomed WHERE t.{key} = doomed.{key}
               RETURNING 1)
           SELECT count(*) FROM gone""",
        idle_for,
        batch,
    )
    return deleted
