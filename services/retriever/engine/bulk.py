"""Bulk loads: an initial baseline or a reindex written with COPY, the indexes built once afterwards.

The live path stores a document's chunks through the parser (the lexical index kept by the insert trigger,
statement by statement) and its vectors through the retriever's upserts into the HNSW graph: ~3.3-4.3 ms of
database CPU a chunk at 10^6 (``docs/benchmarks.md``), which caps two cores near 300 chunks/s. A bulk load
moves both indexes off the write path:

1. :func:`begin_bulk_load` takes the ANN maintenance lock for the whole load (the retrievers' background
   maintenance then leaves the table alone) and drops the vector table's HNSW/IVFFlat index.
2. :func:`write_batch`, once a batch: documents, chunks and vectors COPYed into temporary tables and inserted
   in one transaction with ``evidentia.lexical = 'deferred'`` (the insert trigger does not
   index them). Every row is inserted ``ON CONFLICT DO NOTHING``: a replayed batch writes nothing twice, and
   rows already stored (by the live path or an earlier try) are kept as they are.
3. :func:`finish_bulk_load`: the lexical postings of every chunk not yet indexed, in large batches
   (:mod:`services.retriever.engine.bulk_postings`: analysed by PostgreSQL, packed into blocks with numpy), at
   the same time as the ANN index is built with PostgreSQL's parallel maintenance workers; then the compaction
   merges the batches' small blocks, the lock goes.

Searches during the load stay correct, never complete with what they cannot see: the dense leg reads the
vector table exactly (no ANN index: every stored vector, the new ones included, slower as the table grows);
the lexical leg scores the chunks indexed so far with their own statistics (the load's chunks join batch by
batch while :func:`finish_bulk_load` runs, each batch atomically). :func:`bulk_load_status` says which of the
two states the store is in. For a reindex (``evidentia reindex``) the vectors go to the building index, which
no search reads until it is switched: searches use the previous index throughout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg
import numpy as np

from services.retriever.engine.bulk_postings import index_batch
from services.retriever.engine.jobs import ANN_MAINTENANCE_LOCK
from services.retriever.engine.lexical.compaction import compact
from services.retriever.engine.vector.ann_index import ann_indexes, carry_out, plan, set_build_memory
from services.retriever.engine.vector.tables import VectorIndex
from shared.settings import DatabaseSettings

log = logging.getLogger(__name__)

#: The columns of a document row :func:`write_batch` takes, in this order (the rest take their defaults).
DOCUMENT_COLUMNS = (
    "document_id",
    "source",
    "source_id",
    "pmid",
    "pmcid",
    "doi",
    "title",
    "abstract",
    "journal",
    "journal_iso",
    "year",
    "study_type",
    "evidence_level",
    "mesh_terms",
    "retracted",
    "content_hash",
)
#: The columns of a chunk row :func:`write_batch` takes, in this order.
CHUNK_COLUMNS = (
    "chunk_id",
    "document_id",
    "ordinal",
    "section",
    "doc_title",
    "content",
    "token_count",
    "char_start",
    "char_end",
)

#: Chunks a postings batch indexes (one transaction): a small last block a term each, merged by the compaction.
LEXICAL_BATCH = 50_000


@dataclass(frozen=True)
class BatchWritten:
    """What one :func:`write_batch` stored (rows already present are not counted)."""

    documents: int
    chunks: int
    vectors: int


@dataclass(frozen=True)
class BulkLoadStatus:
    """Whether a bulk load holds the store, and what searches see meanwhile."""

    loading: bool
    """A bulk load holds the ANN maintenance lock (or a build of the index is under way)."""
    ann_index: bool
    """The vector table has a valid HNSW/IVFFlat index (else dense search reads it exactly)."""
    chunks_without_postings: int
    """Chunks lexical search does not see yet (written with the lexical index deferred)."""

    @property
    def searches(self) -> str:
        """What searches do in this state, in words."""
        dense = "approximate (ANN index)" if self.ann_index else "exact over every stored vector (no ANN index)"
        lexical = (
            f"over the indexed chunks; {self.chunks_without_postings} chunks await their postings"
            if self.chunks_without_postings
            else "over every chunk"
        )
        return f"dense {dense}; lexical {lexical}"


def _n(status: str) -> int:
    return int(status.rsplit(" ", 1)[-1])


_TEMP_TABLES = {
    "bulk_documents_in": ("documents", DOCUMENT_COLUMNS),
    "bulk_chunks_in": ("chunks", CHUNK_COLUMNS),
}


async def _temp_tables(conn: asyncpg.Connection, index: VectorIndex) -> str:
    """The transaction's staging tables (emptied at commit); returns the vectors' one (one per column type)."""
    for name, (table, columns) in _TEMP_TABLES.items():
        await conn.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {name} ON COMMIT DELETE ROWS AS "
            f"SELECT {', '.join(columns)} FROM {table} WITH NO DATA"
        )
    vectors = f"bulk_vectors_in_{index.column_type.replace('(', '_').rstrip(')')}"
    await conn.execute(
        f"CREATE TEMP TABLE IF NOT EXISTS {vectors} "
        f"(chunk_id text, embedding {index.column_type}) ON COMMIT DELETE ROWS"
    )
    return vectors


async def write_batch(
    pool: asyncpg.Pool,
    index: VectorIndex,
    documents: Sequence[tuple[Any, ...]],
    chunks: Sequence[tuple[Any, ...]],
    chunk_vectors: tuple[Sequence[str], np.ndarray] | None = None,
) -> BatchWritten:
    """Store one batch in one transaction, COPY-based, the lexical index deferred (module doc, step 2):
    ``documents`` as rows of :data:`DOCUMENT_COLUMNS`, ``chunks`` of :data:`CHUNK_COLUMNS`, ``chunk_vectors``
    (chunk ids, their vectors) into ``index``'s table (a vector of a chunk that is not stored is skipped).
    Rows whose key is already stored are left as they are (a replayed batch writes nothing)."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL evidentia.lexical = 'deferred'")
        vectors_in = await _temp_tables(conn, index)
        docs_n = chunks_n = vectors_n = 0
        if documents:
            await conn.copy_records_to_table("bulk_documents_in", records=documents, columns=DOCUMENT_COLUMNS)
            cols = ", ".join(DOCUMENT_COLUMNS)
            docs_n = _n(
                await conn.execute(
                    f"INSERT INTO documents ({cols}) SELECT {cols} FROM bulk_documents_in ON CONFLICT DO NOTHING"
                )
            )
        if chunks:
            await conn.copy_records_to_table("bulk_chunks_in", records=chunks, columns=CHUNK_COLUMNS)
            cols = ", ".join(CHUNK_COLUMNS)
            chunks_n = _n(
                await conn.execute(
                    f"INSERT INTO chunks ({cols}) SELECT {cols} FROM bulk_chunks_in ON CONFLICT DO NOTHING"
                )
            )
        if chunk_vectors is not None and len(chunk_vectors[0]):
            ids, vectors = chunk_vectors
            await conn.copy_records_to_table(
                vectors_in, records=list(zip(ids, vectors, strict=True)), columns=("chunk_id", "embedding")
            )
            vectors_n = _n(
                await conn.execute(
                    f"""INSERT INTO {index.table_name} (chunk_id, document_id, embedding)
                        SELECT DISTINCT ON (i.chunk_id) i.chunk_id, c.document_id, i.embedding
                        FROM {vectors_in} i JOIN chunks c ON c.chunk_id = i.chunk_id
                        ON CONFLICT (chunk_id) DO NOTHING"""
                )
            )
    return BatchWritten(docs_n, chunks_n, vectors_n)


@asynccontextmanager
async def bulk_load(pool: asyncpg.Pool, index: VectorIndex) -> AsyncIterator[asyncpg.Connection]:
    """:func:`begin_bulk_load` for the block (yields the connection that holds the lock; the caller passes it
    to :func:`finish_bulk_load`). Leaving the block without finishing releases the lock: the retrievers'
    maintenance then builds the ANN index as usual, and :func:`finish_bulk_load` run later (``evidentia bulk
    finish``) indexes the chunks left without postings."""
    async with pool.acquire() as conn:
        await begin_bulk_load(conn, index)
        try:
            yield conn
        finally:
            await conn.execute("SELECT pg_advisory_unlock_all()")


class BulkLoadBusy(RuntimeError):
    """Another session holds the ANN maintenance lock (a bulk load, or a retriever building the index)."""


async def _take_lock(conn: asyncpg.Connection) -> None:
    if not await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", *ANN_MAINTENANCE_LOCK):
        raise BulkLoadBusy("a bulk load or an index build holds the vector index (advisory lock): try again later")


async def begin_bulk_load(conn: asyncpg.Connection, index: VectorIndex) -> list[str]:
    """Hold the ANN maintenance lock on ``conn`` (until :func:`finish_bulk_load` or the session's end) and drop
    ``index``'s ANN indexes; returns their names. :class:`BulkLoadBusy` when the lock is held elsewhere."""
    await _take_lock(conn)
    dropped = [ann.name for ann in await ann_indexes(conn, index.table_name)]
    for name in dropped:
        await conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
    log.info("bulk load started", extra={"table": index.table_name, "dropped": dropped})
    return dropped


@dataclass(frozen=True)
class BulkFinished:
    """What :func:`finish_bulk_load` did, with each phase's seconds (the two builds ran at once)."""

    chunks_indexed: int
    lexical_s: float
    ann_build: str | None
    ann_s: float
    compaction_s: float
    analyze_s: float


async def index_deferred_chunks(pool: asyncpg.Pool, *, batch: int = LEXICAL_BATCH) -> int:
    """The lexical postings of every chunk stored without them, ``batch`` chunks a transaction
    (:func:`~services.retriever.engine.bulk_postings.index_batch`); returns how many were indexed. Safe to run
    beside the live path and again after an interruption."""
    done = 0
    after = ""
    async with pool.acquire() as conn:
        await conn.execute("SET statement_timeout = 0")
        try:
            while True:
                indexed = await index_batch(conn, after, batch)
                if not indexed.chunks:
                    return done
                done += indexed.chunks
                after = indexed.last_id
        finally:
            await conn.execute("RESET statement_timeout")


async def build_ann_index(
    conn: asyncpg.Connection, index: VectorIndex, db: DatabaseSettings, *, workers: int, maintenance_work_mem: str
) -> str | None:
    """Build the configured ANN index of ``index``'s table on ``conn`` (which holds the maintenance lock) with
    ``workers`` parallel maintenance workers beside the leader; returns the statement run (None: nothing to
    build). Built ``CONCURRENTLY``: the live path's writes and searches go on."""
    rows = int(await conn.fetchval(f"SELECT count(*) FROM {index.table_name}"))
    todo = plan(index, db, rows, await ann_indexes(conn, index.table_name))
    await conn.execute(f"SET statement_timeout = 0; SET max_parallel_maintenance_workers = {int(workers)}")
    await set_build_memory(conn, maintenance_work_mem)
    try:
        await carry_out(conn, todo)
    finally:
        await conn.execute(
            "RESET statement_timeout; RESET maintenance_work_mem; RESET max_parallel_maintenance_workers"
        )
    return todo.build


async def finish_bulk_load(
    pool: asyncpg.Pool,
    conn: asyncpg.Connection,
    index: VectorIndex,
    db: DatabaseSettings,
    *,
    workers: int = 1,
    maintenance_work_mem: str = "1GB",
    lexical_batch: int = LEXICAL_BATCH,
) -> BulkFinished:
    """Module doc, step 3: the deferred postings (on a connection of ``pool``) and the ANN index (on ``conn``,
    which holds the lock) at once, then the compaction and ``ANALYZE``; the lock is released."""

    async def timed(work: Any) -> tuple[Any, float]:
        t = time.perf_counter()
        result = await work
        return result, time.perf_counter() - t

    (indexed, lexical_s), (built, ann_s) = await asyncio.gather(
        timed(index_deferred_chunks(pool, batch=lexical_batch)),
        timed(build_ann_index(conn, index, db, workers=workers, maintenance_work_mem=maintenance_work_mem)),
    )
    t = time.perf_counter()
    await compact(pool)
    compaction_s = time.perf_counter() - t
    t = time.perf_counter()
    await conn.execute(f"ANALYZE documents; ANALYZE chunks; ANALYZE bm25_chunks; ANALYZE {index.table_name}")
    analyze_s = time.perf_counter() - t
    await conn.execute("SELECT pg_advisory_unlock($1, $2)", *ANN_MAINTENANCE_LOCK)
    log.info("bulk load finished", extra={"table": index.table_name, "chunks_indexed": indexed, "built": built})
    return BulkFinished(indexed, lexical_s, built, ann_s, compaction_s, analyze_s)


async def finish_left_load(
    pool: asyncpg.Pool, index: VectorIndex, db: DatabaseSettings, *, workers: int = 1, maintenance_work_mem: str = "1GB"
) -> BulkFinished:
    """:func:`finish_bulk_load` of a load no session holds any more (cut short, or deferred by hand): the lock is
    taken first (:class:`BulkLoadBusy` when another session holds it) and released after."""
    async with pool.acquire() as conn:
        await _take_lock(conn)
        try:
            return await finish_bulk_load(
                pool, conn, index, db, workers=workers, maintenance_work_mem=maintenance_work_mem
            )
        finally:
            await conn.execute("SELECT pg_advisory_unlock_all()")


async def bulk_load_status(pool: asyncpg.Pool, index: VectorIndex) -> BulkLoadStatus:
    """:class:`BulkLoadStatus` of the store as it stands (counts the chunks without postings: a scan)."""
    async with pool.acquire() as conn:
        free = await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", *ANN_MAINTENANCE_LOCK)
        if free:
            await conn.execute("SELECT pg_advisory_unlock($1, $2)", *ANN_MAINTENANCE_LOCK)
        ann = any(i.valid for i in await ann_indexes(conn, index.table_name))
        waiting = await conn.fetchval(
            "SELECT count(*) FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM bm25_chunks b WHERE b.chunk_id = c.chunk_id)"
        )
    return BulkLoadStatus(not free, ann, int(waiting))
