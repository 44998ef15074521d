"""Stored guideline consultations in PostgreSQL (``consultations``): one row per consultation, its interview,
accumulated findings, the caller's diagnoses and the latest differentials as JSON.

A consultation belongs to the API key that started it (``owner``), as a conversation does
(:mod:`.conversations`): another key gets 404 for it; with authentication off every consultation is
ownerless and open to everyone who can reach the gateway.

A turn is stored only if no other turn of the same consultation was stored since it read the state: the
row's ``turns`` is compared and advanced in one statement, and a turn that lost the race is refused
(:class:`ConsultationConflict`, HTTP 409) without touching what is stored. A new consultation is stored with
its first turn, never before, so a refused or failed first turn leaves nothing behind.
"""

from __future__ import annotations

import copy
import json
import uuid
from datetime import timedelta
from typing import Any, Protocol

import asyncpg

from services.gateway.intelligence.consult_state import ConsultationState, dump, load
from services.gateway.store.idle import delete_idle


class ConsultationConflict(Exception):
    """Another turn of the same consultation was stored meanwhile (or the consultation was deleted)."""


class ConsultationStore(Protocol):
    async def get(self, consultation_id: str, owner: str | None) -> ConsultationState | None:
        """The consultation, or None when there is none the caller may continue."""
        ...

    async def save(self, state: ConsultationState, read_turns: int) -> None:
        """Store ``state`` (its ``turns`` already advanced) if the stored row still has ``read_turns``
        turns (0: a new consultation); else :class:`ConsultationConflict`."""
        ...

    async def delete(self, consultation_id: str, owner: str | None, any_owner: bool = False) -> bool:
        """Delete the consultation (the caller's, or any with ``any_owner``); False when there is none."""
        ...


def new_consultation_id() -> str:
    return uuid.uuid4().hex


def _visible(row_owner: str | None, owner: str | None) -> bool:
    return row_owner is None or row_owner == owner


class PgConsultationStore:
    def __init__(self, pool: asyncpg.Pool):
        self.pool = pool

    async def get(self, consultation_id: str, owner: str | None) -> ConsultationState | None:
        row = await self.pool.fetchrow("SELECT * FROM consultations WHERE consultation_id = $1", consultation_id)
        if row is None or not _visible(row["owner"], owner):
            return None
        columns = {k: _json(row[k]) for k in ("messages", "findings", "diagnoses", "differentials")}
        return load(consultation_id, row["owner"], row["turns"], columns, row["population"])

    async def save(self, state: ConsultationState, read_turns: int) -> None:
        columns = {k: json.dumps(v) for k, v in dump(state).items()}
        args = (
            state.consultation_id,
            state.turns,
            columns["messages"],
            columns["findings"],
            columns["diagnoses"],
            columns["differentials"],
            state.population,
        )
        if read_turns == 0:
            done = await self.pool.fetchval(
                """INSERT INTO consultations (consultation_id, turns, messages, findings, diagnoses, differentials,
                                              population, owner)
                   VALUES ($1, $2, $3::jsonb, $4::jsonb, $5::jsonb, $6::jsonb, $7, $8)
                   ON CONFLICT (consultation_id) DO NOTHING RETURNING 1""",
                *args,
                state.owner,
            )
        else:
            done = await self.pool.fetchval(
                """UPDATE consultations SET turns = $2, messages = $3::jsonb, findings = $4::jsonb,
                          diagnoses = $5::jsonb, differentials = $6::jsonb, population = $7, updated_at = now()
                   WHERE consultation_id = $1 AND turns = $8 RETURNING 1""",
                *args,
                read_turns,
            )
        if done is None:
            raise ConsultationConflict(
                f"consultation {state.consultation_id} changed while this turn was answered: send the turn again"
            )

    async def delete(self, consultation_id: str, owner: str | None, any_owner: bool = False) -> bool:
        done = await self.pool.fetchval(
            """DELETE FROM consultations WHERE consultation_id = $1
                   AND ($3 OR owner IS NULL OR owner = $2) RETURNING 1""",
            consultation_id,
            owner,
            any_owner,
        )
        return done is not None


async def delete_idle_consultations(pool: asyncpg.Pool, idle_for: timedelta, batch: int) -> int:
    """Delete at most ``batch`` consultations with no turn for ``idle_for`` (oldest first,
    :func:`.idle.delete_idle`); the number deleted."""
    return await delete_idle(pool, "consultations", idle_for, batch)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


class MemoryConsultationStore:
    """The same contract in memory, for one process: what the workflow tests run the route on."""

    def __init__(self) -> None:
        self.rows: dict[str, ConsultationState] = {}

    async def get(self, consultation_id: str, owner: str | None) -> ConsultationState | None:
        row = self.rows.get(consultation_id)
        return copy.deepcopy(row) if row is not None and _visible(row.owner, owner) else None

    async def save(self, state: ConsultationState, read_turns: int) -> None:
        stored = self.rows.get(state.consultation_id)
        if (stored.turns if stored is not None else 0) != read_turns or (stored is None) != (read_turns == 0):
            raise ConsultationConflict(f"consultation {state.consultation_id} changed while this turn was answered")
        self.rows[state.consultation_id] = copy.deepcopy(state)

    async def delete(self, consultation_id: str, owner: str | None, any_owner: bool = False) -> bool:
        row = self.rows.get(consultation_id)
        if row is None or not (any_owner or _visible(row.owner, owner)):
            return False
        del self.rows[consultation_id]
        return True
