"""Reading and following the retriever's doc values (:mod:`services.retriever.doc_values`).

:class:`DocValuesFollower` reads every chunk's filter columns once, in the background (at 10^6 chunks ~3 s,
a few seconds of one database core; searches meanwhile check candidates in SQL as before), then follows the
documents' change feed (migration ``223_document_changes.sql``) before each search that uses the values: one
indexed read of the changes past its horizon (usually none), then the current columns of the changed
documents' chunks, both in one repeatable-read snapshot of one connection. So the values a search uses are
those of every transaction committed before the search began; a transaction still in flight is read again
until it has finished.

A read takes in at most :data:`MAX_REFRESH_DOCUMENTS` changed documents: past that (a long transaction holding
the horizon where it began) the search checks its filters in SQL, and once the horizon moves everything is read
again in the background (``evidentia_retriever_doc_values_held_back_total``, alert ``EvidentiaDocValuesHeldBack``).

:func:`follow_forever` reads the changes every few seconds so that a quiet retriever's reads stay small. The
feed's rows are pruned by age on the primary (:data:`CHANGES_KEPT_S`, by :func:`prune_forever` in every storing
retriever); a follower whose horizon falls behind what was pruned (stalled that long), or that sees a TRUNCATE,
reads everything again. A follower may read a streaming read replica (its searches' database): the feed, the
columns and the horizon (the replica's snapshot of the primary's transactions) all come from there, so its
values are those of the replica's searches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import asyncpg
import numpy as np

from services.retriever.engine.doc_values.columns import DocValues, Rows
from services.retriever.engine.doc_values.mesh import SeenSets
from shared.metrics import DOC_VALUES_BYTES, DOC_VALUES_HELD_BACK, DOC_VALUES_PENDING
from shared.periodic import run_every

if TYPE_CHECKING:
    from collections.abc import Sequence

log = logging.getLogger(__name__)

#: Change-feed rows older than this are pruned: a follower reads the feed every few seconds, so only one that
#: stalled longer than this has to read everything again (a bulk load of 500 documents a second leaves ~300k
#: rows in ten minutes).
CHANGES_KEPT_S = 600.0
#: How often a storing retriever prunes the feed (a bulk load of 500 documents a second adds 30,000 rows a minute).
PRUNE_EVERY_S = 60.0
#: After a failed read of everything, the next is not tried for this long (searches check filters in SQL).
RETRY_LOAD_AFTER_S = 30.0
#: Rows fetched at a time while reading every chunk's columns. Each batch is decoded on the event loop (asyncpg)
#: and then held on a worker thread: at 50,000 rows a batch the loop stalled ~0.3 s a batch, and at 3x10^6
#: chunks the searches of a replica that had just started (or read everything again) waited that long for ~30 s
#: (the eighth session's gateway runs: lexical p95 339 ms against ~33).
LOAD_BATCH = 5_000
#: The most changed documents one read of the feed takes in (their columns are read under the follower's lock,
#: before a search). A long transaction (a reindex copy, a session idle in a transaction) holds the horizon where
#: it began, so every read would take in everything changed since; past this many, the search checks its filters
#: in SQL instead, and the follower reads everything again in the background once the horizon moves.
MAX_REFRESH_DOCUMENTS = 5_000

_COLUMNS_SQL = """
SELECT b.chunk_key, d.year, d.study_type, d.evidence_level, d.source, d.retracted, d.priority, d.mesh_terms
FROM bm25_chunks b
JOIN chunks c ON c.chunk_id = b.chunk_id
JOIN documents d ON d.document_id = c.document_id"""

_KEYS_SQL = "SELECT coalesce(max(chunk_key), -1) + 1 FROM bm25_chunks"
_HORIZON_SQL = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text"

# One statement, one snapshot: the horizon and the changes it covers are read together.
_CHANGES_SQL = """
SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS horizon,
       coalesce((SELECT below >= $1::text::xid8 FROM document_changes_pruned), false) AS pruned_past,
       EXISTS (SELECT 1 FROM document_changes WHERE xid >= $1::text::xid8 AND document_id IS NULL) AS truncated,
       ARRAY(SELECT DISTINCT document_id FROM document_changes
             WHERE xid >= $1::text::xid8 AND document_id IS NOT NULL LIMIT $2) AS documents"""

_PRUNE_SQL = """
WITH gone AS (DELETE FROM document_changes WHERE changed_at < now() - make_interval(secs => $1) RETURNING xid)
INSERT INTO document_changes_pruned (below)
SELECT max(xid) FROM gone HAVING count(*) > 0
ON CONFLICT (one) DO UPDATE SET below = greatest(document_changes_pruned.below, EXCLUDED.below)"""


def _rows(records: Sequence[asyncpg.Record]) -> Rows:
    return Rows(
        keys=np.fromiter((r[0] for r in records), dtype=np.int64, count=len(records)),
        years=[r[1] for r in records],
        study_types=[r[2] for r in records],
        evidence_levels=[r[3] for r in records],
        sources=[r[4] for r in records],
        retracted=[r[5] for r in records],
        priorities=[r[6] for r in records],
        mesh=[r[7] for r in records],
    )


def _hold(values: DocValues, records: Sequence[asyncpg.Record], seen: SeenSets) -> None:
    """Hold ``records`` in ``values`` (not yet shared: a load's own): on a worker thread, off the event loop
    the searches run on."""
    values.put(_rows(records), seen)


async def load(pool: asyncpg.Pool) -> tuple[DocValues, str]:
    """Every chunk's filter columns, and the horizon of the snapshot they were read in (every transaction
    below it had finished)."""
    values = DocValues()
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        horizon = str(await conn.fetchval(_HORIZON_SQL))
        values.reserve(int(await conn.fetchval(_KEYS_SQL)))
        cursor = conn.cursor(_COLUMNS_SQL, prefetch=LOAD_BATCH)
        batch: list[asyncpg.Record] = []
        seen: SeenSets = {}  # MeSH sets by their headings, while everything is read: one a distinct set
        async for record in cursor:
            batch.append(record)
            if len(batch) >= LOAD_BATCH:
                await asyncio.to_thread(_hold, values, batch, seen)
                batch = []
        await asyncio.to_thread(_hold, values, batch, seen)
    await asyncio.to_thread(values.mesh.relist)  # a few million documents' headings: a second or two
    return values, horizon


@dataclass(frozen=True)
class Changes:
    """What the change feed holds past a horizon."""

    horizon: str
    """The new horizon: the oldest transaction running when the feed was read."""
    documents: list[str]
    reload: bool
    """A TRUNCATE, or rows pruned that this reader may not have seen: read everything again."""
    over: bool = False
    """More than the ``limit`` documents asked for changed (``documents`` holds ``limit`` + 1 of them)."""


async def changes_since(conn: asyncpg.Connection, horizon: str, limit: int = MAX_REFRESH_DOCUMENTS) -> Changes:
    """The documents changed by transactions at or past ``horizon`` (at most ``limit`` + 1 of them)."""
    row = await conn.fetchrow(_CHANGES_SQL, horizon, limit + 1)
    assert row is not None
    documents = list(row["documents"])
    return Changes(
        str(row["horizon"]), documents, bool(row["pruned_past"] or row["truncated"]), over=len(documents) > limit
    )


async def columns_of(conn: asyncpg.Connection, documents: Sequence[str]) -> Rows:
    """The current filter columns of ``documents``' chunks."""
    return _rows(await conn.fetch(_COLUMNS_SQL + "\nWHERE d.document_id = ANY ($1::text[])", list(documents)))


async def prune_changes(pool: asyncpg.Pool, kept_s: float = CHANGES_KEPT_S) -> None:
    """Drop change-feed rows older than ``kept_s`` seconds, remembering the newest transaction dropped."""
    await pool.execute(_PRUNE_SQL, float(kept_s))


class DocValuesFollower:
    """One process's doc values: read in the background, then kept current by the change feed."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        max_refresh_documents: int = MAX_REFRESH_DOCUMENTS,
        reload_after_s: float = RETRY_LOAD_AFTER_S,
    ) -> None:
        self._pool = pool
        """Where everything is read at first (no statement timeout: at 10^6 chunks it takes seconds)."""
        self._max_refresh = max_refresh_documents
        self._reload_after_s = reload_after_s
        """Past the cap, everything is read again at most once in this long (a burst of writes lasts a while)."""
        self._loaded_at: float | None = None
        self._values: DocValues | None = None
        self._horizon = ""
        self._loading: asyncio.Task[None] | None = None
        self._failed_at: float | None = None
        self._lock = asyncio.Lock()

    @property
    def pool(self) -> asyncpg.Pool:
        return self._pool

    @property
    def loaded(self) -> bool:
        return self._values is not None

    def start_loading(self) -> asyncio.Task[None]:
        """Read everything in the background (once at a time, and not again within ``RETRY_LOAD_AFTER_S`` of a
        failed read); returns the task."""
        retry = self._failed_at is None or time.monotonic() - self._failed_at >= RETRY_LOAD_AFTER_S
        if self._loading is None or (self._loading.done() and retry):
            self._loading = asyncio.create_task(self._load(), name="doc-values-load")
        return self._loading

    async def _load(self) -> None:
        started = time.perf_counter()
        try:
            values, horizon = await load(self._pool)
        except asyncio.CancelledError:
            raise
        except Exception:
            self._failed_at = time.monotonic()
            log.exception(
                "doc values not read (tried again in %.0f s); searches check filters in the database meanwhile",
                RETRY_LOAD_AFTER_S,
            )
            return
        async with self._lock:
            self._values, self._horizon = values, horizon
            self._loaded_at = time.monotonic()
        DOC_VALUES_BYTES.set(values.nbytes)
        log.info(
            "doc values read",
            extra={"chunks": len(values), "bytes": values.nbytes, "took_s": round(time.perf_counter() - started, 2)},
        )

    async def current(self, pool: asyncpg.Pool | None = None) -> DocValues | None:
        """The values as of every transaction committed before this call (read from the change feed through
        ``pool``, default the follower's own), or None while they are being read (a first call starts that)."""
        if self._values is None:
            self.start_loading()
            return None
        async with self._lock:
            if self._values is None:
                return None
            # One connection, one snapshot: the changes, their columns and the new horizon are read together. Two
            # acquisitions of a pool spread over replicas could read a change on one replica and its columns on
            # another one behind it; the horizon would then pass the change with the old columns held.
            async with (
                (pool or self._pool).acquire() as conn,
                conn.transaction(isolation="repeatable_read", readonly=True),
            ):
                changes = await changes_since(conn, self._horizon, self._max_refresh)
                DOC_VALUES_PENDING.set(len(changes.documents))
                if changes.over and not changes.reload:
                    # Held back (a long transaction) or a burst: not read under the lock before a search. Once the
                    # horizon has moved, reading everything again (in the background, at most once every
                    # reload_after_s, a burst lasting a while) brings the values up to date.
                    recent = self._loaded_at is not None and time.monotonic() - self._loaded_at < self._reload_after_s
                    if changes.horizon == self._horizon or recent:
                        DOC_VALUES_HELD_BACK.labels("wait").inc()
                        return None
                    DOC_VALUES_HELD_BACK.labels("reload").inc()
                    log.warning(
                        "more documents changed than a doc-values read takes in: read everything again",
                        extra={"over": self._max_refresh},
                    )
                if changes.reload or changes.over:
                    self._values = None
                    self.start_loading()
                    return None
                if changes.documents:
                    self._values.put(await columns_of(conn, changes.documents))
                    if self._values.mesh.stale:  # under the lock: no set is added meanwhile
                        await asyncio.to_thread(self._values.mesh.relist)
                    DOC_VALUES_BYTES.set(self._values.nbytes)
            self._horizon = changes.horizon
            return self._values

    async def stop(self) -> None:
        if self._loading is not None:
            self._loading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loading


async def follow_forever(follower: DocValuesFollower, every_s: float) -> None:
    """Read everything, then the change feed every ``every_s`` seconds (so that a search finds little to read),
    until cancelled; a failure is logged and retried next time."""
    follower.start_loading()
    await run_every(every_s, follower.current, failure="doc values not refreshed", log=log, wait_first=True)


async def prune_forever(pool: asyncpg.Pool, every_s: float = PRUNE_EVERY_S, kept_s: float = CHANGES_KEPT_S) -> None:
    """Prune the change feed every ``every_s`` seconds until cancelled (on the primary, by every storing retriever,
    whether or not it holds doc values itself: the triggers write the feed either way)."""
    await run_every(every_s, lambda: prune_changes(pool, kept_s), failure="change feed not pruned", log=log)
