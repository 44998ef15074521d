"""The vector store: one pgvector table per embedding model, exactly one of them active.

Each index records the model and dimension that produced its vectors. A retriever started with a
different model than the active index refuses to run (mixing vector spaces silently ruins search);
``evidentia reindex --model X`` builds a new index next to the old one and switches when done.

Each index also records its precision: ``single`` stores ``vector(dim)`` (4 bytes a
dimension), ``half`` stores ``halfvec(dim)`` (2 bytes a dimension; the HNSW index then uses
``halfvec_cosine_ops``). New indexes take ``EVIDENTIA_DATABASE_VECTOR_PRECISION``; every statement that
touches a vector column uses the index's :attr:`VectorIndex.column_type`.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
import numpy as np

from shared.settings import DatabaseSettings, VectorPrecision

log = logging.getLogger(__name__)


class IndexModelMismatch(RuntimeError):
    """The active index was built by another model than the one configured."""


#: The pgvector type of each precision: the vector column is ``<type>(dim)``, its HNSW operator class
#: ``<type>_cosine_ops``. The one place that maps a precision to SQL.
_PGVECTOR_TYPES: dict[VectorPrecision, str] = {"half": "halfvec", "single": "vector"}


def vector_type(precision: VectorPrecision, dim: int) -> str:
    """The SQL type of a ``dim``-d vector column of ``precision``: ``halfvec(dim)`` or ``vector(dim)``."""
    return f"{_PGVECTOR_TYPES[precision]}({int(dim)})"


def cosine_opclass(precision: VectorPrecision) -> str:
    """The HNSW operator class (cosine distance) of a vector column of ``precision``."""
    return f"{_PGVECTOR_TYPES[precision]}_cosine_ops"


@dataclass(frozen=True)
class VectorIndex:
    name: str
    model: str
    dim: int
    table_name: str
    state: str = "active"
    precision: VectorPrecision = "single"

    @property
    def column_type(self) -> str:
        """The SQL type of the index's vectors (its column, and whatever is compared with or written to it)."""
        return vector_type(self.precision, self.dim)


def index_name_for(model: str) -> str:
    """The index name for a model: its name lower-cased, non-alphanumerics as ``_``, at most 40 characters."""
    slug = re.sub(r"[^a-z0-9]+", "_", model.lower()).strip("_")
    return slug[:40] or "default"


def _row(r: asyncpg.Record) -> VectorIndex:
    return VectorIndex(r["name"], r["model"], r["dim"], r["table_name"], r["state"], r["precision"])


async def index_name_with_precision(pool: asyncpg.Pool, model: str, precision: VectorPrecision) -> str:
    """The name of ``model``'s index of ``precision``: :func:`index_name_for`, or that with ``_<precision>``
    when an index of that name already stores the other precision (a store moved to another precision)."""
    name = index_name_for(model)
    held = await pool.fetchval("SELECT precision FROM vector_indexes WHERE name = $1", name)
    return name if held in (None, precision) else f"{name[:33]}_{precision}"


async def active_index(pool: asyncpg.Pool) -> VectorIndex | None:
    """The active vector index, or None before the first one is created."""
    row = await pool.fetchrow("SELECT * FROM vector_indexes WHERE state = 'active'")
    return _row(row) if row else None


async def get_index(pool: asyncpg.Pool, name: str) -> VectorIndex | None:
    """The vector index called ``name``, or None."""
    row = await pool.fetchrow("SELECT * FROM vector_indexes WHERE name = $1", name)
    return _row(row) if row else None


async def live_index_for(pool: asyncpg.Pool, model: str, dim: int) -> VectorIndex | None:
    """The index (active or building, not retired) that holds ``model``'s ``dim``-d vectors, if any."""
    row = await pool.fetchrow(
        "SELECT * FROM vector_indexes WHERE model = $1 AND dim = $2 AND state <> 'retired' "
        "ORDER BY state = 'active' DESC LIMIT 1",
        model,
        dim,
    )
    return _row(row) if row else None


def hnsw_index_sql(
    table: str, db: DatabaseSettings, precision: VectorPrecision | None = None, *, concurrently: bool = False
) -> str:
    """The HNSW index of a vector table (cosine distance, ``m``/``ef_construction`` from the settings) whose
    vectors have ``precision`` (default: the precision of new indexes, ``db.vector_precision``)."""
    opclass = cosine_opclass(precision or db.vector_precision)
    how = "CONCURRENTLY " if concurrently else ""
    return (
        f"CREATE INDEX {how}IF NOT EXISTS {table}_hnsw ON {table} USING hnsw (embedding {opclass}) "
        f"WITH (m = {int(db.hnsw_m)}, ef_construction = {int(db.hnsw_ef_construction)})"
    )


def ivfflat_index_name(table: str, lists: int) -> str:
    """An IVFFlat index's name: its table's and its lists (a retrained index is built beside the old one)."""
    return f"{table[:48]}_ivf{int(lists)}"


def ivfflat_index_sql(table: str, precision: VectorPrecision, lists: int, *, concurrently: bool = False) -> str:
    """The IVFFlat index (cosine distance, ``lists`` k-means centres trained on the rows stored now) of a
    vector table whose vectors have ``precision``."""
    how = "CONCURRENTLY " if concurrently else ""
    return (
        f"CREATE INDEX {how}IF NOT EXISTS {ivfflat_index_name(table, lists)} ON {table} "
        f"USING ivfflat (embedding {cosine_opclass(precision)}) WITH (lists = {int(lists)})"
    )


async def create_index(
    pool: asyncpg.Pool,
    model: str,
    dim: int,
    db: DatabaseSettings,
    *,
    name: str | None = None,
    activate: bool = False,
) -> VectorIndex:
    """Create (or return) the index table for ``model``; HNSW over cosine distance. A new index stores its
    vectors in ``db.vector_precision``; an existing one keeps its own."""
    name = name or index_name_for(model)
    precision = db.vector_precision
    table = f"chunk_vectors_{name}"
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext('evidentia.vector_indexes'))")
        existing = await conn.fetchrow("SELECT * FROM vector_indexes WHERE name = $1", name)
        if existing is not None:
            idx = _row(existing)
            if idx.model != model or idx.dim != dim:
                raise IndexModelMismatch(
                    f"index {name!r} holds {idx.model} ({idx.dim}-d) vectors, not {model} ({dim}-d)"
                )
        else:
            await conn.execute(
                f"""CREATE TABLE {table} (
                        chunk_id    text PRIMARY KEY REFERENCES chunks (chunk_id) ON DELETE CASCADE,
                        document_id text NOT NULL,
                        embedding   {vector_type(precision, dim)} NOT NULL,
                        created_at  timestamptz NOT NULL DEFAULT now())"""
            )
            await conn.execute(f"CREATE INDEX {table}_doc_idx ON {table} (document_id)")
            if db.vector_index == "hnsw":
                await conn.execute(hnsw_index_sql(table, db, precision))
            # IVFFlat: trained on stored vectors later (vector/ann_index.py); exact search until then.
            await conn.execute(
                "INSERT INTO vector_indexes (name, model, dim, table_name, state, precision) "
                "VALUES ($1,$2,$3,$4,'building',$5)",
                name,
                model,
                dim,
                table,
                precision,
            )
        if activate:
            await _activate(conn, name)
        row = await conn.fetchrow("SELECT * FROM vector_indexes WHERE name = $1", name)
    assert row is not None
    return _row(row)


async def _activate(conn: asyncpg.Connection, name: str) -> None:
    """Make ``name`` the active index and retire the one active before (in the caller's transaction)."""
    await conn.execute("UPDATE vector_indexes SET state = 'retired' WHERE state = 'active' AND name <> $1", name)
    await conn.execute("UPDATE vector_indexes SET state = 'active', activated_at = now() WHERE name = $1", name)


async def copy_vectors(pool: asyncpg.Pool, source: VectorIndex, target: VectorIndex, *, activate: bool = False) -> int:
    """Copy ``source``'s vectors into ``target`` (the same model, another precision), converted to
    ``target``'s type: the rows ``target`` lacks or holds differently. Returns the rows written.

    ``activate``: with writes to ``source`` held back (``SHARE`` lock) until ``target`` has replaced it as the
    active index, in one transaction, so no vector written to ``source`` before the switch is missed. Run
    once without it first: the bulk of the copy then does not hold ingestion back.
    """
    if (source.model, source.dim) != (target.model, target.dim):
        raise IndexModelMismatch(
            f"index {target.name!r} holds {target.model} ({target.dim}-d) vectors, not {source.model} ({source.dim}-d)"
        )
    async with pool.acquire() as conn, conn.transaction():
        if activate:
            await conn.execute(f"LOCK TABLE {source.table_name} IN SHARE MODE")
        result: str = await conn.execute(
            f"""INSERT INTO {target.table_name} (chunk_id, document_id, embedding)
                SELECT s.chunk_id, s.document_id, s.embedding::{target.column_type}
                FROM {source.table_name} s LEFT JOIN {target.table_name} t ON t.chunk_id = s.chunk_id
                WHERE t.chunk_id IS NULL OR t.embedding <> s.embedding::{target.column_type}
                ON CONFLICT (chunk_id) DO UPDATE SET embedding = EXCLUDED.embedding"""
        )
        if activate:
            await _activate(conn, target.name)
    return int(result.rsplit(" ", 1)[-1])


async def ensure_active_index(pool: asyncpg.Pool, model: str, dim: int, db: DatabaseSettings) -> VectorIndex:
    """The active index, created for ``model`` if there is none; refuse a different model."""
    current = await active_index(pool)
    if current is None:
        return await create_index(pool, model, dim, db, activate=True)
    return same_model(current, model, dim)


async def await_active_index(
    pool: asyncpg.Pool, model: str, dim: int, *, timeout_s: float = 300.0, every_s: float = 2.0
) -> VectorIndex:
    """The active index, read without writing anything (a search-only retriever on a read replica): waits up to
    ``timeout_s`` for a storing retriever to create it; refuses a different model like :func:`ensure_active_index`."""
    deadline = time.monotonic() + timeout_s
    while (current := await active_index(pool)) is None:
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"no active vector index after {timeout_s:.0f} s: a retriever with EVIDENTIA_RETRIEVAL_ROLE=store or "
                "all creates it on the primary (and a read replica must be replaying it)"
            )
        log.info("waiting for the active vector index (created by a storing retriever)")
        await asyncio.sleep(every_s)
    return same_model(current, model, dim)


def same_model(current: VectorIndex, model: str, dim: int) -> VectorIndex:
    """``current`` when it holds ``model``'s ``dim``-d vectors, else :class:`IndexModelMismatch` saying what to do."""
    if current.model != model or current.dim != dim:
        raise IndexModelMismatch(
            f"the active vector index {current.name!r} was built with {current.model} ({current.dim}-d), "
            f"but this service is configured with {model} ({dim}-d). Set EVIDENTIA_EMBEDDING_MODEL back to "
            f"{current.model}, or run `evidentia reindex --model {model}` to re-embed everything and switch."
        )
    return current


# Below this many rows a batch is stored by one statement: splitting would cost more than it saves.
MIN_ROWS_PER_WRITER = 64


async def upsert_vectors(
    pool: asyncpg.Pool,
    index: VectorIndex,
    chunk_ids: Sequence[str],
    document_ids: Sequence[str],
    vectors: np.ndarray,
    *,
    concurrency: int = 1,
) -> int:
    """Store vectors; rows whose chunk no longer exists (a replaced version) are skipped. Returns rows written.
    A row's document id is its chunk's as stored (``document_ids`` are the events' word for it): dense search
    filters documents through it (:func:`nearest_chunks_sql`).

    With ``concurrency`` > 1 the rows are split by chunk id into up to that many parts, each stored by its own
    statement on its own connection at once: PostgreSQL inserts into the HNSW graph on one core per
    statement (at 10^6 vectors, 600 a second for one statement, 1,150 for two on two cores;
    docs/benchmarks.md). One chunk's rows always go to the same part, in chunk id order, so two parts never
    wait on each other's rows. Each part commits on its own: if one fails, the others are cancelled or may
    already be stored (an upsert: storing them again, on a retry, changes nothing), and its error is raised
    as it was (not wrapped in a group).
    """
    if not chunk_ids:
        return 0
    rows = [(c, d, v) for c, d, v in zip(chunk_ids, document_ids, vectors, strict=True)]
    parts = max(1, min(concurrency, len(rows) // MIN_ROWS_PER_WRITER))
    if parts == 1:
        return await _upsert_rows(pool, index, rows)
    groups: list[list[tuple[str, str, np.ndarray]]] = [[] for _ in range(parts)]
    for row in sorted(rows, key=lambda r: r[0]):
        groups[zlib.crc32(row[0].encode()) % parts].append(row)
    try:
        async with asyncio.TaskGroup() as writers:  # a part that fails cancels the others: none outlives the call
            tasks = [writers.create_task(_upsert_rows(pool, index, g)) for g in groups if g]
    except BaseExceptionGroup as failed:  # the caller (bisecting, retrying) sees the first error as it was
        raise failed.exceptions[0] from None
    return sum(task.result() for task in tasks)


async def _upsert_rows(pool: asyncpg.Pool, index: VectorIndex, rows: list[tuple[str, str, np.ndarray]]) -> int:
    # One temp table per column type: a connection may write to indexes of several dimensions or precisions.
    incoming = f"incoming_{index.column_type.replace('(', '_').rstrip(')')}"
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {incoming} "
            f"(chunk_id text, document_id text, embedding {index.column_type}) ON COMMIT DELETE ROWS"
        )
        await conn.copy_records_to_table(incoming, records=rows)
        result: str = await conn.execute(
            f"""INSERT INTO {index.table_name} (chunk_id, document_id, embedding)
                SELECT DISTINCT ON (i.chunk_id) i.chunk_id, c.document_id, i.embedding
                FROM {incoming} i JOIN chunks c ON c.chunk_id = i.chunk_id
                ON CONFLICT (chunk_id) DO UPDATE SET embedding = EXCLUDED.embedding"""
        )
    return int(result.rsplit(" ", 1)[-1])


async def complete_documents(pool: asyncpg.Pool, index: VectorIndex, document_ids: Sequence[str]) -> list[str]:
    """Of ``document_ids``, those whose every chunk now has a vector in ``index``."""
    rows = await pool.fetch(
        f"""SELECT c.document_id
            FROM chunks c LEFT JOIN {index.table_name} v ON v.chunk_id = c.chunk_id
            WHERE c.document_id = ANY($1::text[])
            GROUP BY c.document_id
            HAVING count(*) = count(v.chunk_id)""",
        list(set(document_ids)),
    )
    return [r["document_id"] for r in rows]


async def vector_table_bytes(pool: asyncpg.Pool, index: VectorIndex) -> dict[str, int]:
    """The disk size of ``index``'s table: ``total`` (rows, TOAST, ANN and B-tree indexes), ``table`` (rows and
    TOAST) and ``ann`` (its HNSW or IVFFlat indexes, 0 while it has none)."""
    row = await pool.fetchrow(
        """SELECT pg_total_relation_size($1::regclass) AS total, pg_table_size($1::regclass) AS table,
                  (SELECT coalesce(sum(pg_relation_size(i.indexrelid)), 0)
                   FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
                   WHERE i.indrelid = $1::regclass AND a.amname IN ('hnsw', 'ivfflat')) AS ann""",
        index.table_name,
    )
    assert row is not None
    return {k: int(row[k]) for k in ("total", "table", "ann")}


async def count_vectors(pool: asyncpg.Pool, index: VectorIndex) -> int:
    """How many vectors ``index`` holds."""
    return int(await pool.fetchval(f"SELECT count(*) FROM {index.table_name}"))
