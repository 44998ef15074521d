"""The vector table's HNSW or IVFFlat index on a real PostgreSQL 18 + pgvector 0.8: a store moves from one
method to the other while it keeps answering, searches read the index the table has, a build cut short is
cleaned up and built again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import numpy as np
import pytest

from services.parser.store import store_document
from services.retriever.engine.jobs import ANN_MAINTENANCE_LOCK, COMPACTION_LOCK, advisory_session
from services.retriever.engine.vector.ann_index import IvfflatProbes, ann_indexes, ivfflat_lists, maintain_ann_index
from services.retriever.engine.vector.search import nearest_chunks, nearest_chunks_settings, nearest_chunks_sql
from services.retriever.engine.vector.tables import VectorIndex, create_index, ivfflat_index_sql, upsert_vectors
from shared.db import create_pool
from shared.models import Chunk, ParsedDocument, SearchFilters
from shared.settings import DatabaseSettings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DIM = 16
N = 600


def _db(url: str, **values: Any) -> DatabaseSettings:
    return DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": url, **values})


def _doc(i: int) -> ParsedDocument:
    text = f"Finding number {i} about outcome {i % 7}."
    chunk = Chunk(section="Abstract", ordinal=0, text=text, token_count=8, char_start=0, char_end=len(text))
    return ParsedDocument(
        source="pubmed", source_id=str(50_000 + i), pmid=str(50_000 + i), title=f"T{i}", abstract=text, chunks=[chunk]
    )


@pytest.fixture(scope="module")
async def store(migrated_postgres_url: str) -> AsyncIterator[tuple[asyncpg.Pool, VectorIndex, dict[str, np.ndarray]]]:
    db = _db(migrated_postgres_url)  # HNSW, the default: the store starts as every store before this setting
    pool = await create_pool(db)
    for i in range(N):
        await store_document(pool, _doc(i))
    index = await create_index(pool, "ann-test-model", DIM, db, activate=True)
    rows = await pool.fetch("SELECT chunk_id, document_id FROM chunks ORDER BY chunk_id")
    rng = np.random.default_rng(11)
    centres = rng.normal(size=(8, DIM))
    vectors = (centres[rng.integers(0, 8, len(rows))] + 0.3 * rng.normal(size=(len(rows), DIM))).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    await upsert_vectors(pool, index, [r["chunk_id"] for r in rows], [r["document_id"] for r in rows], vectors)
    await pool.execute(f"ANALYZE {index.table_name}")
    try:
        yield pool, index, {r["chunk_id"]: v for r, v in zip(rows, vectors, strict=True)}
    finally:
        await pool.close()


async def _methods(pool: asyncpg.Pool, index: VectorIndex) -> list[tuple[str, bool, int | None]]:
    async with pool.acquire() as conn:
        return sorted((i.method, i.valid, i.lists) for i in await ann_indexes(conn, index.table_name))


def _exact(vectors: dict[str, np.ndarray], query: np.ndarray, k: int) -> list[str]:
    ids = list(vectors)
    held = np.stack([vectors[i].astype(np.float16).astype(np.float32) for i in ids])  # halfvec, as stored
    q = query.astype(np.float16).astype(np.float32)
    sims = held @ q / (np.linalg.norm(held, axis=1) * np.linalg.norm(q))
    return [ids[j] for j in np.argsort(-sims)[:k]]


async def _plan(pool: asyncpg.Pool, index: VectorIndex, query: np.ndarray) -> str:
    sql, params = nearest_chunks_sql(index, SearchFilters(include_retracted=True))
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")  # 600 rows: the planner would rather sort them
        await conn.execute(nearest_chunks_settings(40, 10, filtered=False, probes=8))
        return "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, query, 10, *params))


async def test_a_store_moves_to_ivfflat_and_back_and_searches_the_index_it_has(store: tuple) -> None:  # type: ignore[type-arg]
    pool, index, vectors = store
    assert await _methods(pool, index) == [("hnsw", True, None)]
    ivf = _db("postgresql://x", vector_index="ivfflat", ivfflat_min_rows=N + 1, ivfflat_lists=8)
    assert (await maintain_ann_index(pool, index, ivf)).empty  # type: ignore[union-attr]  # too few rows yet
    assert await _methods(pool, index) == [("hnsw", True, None)]

    ivf = ivf.model_copy(update={"ivfflat_min_rows": N})
    done = await maintain_ann_index(pool, index, ivf)
    assert done is not None and done.build and done.drop_after == [f"{index.table_name}_hnsw"]
    assert await _methods(pool, index) == [("ivfflat", True, 8)]
    # searches read a share of the live index's lists
    probes = IvfflatProbes(ivf.model_copy(update={"ivfflat_probe_share": 0.25}), every_s=0.0)
    assert await ivfflat_lists(pool, index.table_name) == 8 and await probes.current(pool, index.table_name) == 2
    query = next(iter(vectors.values())) + np.float32(0.05)
    assert "_ivf8" in await _plan(pool, index, query)
    # all 8 lists probed: exactly the nearest; 1 list: fewer of them, but still k results (iterative scan)
    filters = SearchFilters(include_retracted=True)
    full = [c for c, _ in await nearest_chunks(pool, index, query, 10, filters, 40, probes=8)]
    assert full == _exact(vectors, query, 10)
    assert len(await nearest_chunks(pool, index, query, 10, filters, 40, probes=1)) == 10
    # a vector stored after training is found
    newest = next(reversed(vectors))
    target = -vectors[newest]
    await upsert_vectors(
        pool,
        index,
        [newest],
        [await pool.fetchval("SELECT document_id FROM chunks WHERE chunk_id = $1", newest)],
        target[None, :],
    )
    assert (await nearest_chunks(pool, index, target, 1, filters, 40, probes=8))[0][0] == newest
    await upsert_vectors(
        pool,
        index,
        [newest],
        [await pool.fetchval("SELECT document_id FROM chunks WHERE chunk_id = $1", newest)],
        vectors[newest][None, :],
    )

    back = await maintain_ann_index(pool, index, _db("postgresql://x"))
    assert back is not None and back.build and "USING hnsw" in back.build
    assert await _methods(pool, index) == [("hnsw", True, None)]
    assert f"{index.table_name}_hnsw" in await _plan(pool, index, query)
    assert await ivfflat_lists(pool, index.table_name) is None


async def test_a_build_cut_short_is_dropped_and_built_again(store: tuple) -> None:  # type: ignore[type-arg]
    pool, index, _ = store
    ivf = _db("postgresql://x", vector_index="ivfflat", ivfflat_min_rows=N, ivfflat_lists=4)
    writer = await pool.acquire()
    builder = await pool.acquire()
    try:
        # A writer's open transaction holds the concurrent build after it has entered the index in the
        # catalogue; the build's statement timeout strikes while it waits.
        tx = writer.transaction()
        await tx.start()
        await writer.execute(f"LOCK TABLE {index.table_name} IN ROW EXCLUSIVE MODE")
        await builder.execute("SET statement_timeout = '300ms'")
        with pytest.raises(asyncpg.QueryCanceledError):
            await builder.execute(ivfflat_index_sql(index.table_name, index.precision, 4, concurrently=True))
        await tx.rollback()
    finally:
        await builder.execute("RESET statement_timeout")
        await pool.release(builder)
        await pool.release(writer)
    assert ("ivfflat", False, 4) in await _methods(pool, index)  # the fault struck mid-build

    done = await maintain_ann_index(pool, index, ivf)
    assert done is not None and done.drop_first and done.build
    assert await _methods(pool, index) == [("ivfflat", True, 4)]
    # one replica at a time: while another holds the lock, nothing is done
    async with pool.acquire() as other:
        await other.execute("SELECT pg_advisory_lock($1, $2)", *ANN_MAINTENANCE_LOCK)
        try:
            assert await asyncio.wait_for(maintain_ann_index(pool, index, _db("postgresql://x")), 10) is None
        finally:
            await other.execute("SELECT pg_advisory_unlock($1, $2)", *ANN_MAINTENANCE_LOCK)
    assert await _methods(pool, index) == [("ivfflat", True, 4)]
    # back to HNSW for the module's other tests, built with the memory the setting gives the build's session
    await maintain_ann_index(pool, index, _db("postgresql://x", ann_build_memory="32MB"))
    assert await _methods(pool, index) == [("hnsw", True, None)]


async def test_an_advisory_session_is_one_replicas_at_a_time_and_released_after(store: tuple) -> None:  # type: ignore[type-arg]
    pool, _, _ = store
    key = COMPACTION_LOCK  # the lexical compaction's; the vector index maintenance's is covered above
    async with advisory_session(pool, key) as held:
        assert held is not None
        async with advisory_session(pool, key) as second:
            assert second is None  # another session (another replica) holds it
    async with pool.acquire() as other:
        assert await other.fetchval("SELECT pg_try_advisory_lock($1, $2)", *key)  # released after the block
        await other.execute("SELECT pg_advisory_unlock($1, $2)", *key)


async def test_a_rolling_deploy_with_two_settings_builds_the_newer_ones_index_once(store: tuple) -> None:  # type: ignore[type-arg]
    """Issue 40 (14): old and new retrievers, maintaining in turn, hold two ``VECTOR_INDEX`` settings: the newer
    setting's index is built once and the old retrievers build nothing until they leave; a decision nobody holds
    any more is taken over."""
    pool, index, _ = store
    await pool.execute("TRUNCATE vector_index_decision")
    assert await _methods(pool, index) == [("hnsw", True, None)]
    started = await pool.fetchval("SELECT now()")
    old, old_since = _db("postgresql://x"), started - timedelta(minutes=30)
    new = _db("postgresql://x", vector_index="ivfflat", ivfflat_min_rows=N, ivfflat_lists=4)
    new_since = started
    done = await maintain_ann_index(pool, index, old, since=old_since)
    assert done is not None and done.empty and done.deferred_to is None  # before the deploy: as it was
    builds = []
    for _ in range(3):  # the deploy: old and new pods take turns
        for db, since in ((new, new_since), (old, old_since)):
            done = await maintain_ann_index(pool, index, db, since=since)
            assert done is not None
            builds += [done.build] if done.build else []
            if db is old:
                assert done.deferred_to == "ivfflat" and done.empty
    assert len(builds) == 1 and "ivfflat" in str(builds[0])
    assert await _methods(pool, index) == [("ivfflat", True, 4)]
    assert await pool.fetchval("SELECT method FROM vector_index_decision") == "ivfflat"

    # the new pods gone (a rollback to the old setting): their decision stays until it is stale, then the old
    # setting takes over
    assert (await maintain_ann_index(pool, index, old, since=old_since)).deferred_to == "ivfflat"  # type: ignore[union-attr]
    stale_s = 3 * old.ann_maintain_every_s + 1
    await pool.execute(
        "UPDATE vector_index_decision SET confirmed_at = confirmed_at - make_interval(secs => $1)", stale_s
    )
    done = await maintain_ann_index(pool, index, old, since=old_since)
    assert done is not None and done.deferred_to is None and done.build and "USING hnsw" in done.build
    assert await _methods(pool, index) == [("hnsw", True, None)]
