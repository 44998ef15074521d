"""Ingestion jobs and per-document pipeline stages, shared by every service that moves a document on.

Tables (``shared/db/migrations/001_init.sql``): ``document_status``, ``ingest_jobs``,
``ingest_job_documents`` and ``documents`` (read only here).

Stage rule (:func:`set_stage`). The normal path is ``discovered -> fetched -> parsed -> embedded``;
``failed`` (with the reason) and ``deleted`` are the other two. Events arrive at least once and a
late or replayed event must not undo progress, so:

1. a document moves forward or stays (same stage: the timestamp is renewed, the error cleared);
2. it never moves backwards (a replayed ``discovered`` or ``fetched`` after ``embedded`` is ignored)
   unless the caller passes ``force=True`` (a re-ingest asked for by a user, or the parser storing a
   changed version), which may set any stage;
3. ``failed`` replaces any stage except ``embedded`` and ``deleted``: a failed *re*-fetch of a
   document that is already searchable keeps ``embedded`` and records the reason in ``error``
   (the old version is still served); with ``force=True`` it becomes ``failed``;
4. from ``failed`` any stage may follow (a retry that worked);
5. ``deleted`` (a PubMed ``DeleteCitation``) always wins, and only ``force=True`` brings a deleted
   document back, so a stale event cannot resurrect a withdrawn paper.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, Literal, TypeAlias

import asyncpg
from pydantic import BaseModel, Field, computed_field, model_validator

Stage = Literal["discovered", "fetched", "parsed", "embedded", "failed", "deleted"]
STAGES: tuple[Stage, ...] = ("discovered", "fetched", "parsed", "embedded", "failed", "deleted")
PROGRESS: tuple[Stage, ...] = ("discovered", "fetched", "parsed", "embedded")
TERMINAL: frozenset[str] = frozenset({"embedded", "failed", "deleted"})
JobState = Literal["running", "discovered", "failed"]

Db: TypeAlias = asyncpg.Pool | asyncpg.Connection


def dedupe(items: Iterable[str]) -> list[str]:
    """Items in first-seen order, each once, blanks dropped."""
    return list(dict.fromkeys(i.strip() for i in items if i and i.strip()))


# ------------------------------------------------------------------------------------------ jobs


async def create_job(pool: Db, job_id: str, kind: str, params: dict[str, Any] | None = None) -> bool:
    """Create the job row if it does not exist; True when this call created it."""
    status = await pool.execute(
        """INSERT INTO ingest_jobs (job_id, kind, params) VALUES ($1, $2, $3::jsonb)
           ON CONFLICT (job_id) DO NOTHING""",
        job_id,
        kind,
        json.dumps(params or {}, default=str),
    )
    return bool(status.endswith(" 1"))


async def set_job_state(pool: Db, job_id: str, state: JobState, error: str | None = None) -> None:
    """Set the job's state; ``discovered`` waits while one of its tasks is pending (see :func:`finish_task`)."""
    await pool.execute(
        """UPDATE ingest_jobs SET state = $2, error = $3, updated_at = now()
           WHERE job_id = $1 AND ($2 <> 'discovered' OR NOT EXISTS (
               SELECT 1 FROM ingest_job_tasks t WHERE t.job_id = $1 AND t.state = 'pending'))""",
        job_id,
        state,
        error,
    )


async def fail_running_job(pool: Db, job_id: str, error: str) -> None:
    """Mark the job ``failed`` with ``error`` unless it already left ``running`` (discovered or failed)."""
    await pool.execute(
        "UPDATE ingest_jobs SET state = 'failed', error = $2, updated_at = now() "
        "WHERE job_id = $1 AND state = 'running'",
        job_id,
        error,
    )


# ------------------------------------------------------------------------------------------ tasks


async def add_tasks(pool: Db, job_id: str, task_ids: Sequence[str]) -> None:
    """Register parts of a job's discovery handled by separate events (idempotent)."""
    await pool.execute(
        """INSERT INTO ingest_job_tasks (job_id, task_id)
           SELECT $1, t FROM unnest($2::text[]) AS t ON CONFLICT DO NOTHING""",
        job_id,
        list(task_ids),
    )


async def task_state(pool: Db, job_id: str, task_id: str) -> str | None:
    value = await pool.fetchval(
        "SELECT state FROM ingest_job_tasks WHERE job_id = $1 AND task_id = $2", job_id, task_id
    )
    return None if value is None else str(value)


async def finish_task(pool: Db, job_id: str, task_id: str, error: str | None = None) -> bool:
    """Mark a task done (or failed with ``error``); True when it was the job's last: the job is then
    ``discovered``, with the failed tasks' reasons as its error."""
    await pool.execute(
        """UPDATE ingest_job_tasks SET state = $3, error = $4, updated_at = now()
           WHERE job_id = $1 AND task_id = $2""",
        job_id,
        task_id,
        "failed" if error else "done",
        error[:2000] if error else None,
    )
    rows = await pool.fetch("SELECT task_id, state, error FROM ingest_job_tasks WHERE job_id = $1", job_id)
    if any(r["state"] == "pending" for r in rows):
        return False
    failed = [r for r in rows if r["state"] == "failed"]
    summary = None
    if failed:
        reasons = "; ".join(f"{r['task_id']}: {r['error']}" for r in failed[:10])
        summary = f"{len(failed)} of {len(rows)} parts failed: {reasons}"[:4000]
    status = await pool.execute(
        """UPDATE ingest_jobs SET state = 'discovered', error = coalesce($2, error), updated_at = now()
           WHERE job_id = $1 AND state = 'running'""",
        job_id,
        summary,
    )
    return bool(str(status).endswith(" 1"))


async def add_job_documents(pool: Db, job_id: str, document_ids: Sequence[str]) -> int:
    """Attach documents to a job (idempotent); the number newly attached."""
    ids = dedupe(document_ids)
    if not ids:
        return 0
    status = await pool.execute(
        """INSERT INTO ingest_job_documents (job_id, document_id)
           SELECT $1, d FROM unnest($2::text[]) AS d
           ON CONFLICT DO NOTHING""",
        job_id,
        ids,
    )
    return int(status.rsplit(" ", 1)[-1])


# ------------------------------------------------------------------------------------------ stages

_SET_STAGE = """
INSERT INTO document_status AS s (document_id, stage, error, updated_at)
SELECT d, $2::text, $3::text, now() FROM unnest($1::text[]) AS d
ON CONFLICT (document_id) DO UPDATE SET
    stage = CASE WHEN EXCLUDED.stage = 'failed' AND s.stage = 'embedded' AND NOT $4::boolean
                 THEN s.stage ELSE EXCLUDED.stage END,
    error = EXCLUDED.error,
    updated_at = now()
WHERE $4::boolean
   OR EXCLUDED.stage = 'deleted'
   OR s.stage = 'failed'
   OR (s.stage <> 'deleted' AND (
          EXCLUDED.stage = 'failed'
       OR array_position(ARRAY['discovered','fetched','parsed','embedded'], EXCLUDED.stage)
          >= array_position(ARRAY['discovered','fetched','parsed','embedded'], s.stage)))
"""


async def set_stage(
    pool: Db,
    document_ids: Sequence[str],
    stage: Stage,
    error: str | None = None,
    *,
    force: bool = False,
) -> int:
    """Move documents to ``stage`` following the module's rule; the number of rows written."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}")
    ids = dedupe(document_ids)
    if not ids:
        return 0
    if stage != "failed":
        error = None
    elif error:
        error = error[:2000]
    status = await pool.execute(_SET_STAGE, ids, stage, error, force)
    return int(status.rsplit(" ", 1)[-1])


async def stages(pool: Db, document_ids: Sequence[str]) -> dict[str, str]:
    """{document id: stage} for the documents that have a status."""
    rows = await pool.fetch(
        "SELECT document_id, stage FROM document_status WHERE document_id = ANY($1::text[])",
        list(document_ids),
    )
    return {str(r["document_id"]): str(r["stage"]) for r in rows}


class JobFailure(BaseModel):
    document_id: str
    stage: str
    error: str


class JobStatus(BaseModel):
    """A job's progress: documents per stage, failures with their reason, total."""

    job_id: str
    kind: str
    state: str = Field(
        description="running (discovering documents), discovered (every document published, work in progress), "
        "done (every document embedded, failed or deleted), failed (discovery itself failed)."
    )
    error: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    total: int
    counts: dict[str, int] = Field(default_factory=dict, description="Documents per stage (their latest).")
    failures: list[JobFailure] = Field(default_factory=list)
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @model_validator(mode="after")
    def _done_when_every_document_is_terminal(self) -> JobStatus:
        # The stored state says how far discovery went; the job is done once every document it
        # found reached a final stage. A finished job must never read "discovered" with done: true.
        if self.state == "discovered" and sum(self.counts.get(s, 0) for s in TERMINAL) >= self.total:
            self.state = "done"
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def done(self) -> bool:
        """Discovery is over and every document reached embedded, failed or deleted (or discovery failed)."""
        return self.state in ("done", "failed")

    def reached(self, stage: Stage) -> int:
        """Documents at ``stage`` or past it on the normal path (for progress bars)."""
        if stage not in PROGRESS:
            return self.counts.get(stage, 0)
        later = PROGRESS[PROGRESS.index(stage) :]
        return sum(self.counts.get(s, 0) for s in later)


async def job_status(pool: Db, job_id: str, *, max_failures: int = 100) -> JobStatus | None:
    """The job's status, or None for an unknown job.

    A document of the job with no status row counts as ``parsed`` when it is in ``documents`` (it
    was stored by another path) and as ``discovered`` otherwise.
    """
    job = await pool.fetchrow("SELECT * FROM ingest_jobs WHERE job_id = $1", job_id)
    if job is None:
        return None
    rows = await pool.fetch(
        """SELECT coalesce(s.stage, CASE WHEN d.document_id IS NULL THEN 'discovered' ELSE 'parsed' END)
                  AS stage, count(*) AS n
           FROM ingest_job_documents jd
           LEFT JOIN document_status s ON s.document_id = jd.document_id
           LEFT JOIN documents d ON d.document_id = jd.document_id
           WHERE jd.job_id = $1 GROUP BY 1""",
        job_id,
    )
    counts: dict[str, int] = dict.fromkeys(STAGES, 0)
    for row in rows:
        counts[str(row["stage"])] = int(row["n"])
    failures = await pool.fetch(
        """SELECT s.document_id, s.stage, s.error FROM ingest_job_documents jd
           JOIN document_status s ON s.document_id = jd.document_id
           WHERE jd.job_id = $1 AND (s.stage = 'failed' OR s.error IS NOT NULL)
           ORDER BY s.updated_at, s.document_id LIMIT $2""",
        job_id,
        max_failures,
    )
    params = job["params"]
    if isinstance(params, str):
        params = json.loads(params)
    return JobStatus(
        job_id=job_id,
        kind=str(job["kind"]),
        state=str(job["state"]),
        error=job["error"],
        params=dict(params or {}),
        total=sum(counts.values()),
        counts=counts,
        failures=[
            JobFailure(document_id=str(f["document_id"]), stage=str(f["stage"]), error=f["error"] or "")
            for f in failures
        ],
        created_at=job["created_at"],
        updated_at=job["updated_at"],
    )


async def mark_job(pool: Db, job_id: str, state: JobState, error: str | None = None) -> None:
    await set_job_state(pool, job_id, state, error)


def fail_documents_hook(pool: asyncpg.Pool) -> Callable[[list[str], BaseException], Awaitable[None]]:
    """A dead-letter hook: the documents behind dead-lettered events are marked failed, with the reason."""

    async def hook(keys: list[str], exc: BaseException) -> None:
        document_ids = [k for k in keys if ":" in k]
        if document_ids:
            await set_stage(pool, document_ids, "failed", f"{type(exc).__name__}: {exc}")

    return hook
